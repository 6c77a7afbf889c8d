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

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxlab/outboxlab/consumer"
	"github.com/outboxlab/outboxlab/contract"
	"github.com/outboxlab/outboxlab/fixture"
	"github.com/outboxlab/outboxlab/seed"
	"github.com/outboxlab/outboxlab/workload"

	"github.com/outboxlab/outboxlab/chaos"
	"github.com/outboxlab/outboxlab/footprint"
	"github.com/outboxlab/outboxlab/history"
	"github.com/outboxlab/outboxlab/internal/observe"
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
	// QueueType is the consumer queues' type on a broker cluster:
	// relay.QueueQuorum (the default) or relay.QueueClassic, the
	// non-replicated contrast, which lives on the node that declared it.
	// A scenario on one node always uses classic queues.
	QueueType string
	// Consumer, when set, is a consumer under test other than ours: its
	// decorator wraps every consumer's inbox.
	Consumer *ConsumerUnderTest
	// Unobserved runs without observing the outbox tables (no trigger, no
	// role per replica): a relay without records is then judged from the
	// final rows alone. For measuring what observing costs.
	Unobserved bool
	// Progress, when set, receives a snapshot about twice a second.
	Progress func(Progress)
	// Log receives the run's lines: SEED= first, then the phases, and on
	// failure the verdict and the replay command.
	Log func(string)
}

// ConsumerUnderTest is a consumer-side change under test, such as a
// consumer-side mutant.
type ConsumerUnderTest struct {
	// Name is how reports call it.
	Name string
	// Wrap decorates a consumer's inbox. pool is the consumer's database
	// and effect the effect its inbox applies once per message id, for a
	// consumer that applies effects without the inbox.
	Wrap func(in consumer.Inbox, pool *pgxpool.Pool, effect consumer.Effect) consumer.Inbox
	// Project, when set, replaces how the consumer keeps the state of the
	// entities a workload with entities updates (workload.Shape.Entities):
	// the harness's consumer keeps the newest version
	// (consumer.ProjectNewest). It returns the effect that writes the
	// projection table for the consumer named consumer; version reads an
	// event's entity and version.
	Project func(consumer string, version consumer.Versioned) consumer.Effect
	// Replay is the command that runs the same schedule again with this
	// consumer; the run verb cannot name it.
	Replay string
}

// ErrNotApplicable is returned for a scenario the relay or the variant
// cannot run: faults on relays with an unsafe variant (no relay), or a
// scenario that needs a promise the relay does not make (Scenario.Needs:
// failpoints, a lease locking style).
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
	name  string
	table outbox.Table
	rows  string // the relation showing the outbox's rows under their events' ids (fixture.Context.Rows)
	// ids names the events the database's ids of the outbox's rows stand
	// for, when the relay's outbox returns them (fixture.Context.IDs); nil
	// names every id as it is.
	ids      *workload.IDs
	exchange string
	queue    string
	inbox    string
	topology relay.Topology
	relays   []*Replica
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

	// recordsDir holds the relays' records files, one per lifetime of
	// each replica; "" when the relay records nothing.
	recordsDir string
	// unobserved says why the run's outbox tables could not be observed
	// (observeOutboxes); "" when they are, or when no relay runs.
	unobserved string
	// tap sees every publish the broker accepts for the run's exchanges,
	// each replica publishing as a broker user of its own; nil when the
	// broker is not observed, and brokerUnobserved says why.
	tap              *observe.Tap
	brokerUnobserved string
	brokerUsers      []observe.Role

	// fx holds the run's schema, tables, topology and pools.
	fx       *fixture.Fixture
	contexts []*boundedCtx

	nemesis   *chaos.Nemesis
	links     map[string]*chaos.Link
	producers []*workload.Producer
	// usage samples the replicas and the producers' lock waits for the
	// footprint, from the replicas' start; nil in an unsafe mode.
	usage *usage
	// consumerNames are the history processes of the consumers, and
	// consumers their inboxes, in the same order.
	consumerNames []string
	consumers     []*recordingInbox
	// lastArrivals is the count of Deliver and Apply records stalled saw
	// last.
	lastArrivals int
	clocks       []*chaos.Clock
	publishers   []*relay.AMQPPublisher
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
	// noBite are the faults that could not bite what they claim to test:
	// they make the run inconclusive.
	noBite []*chaos.NoBite
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
func (r *run) slot(c, i int) *Replica { return r.contexts[c].relays[i] }

// link returns the chaos link of a testenv link.
func (r *run) link(name string) *chaos.Link { return r.links[name] }

// lease is the lease the replicas run with.
func (r *run) lease() time.Duration {
	if d, err := time.ParseDuration(r.setting(contract.EnvLease)); err == nil && d > 0 {
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
	if err := r.validScenario(); err != nil {
		return res, err
	}
	if err := validQueueType(sc, opts.QueueType); err != nil {
		return res, err
	}
	if err := r.relay.Promises.Validate(); err != nil {
		return res, fmt.Errorf("relay %s declares promises that cannot hold together: %w", r.relay.Name, err)
	}
	if err := r.applicable(); err != nil {
		res.NotApplicable = strings.TrimPrefix(err.Error(), ErrNotApplicable.Error()+": ")
		return res, err
	}
	if err := envFits(env, sc); err != nil {
		return res, err
	}
	if r.mode == workload.Outbox {
		if err := probeOnce(ctx, env, r.relay, opts.Log); err != nil {
			return res, fmt.Errorf("scenario %s: %w", sc.Name, err)
		}
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
	ph := &chaos.Phases{Recorder: r.rec, Nemesis: r.nemesis, DrainWithin: DrainWithin, PollEvery: 200 * time.Millisecond,
		Stalled: r.stalled, StallFor: StallFor}
	r.phase.Store(history.PhaseSafety)
	r.safetyEnd.Store(time.Now().Add(r.safety).UnixNano())
	if err := r.runSafety(ctx, steps); err != nil {
		noBite, others := chaos.SplitNoBite(err)
		r.noBite = append(r.noBite, noBite...)
		if len(others) > 0 {
			r.problem("safety phase: %v", errors.Join(others...))
		}
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
	if sc.Standby != "" {
		if st.Business, err = r.readBusiness(ctx); err != nil {
			return res, fmt.Errorf("scenario %s: reading the final state: %w", sc.Name, err)
		}
	}
	res = r.verdict(ctx, st, drain, steps)
	res.Duration = time.Since(began)
	if rr := res.Records; rr.Known {
		r.logf("relay records: %d lifetime(s), %d record(s) merged; %d torn last line(s) dropped, %d lifetime(s) ended without a stop, %d without a file",
			rr.Lifetimes, rr.Ops, rr.Torn, rr.Died, rr.Missing)
	}
	if res.Footprint != nil {
		for _, line := range footprint.Summary(*res.Footprint) {
			r.logf("footprint: %s", line)
		}
	}
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

// validScenario says why the scenario cannot make a run, or nil: one
// built outside the catalogue may lack what a run needs.
func (r *run) validScenario() error {
	sc := r.sc
	switch {
	case sc.Name == "":
		return errors.New("a scenario needs a Name")
	case r.safety <= 0:
		return fmt.Errorf("scenario %s has no safety phase (Scenario.Safety or Options.Duration)", sc.Name)
	case r.workload.Events <= 0:
		return fmt.Errorf("scenario %s has no workload (Scenario.Workload.Events or Options.Events)", sc.Name)
	case sc.Replicas < 0:
		return fmt.Errorf("scenario %s: %d relay replicas", sc.Name, sc.Replicas)
	}
	return nil
}

// applicable says why sc cannot run against the relay or in the mode, or
// nil.
func (r *run) applicable() error {
	switch {
	case r.mode.Unsafe() && r.sc.NeedsRelay:
		return fmt.Errorf("%w: %s acts on relay replicas, and the %s variant runs without a relay", ErrNotApplicable, r.sc.Name, r.mode)
	case r.mode != workload.Outbox:
		return nil
	}
	return r.sc.Unmet(r.relay)
}

func (r *run) baseResult() Result {
	res := Result{
		Scenario: r.sc.Name, Relay: r.relay.Name, Variant: string(r.mode), Seed: r.opts.Seed,
		Events: r.plan.Total, Safety: r.safety, Subject: r.sc.Subject,
	}
	if r.sc.BrokerNodes > 1 {
		res.Queue = r.queueType()
	}
	res.Database = r.sc.ChangesDatabase
	res.Replay, res.ReplayTest = r.replay()
	return res
}

// Unmet says why sc is not applicable to relay, wrapping
// ErrNotApplicable, or returns nil: the one place that holds a
// scenario's needs (Needs, NeedsOneOf) against what a relay promises.
func (sc Scenario) Unmet(relay RelayUnderTest) error {
	if t := relay.Outbox.Table; t != "" && len(sc.Contexts) > 1 {
		return fmt.Errorf("%w: %s needs an outbox table for each of %d bounded contexts in one database, and %s keeps one table per schema (%s)",
			ErrNotApplicable, sc.Name, len(sc.Contexts), relay.Name, t)
	}
	if relay.Outbox.Commit != nil && sc.Independent && len(sc.Contexts) > 1 {
		return fmt.Errorf("%w: %s stages the events of one transaction in the outboxes of %d bounded contexts, and the writer of %s commits one outbox table per transaction",
			ErrNotApplicable, sc.Name, len(sc.Contexts), relay.Name)
	}
	if sc.upgrades {
		up := relay.PlannedUpgrade()
		if up == nil {
			return fmt.Errorf("%w: %s upgrades a relay from one version to the next, and %s, with an outbox of its own, declares no next version (a target file's next: relay and migrate)",
				ErrNotApplicable, sc.Name, relay.Name)
		}
		if err := up.Validate(); err != nil {
			return fmt.Errorf("%w: %s: %s's %v", ErrNotApplicable, sc.Name, relay.Name, err)
		}
	}
	if unmet := relay.Promises.Unmet(sc.Needs, relay.Name); len(unmet) > 0 {
		return fmt.Errorf("%w: %s needs %s", ErrNotApplicable, sc.Name, strings.Join(unmet, "; and "))
	}
	if len(sc.NeedsOneOf) == 0 {
		return nil
	}
	var why []string
	for _, alt := range sc.NeedsOneOf {
		unmet := relay.Promises.Unmet(alt, relay.Name)
		if len(unmet) == 0 {
			return nil
		}
		why = append(why, strings.Join(unmet, " and "))
	}
	return fmt.Errorf("%w: %s needs %s", ErrNotApplicable, sc.Name, strings.Join(why, "; or "))
}
