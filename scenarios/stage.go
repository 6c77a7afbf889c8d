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

// stage is what a scenario's hooks (prepare, faults, check) see of their
// run: its settings, the links and relay replicas they may fault, the
// services, and the nemesis they register faults with. They see nothing
// else of the run, so that a hook cannot come to depend on the runner's
// bookkeeping.
type stage interface {
	// Seed is the run's seed.
	Seed() uint64
	// Mode is the producers' mode.
	Mode() workload.Mode
	// Relay is the relay under test.
	Relay() RelayUnderTest
	// Lease is the lease the replicas run with.
	Lease() time.Duration
	// Link returns the chaos link of a testenv link.
	Link(name string) *chaos.Link
	// PublisherLink is the link through which events reach the broker:
	// the relays' for the outbox, the producers' for the unsafe modes.
	PublisherLink() *chaos.Link
	// Slot returns replica i of context c; Replicas how many context c
	// has.
	Slot(c, i int) *relaySlot
	Replicas(c int) int
	// Producer returns producer i's history process and its clock.
	Producer(i int) (string, *chaos.Clock)
	// Postgres and RabbitMQ are the services' containers.
	Postgres() *testenv.Container
	RabbitMQ() *testenv.Container
	// Queue returns context c's consumer queue; QueueType its type
	// (relay.QueueQuorum, relay.QueueClassic).
	Queue(c int) string
	QueueType() string
	// Cluster is the broker cluster of a scenario with BrokerNodes, else
	// nil.
	Cluster() *testenv.Cluster
	// DB is a direct pool to the run's database, for faults that read the
	// rows (which rows a paused relay holds).
	DB() *pgxpool.Pool
	// Recorder is the run's history, for faults that record what they
	// did to a process (a crash at a failpoint).
	Recorder() *history.Recorder
	// AddFault registers f with the run's nemesis. Faults of one non-empty
	// lane run one after another; by default each fault is its own lane.
	AddFault(f chaos.Fault, lane string) error
	// Faults returns the registered faults.
	Faults() []chaos.Fault
	// Consumers returns the run's consumer processes, in order.
	Consumers() []*recordingInbox
}

// runStage is the stage of a run.
type runStage struct{ r *run }

func (s runStage) Seed() uint64                 { return s.r.opts.Seed }
func (s runStage) Mode() workload.Mode          { return s.r.mode }
func (s runStage) Relay() RelayUnderTest        { return s.r.relay }
func (s runStage) Lease() time.Duration         { return s.r.lease() }
func (s runStage) Link(name string) *chaos.Link { return s.r.link(name) }
func (s runStage) PublisherLink() *chaos.Link   { return s.r.link(s.r.publisherBrokerLink()) }
func (s runStage) Slot(c, i int) *relaySlot     { return s.r.slot(c, i) }
func (s runStage) Replicas(c int) int           { return len(s.r.contexts[c].relays) }
func (s runStage) Postgres() *testenv.Container { return s.r.env.Postgres() }
func (s runStage) RabbitMQ() *testenv.Container { return s.r.env.RabbitMQ() }
func (s runStage) Cluster() *testenv.Cluster    { return s.r.env.Cluster() }
func (s runStage) Queue(c int) string           { return s.r.contexts[c].queue }
func (s runStage) QueueType() string            { return s.r.queueType() }
func (s runStage) DB() *pgxpool.Pool            { return s.r.fx.Admin }
func (s runStage) Recorder() *history.Recorder  { return s.r.rec }
func (s runStage) Faults() []chaos.Fault        { return s.r.nemesis.Faults() }
func (s runStage) Consumers() []*recordingInbox { return s.r.consumers }

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
