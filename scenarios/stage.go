package scenarios

import (
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxlab/outboxlab/chaos"
	"github.com/outboxlab/outboxlab/history"
	"github.com/outboxlab/outboxlab/testenv"
	"github.com/outboxlab/outboxlab/workload"
)

// Stage is what a scenario's hooks (Scenario.Prepare, Faults and Check)
// see of their run: its settings, the links and relay replicas they may
// fault, the services, and the nemesis they register faults with. They
// see nothing else of the run, so that a hook, the catalogue's or one
// written in another module, cannot come to depend on the runner's
// bookkeeping. Run gives every hook the Stage of its run; a test of a
// hook may give it a fake.
type Stage interface {
	// Seed is the run's seed. The rng Faults gets is drawn from it
	// already; a hook that needs more randomness draws it from
	// seed.Rand(Seed(), ...) so that the run replays.
	Seed() uint64
	// Mode is how the producers get their events out: workload.Outbox,
	// or an unsafe variant that runs with no relay at all (then the run
	// has no replica: see Scenario.NeedsRelay).
	Mode() workload.Mode
	// Relay is the relay under test, its Promises included.
	Relay() RelayUnderTest
	// Lease is the lease the replicas run with (OUTBOX_LEASE, else
	// Lease).
	Lease() time.Duration
	// Link returns the chaos link of a testenv link, named by its
	// testenv.Link* constant (testenv.LinkAppDB, LinkRelayDB,
	// LinkRelayBroker, LinkConsumerBroker, LinkConsumerDB, or
	// LinkAppBroker), to build a toxiproxy fault
	// on it (chaos.Down, chaos.Latency, chaos.Timeout); nil for a link
	// the environment does not have.
	Link(name string) *chaos.Link
	// PublisherLink is the link through which events reach the broker:
	// the relays' for the outbox, the producers' for the unsafe modes.
	PublisherLink() *chaos.Link
	// Replica returns replica i of context c (both from 0), to fault
	// (chaos.PauseContainer, chaos.KillContainer...) or, in Prepare, to
	// set its environment; Replicas returns how many context c has
	// (Scenario.Replicas; none in an unsafe mode).
	Replica(c, i int) *Replica
	Replicas(c int) int
	// Producer returns producer i's history process and its clock, for a
	// clock fault (chaos.NewClockSkew); i is below the workload's
	// Producers.
	Producer(i int) (string, *chaos.Clock)
	// Postgres and RabbitMQ are the services' containers, for a fault on
	// a whole service (chaos.KillContainer); RabbitMQ is nil on a broker
	// cluster, whose nodes Cluster gives.
	Postgres() *testenv.Container
	RabbitMQ() *testenv.Container
	// Queue returns context c's consumer queue; QueueType its type
	// (relay.QueueQuorum, relay.QueueClassic).
	Queue(c int) string
	QueueType() string
	// Cluster is the broker cluster of a scenario with BrokerNodes, else
	// nil.
	Cluster() *testenv.Cluster
	// Env is the run's environment, for a fault on it as a whole (a
	// failover of the database to its standby, Scenario.Standby).
	Env() *testenv.Env
	// DB is a direct pool to the run's database, for faults and checks
	// that read the outbox's rows through Rows.
	DB() *pgxpool.Pool
	// Rows returns the relation that shows context c's outbox rows under
	// their events' ids (the harness's columns of docs/contract.md §3,
	// whatever the relay's own schema), to use in a query on DB.
	Rows(c int) string
	// Recorder is the run's history, for faults that record what they
	// did to a process (a crash at a failpoint).
	Recorder() *history.Recorder
	// AddFault registers f with the run's nemesis, which injects and
	// heals it as the schedule Faults returns says; a scheduled fault
	// that never fires fails the run. Faults of one non-empty lane run
	// one after another; by default each fault is its own lane. Fault
	// names must be unique within a run.
	AddFault(f chaos.Fault, lane string) error
	// Faults returns the registered faults, for a check that reads how
	// often they fired (Hits).
	Faults() []chaos.Fault
}

// runStage is the Stage of a run.
type runStage struct{ r *run }

var _ Stage = runStage{}

func (s runStage) Seed() uint64                 { return s.r.opts.Seed }
func (s runStage) Mode() workload.Mode          { return s.r.mode }
func (s runStage) Relay() RelayUnderTest        { return s.r.relay }
func (s runStage) Lease() time.Duration         { return s.r.lease() }
func (s runStage) Link(name string) *chaos.Link { return s.r.link(name) }
func (s runStage) PublisherLink() *chaos.Link   { return s.r.link(s.r.publisherBrokerLink()) }
func (s runStage) Replica(c, i int) *Replica    { return s.r.slot(c, i) }
func (s runStage) Replicas(c int) int           { return len(s.r.contexts[c].relays) }
func (s runStage) Postgres() *testenv.Container { return s.r.env.Postgres() }
func (s runStage) RabbitMQ() *testenv.Container { return s.r.env.RabbitMQ() }
func (s runStage) Cluster() *testenv.Cluster    { return s.r.env.Cluster() }
func (s runStage) Env() *testenv.Env            { return s.r.env }
func (s runStage) Queue(c int) string           { return s.r.contexts[c].queue }
func (s runStage) QueueType() string            { return s.r.queueType() }
func (s runStage) DB() *pgxpool.Pool            { return s.r.fx.Admin }
func (s runStage) Rows(c int) string            { return s.r.contexts[c].rows }
func (s runStage) Recorder() *history.Recorder  { return s.r.rec }
func (s runStage) Faults() []chaos.Fault        { return s.r.nemesis.Faults() }

func (s runStage) Producer(i int) (string, *chaos.Clock) {
	return s.r.producers[i].Name, s.r.clocks[i]
}

func (s runStage) AddFault(f chaos.Fault, lane string) error {
	if err := s.r.nemesis.Add(f); err != nil {
		return fmt.Errorf("scenario %s: %w", s.r.sc.Name, err)
	}
	if lane != "" {
		s.r.lanes[f.Name()] = lane
	}
	return nil
}

// consumers returns the consumer processes of the run s is the stage of,
// in order: for the catalogue's faults on the consumers, which act on
// the harness's own inboxes and so are not part of Stage.
func consumers(s Stage) []*recordingInbox {
	if rs, ok := s.(runStage); ok {
		return rs.r.consumers
	}
	return nil
}
