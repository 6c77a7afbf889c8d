package scenarios

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outboxlab/outboxlab/fixture"
	"github.com/outboxlab/outboxlab/seed"
	"github.com/outboxlab/outboxlab/workload"

	"github.com/jackc/pgx/v5"

	"github.com/outboxlab/outboxlab/chaos"
	"github.com/outboxlab/outboxlab/consumer"
	"github.com/outboxlab/outboxlab/history"
	"github.com/outboxlab/outboxlab/outbox"
	"github.com/outboxlab/outboxlab/relay"
	"github.com/outboxlab/outboxlab/testenv"
)

// Options tunes one run. The zero value runs the scenario's default size
// with seed 0 against this repository's relay, producers using the outbox.
type Options struct {
	// Seed decides the workload (event ids included) and the fault
	// schedule.
	Seed uint64
	// Relay is the relay under test; the zero value is ours (see Ours).
	Relay RelayUnderTest
	// Mode is how producers get their events out; the unsafe modes
	// run with no relay at all. Default workload.Outbox.
	Mode workload.Mode
	// Events overrides the workload's size.
	Events int
	// Duration overrides the length of the safety phase.
	Duration time.Duration
	// Long runs bigger workloads over longer safety phases (also turned on
	// by OUTBOXLAB_LONG=1).
	Long bool
	// Progress, when set, receives a snapshot about twice a second.
	Progress func(Progress)
	// Log receives the run's lines: SEED= first, then the phases, and on
	// failure the verdict and the replay command.
	Log func(string)
}

// ErrNotApplicable is returned for a scenario the relay or the variant
// cannot run: faults on relays with an unsafe variant (no relay), or
// failpoints with a relay that does not declare them.
var ErrNotApplicable = errors.New("scenario not applicable")

// Long mode sizes.
const (
	longEvents = 4
	longSafety = 2
)

// DrainWithin bounds the liveness phase: leases and backoffs of a few
// seconds, a broker or database restart, and the backlog itself fit.
const DrainWithin = 60 * time.Second

// boundedCtx is one bounded context of a run: its outbox table, exchange,
// queue, inbox consumer name and relay replicas; next is the context its
// consumer stages into (pipelines).
type boundedCtx struct {
	name     string
	table    outbox.Table
	exchange string
	queue    string
	inbox    string
	relays   []*relaySlot
	next     *boundedCtx
}

// run is the state of one scenario run.
type run struct {
	env      *testenv.Env
	sc       Scenario
	opts     Options
	relay    RelayUnderTest
	mode     workload.Mode
	long     bool
	safety   time.Duration
	workload workload.Shape
	plan     workload.Plan
	rec      *history.Recorder

	// fx holds the run's schema, tables, topology and pools.
	fx       *fixture.Fixture
	contexts []*boundedCtx

	nemesis   *chaos.Nemesis
	links     map[string]*chaos.Link
	producers []*workload.Producer
	// consumerNames are the history processes of the consumers.
	consumerNames []string
	clocks        []*chaos.Clock
	publishers    []*relay.AMQPPublisher
	pause         *pauseHolding
	// lanes groups faults whose steps must run one after another (by
	// default each fault is its own lane).
	lanes map[string]string

	consumersStop context.CancelFunc
	consumersDone sync.WaitGroup
	applied       atomic.Int64
	phase         atomic.Value // string
	safetyEnd     atomic.Int64 // unix nanos
	ensured       bool

	problems []string
}

func (r *run) logf(format string, args ...any) {
	if r.opts.Log != nil {
		r.opts.Log(fmt.Sprintf(format, args...))
	}
}

func (r *run) problem(format string, args ...any) {
	r.problems = append(r.problems, fmt.Sprintf(format, args...))
}

func (r *run) replicaCount() int {
	n := 0
	for _, bc := range r.contexts {
		n += len(bc.relays)
	}
	return n
}

// slot returns replica i of context c.
func (r *run) slot(c, i int) *relaySlot { return r.contexts[c].relays[i] }

// link returns the chaos link of a testenv link.
func (r *run) link(name string) *chaos.Link { return r.links[name] }

// lease is the lease the replicas run with.
func (r *run) lease() time.Duration {
	if d, err := time.ParseDuration(r.relay.setting("OUTBOX_LEASE")); err == nil && d > 0 {
		return d
	}
	return Lease
}

// publisherBrokerLink is the link through which events reach the broker:
// the relays' for the outbox, the producers' for the unsafe variants.
func (r *run) publisherBrokerLink() string {
	if r.mode == workload.Outbox {
		return testenv.LinkRelayBroker
	}
	if slices.ContainsFunc(r.env.Links(), func(l testenv.Link) bool { return l.Name == LinkAppBroker }) {
		return LinkAppBroker
	}
	return testenv.LinkRelayBroker
}

func (r *run) publisherBrokerLinkName() string { return r.link(r.publisherBrokerLink()).Name() }

// Run runs scenario sc once on env and returns its verdict. env may be
// shared by runs one after another: every run works in its own schema,
// tables, exchanges and queues, and leaves PostgreSQL, RabbitMQ and the
// links running and clean. The error reports a run that could not be
// carried out (the environment failed, or ErrNotApplicable); a failed
// verdict is not an error.
func Run(ctx context.Context, env *testenv.Env, sc Scenario, opts Options) (Result, error) {
	began := time.Now()
	r := newRun(env, sc, opts)
	r.logf("SEED=%d scenario=%s relay=%s variant=%s events=%d safety=%s", opts.Seed, sc.Name, r.relay.Name, r.mode, r.plan.Total, r.safety)
	res := r.baseResult()
	if err := r.applicable(); err != nil {
		res.Problems = append(res.Problems, err.Error())
		return res, err
	}
	defer r.teardown()
	if err := r.setup(ctx); err != nil {
		return res, fmt.Errorf("scenario %s: setting up: %w", sc.Name, err)
	}
	r.logf("setup: schema %s, %d relay replica(s), ready after %s", r.fx.Schema, r.replicaCount(), time.Since(began).Round(time.Millisecond))
	steps, err := r.planFaults()
	if err != nil {
		return res, fmt.Errorf("scenario %s: fault plan: %w", sc.Name, err)
	}
	for _, s := range steps {
		r.logf("fault plan: %s at %s for %s", s.Fault, s.At, s.Duration)
	}
	stopProgress := r.startProgress()
	ph := &chaos.Phases{Recorder: r.rec, Nemesis: r.nemesis, DrainWithin: DrainWithin, PollEvery: 200 * time.Millisecond}
	r.phase.Store(history.PhaseSafety)
	r.safetyEnd.Store(time.Now().Add(r.safety).UnixNano())
	if err := r.runSafety(ctx, steps); err != nil {
		r.problem("safety phase: %v", err)
	}
	r.phase.Store(history.PhaseLiveness)
	r.logf("safety phase over after %s; faults: %s", time.Since(began).Round(time.Millisecond), strings.TrimSpace(strings.ReplaceAll(r.nemesis.Summary(), "\n", "; ")))
	drain, err := ph.RunLiveness(ctx, r.drained)
	if err != nil {
		r.problem("liveness: %v", err)
	}
	r.logf("liveness phase over after %s (drained in %s)", time.Since(began).Round(time.Millisecond), drain.Round(time.Millisecond))
	r.phase.Store(history.PhaseCheck)
	ph.StartCheck()
	stopProgress()
	if ctx.Err() != nil {
		return res, ctx.Err()
	}
	queued, err := r.settle(ctx)
	if err != nil {
		return res, fmt.Errorf("scenario %s: settling: %w", sc.Name, err)
	}
	r.logf("settled after %s: relays stopped, %d message(s) left in the queues", time.Since(began).Round(time.Millisecond), len(queued))
	st, err := r.readState(ctx, queued)
	if err != nil {
		return res, fmt.Errorf("scenario %s: reading the final state: %w", sc.Name, err)
	}
	res = r.verdict(ctx, st, drain, steps)
	res.Duration = time.Since(began)
	if res.Valid {
		r.logf("PASS %s in %s: %d committed, %d delivered, %d duplicate deliveries%s, drain %s",
			sc.Name, res.Duration.Round(time.Millisecond), res.Counts.Committed, res.Counts.Delivered,
			res.Counts.DuplicateDeliveries, byCause(res.Counts.DuplicatesBy), res.DrainTime.Round(time.Millisecond))
	} else {
		r.logf("FAIL %s:\n  %s\n%s", sc.Name, strings.Join(res.Problems, "\n  "), res.Report.Summary())
		r.logf("fault records:\n%s", r.faultRecords())
		r.logf("replay: %s\n        %s", res.Replay, res.ReplayTest)
	}
	return res, nil
}

// byCause renders duplicates by the cause that explains them.
func byCause(by map[string]int) string {
	if len(by) == 0 {
		return ""
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(by)) {
		parts = append(parts, fmt.Sprintf("%s=%d", k, by[k]))
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

// newRun resolves the options: relay defaults, sizes, the plan.
func newRun(env *testenv.Env, sc Scenario, opts Options) *run {
	r := &run{env: env, sc: sc, opts: opts, rec: &history.Recorder{}, links: map[string]*chaos.Link{}, lanes: map[string]string{}}
	r.relay = opts.Relay.resolve()
	r.mode = opts.Mode
	if r.mode == "" {
		r.mode = workload.Outbox
	}
	r.long = opts.Long || LongFromEnv()
	r.workload, r.safety = sc.Workload, sc.Safety
	if r.long {
		r.workload = r.workload.Scaled(longEvents)
		r.safety *= longSafety
	}
	if opts.Events > 0 {
		r.workload.Events = opts.Events
	}
	if opts.Duration > 0 {
		r.safety = opts.Duration
	}
	if r.mode != workload.Outbox {
		// Nothing would park poison without a relay.
		r.workload.PoisonRate = 0
	}
	r.plan = r.workload.Draw(seed.Rand(opts.Seed, seed.Workload))
	return r
}

func (r *run) applicable() error {
	switch {
	case r.mode.Unsafe() && r.sc.NeedsRelay:
		return fmt.Errorf("%w: %s acts on relay replicas, and the %s variant runs without a relay", ErrNotApplicable, r.sc.Name, r.mode)
	case r.mode == workload.Outbox && r.sc.NeedsFailpoints && !r.relay.Failpoints:
		return fmt.Errorf("%w: %s needs a relay that honours %s, and %s does not declare it", ErrNotApplicable, r.sc.Name, chaos.FailpointsEnv, r.relay.Name)
	}
	return nil
}

func (r *run) baseResult() Result {
	res := Result{
		Scenario: r.sc.Name, Relay: r.relay.Name, Variant: string(r.mode), Seed: r.opts.Seed,
		Events: r.plan.Total, Safety: r.safety,
	}
	res.Replay, res.ReplayTest = r.replay()
	return res
}

// replay returns the commands that run the same schedule again.
func (r *run) replay() (cmd, test string) {
	cmd = fmt.Sprintf("go run ./cmd/outboxlab run --scenario %s --seed %d", r.sc.Name, r.opts.Seed)
	if r.relay.Name != "ours" {
		switch {
		case len(r.opts.Relay.Command) > 0:
			cmd += " --relay 'cmd:" + strings.Join(r.opts.Relay.Command, " ") + "'"
		case r.opts.Relay.Image != "":
			cmd += " --relay image:" + r.opts.Relay.Image
		default:
			cmd += " --relay " + r.relay.Name
		}
	}
	if r.opts.Events > 0 {
		cmd += fmt.Sprintf(" --events %d", r.opts.Events)
	}
	if r.opts.Duration > 0 {
		cmd += fmt.Sprintf(" --duration %s", r.opts.Duration)
	}
	long := ""
	if r.long {
		long = LongEnv + "=1 "
	}
	if r.mode.Unsafe() {
		test = fmt.Sprintf("%sgo test ./scenarios -run 'TestUnsafeVariants/%s/%s$' -args -seed=%d", long, r.mode, r.sc.Name, r.opts.Seed)
		return test, test
	}
	test = fmt.Sprintf("%sgo test ./scenarios -run 'TestCatalogue/%s$' -args -seed=%d", long, r.sc.Name, r.opts.Seed)
	return long + cmd, test
}

// contextNames returns the names of the run's bounded contexts.
func (r *run) contextNames() []string {
	if len(r.sc.Contexts) == 0 {
		return []string{defaultContext}
	}
	return r.sc.Contexts
}

// schemaPrefix starts the name of the run's schema: its scenario's name.
func (r *run) schemaPrefix() string {
	short := strings.NewReplacer("-", "_").Replace(r.sc.Name)
	if len(short) > 24 {
		short = short[:24]
	}
	return "sc_" + short
}

// setup creates the run's schema, tables and topology, and starts the
// relays, the consumers and the producers.
func (r *run) setup(ctx context.Context) error {
	sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	var err error
	r.fx, err = fixture.New(sctx, r.env, fixture.Options{
		Prefix: r.schemaPrefix(), Contexts: r.contextNames(), AppConns: int32(2*r.workload.Producers + 4),
	})
	if err != nil {
		return err
	}
	for _, c := range r.fx.Contexts {
		r.contexts = append(r.contexts, &boundedCtx{
			name: c.Name, table: c.Table, exchange: c.Topology.Exchange, queue: c.Topology.Queue, inbox: c.Name,
		})
	}
	for i := 0; i+1 < len(r.contexts); i++ {
		r.contexts[i].next = r.contexts[i+1]
	}
	for _, l := range r.env.Links() {
		if r.links[l.Name], err = chaos.LinkByName(sctx, r.env.ToxiproxyClient(), l.Name, ""); err != nil {
			return fmt.Errorf("link %s: %w", l.Name, err)
		}
	}
	if r.nemesis, err = chaos.NewNemesis(r.rec); err != nil {
		return err
	}
	if err := r.startRelays(sctx); err != nil {
		return err
	}
	if err := r.startConsumers(); err != nil {
		return err
	}
	if err := r.makeProducers(); err != nil {
		return err
	}
	r.scopeLinks()
	return nil
}

// scopeLinks gives every link's faults their class, from the service at
// the link's far end, and their targets: the processes of the run that
// connect through it.
func (r *run) scopeLinks() {
	var relays, consumers, producers []string
	for _, bc := range r.contexts {
		for _, s := range bc.relays {
			relays = append(relays, s.name)
		}
	}
	consumers = append(consumers, r.consumerNames...)
	for _, p := range r.producers {
		producers = append(producers, p.Name)
	}
	users := map[string][]string{
		testenv.LinkAppDB:          producers,
		testenv.LinkRelayDB:        relays,
		testenv.LinkRelayBroker:    relays,
		testenv.LinkConsumerBroker: consumers,
		testenv.LinkConsumerDB:     consumers,
	}
	if r.mode.Unsafe() {
		pb := r.publisherBrokerLink()
		users[pb] = append(slices.Clone(users[pb]), producers...)
	}
	for _, l := range r.env.Links() {
		cl, ok := r.links[l.Name]
		if !ok {
			continue
		}
		switch l.Service {
		case testenv.ServiceBroker:
			cl.WithClass(history.ClassBroker)
		case testenv.ServiceDB:
			cl.WithClass(history.ClassDB)
		}
		targets := users[l.Name]
		if len(targets) == 0 {
			// No process of this run uses the link: its faults hit the
			// link alone, which is no process, rather than everyone.
			targets = []string{"link " + l.Name}
		}
		cl.WithTargets(targets...)
	}
}

// startRelays starts every replica of every context at once.
func (r *run) startRelays(ctx context.Context) error {
	if r.mode.Unsafe() {
		return nil
	}
	replicas := r.sc.Replicas
	if replicas == 0 {
		replicas = defaultReplicaCount
	}
	var slots []*relaySlot
	for _, bc := range r.contexts {
		for i := range replicas {
			name := "relay-" + string(rune('a'+i))
			if len(r.contexts) > 1 {
				name = "relay-" + bc.name
				if replicas > 1 {
					name += "-" + string(rune('a'+i))
				}
			}
			base := map[string]string{
				"OUTBOX_TABLE":       bc.table.String(),
				"OUTBOX_EXCHANGE":    bc.exchange,
				chaos.ClockOffsetEnv: chaos.FormatClockOffset(0),
			}
			for k, v := range TimingEnv() {
				base[k] = v
			}
			for k, v := range r.relay.Env {
				base[k] = v
			}
			s := &relaySlot{r: r, name: name, bc: bc, base: base}
			bc.relays = append(bc.relays, s)
			slots = append(slots, s)
		}
	}
	for _, s := range slots {
		if r.sc.prepare != nil {
			r.sc.prepare(r, s)
		}
		// A replica left behind by an interrupted run would hold the name.
		for _, c := range r.env.Containers() {
			if c.Name() == s.name {
				_ = c.Remove(ctx)
			}
		}
	}
	errs := make([]error, len(slots))
	var wg sync.WaitGroup
	for i, s := range slots {
		wg.Go(func() { errs[i] = s.start(ctx, nil) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// startConsumers runs the consumer processes: two competing ones on a
// single context's queue, one per hop in a pipeline.
func (r *run) startConsumers() error {
	cctx, cancel := context.WithCancel(context.Background())
	r.consumersStop = cancel
	per := 2
	if len(r.contexts) > 1 {
		per = 1
	}
	n := 0
	for _, bc := range r.contexts {
		for range per {
			n++
			in := &recordingInbox{r: r, process: fmt.Sprintf("consumer-%d", n), bc: bc}
			r.consumerNames = append(r.consumerNames, in.process)
			if len(r.contexts) > 1 {
				in.queue = bc.queue
			}
			pg, err := consumer.NewPGInbox(r.fx.Cons, bc.inbox, in.effect())
			if err != nil {
				return err
			}
			in.inner = pg
			c, err := consumer.New(consumer.Config{Name: bc.inbox, MaxDeliveries: 1 << 30}, in, nil)
			if err != nil {
				return err
			}
			src := &consumer.AMQPSource{
				URL: r.env.AMQPURL(testenv.LinkConsumerBroker), Queue: bc.queue, Prefetch: 8,
				HandleTimeout: 5 * time.Second, MinBackoff: 100 * time.Millisecond, MaxBackoff: time.Second,
			}
			r.consumersDone.Go(func() { _ = src.Run(cctx, c) })
		}
	}
	return nil
}

// makeProducers builds the producers; the unsafe variants get a publisher
// each.
func (r *run) makeProducers() error {
	bc := r.contexts[0]
	for i := range max(r.workload.Producers, 1) {
		clk := chaos.NewClock(0)
		p := &workload.Producer{
			Name: fmt.Sprintf("producer-%d", i+1), DB: r.fx.App, Table: bc.table, Business: r.fx.Business,
			Mode: r.mode, PublishTimeout: 2 * PublishTimeout, Rec: r.rec, Now: clk.Now,
			Notify: true, StampOccurredAt: true,
		}
		if r.mode.Unsafe() {
			pub, err := relay.NewAMQPPublisher(relay.AMQPConfig{
				URL: r.env.AMQPURL(r.publisherBrokerLink()), Exchange: bc.exchange, Name: p.Name, DialTimeout: time.Second,
			})
			if err != nil {
				return err
			}
			p.Publisher = pub
			r.publishers = append(r.publishers, pub)
		}
		r.producers = append(r.producers, p)
		r.clocks = append(r.clocks, clk)
	}
	return nil
}

// planFaults registers the scenario's faults and draws their schedule.
func (r *run) planFaults() ([]chaos.Step, error) {
	if r.sc.faults == nil {
		return nil, nil
	}
	steps, err := r.sc.faults(r, seed.Rand(r.opts.Seed, seed.Faults), r.safety)
	if err != nil {
		return nil, err
	}
	for _, s := range steps {
		if s.End() > r.safety {
			return nil, fmt.Errorf("fault %s ends at %s, after the safety phase (%s)", s.Fault, s.End(), r.safety)
		}
	}
	return steps, nil
}

// warmUp bounds the wait for the first event delivered end to end before
// the fault schedule starts.
const warmUp = 10 * time.Second

// faultActionTimeout bounds one injection or heal.
const faultActionTimeout = 90 * time.Second

// runSafety runs the safety phase through chaos.Phases: the workload for
// the safety phase's length beside the fault schedule, whose clock starts
// with the first event delivered (or after warmUp). Every step of the
// schedule plays out in full, even when a slow Docker engine makes it
// start late; steps of one lane (by default, of one fault) run one after
// another, each lasting its Duration from the moment its injection
// returned; lanes run side by side.
func (r *run) runSafety(ctx context.Context, steps []chaos.Step) error {
	p := &chaos.Phases{
		Recorder: r.rec, Nemesis: r.nemesis, Safety: r.safety, Steps: steps,
		Schedule:    chaos.RunOptions{Lanes: r.lanes, ActionTimeout: faultActionTimeout},
		Ready:       func() bool { return r.applied.Load() > 0 },
		ReadyWithin: warmUp,
	}
	return p.RunSafety(ctx, func(ctx context.Context) error {
		_ = r.runWorkload(ctx)
		return nil
	})
}

// runWorkload runs every producer's transactions, paced over most of the
// safety phase. A held transaction of the outbox variant runs beside the
// producer's next ones, as a slow request does beside others.
func (r *run) runWorkload(ctx context.Context) error {
	var wg sync.WaitGroup
	for i, txns := range r.plan.Txns {
		if i >= len(r.producers) || len(txns) == 0 {
			continue
		}
		p := r.producers[i]
		pace := r.workload.Pace
		if pace == 0 {
			pace = max(5*time.Millisecond, r.safety*7/10/time.Duration(len(txns)))
		}
		offset := pace * time.Duration(i) / time.Duration(len(r.producers))
		wg.Go(func() {
			// Transactions start on a fixed beat, however long each
			// takes, so that the workload spans the phase as planned.
			began := time.Now()
			for k, t := range txns {
				if !chaos.Sleep(ctx, time.Until(began.Add(offset+time.Duration(k)*pace))) {
					return
				}
				do := func() {
					tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), t.Hold+10*time.Second)
					defer cancel()
					_ = p.Do(tctx, t)
				}
				if t.Hold > 0 && r.mode == workload.Outbox {
					wg.Go(do)
				} else {
					do()
				}
			}
		})
	}
	wg.Wait()
	return nil
}


// startProgress reports progress about twice a second until stopped.
func (r *run) startProgress() func() {
	if r.opts.Progress == nil {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(500 * time.Millisecond)
		defer t.Stop()
		committed := map[string]bool{}
		seen := 0
		for {
			ops := r.rec.Ops()
			for _, op := range ops[seen:] {
				if op.F == history.Commit && op.Type == history.OK {
					for _, id := range op.Events {
						committed[id] = true
					}
				}
			}
			seen = len(ops)
			phase, _ := r.phase.Load().(string)
			p := Progress{Scenario: r.sc.Name, Phase: phase, Committed: len(committed), Delivered: int(r.applied.Load()), Faults: r.nemesis.Open()}
			if phase == history.PhaseSafety {
				p.Left = max(0, time.Until(time.Unix(0, r.safetyEnd.Load())))
			}
			r.opts.Progress(p)
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	})
	return func() { close(done); wg.Wait() }
}

// faultRecords renders the nemesis's and the relays' records, timed from
// the start of the safety phase, for a failed run's printout.
func (r *run) faultRecords() string {
	var b strings.Builder
	var start time.Time
	for _, op := range r.rec.Ops() {
		if op.F == history.Phase && op.Phase == history.PhaseSafety {
			start = op.Time
		}
		if op.Process != chaos.NemesisProcess && !strings.HasPrefix(op.Process, "relay-") && op.F != history.Phase {
			continue
		}
		fmt.Fprintf(&b, "  %8s %s\n", op.Time.Sub(start).Round(time.Millisecond), op)
	}
	return b.String()
}

// ensureRunning restarts or thaws whatever a fault left down: the relay
// replicas, PostgreSQL and RabbitMQ.
func (r *run) ensureRunning(ctx context.Context) error {
	for _, c := range []*testenv.Container{r.env.Postgres(), r.env.RabbitMQ()} {
		st, err := c.State(ctx)
		if err != nil {
			return err
		}
		if st.Paused {
			if err := c.Unpause(ctx); err != nil {
				return err
			}
		}
		if !st.Running {
			if err := c.Start(ctx); err != nil {
				return err
			}
		}
		if err := c.WaitReady(ctx); err != nil {
			return err
		}
	}
	for _, bc := range r.contexts {
		for _, s := range bc.relays {
			if err := s.ensureRunning(ctx); err != nil {
				return fmt.Errorf("relay %s: %w", s.name, err)
			}
		}
	}
	return nil
}

// committedIDs returns the events of commits that completed ok, and those
// published with a confirm.
func (r *run) committedIDs() (committed, confirmed map[string]bool) {
	committed, confirmed = map[string]bool{}, map[string]bool{}
	for _, op := range r.rec.Ops() {
		if op.Type != history.OK {
			continue
		}
		switch op.F {
		case history.Commit:
			for _, id := range op.Events {
				committed[id] = true
			}
		case history.Publish:
			for _, id := range op.Events {
				confirmed[id] = true
			}
		}
	}
	return committed, confirmed
}

// drained reports that the backlog is gone: no pending outbox row, every
// event that must arrive applied, and no message left in a queue.
func (r *run) drained(ctx context.Context) (bool, error) {
	if !r.ensured {
		if err := r.ensureRunning(ctx); err != nil {
			return false, err
		}
		r.ensured = true
	}
	committed, confirmed := r.committedIDs()
	expect := map[string]bool{}
	if r.mode == workload.Outbox {
		faulted := map[string]bool{}
		for _, bc := range r.contexts {
			rows, err := r.fx.Admin.Query(ctx, `SELECT id::text, processed_at IS NULL AND faulted_at IS NULL, faulted_at IS NOT NULL FROM `+bc.table.Ident())
			if err != nil {
				return false, err
			}
			var (
				id              string
				pending, parked bool
				waiting         bool
			)
			_, err = pgx.ForEachRow(rows, []any{&id, &pending, &parked}, func() error {
				switch {
				case pending:
					waiting = true
				case parked:
					faulted[id] = true
				case !r.plan.Poison[id]:
					expect[id] = true
				}
				return nil
			})
			if err != nil {
				return false, err
			}
			if waiting {
				return false, nil
			}
		}
		for id := range committed {
			if !r.plan.Poison[id] && !faulted[id] {
				expect[id] = true
			}
		}
	} else {
		for id := range committed {
			if confirmed[id] {
				expect[id] = true
			}
		}
	}
	rows, err := r.fx.Admin.Query(ctx, `SELECT DISTINCT message_id FROM `+pgx.Identifier{r.fx.Schema, "inbox"}.Sanitize())
	if err != nil {
		return false, err
	}
	applied, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return false, err
	}
	got := make(map[string]bool, len(applied))
	for _, id := range applied {
		got[id] = true
	}
	for id := range expect {
		if !got[id] {
			return false, nil
		}
	}
	ready, err := r.fx.QueueDepth(ctx)
	return err == nil && ready == 0, err
}

// deliveries counts the Deliver records so far.
func (r *run) deliveries() int {
	n := 0
	for _, op := range r.rec.Ops() {
		if op.F == history.Deliver {
			n++
		}
	}
	return n
}

// settle stops the relays (SIGTERM: each finishes its batch), lets the
// consumers take what is left in the queues, stops them, and takes what
// is still queued (dead letters included).
func (r *run) settle(ctx context.Context) ([]string, error) {
	var wg sync.WaitGroup
	for _, bc := range r.contexts {
		for _, s := range bc.relays {
			wg.Go(func() {
				if h := s.handle(); h != nil {
					_ = h.Stop(ctx, relayStopTimeout)
				}
			})
		}
	}
	wg.Wait()
	// The queues are empty and no delivery came in over the last poll.
	wctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	last := -1
	_ = chaos.WaitFor(wctx, 300*time.Millisecond, func(ctx context.Context) (bool, error) {
		n, err := r.fx.QueueDepth(ctx)
		if err != nil {
			return false, nil
		}
		d := r.deliveries()
		quiet := n == 0 && d == last
		last = d
		return quiet, nil
	})
	cancel()
	r.consumersStop()
	r.consumersDone.Wait()
	return r.fx.TakeQueued(ctx)
}

// teardown removes everything the run made and leaves the environment as
// it found it: services running and ready, links enabled without toxics.
func (r *run) teardown() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if r.consumersStop != nil {
		r.consumersStop()
		r.consumersDone.Wait()
	}
	if r.nemesis != nil {
		_ = r.nemesis.HealAll(ctx)
	}
	for _, p := range r.publishers {
		_ = p.Close()
	}
	var wg sync.WaitGroup
	for _, bc := range r.contexts {
		for _, s := range bc.relays {
			wg.Go(func() { _ = s.remove(ctx) })
		}
	}
	wg.Wait()
	if err := r.resetEnv(ctx); err != nil {
		r.logf("teardown: %v", err)
	}
	if r.fx != nil {
		if err := r.fx.Close(ctx); err != nil {
			r.logf("teardown: %v", err)
		}
	}
}

// resetEnv brings PostgreSQL and RabbitMQ up and every link back to
// enabled with no toxics.
func (r *run) resetEnv(ctx context.Context) error {
	var errs []error
	for _, c := range []*testenv.Container{r.env.Postgres(), r.env.RabbitMQ()} {
		st, err := c.State(ctx)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if st.Paused {
			errs = append(errs, c.Unpause(ctx))
		}
		if !st.Running {
			errs = append(errs, c.Start(ctx))
		}
		errs = append(errs, c.WaitReady(ctx))
	}
	for _, l := range r.env.Links() {
		p, err := r.env.Proxy(l.Name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		toxics, err := p.Toxics()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, t := range toxics {
			errs = append(errs, p.RemoveToxic(t.Name))
		}
		if !p.Enabled {
			errs = append(errs, p.Enable())
		}
	}
	return errors.Join(errs...)
}
