package scenarios

import (
	"github.com/outboxlab/outboxlab/contract"
	"github.com/outboxlab/outboxlab/footprint"
	"github.com/outboxlab/outboxlab/history"
	"github.com/outboxlab/outboxlab/seed"
	"github.com/outboxlab/outboxlab/workload"

	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/outboxlab/outboxlab/chaos"
	"github.com/outboxlab/outboxlab/relay"
	"github.com/outboxlab/outboxlab/testenv"
)

// Scenario is one named chaos run: a workload, relay replicas, a fault
// plan drawn from the run's seed, and what the run must show besides the
// checkers' verdict. The catalogue's are built here (Lookup); a team
// builds its own as a Scenario value, with a workload, its own Faults
// and Check, and runs it with Run or package suite (docs/scenarios.md,
// "Your own scenario").
type Scenario struct {
	// Name is how the catalogue, the command and the tests call it.
	Name string
	// Summary says in one sentence what the scenario does.
	Summary string
	// Workload is the default workload; Options.Events and the long mode
	// resize it.
	Workload workload.Shape
	// Safety is the default length of the safety phase.
	Safety time.Duration
	// Replicas is the number of relay replicas per context (default 2).
	Replicas int
	// Contexts names the bounded contexts, each with its own outbox table,
	// exchange, queue and relay; more than one makes a pipeline whose hops
	// stage the next context's event as they consume, unless Independent.
	// Default: one, "orders".
	Contexts []string
	// Independent makes the contexts side by side instead of a pipeline:
	// the producers stage each event in the context the workload gives it
	// (workload.Shape.Contexts), every context's consumer applies its own
	// queue, and the consumers keep one projection of the entities
	// together, as a downstream service fed by two upstream contexts does.
	Independent bool
	// ContextEnv sets, per context name, OUTBOX_* settings of that
	// context's replicas over RelayEnv (the relay under test's own Env
	// still wins).
	ContextEnv map[string]map[string]string
	// NeedsRelay: the faults act on relay replicas, so the unsafe
	// variants, which run without one, cannot run it.
	NeedsRelay bool
	// Needs is what the scenario needs a relay to promise: failpoints for
	// a fault at a point of its loop, a lease locking style for the
	// faults and checks that act on the leases it takes on rows
	// (locked_by, locked_at, locked_until). Against a relay whose
	// RelayUnderTest.Promises lack it the scenario is not applicable,
	// with the reason contract.Promises.Unmet gives.
	Needs contract.Promises
	// NeedsOneOf, when set, asks besides Needs for at least one of its
	// promises: a fault that works on a relay of either locking style, or
	// through a failpoint where the relay declares them. Against a relay
	// that makes none of them the scenario is not applicable, with the
	// reasons of each.
	NeedsOneOf []contract.Promises
	// Exposes lists the unsafe variants this scenario catches: running it
	// with one of them must report lost or phantom events.
	Exposes []workload.Mode
	// WorkloadFaults names the workload's own faults (poison events, held
	// transactions, producer crashes) that must fire.
	WorkloadFaults []string
	// BrokerNodes, when 2 or more, runs the scenario on a RabbitMQ
	// cluster of that many nodes (EnvOptionsFor) with quorum queues.
	BrokerNodes int
	// Standby, when set, runs the scenario on a PostgreSQL with a
	// streaming standby of that replication (EnvOptionsFor), which its
	// faults may fail over to (testenv.Env.Failover); the final state
	// then also reads which business rows survived.
	Standby testenv.Replication
	// ChangesDatabase says, for reports, what the scenario does to the
	// database itself ("failover to an async standby", "dump and
	// restore"); empty for the scenarios that leave it in place.
	ChangesDatabase string
	// RelayEnv is what the scenario sets of every replica's OUTBOX_*
	// settings, over TimingEnv; the relay under test's own Env still wins.
	RelayEnv map[string]string
	// Subject is what the scenario puts under test: empty for the relay
	// (the catalogue), SubjectConsumers for the consumers
	// (ConsumerCatalogue). Results carry it, so that reports keep the
	// consumers' runs apart from the relay's.
	Subject string
	// ConsumerPrefetch is the consumers' prefetch (default 8).
	ConsumerPrefetch int
	// ApplyHold is about how long every consumer's effect keeps its
	// transaction open before the commit: a slow apply, during which a
	// duplicate of the same event can reach another consumer. Each event
	// holds between half and one and a half times it, by a hash of its
	// id, so that the consumers do not apply in step. Default 0.
	ApplyHold time.Duration

	// Prepare, when set, is called for every relay replica before it
	// first starts, to set its environment (Replica.Setenv: a failpoint
	// for one replica, other settings for another). It is not called in
	// an unsafe mode, which runs no replica.
	Prepare func(s Stage, r *Replica)
	// Faults, when set, registers the scenario's faults with the run's
	// nemesis (Stage.AddFault) and returns their schedule: when each
	// starts and how long it lasts (Step), drawn from rng, which the
	// run's seed decides, so that a seed replays the same schedule. Every
	// step must end within safety, the length of the safety phase; a
	// scheduled fault that never fires fails the run. An error stops the
	// run before its workload starts.
	Faults func(s Stage, rng *rand.Rand, safety time.Duration) ([]chaos.Step, error)
	// Check, when set, judges the run once the checkers have: it reads
	// res (the history, the counts, the checkers' report) and adds the
	// scenario's own findings to it: a line in res.Problems fails the
	// run, one in res.Inconclusive makes it inconclusive when nothing
	// failed, one in res.Unchecked says what was not judged.
	Check func(ctx context.Context, s Stage, res *Result)

	// upgrades marks the rolling upgrade, which creates the outbox as the
	// relay's upgrade starts from (RelayUnderTest.Upgrade) and applies
	// only to a relay that has one.
	upgrades bool

	// hooks, set on the scenarios the catalogue's functions return, are
	// the code pointers of their hooks as built (see catalogued).
	hooks *[3]uintptr
}

// Workload faults, counted from the history.
const (
	WorkloadPoison        = "poison events committed"
	WorkloadHeld          = "held transactions committed after later ones"
	WorkloadProducerCrash = "producer crashes"
)

// Scenario names.
const (
	Baseline            = "baseline"
	BrokerDown          = "broker-down"
	BrokerKilled        = "broker-killed"
	DBDown              = "db-down"
	CrashBeforeMark     = "crash-between-publish-and-mark"
	LeaseExpiry         = "lease-expiry"
	ClockSkew           = "clock-skew"
	Poison              = "poison"
	ConfirmLost         = "confirm-lost"
	SlowNetwork         = "slow-network"
	CommitOrder         = "commit-order-inversion"
	RollingRestart      = "rolling-restart"
	ProducerCrash       = "producer-crash"
	Pipeline            = "pipeline"
	defaultContext      = "orders"
	defaultReplicaCount = 2
)

// defaultWorkload is the workload of most scenarios: a few producers
// writing small transactions concurrently, a tenth of them rolled back.
func defaultWorkload() workload.Shape {
	return workload.Shape{Events: 150, Producers: 3, MaxEventsPerTxn: 3, RollbackRate: 0.1}
}

// Catalogue returns every scenario, in the order the catalogue runs them.
func Catalogue() []Scenario {
	return named(
		baseline(), brokerDown(), brokerKilled(), dbDown(), crashBeforeMark(), leaseExpiry(), stallUnderLoad(),
		clockSkew(), poison(), confirmLost(), slowNetwork(), commitOrder(), rollingRestart(),
		producerCrash(), pipeline(),
	)
}

// DualWrite is the scenario of the demo: the catalogue's broker-down (the
// publisher's link to the broker goes down twice), with a workload that
// also rolls requests back and has producers die right after COMMIT, so
// that each unsafe producer mode shows its own failure under the same run.
// It is not part of Catalogue (the relay is judged by the scenarios
// there); Lookup finds it.
const DualWrite = "dual-write"

func dualWrite() Scenario {
	sc := brokerDown()
	sc.Name = DualWrite
	sc.Summary = "the broker goes down twice while producers commit, roll back, and die right after COMMIT"
	sc.Workload.RollbackRate = 0.15
	sc.Workload.CrashAfterCommitRate = 0.1
	sc.WorkloadFaults = append(sc.WorkloadFaults, WorkloadProducerCrash)
	sc.Exposes = []workload.Mode{workload.PublishThenCommit, workload.CommitThenPublish}
	return sc
}

// Lookup returns the scenario named name: one of Catalogue, of
// ClusterCatalogue, of ConsumerCatalogue, of DatabaseCatalogue, or
// DualWrite.
func Lookup(name string) (Scenario, bool) {
	all := append(append(append(Catalogue(), ClusterCatalogue()...), ConsumerCatalogue()...), DatabaseCatalogue()...)
	for _, s := range append(all, named(dualWrite())...) {
		if s.Name == name {
			return s, true
		}
	}
	return Scenario{}, false
}

// Names returns the names of the catalogue's scenarios, in order.
func Names() []string {
	var out []string
	for _, s := range Catalogue() {
		out = append(out, s.Name)
	}
	return out
}

// between draws a duration in [lo, hi] from rng.
func between(rng *rand.Rand, lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(rng.Int64N(int64(hi-lo)+1)).Truncate(time.Millisecond)
}

// Step is one window of fault f in a schedule Scenario.Faults returns: f
// is injected at (from the start of the safety phase's fault clock,
// which starts with the first event delivered, or 10 s into the phase)
// and healed d later. f
// must be registered with Stage.AddFault; a one-shot fault (a restart)
// takes a short d.
func Step(f chaos.Fault, at, d time.Duration) chaos.Step {
	return chaos.Step{At: at, Fault: f.Name(), Kind: f.Kind(), Duration: d}
}

func baseline() Scenario {
	return Scenario{
		Name:     Baseline,
		Summary:  "no faults: every committed event is delivered once, with no duplicate at all",
		Workload: defaultWorkload(),
		Safety:   6 * time.Second,
		Exposes:  []workload.Mode{workload.PublishThenCommit},
		Check: func(ctx context.Context, s Stage, res *Result) {
			// A relay that takes no lock of a row duplicates without a
			// fault, as it declares (locking=none): those duplicates are
			// the duplicates checker's to explain.
			unlocked := s.Relay().Promises.Locking.Style == contract.LockingNone
			if s.Mode() == workload.Outbox && res.Counts.DuplicateDeliveries > 0 && !unlocked {
				res.Problems = append(res.Problems, fmt.Sprintf("baseline: %d duplicate deliveries with no fault at all", res.Counts.DuplicateDeliveries))
			}
		},
	}
}

func brokerDown() Scenario {
	return Scenario{
		Name:     BrokerDown,
		Summary:  "the link from the publisher to the broker goes down for many polls, twice, each time the moment the broker takes a publish of the relays, then heals",
		Workload: defaultWorkload(),
		Safety:   9 * time.Second,
		Exposes:  []workload.Mode{workload.CommitThenPublish, workload.Optimistic},
		Faults: func(s Stage, rng *rand.Rand, safety time.Duration) ([]chaos.Step, error) {
			// The cut waits for a publish the broker takes from a relay
			// and lands on it, so that confirms are on their way: an
			// outage must consume no attempt of what it cut off.
			f := &inFlight{Fault: chaos.Down(s.PublisherLink()), wait: time.Second}
			for i := range s.Replicas(0) {
				f.slots = append(f.slots, s.Replica(0, i))
			}
			if err := s.AddFault(f, ""); err != nil {
				return nil, err
			}
			at1, d1 := between(rng, time.Second, 2*time.Second), between(rng, 1500*time.Millisecond, 2500*time.Millisecond)
			at2 := at1 + d1 + between(rng, time.Second, 2*time.Second)
			d2 := between(rng, 1500*time.Millisecond, 2500*time.Millisecond)
			steps := []chaos.Step{Step(f, at1, d1), Step(f, at2, d2)}
			if len(f.slots) > 0 {
				// Slowed confirms keep every publish in flight for a
				// while, so that the cut finds some on their way.
				slow := chaos.Latency(s.PublisherLink(), chaos.Downstream, confirmLatency, 0).WithName(s.PublisherLink().Name() + " confirms slowed")
				if err := s.AddFault(slow, ""); err != nil {
					return nil, err
				}
				steps = append(steps, Step(slow, 0, min(at2+d2, safety-500*time.Millisecond)))
			}
			return steps, nil
		},
		Check: func(ctx context.Context, s Stage, res *Result) {
			for _, f := range s.Faults() {
				if c, ok := f.(*inFlight); ok && len(c.slots) > 0 && c.slots[0].r.tap != nil {
					if n := len(c.landedOn()); n > 0 {
						res.Unchecked = append(res.Unchecked, fmt.Sprintf("broker-down: the cuts landed on %d publishes in flight: rows the broker had taken and the relays had not marked %s after the cut", n, inFlightSettle))
					} else {
						res.Unchecked = append(res.Unchecked, "broker-down: neither cut landed on a publish in flight (every row the broker took just before a cut was marked)")
					}
				}
			}
		},
	}
}

func brokerKilled() Scenario {
	return Scenario{
		Name:     BrokerKilled,
		Summary:  "the RabbitMQ container is killed with a backlog in its queue and started again; retention is short, so the sweep runs while rows wait for the broker",
		Workload: defaultWorkload(),
		Safety:   8 * time.Second,
		// The sweep deletes processed rows a second after their mark
		// while the outage keeps others pending for longer: it must
		// tell them apart.
		RelayEnv: map[string]string{contract.EnvRetention: "1s", contract.EnvSweepInterval: "250ms"},
		Exposes:  []workload.Mode{workload.Optimistic},
		Faults: func(s Stage, rng *rand.Rand, safety time.Duration) ([]chaos.Step, error) {
			// The consumers are cut off first, so that the kill finds
			// published messages waiting in the queue: only their
			// persistence decides whether they survive the restart.
			cut := chaos.Down(s.Link(testenv.LinkConsumerBroker))
			kill := newServiceKill(s.RabbitMQ(), history.ClassBroker)
			for _, f := range []chaos.Fault{cut, kill} {
				if err := s.AddFault(f, ""); err != nil {
					return nil, err
				}
			}
			killAt := between(rng, 1500*time.Millisecond, 3*time.Second)
			killFor := between(rng, 500*time.Millisecond, 1500*time.Millisecond)
			cutAt := killAt - time.Second
			return []chaos.Step{
				Step(cut, cutAt, killAt+killFor+time.Second-cutAt),
				Step(kill, killAt, killFor),
			}, nil
		},
	}
}

func dbDown() Scenario {
	return Scenario{
		Name:     DBDown,
		Summary:  "the relays' database link is cut, then the PostgreSQL container is killed and started again",
		Workload: defaultWorkload(),
		Safety:   9 * time.Second,
		Faults: func(s Stage, rng *rand.Rand, safety time.Duration) ([]chaos.Step, error) {
			cut := chaos.Down(s.Link(testenv.LinkRelayDB))
			kill := newServiceKill(s.Postgres(), history.ClassDB)
			for _, f := range []chaos.Fault{cut, kill} {
				if err := s.AddFault(f, ""); err != nil {
					return nil, err
				}
			}
			at1, d1 := between(rng, time.Second, 2*time.Second), between(rng, 1500*time.Millisecond, 2500*time.Millisecond)
			at2 := at1 + d1 + between(rng, time.Second, 2*time.Second)
			return []chaos.Step{Step(cut, at1, d1), Step(kill, at2, between(rng, 300*time.Millisecond, time.Second))}, nil
		},
	}
}

func crashBeforeMark() Scenario {
	return Scenario{
		Name:       CrashBeforeMark,
		Summary:    "a relay is killed after the broker took its publish and before its mark (at a failpoint, or by the harness on seeing the publish at the broker while the row is held and unmarked); another replica republishes; the consumer dedupes",
		Workload:   defaultWorkload(),
		Safety:     9 * time.Second,
		NeedsRelay: true,
		NeedsOneOf: append([]contract.Promises{{Failpoints: true}, {Locking: contract.NoLocks}}, holdsRows...),
		Prepare: func(s Stage, r *Replica) {
			// The first replica lets one to three confirmed batches be
			// marked, and dies before marking the next.
			if r == s.Replica(0, 0) && s.Relay().Promises.Failpoints {
				passes := 1 + seed.Rand(s.Seed(), seed.Kill).IntN(3)
				r.Setenv(contract.EnvFailpoints, killSpec(relay.FailAfterConfirmBeforeMark, passes))
			}
		},
		Faults: func(s Stage, rng *rand.Rand, safety time.Duration) ([]chaos.Step, error) {
			// The window opens with the workload and closes once the
			// lease of the dead replica's batch has run out.
			window := s.Lease() + between(rng, time.Second, 2*time.Second)
			if s.Relay().Promises.Failpoints {
				f := &failpointKill{rec: s.Recorder(), slot: s.Replica(0, 0), point: relay.FailAfterConfirmBeforeMark, within: safety}
				if err := s.AddFault(f, ""); err != nil {
					return nil, err
				}
				return []chaos.Step{Step(f, 0, window)}, nil
			}
			// Without a failpoint the harness kills the replica when it
			// sees its publish at the broker; the relays' confirms are
			// slowed meanwhile, so that the replica is still waiting for
			// the confirm, and has sent no mark, when the kill lands.
			slow := chaos.Latency(s.PublisherLink(), chaos.Downstream, killWindowLatency, 0).WithName(s.PublisherLink().Name() + " confirms slowed for the kill")
			kill := &observedKill{rec: s.Recorder(), slot: s.Replica(0, 0), within: safety}
			for _, f := range []chaos.Fault{slow, kill} {
				if err := s.AddFault(f, ""); err != nil {
					return nil, err
				}
			}
			return []chaos.Step{Step(slow, 0, window), Step(kill, 0, window)}, nil
		},
		Check: func(ctx context.Context, s Stage, res *Result) {
			for _, f := range s.Faults() {
				if f.Kind() != chaos.KindLatency && f.Hits() == 0 {
					return // the kill never bit: the run is inconclusive, or failed for it
				}
			}
			if res.Counts.DuplicateDeliveries == 0 {
				res.Problems = append(res.Problems, "crash-between-publish-and-mark: no event was delivered twice, so the republish after the kill never reached the consumer")
			}
		},
	}
}

// killWindowLatency is the latency crash-between-publish-and-mark adds to
// the relays' confirms while it waits to kill a replica that has no
// failpoints: the replica learns that the broker took a publish, and so
// marks it, at least this long after the broker's firehose shows it.
const killWindowLatency = 300 * time.Millisecond

// confirmLatency is the latency broker-down adds to the confirms of the
// relays, so that its cuts find publishes in flight: below the publish
// timeout, so that no publish fails for it.
const confirmLatency = 200 * time.Millisecond

// heldPublished counts the publishes of held rows a pause's replica made
// before the freeze and after the thaw; -1 when the broker is not
// observed.
func heldPublished(p *pauseHolding) int {
	before, after := p.heldPublishes()
	if before < 0 {
		return -1
	}
	return before + after
}

// holdWindowLatency is the latency lease-expiry adds to the confirms of a
// relay that holds row locks while it publishes, so that the pause can
// catch a replica holding them: below the publish timeout, so that no
// publish fails for it.
const holdWindowLatency = 300 * time.Millisecond

// rowLockTimeout is the idle_in_transaction_session_timeout lease-expiry
// gives the frozen replica of a relay that holds row locks: half the
// lease the harness gives relays, far longer than a publish's wait for
// its confirm (PublishTimeout) and far shorter than the freeze.
func rowLockTimeout(s Stage) time.Duration { return max(s.Lease()/2, 2*PublishTimeout) }

func leaseExpiry() Scenario {
	return Scenario{
		Name:       LeaseExpiry,
		Summary:    "a relay holding rows is frozen past its hold: its lease runs out, or the database ends its idle transaction and frees its row locks; another replica publishes and marks the rows; the frozen one resumes and changes none of them",
		Workload:   defaultWorkload(),
		Safety:     10 * time.Second,
		NeedsRelay: true,
		NeedsOneOf: holdsRows,
		Prepare:    prepareFreeze,
		Faults: func(s Stage, rng *rand.Rand, safety time.Duration) ([]chaos.Step, error) {
			return freezeHolder(s, rng, safety, s.Lease()+between(rng, time.Second, 2*time.Second))
		},
		Check: func(ctx context.Context, s Stage, res *Result) {
			pause := frozen(s)
			if pause == nil {
				return // never fired: the run is failed or inconclusive for it
			}
			rowLocks := s.Relay().Promises.Locking.Style == contract.LockingRowLock
			problems, n := pause.verdict(ctx, s.Relay().Promises.Fenced || rowLocks)
			res.Problems = append(res.Problems, problems...)
			switch {
			case n == 0 || len(problems) > 0:
				// Nothing held was judged, or the problems say what was found.
			case rowLocks:
				pause.mu.Lock()
				after := pause.tookOver
				pause.mu.Unlock()
				res.Unchecked = append(res.Unchecked, fmt.Sprintf("row locks: judged on the %d rows %s held locked when frozen: freed when the database ended its idle transaction (its role's idle_in_transaction_session_timeout is %s, unless the relay sets its own), all marked by another replica %s into the freeze, unchanged after it resumed",
					n, pause.slot.name, rowLockTimeout(s), after))
			case s.Relay().Promises.Fenced && !res.Records.Known && heldPublished(pause) == 0:
				// Without records, a late mark is exercised only where the
				// frozen replica had published what it held, or went on to
				// after it resumed: a relay follows a confirmed publish
				// with its mark.
				res.Inconclusive = append(res.Inconclusive, fmt.Sprintf("lease-expiry: the broker took no publish of the %d rows %s held from it, before it was frozen or after it resumed, so its late mark was not exercised",
					n, pause.slot.name))
			case s.Relay().Promises.Fenced:
				late := ""
				if before, after := pause.heldPublishes(); before+after > 0 {
					late = fmt.Sprintf(" (the broker took %d publishes of them from it before it was frozen, whose confirms reached it frozen, and %d after it resumed; a relay marks a row once its confirm arrives)", before, after)
				}
				res.Unchecked = append(res.Unchecked, fmt.Sprintf("fencing: judged on the %d rows %s held when paused: taken over and marked by another replica, unchanged by its late mark%s",
					n, pause.slot.name, late))
			default:
				res.Unchecked = append(res.Unchecked, fmt.Sprintf("fencing: not declared; the %d rows %s held when paused were taken over and marked by another replica, and what its late mark did to them is not judged",
					n, pause.slot.name))
			}
			if s.Relay().Promises.Fenced && res.Records.Known && s.Relay().Promises.Failpoints && fencedWrites(res.History, pause.slot.name) == 0 {
				// The promise was not put to the test, which says nothing
				// of the relay: the run cannot pass on it.
				res.Inconclusive = append(res.Inconclusive, fmt.Sprintf("lease-expiry: the records of %s show no write the lease fence stopped, so its late mark was not exercised (%s)",
					pause.slot.name, lastRecorded(res.History, pause.slot.name)))
			}
		},
	}
}

// prepareFreeze readies the first replica for a freeze while it holds
// rows (freezeHolder): a relay of row locks gets an
// idle_in_transaction_session_timeout, one with failpoints lingers after
// each claim.
func prepareFreeze(s Stage, r *Replica) {
	if r != s.Replica(0, 0) {
		return
	}
	switch {
	case s.Relay().Promises.Locking.Style == contract.LockingRowLock:
		// The database ends the frozen replica's transaction, as a
		// team's idle_in_transaction_session_timeout would, long before
		// the freeze ends.
		r.SetSessionSetting("idle_in_transaction_session_timeout", rowLockTimeout(s).String())
	case s.Relay().Promises.Failpoints:
		// The first replica lingers after each claim, so that the pause
		// catches it holding a batch it has not published yet.
		r.Setenv(contract.EnvFailpoints, relay.FailAfterClaim+"=sleep(1500ms)")
	}
}

// freezeHolder schedules a freeze of d of the first replica, 1 to 2 s
// into the fault clock, once it holds rows (pauseHolding), with what
// makes it hold them long enough to be caught.
func freezeHolder(s Stage, rng *rand.Rand, safety, d time.Duration) ([]chaos.Step, error) {
	f := &pauseHolding{db: s.DB(), rec: s.Recorder(), slot: s.Replica(0, 0), within: s.Lease() + 6*time.Second}
	at := between(rng, time.Second, 2*time.Second)
	var steps []chaos.Step
	if s.Relay().Promises.Locking.Style == contract.LockingRowLock {
		// A relay holding row locks holds them while it waits for its
		// confirms: slowed confirms keep them held long enough to be
		// caught.
		slow := chaos.Latency(s.PublisherLink(), chaos.Downstream, holdWindowLatency, 0).WithName(s.PublisherLink().Name() + " confirms slowed for the pause")
		if err := s.AddFault(slow, ""); err != nil {
			return nil, err
		}
		steps = append(steps, Step(slow, 0, min(at+d, safety-500*time.Millisecond)))
	} else if s.Relay().Promises.Failpoints {
		f.asleep = relay.FailAfterClaim
	} else {
		// A lease relay without failpoints is frozen once the broker took
		// its publish of a row it holds, its confirms slowed so that it
		// is waiting for one: the confirm reaches it while it is frozen,
		// and it marks the row when it resumes, its lease long gone: its
		// late mark is exercised.
		f.onPublish = true
		slow := chaos.Latency(s.PublisherLink(), chaos.Downstream, holdWindowLatency, 0).WithName(s.PublisherLink().Name() + " confirms slowed for the pause")
		if err := s.AddFault(slow, ""); err != nil {
			return nil, err
		}
		steps = append(steps, Step(slow, 0, min(at+d, safety-500*time.Millisecond)))
	}
	if err := s.AddFault(f, ""); err != nil {
		return nil, err
	}
	return append(steps, Step(f, at, d)), nil
}

// frozen returns the run's freeze of a replica holding rows
// (freezeHolder), nil when it never fired.
func frozen(s Stage) *pauseHolding {
	for _, f := range s.Faults() {
		if p, ok := f.(*pauseHolding); ok && p.Hits() > 0 {
			return p
		}
	}
	return nil
}

// StallUnderLoad freezes a relay replica while it holds rows, as
// lease-expiry does, for 3 s, while the producers keep committing to its
// outbox at twice the default pace: what the producers suffer from a
// stalled holder is its subject. A relay that holds a lease or row locks
// must not make them wait; one that locks more (the table) makes every
// producer wait for the stalled replica. The run's footprint holds their
// transactions against the control phase (a declared producer budget
// fails the run), and the check reports the transactions that began
// during the freeze.
const StallUnderLoad = "stall-under-load"

func stallUnderLoad() Scenario {
	w := defaultWorkload()
	w.Events *= 2
	return Scenario{
		Name:       StallUnderLoad,
		Summary:    "a relay holding rows is frozen for 3 s while the producers keep committing to its outbox at twice the usual pace: their transactions must not wait for it (held to the relay's producer budget against the control phase)",
		Workload:   w,
		Safety:     9 * time.Second,
		NeedsRelay: true,
		NeedsOneOf: holdsRows,
		Prepare:    prepareFreeze,
		Faults: func(s Stage, rng *rand.Rand, safety time.Duration) ([]chaos.Step, error) {
			return freezeHolder(s, rng, safety, 3*time.Second)
		},
		Check: func(ctx context.Context, s Stage, res *Result) {
			pause := frozen(s)
			if pause == nil {
				return // never fired: the run is failed or inconclusive for it
			}
			if line, ok := freezeCommits(res.History, pause.Name()); ok {
				res.Unchecked = append(res.Unchecked, line)
			} else {
				res.Inconclusive = append(res.Inconclusive, fmt.Sprintf("%s: no producer transaction ran while %s was frozen, so none could wait for it", StallUnderLoad, pause.slot.name))
			}
		},
	}
}

// freezeCommits describes the producers' transactions that ran while
// fault did (began before it ended, ended after it began), committed or
// not: how many, their p99 and the longest.
func freezeCommits(h []history.Op, fault string) (string, bool) {
	var from, to time.Time
	for _, op := range h {
		if op.Fault == nil || op.Fault.Name != fault || op.Type != history.OK {
			continue
		}
		switch {
		case op.F == history.FaultStart && from.IsZero():
			from = op.Time
		case op.F == history.FaultStop && !from.IsZero() && to.IsZero():
			to = op.Time
		}
	}
	if from.IsZero() || to.IsZero() {
		return "", false
	}
	var took []time.Duration
	for _, p := range history.Pairs(h) {
		inv := p.Invoke
		if inv == nil || inv.F != history.Commit || !strings.HasPrefix(inv.Process, "producer-") || p.Done == nil ||
			p.Done.Time.Before(from) || inv.Time.After(to) {
			continue
		}
		took = append(took, p.Done.Time.Sub(inv.Time)-inv.Held)
	}
	if len(took) == 0 {
		return "", false
	}
	l := footprint.LatencyOf(took)
	return fmt.Sprintf("producers during the freeze of %s (%s): %d transactions ran into it, p99 %s, longest %s",
		fault, to.Sub(from).Round(time.Millisecond), l.Count, l.P99.Round(time.Millisecond), l.Max.Round(time.Millisecond)), true
}

func clockSkew() Scenario {
	return Scenario{
		Name:       ClockSkew,
		Summary:    "relay replicas and producers run with clock offsets in both directions of 2 to 10 minutes, or 2 to 10 times the relay's lease where that is longer than a minute, while the replicas contend for rows; leases and row locks follow the database, so no duplicate is allowed",
		Workload:   defaultWorkload(),
		Safety:     9 * time.Second,
		NeedsRelay: true,
		NeedsOneOf: holdsRows,
		Prepare: func(s Stage, r *Replica) {
			// The skewed replicas linger after each claim, so that each
			// holds live leases while the other claims: the forward one
			// meets leases it would take for run out, were it to compare
			// them with its own clock, and the backward one's leases
			// would have run out at once.
			if (r == s.Replica(0, 0) || r == s.Replica(0, 1)) && s.Relay().Promises.Failpoints {
				r.Setenv(contract.EnvFailpoints, "after-claim=sleep(700ms)")
			}
		},
		Faults: func(s Stage, rng *rand.Rand, safety time.Duration) ([]chaos.Step, error) {
			unit := skewUnit(s)
			minutes := func() time.Duration { return time.Duration(2+rng.IntN(9)) * unit }
			fa := &relayClock{slot: s.Replica(0, 0), offset: minutes()}
			fb := &relayClock{slot: s.Replica(0, 1), offset: -minutes()}
			n1, c1 := s.Producer(0)
			n2, c2 := s.Producer(1)
			p1 := chaos.NewClockSkew(n1, c1, -minutes())
			p2 := chaos.NewClockSkew(n2, c2, minutes())
			for _, f := range []chaos.Fault{fa, fb, p1, p2} {
				if err := s.AddFault(f, ""); err != nil {
					return nil, err
				}
			}
			end := safety - 500*time.Millisecond
			a := between(rng, 200*time.Millisecond, time.Second)
			b := a + between(rng, time.Second, 2*time.Second)
			c := between(rng, 500*time.Millisecond, 2*time.Second)
			d := c + between(rng, 500*time.Millisecond, 2*time.Second)
			steps := []chaos.Step{Step(fa, a, end-a), Step(p1, c, end-c), Step(fb, b, end-b), Step(p2, d, end-d)}
			if s.Relay().Promises.Locking.Style == contract.LockingRowLock {
				// Replicas that hold row locks contend only while they
				// hold them: slowed confirms keep each batch's locks held,
				// and the lock table is watched meanwhile.
				w := &lockWatch{Toxic: chaos.Latency(s.PublisherLink(), chaos.Downstream, holdWindowLatency, 0).WithName(s.PublisherLink().Name() + " confirms slowed while the clocks are apart")}
				for i := range s.Replicas(0) {
					w.slots = append(w.slots, s.Replica(0, i))
				}
				if err := s.AddFault(w, ""); err != nil {
					return nil, err
				}
				steps = append(steps, Step(w, a, end-a))
			}
			return steps, nil
		},
		Check: skewBite,
	}
}

func poison() Scenario {
	w := defaultWorkload()
	w.PoisonRate = 0.15
	w.RejectRate = 0.05
	return Scenario{
		Name:           Poison,
		Summary:        "unknown types, undecodable payloads and a type the broker returns as unroutable, mixed into the workload, are parked within the attempt limit while the rest flows",
		Workload:       w,
		Safety:         6 * time.Second,
		NeedsRelay:     true,
		WorkloadFaults: []string{WorkloadPoison},
		Check: func(ctx context.Context, s Stage, res *Result) {
			if s.Relay().Promises.Parks && res.Counts.Parked == 0 {
				res.Problems = append(res.Problems, "poison: no row ended parked")
			}
		},
	}
}

func confirmLost() Scenario {
	return Scenario{
		Name:     ConfirmLost,
		Summary:  "a timeout toxic swallows the broker's confirms: published rows are not marked, and are published again after the heal",
		Workload: defaultWorkload(),
		Safety:   8 * time.Second,
		Faults: func(s Stage, rng *rand.Rand, safety time.Duration) ([]chaos.Step, error) {
			l := s.PublisherLink()
			f := chaos.Timeout(l, chaos.Downstream, 0).WithName(l.Name() + " confirms lost")
			if err := s.AddFault(f, ""); err != nil {
				return nil, err
			}
			return []chaos.Step{Step(f, between(rng, time.Second, 2*time.Second), between(rng, 2*time.Second, 3*time.Second))}, nil
		},
		Check: func(ctx context.Context, s Stage, res *Result) {
			if s.Mode() != workload.Outbox {
				return
			}
			// With records, a duplicate of a row whose confirm was lost is
			// explained by that unconfirmed publish; without, by the fault
			// that hit the relays.
			problem, inconclusive := judgeConfirmLost(res.History, res.Counts.DuplicatesBy, s.PublisherLink().Name()+" confirms lost")
			if problem != "" {
				res.Problems = append(res.Problems, problem)
			}
			if inconclusive != "" {
				res.Inconclusive = append(res.Inconclusive, inconclusive)
			}
		},
	}
}

func slowNetwork() Scenario {
	return Scenario{
		Name:     SlowNetwork,
		Summary:  "latency and jitter above the publish timeout on the publisher's link to the broker",
		Workload: defaultWorkload(),
		Safety:   8 * time.Second,
		Faults: func(s Stage, rng *rand.Rand, safety time.Duration) ([]chaos.Step, error) {
			l := s.PublisherLink()
			lat := PublishTimeout + between(rng, 300*time.Millisecond, 800*time.Millisecond)
			f := chaos.Latency(l, chaos.Downstream, lat, 200*time.Millisecond)
			if err := s.AddFault(f, ""); err != nil {
				return nil, err
			}
			return []chaos.Step{Step(f, between(rng, time.Second, 2*time.Second), between(rng, 2500*time.Millisecond, 3500*time.Millisecond))}, nil
		},
	}
}

func commitOrder() Scenario {
	w := defaultWorkload()
	w.HoldRate, w.Hold = 0.12, 2500*time.Millisecond
	return Scenario{
		Name:           CommitOrder,
		Summary:        "long-open transactions commit after many later ones, their rows older than rows already published: nothing may be skipped",
		Workload:       w,
		Safety:         8 * time.Second,
		WorkloadFaults: []string{WorkloadHeld},
	}
}

func rollingRestart() Scenario {
	return Scenario{
		Name:       RollingRestart,
		Summary:    "relay replicas are restarted one by one under load",
		Workload:   defaultWorkload(),
		Safety:     9 * time.Second,
		Replicas:   3,
		NeedsRelay: true,
		Faults: func(s Stage, rng *rand.Rand, safety time.Duration) ([]chaos.Step, error) {
			var steps []chaos.Step
			// One lane: a replica restarts only once the one before it is
			// back, however long the Docker engine takes.
			at := between(rng, time.Second, 1500*time.Millisecond)
			for i := range s.Replicas(0) {
				f := chaos.RestartContainer(s.Replica(0, i), history.ClassProcess)
				if err := s.AddFault(f, "rolling"); err != nil {
					return nil, err
				}
				steps = append(steps, Step(f, at, 100*time.Millisecond))
				at += between(rng, 1500*time.Millisecond, 2*time.Second)
			}
			return steps, nil
		},
	}
}

func producerCrash() Scenario {
	w := defaultWorkload()
	w.CrashAtCommitRate, w.MaxCrashDelay = 0.15, 3*time.Millisecond
	w.CrashAfterCommitRate = 0.08
	return Scenario{
		Name:           ProducerCrash,
		Summary:        "producers die around COMMIT: outcomes unknown to them; nothing of a rolled-back transaction may show up, and what did commit must arrive",
		Workload:       w,
		Safety:         6 * time.Second,
		Exposes:        []workload.Mode{workload.CommitThenPublish},
		WorkloadFaults: []string{WorkloadProducerCrash},
	}
}

func pipeline() Scenario {
	w := defaultWorkload()
	w.Events = 90
	return Scenario{
		Name:       Pipeline,
		Summary:    "the article's three-hop inbound flow: envelope, message and chat contexts, each with its own outbox and relay; each hop stages the next event in its consumer's transaction; faults on every hop",
		Workload:   w,
		Safety:     14 * time.Second,
		Replicas:   1,
		Contexts:   []string{"envelope", "message", "chat"},
		NeedsRelay: true,
		Faults: func(s Stage, rng *rand.Rand, safety time.Duration) ([]chaos.Step, error) {
			faults := []chaos.Fault{
				chaos.Down(s.Link(testenv.LinkRelayBroker)),
				chaos.Down(s.Link(testenv.LinkConsumerDB)),
				chaos.KillContainer(s.Replica(1, 0), history.ClassProcess),
				chaos.Down(s.Link(testenv.LinkConsumerBroker)),
				chaos.Down(s.Link(testenv.LinkRelayDB)),
			}
			var steps []chaos.Step
			at := between(rng, 500*time.Millisecond, time.Second)
			for _, f := range faults {
				if err := s.AddFault(f, ""); err != nil {
					return nil, err
				}
				d := between(rng, 800*time.Millisecond, 1200*time.Millisecond)
				steps = append(steps, Step(f, at, d))
				at += d + between(rng, 300*time.Millisecond, 700*time.Millisecond)
			}
			return steps, nil
		},
		Check: func(ctx context.Context, s Stage, res *Result) {
			if cr, ok := res.Report.Result("causal-order"); !ok || cr.Skipped {
				res.Problems = append(res.Problems, "pipeline: no causal link was checked")
			}
		},
	}
}
