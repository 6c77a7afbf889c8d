// Package sim is the deterministic simulation tier. The production relay
// (relay.New and its run loop, relay.Run, driven through its Store and
// Publisher seams, its poll timer and its wake channel) and the
// production consumer (consumer.Consumer.Handle, through its Inbox and
// Delivery seams) run against in-memory fakes of PostgreSQL and RabbitMQ
// under a seeded scheduler: every fake call is a point where the scheduler
// takes the baton back and decides who runs next, and where it can crash,
// pause, cut off, skew or stop the caller. A relay waits between ticks on
// its poll timer, which runs on the database clock, and on the wake-ups a
// committed staging transaction sends (see runloop.go). One uint64 seed
// decides everything: the swarm parameters (replicas, batch size, poll
// interval, which faults are enabled and how often), the workload, the
// schedule and the faults, so the same seed gives the same history byte
// for byte.
//
// A run has a safety phase (workload and faults), a liveness phase (heal
// everything, restart what crashed, let time pass leases and backoffs,
// drain) and a check: the history and the final state of the fakes go to
// checker.Check, and the simulation adds what it saw of the relays'
// shutdowns (CheckerShutdown).
//
// Processes are coroutines (iter.Pull): exactly one runs at a time, and it
// runs until its next fake call, so no goroutine race decides anything.
//
// With Options.SQL the same scheduler, processes and recording run the
// SQL-faithful tier: the ports run the production PostgreSQL store, inbox
// and staging on a real database whose clock the simulation sets (see
// sqldb.go for how, and for what that tier cannot control and how it
// stays deterministic anyway).
package sim

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	seedpkg "github.com/outboxlab/outboxlab/seed"
	"github.com/outboxlab/outboxlab/workload"

	"github.com/outboxlab/outboxlab/checker"
	"github.com/outboxlab/outboxlab/consumer"
	"github.com/outboxlab/outboxlab/history"
	"github.com/outboxlab/outboxlab/relay"
)

// Variant changes what runs in the simulation without touching production
// code: decorators on the seams the production relay and consumer are
// built on, a relay configuration hook and the producers' mode. The zero
// Variant runs the production relay and consumer over the outbox. Mutants
// are Variants.
type Variant struct {
	// Name names the variant in results; empty for production.
	Name string
	// WrapStore decorates a relay process's store. The store it receives
	// also implements RawStore, for statements a correct relay never
	// issues.
	WrapStore func(p Process, s relay.Store) relay.Store
	// WrapPublisher decorates a relay process's publisher.
	WrapPublisher func(p Process, pub relay.Publisher) relay.Publisher
	// WrapTimer decorates a relay process's poll timer. The timer it
	// receives runs on the database clock, and its C is where the relay
	// waits between ticks, handing the baton back to the scheduler: a
	// decorator's C must call it.
	WrapTimer func(p Process, t relay.Timer) relay.Timer
	// WrapWake decorates the wake channel a relay process's listener
	// feeds, as relay.Run receives it. It returns the channel it got, or
	// nil for a relay that does not listen (the simulation then sends it
	// no wake-up).
	WrapWake func(p Process, wake <-chan struct{}) <-chan struct{}
	// WrapInbox decorates a consumer process's inbox; the inbox it
	// receives also implements RawInbox.
	WrapInbox func(p Process, in consumer.Inbox) consumer.Inbox
	// WrapDecoder decorates the relays' decoder (an *outbox.Registry that
	// knows the workload's types and workload.TypeRejected).
	WrapDecoder func(relay.Decoder) relay.Decoder
	// RelayConfig adjusts each relay's configuration before relay.New.
	RelayConfig func(*relay.Config)
	// PublishOptions are the delivery properties of the relays'
	// publishes, as relay.AMQPConfig.Options; nil means
	// relay.DefaultPublishOptions (persistent, mandatory).
	PublishOptions *relay.PublishOptions
	// Producer is the producers' mode; empty means workload.Outbox.
	Producer workload.Mode
}

// mode returns the producers' mode.
func (v Variant) mode() workload.Mode {
	if v.Producer == "" {
		return workload.Outbox
	}
	return v.Producer
}

// Options tunes a run. The zero value runs the production system with the
// defaults documented on each field.
type Options struct {
	// Steps is the length of the safety phase in scheduler steps. Default
	// 200.
	Steps int
	// LivenessSteps bounds the liveness phase. Default 20000.
	LivenessSteps int
	// Variant is what runs; the zero Variant is production.
	Variant Variant
	// Tune adjusts the swarm parameters drawn from the seed, e.g. to
	// force a fault on or all faults off.
	Tune func(*Swarm)
	// SQL, when set, runs the SQL-faithful tier: the production
	// PostgreSQL store, inbox and staging on a fresh database of the
	// backend's server (see NewSQL), instead of the fakes. A driven
	// World runs on the fakes only.
	SQL *SQL
}

func (o Options) withDefaults() Options {
	if o.Steps == 0 {
		o.Steps = 200
	}
	if o.LivenessSteps == 0 {
		o.LivenessSteps = 20000
	}
	return o
}

// FaultRate is how often the nemesis starts one fault.
type FaultRate struct {
	Fault Fault
	// Rate is the probability per step that the fault starts (on a random
	// target when it hits one process).
	Rate float64
	// MaxSteps bounds how many steps the fault lasts.
	MaxSteps int
}

// Swarm is a run's configuration, drawn from its seed ("swarm testing":
// which faults are on and how often is itself random).
type Swarm struct {
	Producers, Replicas, Consumers int
	// Weights make some kinds of process step more often than others.
	ProducerWeight, RelayWeight, ConsumerWeight int

	BatchSize, Window, MaxAttempts, SweepBatch int
	Lease, BackoffBase, BackoffMax             time.Duration
	Retention, SweepInterval                   time.Duration

	// StepTime bounds how much database time one step takes.
	StepTime time.Duration
	// PollInterval is the relays' relay.Config.PollInterval: how long a
	// relay that no wake-up reaches sleeps between ticks.
	PollInterval time.Duration
	// Prefetch is the consumers' channel prefetch: how many deliveries
	// the broker pushes to a consumer ahead of its acknowledgements.
	Prefetch int
	// TxMax bounds the events of one transaction.
	TxMax int
	// Rollback, Poison and LongTx are the shares of transactions rolled
	// back, of poison events, and of transactions held open for a while
	// (their rows commit with an old occurred_at).
	Rollback, Poison, LongTx float64
	// LostReply is the share of calls over a cut database link that take
	// effect before the link fails.
	LostReply float64
	// Faults are the enabled faults.
	Faults []FaultRate
}

func pick[T any](r *rand.Rand, xs ...T) T { return xs[r.IntN(len(xs))] }

// DrawSwarm draws the swarm parameters of seed.
func DrawSwarm(seed uint64) Swarm {
	r := seedpkg.Rand(seed, seedpkg.Swarm)
	sw := Swarm{
		Producers:      1 + r.IntN(3),
		Replicas:       2 + r.IntN(2),
		Consumers:      1 + r.IntN(2),
		ProducerWeight: 1 + r.IntN(4),
		RelayWeight:    1 + r.IntN(4),
		ConsumerWeight: 1 + r.IntN(4),
		BatchSize:      pick(r, 1, 2, 3, 5, 10, 100),
		Window:         pick(r, 1, 2, 5, 100),
		MaxAttempts:    pick(r, 3, 5),
		SweepBatch:     pick(r, 2, 500),
		// A lease must outlast twice RealTimeout (relay.Config.Validate).
		Lease:         2*RealTimeout + time.Minute + time.Duration(r.IntN(120))*time.Minute,
		BackoffBase:   pick(r, 10*time.Second, time.Minute, 5*time.Minute),
		BackoffMax:    pick(r, 10*time.Minute, time.Hour),
		Retention:     pick(r, 30*time.Minute, 2*time.Hour, 24*time.Hour),
		SweepInterval: pick(r, time.Minute, 10*time.Minute),
		StepTime:      pick(r, 10*time.Millisecond, time.Second, 5*time.Second),
		TxMax:         1 + r.IntN(4),
		Rollback:      pick(r, 0, 0.1, 0.3),
		Poison:        pick(r, 0, 0.05, 0.2),
		LongTx:        pick(r, 0, 0.1, 0.3),
		LostReply:     pick(r, 0, 0.3, 0.7),
	}
	for _, f := range SwarmFaults {
		if r.IntN(2) == 0 {
			continue
		}
		sw.Faults = append(sw.Faults, FaultRate{Fault: f, Rate: pick(r, 0.003, 0.01, 0.03), MaxSteps: pick(r, 5, 20, 60)})
	}
	// Drawn last, so that the draws above are those of every seed before
	// the relays ran their own loop.
	sw.PollInterval = pick(r, 100*time.Millisecond, time.Second, 5*time.Second, time.Minute)
	sw.Prefetch = pick(r, 1, 2, 16)
	return sw
}

// swarmOf returns the swarm a run of seed uses: drawn, tuned, bounded.
func swarmOf(seed uint64, opts Options) Swarm {
	sw := DrawSwarm(seed)
	if opts.Tune != nil {
		opts.Tune(&sw)
	}
	sw = sw.sane()
	if opts.Variant.mode() != workload.Outbox {
		sw.Poison = 0 // inline producers have no relay to park anything
	}
	return sw
}

// Describe returns the line a run of seed prints first (see
// Result.Header) without running it.
func Describe(seed uint64, opts Options) string {
	return Result{Seed: seed, Swarm: swarmOf(seed, opts).String(), Variant: opts.Variant.Name}.Header()
}

// sane bounds the step time so that no lease runs out without a fault: a
// row stays leased until the publishes ahead of it in the window, the rest
// of its batch and the next claim are through (fewer than Window +
// 2 x BatchSize rows, about three calls each), and every other process may
// step between two calls.
func (sw Swarm) sane() Swarm {
	procs := sw.Producers + sw.Replicas + sw.Consumers
	bound := sw.Lease / time.Duration(4*procs*(3*(2*sw.BatchSize+sw.Window)+8))
	if sw.StepTime > bound {
		sw.StepTime = bound.Truncate(time.Millisecond)
	}
	if sw.BackoffMax < sw.BackoffBase {
		sw.BackoffMax = sw.BackoffBase
	}
	sw.Prefetch = max(sw.Prefetch, 1)
	return sw
}

// String renders the parameters on one line.
func (sw Swarm) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "producers=%d replicas=%d consumers=%d weights=%d/%d/%d batch=%d window=%d max_attempts=%d sweep_batch=%d",
		sw.Producers, sw.Replicas, sw.Consumers, sw.ProducerWeight, sw.RelayWeight, sw.ConsumerWeight,
		sw.BatchSize, sw.Window, sw.MaxAttempts, sw.SweepBatch)
	fmt.Fprintf(&b, " lease=%s backoff=%s..%s retention=%s sweep_every=%s step_time=%s poll=%s prefetch=%d",
		sw.Lease, sw.BackoffBase, sw.BackoffMax, sw.Retention, sw.SweepInterval, sw.StepTime, sw.PollInterval, sw.Prefetch)
	fmt.Fprintf(&b, " tx_max=%d rollback=%g poison=%g long_tx=%g lost_reply=%g faults=",
		sw.TxMax, sw.Rollback, sw.Poison, sw.LongTx, sw.LostReply)
	if len(sw.Faults) == 0 {
		b.WriteString("none")
	}
	for i, f := range sw.Faults {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%s:%g/%d", f.Fault, f.Rate, f.MaxSteps)
	}
	return b.String()
}

// Result is the outcome of one run.
type Result struct {
	Seed uint64
	// Swarm is the run's swarm parameters on one line.
	Swarm string
	// Variant names what ran ("" for production).
	Variant string
	// Steps counts scheduler steps over all phases.
	Steps int
	// Events counts the events committed.
	Events int
	// Hits counts the faults started, by fault.
	Hits    map[Fault]int
	History []history.Op
	State   checker.State
	Config  checker.Config
	Report  checker.Report
	// Valid is the checkers' verdict; false too when Err is set.
	Valid bool
	// Err reports a simulation that could not run (an invalid relay
	// configuration from a Variant).
	Err error
}

// Header is the line a run prints first: its seed and swarm parameters.
func (r Result) Header() string {
	h := fmt.Sprintf("SEED=%d", r.Seed)
	if r.Variant != "" {
		h += " variant=" + r.Variant
	}
	return h + " " + r.Swarm
}

// Run runs the simulation of seed.
func Run(seed uint64, opts Options) Result {
	w := newWorld(seed, opts)
	for w.steps < w.opts.Steps && w.err == nil {
		w.nemesis()
		w.step()
	}
	return w.finish()
}

// finish heals, drains, checks and tears down.
func (w *world) finish() Result {
	w.healAll()
	w.producing = false
	// Producers close the transaction they have open, then stop.
	for _, p := range w.procs {
		for i := 0; p.kind == kindProducer && p.alive && i < 10000; i++ {
			w.steps++
			w.resume(p)
		}
	}
	w.phase = history.PhaseLiveness
	w.record(history.Op{Time: w.clock.Now(), Process: "runner", Type: history.Info, F: history.Phase, Meta: history.Meta{Phase: history.PhaseLiveness}})
	w.drain()
	// Time passes beyond retention; every relay ticks once more and
	// sweeps.
	w.clock.Advance(w.sw.Retention + w.sw.SweepInterval + time.Second)
	for _, p := range w.procs {
		if p.kind != kindRelay {
			continue
		}
		for i := 0; p.alive && i < 1000; i++ {
			w.steps++
			w.resume(p)
			if p.at == callIdle {
				break
			}
		}
	}
	w.phase = history.PhaseCheck
	w.record(history.Op{Time: w.clock.Now(), Process: "runner", Type: history.Info, F: history.Phase, Meta: history.Meta{Phase: history.PhaseCheck}})
	res := Result{
		Seed:    w.seed,
		Swarm:   w.sw.String(),
		Variant: w.v.Name,
		Steps:   w.steps,
		Events:  w.events,
		Hits:    maps.Clone(w.hits),
		History: w.ops,
		State:   w.state(),
		Config:  w.checkerConfig(),
		Err:     w.err,
	}
	w.teardown()
	if w.db != nil {
		if err := w.db.close(); err != nil && res.Err == nil {
			res.Err = err
		}
		res.Err = cmpErr(res.Err, w.err)
	}
	res.Report = checker.Check(res.History, res.State, res.Config)
	sd := w.shutdownResult()
	res.Report.Results = append(res.Report.Results, sd)
	res.Report.Valid = res.Report.Valid && sd.Valid
	res.Valid = res.Report.Valid && res.Err == nil
	return res
}

// drain runs steps until the backlog is gone or the bound is reached,
// jumping the clock to the next lease or backoff expiry whenever nothing
// moves.
func (w *world) drain() {
	for start := w.steps; w.steps-start < w.opts.LivenessSteps; {
		if w.drained() {
			return
		}
		// Jump only when nothing else can move: every relay is between
		// ticks (so only abandoned claims and backoffs hold rows) and the
		// queue has nothing left to deliver. The clock goes to the moment
		// a row is eligible and a relay's poll timer has fired.
		if w.quiet > 2*len(w.procs)+4 && w.othersIdle(nil) && len(w.broker.ready) == 0 && len(w.broker.unacked) == 0 {
			if t, ok := w.nextEligible(); ok {
				if poll, ok := w.nextTimer(); ok && poll.After(t) {
					t = poll
				}
				if t.After(w.clock.Now()) {
					w.clock.AdvanceTo(t)
				}
			}
			w.quiet = 0
		}
		w.step()
	}
}

// drained reports that nothing is left to publish or deliver, and no
// relay or consumer is in the middle of its work.
func (w *world) drained() bool {
	if len(w.store.pending) > 0 || len(w.broker.ready) > 0 || len(w.broker.unacked) > 0 {
		return false
	}
	if w.err != nil {
		return true // nothing more can be learnt
	}
	for _, p := range w.procs {
		if !p.alive || p.down {
			continue
		}
		switch p.kind {
		case kindProducer:
			return false
		case kindRelay:
			if p.at != callIdle {
				return false
			}
		case kindConsumer:
			if p.at != callNext {
				return false
			}
		}
	}
	if w.db != nil {
		pending, err := w.db.pending()
		if err != nil {
			w.harnessFailed(err)
		}
		return !pending
	}
	return true
}

// nextEligible is Store.NextEligible of the run's table.
func (w *world) nextEligible() (time.Time, bool) {
	if w.db == nil {
		return w.store.NextEligible()
	}
	t, ok, err := w.db.nextEligible(w.clock.Now())
	if err != nil {
		w.harnessFailed(err)
	}
	return t, ok
}

// teardown ends every coroutine without recording anything.
func (w *world) teardown() {
	for _, p := range w.procs {
		if p.alive {
			p.silent = true
			p.stop()
			p.alive = false
		}
	}
}

// state reads the final state of the fakes.
func (w *world) state() checker.State {
	st := checker.State{Effects: w.inbox.Effects(), DBStart: w.dbStart, DBNow: w.clock.Now()}
	if w.db != nil {
		if err := w.db.state(&st, w.v.mode() == workload.Outbox); err != nil {
			w.harnessFailed(err)
		}
		w.queued(&st)
		return st
	}
	if w.v.mode() == workload.Outbox {
		st.Outbox = make(map[string]checker.RowState, len(w.store.byID))
		for _, r := range w.store.Rows() {
			cr := checker.RowState{ID: r.ID.String(), Type: r.Type, Attempts: r.Attempts, OccurredAt: r.OccurredAt}
			if !r.ProcessedAt.IsZero() {
				t := r.ProcessedAt
				cr.ProcessedAt = &t
			}
			if !r.FaultedAt.IsZero() {
				t := r.FaultedAt
				cr.FaultedAt = &t
			}
			st.Outbox[cr.ID] = cr
		}
	}
	w.queued(&st)
	return st
}

// queued adds the messages left in the broker to st.
func (w *world) queued(st *checker.State) {
	for _, q := range [][]*Message{w.broker.ready, w.broker.unacked, w.broker.dead} {
		for _, m := range q {
			st.Queued = append(st.Queued, m.ID)
		}
	}
}

// cmpErr returns a, or b when a is nil.
func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// relayConfig is the configuration every relay of the run gets.
func (w *world) relayConfig(p *proc) relay.Config {
	cfg := relay.Config{
		RelayID:        p.id,
		PollInterval:   w.sw.PollInterval,
		BatchSize:      w.sw.BatchSize,
		Lease:          w.sw.Lease,
		MaxAttempts:    w.sw.MaxAttempts,
		BackoffBase:    w.sw.BackoffBase,
		BackoffMax:     w.sw.BackoffMax,
		Retention:      w.sw.Retention,
		SweepBatch:     w.sw.SweepBatch,
		SweepInterval:  w.sw.SweepInterval,
		PublishTimeout: RealTimeout,
		StoreTimeout:   RealTimeout,
		PublishWindow:  w.sw.Window,
		Now:            p.Now,
	}
	if w.v.RelayConfig != nil {
		w.v.RelayConfig(&cfg)
	}
	return cfg.WithDefaults()
}

// checkerConfig states what the run promises.
func (w *world) checkerConfig() checker.Config {
	var relayProc *proc
	for _, p := range w.procs {
		if p.kind == kindRelay {
			relayProc = p
			break
		}
	}
	cfg := w.relayConfig(relayProc)
	stages := w.v.mode() == workload.Outbox
	return checker.Config{
		Retention:   cfg.Retention,
		Lease:       cfg.Lease,
		MaxAttempts: cfg.MaxAttempts,
		// The store backs a row off by Backoff(attempts before the
		// failure), as relay.PGStore does; the checker asks for the delay
		// after a retry that left n attempts, which is Backoff(n-1).
		Backoff: func(n int) time.Duration { return cfg.Policy().Backoff(max(n-1, 0)) },
		Poison:  maps.Clone(w.poison),
		// Every committed event is delivered within the lease (claims of
		// crashed or paused relays), the longest backoff, a poll interval
		// after each, and the steps of the liveness phase.
		LivenessBound: cfg.Lease + cfg.BackoffMax + 2*cfg.PollInterval + time.Duration(w.opts.LivenessSteps+1)*w.sw.StepTime + time.Minute,
		Features:      checker.Features{Stages: stages, Parks: stages, Fenced: true, Sweeps: true},
	}
}

// Faults returns the names of the faults a result's history shows
// starting, sorted.
func (r Result) Faults() []string {
	seen := map[string]bool{}
	for _, op := range r.History {
		if op.F == history.FaultStart {
			seen[op.Fault.Name] = true
		}
	}
	return slices.Sorted(maps.Keys(seen))
}
