// Package scenarios holds the chaos catalogue: named, time-bounded runs on
// containers. A scenario is a workload (producers staging events, a share
// rolled back, transactions committing concurrently and out of id order),
// relay replicas running as containers (or host processes), idempotent
// consumers, a fault schedule drawn from the run's seed, a heal-and-drain
// phase and the checkers. One runner, Run, runs every scenario against any
// relay that follows the black-box contract of docs/contract.md §3: ours, a
// mutant, or another implementation given as an image or a command, with
// its promises (RelayUnderTest.Promises, a contract.Promises) saying what
// the harness may assume of it. The unsafe producer variants run through
// the same runner with no relay at all, so that the checkers show the
// events they lose or invent.
//
// Producers and consumers run in the harness's process and record every
// commit, delivery and apply in the history; the nemesis records every
// fault window. The relays run outside it: a relay that declares records
// (contract.Promises.Records; ours does) writes its own operations to a records file per
// lifetime, which the runner merges into the history after the run
// (records.go), so the checkers judge its claims, publishes, marks,
// retries, parks and sweeps as they judge the simulation's. A relay that
// records nothing is judged by the harness's records and the final state
// read from PostgreSQL and RabbitMQ; Result.Unchecked lists what that
// leaves out, and lease-expiry reads the rows a paused relay held from
// the database. No verdict reads a relay's logs.
//
// The runner is split by responsibility: runner.go resolves the options
// and runs the phases, setup.go makes the run on a fixture.Fixture (links
// scoped, replicas, consumers, producers), schedule.go draws the fault
// schedule and runs the safety phase through chaos.Phases, settle.go
// judges the drain, settles and tears down, replay.go prints what replays
// a run, and stage.go is the narrow view of a run the scenarios' hooks get
// (Stage), the catalogue's and a team's own alike: a Scenario built in
// another module, with its own Faults and Check, runs through Run as the
// catalogue's do.
package scenarios

import (
	"time"

	"github.com/outboxlab/outboxlab/consumer"
	"github.com/outboxlab/outboxlab/contract"
	"github.com/outboxlab/outboxlab/footprint"
	"github.com/outboxlab/outboxlab/outbox"

	"github.com/outboxlab/outboxlab/checker"
	"github.com/outboxlab/outboxlab/history"
)

// RelayUnderTest is the relay a run puts under the scenarios. It follows the
// contract of docs/contract.md §3: configured by OUTBOX_* environment
// variables, stopped with SIGTERM, killed, paused or restarted as a fault.
type RelayUnderTest struct {
	// Name is how reports call it: "ours", a mutant name, or the image or
	// command given.
	Name string
	// Image runs the relay as a container on the harness network; Command
	// runs it as a process on the host instead. Exactly one is set.
	Image   string
	Command []string
	// Env adds to (and overrides) the OUTBOX_* settings the runner passes.
	Env map[string]string
	// Promises is what the harness may assume of the relay beyond the
	// core guarantee (no lost, no phantom, no unexplained duplicate, no
	// duplicate effect), which is never optional: its locking style,
	// parking, fencing, sweeping, failpoints, records, attempt limit,
	// backoff and retention. A scenario that needs a promise the relay
	// does not make is not applicable (Scenario.Needs), and a check of a
	// promise runs only when it is made. Our relay and its mutants
	// declare the lease, attempt limit and backoff they run with. Its
	// fields read through the relay (u.Failpoints, u.Lease).
	contract.Promises
	// Mutants, with neither Image nor Command set, runs this repository's
	// relay from testenv.ImageRelayMutants, the relay built with the
	// mutants tag, instead of testenv.ImageRelay: for a relay-side mutant
	// that Env names in OUTBOX_MUTANT, which the relay image refuses.
	Mutants bool
	// Outbox is the relay's own outbox schema: how the harness creates it,
	// stages into it and reads its rows back. The zero value is package
	// outbox's table, which the black-box contract's relays read.
	Outbox outbox.Schema
	// Identity says where the relay's deliveries carry their event id;
	// the zero value is the AMQP message_id of the contract.
	Identity consumer.Identity
	// Upgrade, when set, is the rolling upgrade the rolling-upgrade
	// scenario runs: which version the replicas start as, which one
	// replaces them, and the outbox's migration between. Nil: a relay on
	// package outbox's table is upgraded from this repository's relay of
	// an earlier commit (DefaultUpgrade); one with an outbox of its own
	// declares none, and the scenario is not applicable to it.
	Upgrade *Upgrade
	// Replay, when set, is what selects this relay on the run verb's
	// command line ("--target FILE", "--relay watermill"), which the
	// replay command then uses instead of one derived from Image or
	// Command.
	Replay string
}

// FaultHits is how often one fault of a run fired.
type FaultHits struct {
	Name  string `json:"name"`
	Class string `json:"class"`
	Hits  int64  `json:"hits"`
}

// Progress is a snapshot of a running scenario, for a live progress line.
type Progress struct {
	Scenario  string
	Phase     string // safety, liveness, check
	Committed int
	Delivered int
	Faults    []string // faults active now
	Left      time.Duration
}

// Result is the verdict of one scenario run.
type Result struct {
	Scenario string `json:"scenario"`
	Relay    string `json:"relay"`
	Variant  string `json:"variant"`
	Seed     uint64 `json:"seed"`
	// Queue is the consumer queues' type on a broker cluster (quorum, or
	// classic for the contrast); empty on one node.
	Queue string `json:"queue,omitempty"`
	// Database is what the run did to the database
	// (Scenario.ChangesDatabase): a failover to a standby, a restore;
	// empty for the others.
	Database string `json:"database,omitempty"`
	// Subject is what the scenario puts under test (Scenario.Subject):
	// empty for the relay, SubjectConsumers for the consumers.
	Subject string `json:"subject,omitempty"`
	// ConfirmStall is, on a broker cluster, the longest time from the
	// start of a node fault without any publish confirmed by the broker
	// (ack), measured from the relays' records up to the last confirm of
	// the run; 0 when the relay records nothing.
	ConfirmStall time.Duration `json:"confirm_stall_ns,omitempty"`
	// Valid is true when every checker passed and every intended fault
	// fired.
	Valid bool `json:"valid"`
	// NotApplicable, when set, says why the scenario did not run against
	// this relay (it needs a promise the relay does not declare): the run
	// judged nothing, and its verdict is VerdictNotApplicable.
	NotApplicable string `json:"not_applicable,omitempty"`
	// Problems lists what made the run fail, one line each.
	Problems []string `json:"problems,omitempty"`
	// Inconclusive lists the faults that could not bite what they claim
	// to test (a pause that found no relay holding claims). A run with
	// such a fault and no problem is inconclusive: see Verdict.
	Inconclusive []string       `json:"inconclusive,omitempty"`
	Counts       checker.Counts `json:"counts"`
	Report       checker.Report `json:"-"`
	Faults       []FaultHits    `json:"faults"`
	// DrainTime is how long the backlog took to drain after heal.
	DrainTime time.Duration `json:"drain_time_ns"`
	Duration  time.Duration `json:"duration_ns"`
	// Replay is the exact command that runs the same schedule again; for
	// a scenario that is not the catalogue's (built in Go code, or one of
	// the catalogue's changed after Lookup), which no command can name, a
	// shell comment that says so, and that the Go test that ran it runs
	// it again (ReplayTest is the same).
	Replay string `json:"replay"`
	// ReplayTest runs the same schedule again from go test where a test
	// of this repository does: for an unsafe producer, the go test
	// command of TestUnsafeVariants (Replay is the same); for our relay,
	// that of the catalogue's test, TestCatalogue; both prefixed
	// OUTBOXLAB_LONG=1 for a long run. Otherwise it is Replay: the run
	// command for another relay (with that prefix for a long run), the
	// comment for a relay the run verb cannot name, and the consumer's own
	// replay command for a consumer under test (Options.Consumer).
	ReplayTest string `json:"replay_test,omitempty"`
	// Unchecked names what the checkers judged the relays by and what
	// they could not judge in this run, one line each: a relay without
	// records leaves the checkers that need its claims, publishes or marks
	// only the final rows and the deliveries.
	Unchecked []string `json:"unchecked,omitempty"`
	// Records sums up what the relays recorded of their own operations,
	// when they record (contract.Promises.Records).
	Records history.RecordsSummary `json:"relay_records"`
	// Observed sums up what the harness observed of the relays from the
	// database, and ObservedOps are the operations it observed: the
	// relays' in History when they record nothing, kept apart from their
	// records when they do.
	Observed    history.ObservedSummary `json:"observed"`
	ObservedOps []history.Op            `json:"-"`
	// Footprint is what the relay cost the producers, against the run's
	// control phase, and how its replicas behaved over the outages of
	// the broker or the database; nil for a run without a relay.
	Footprint *footprint.Footprint `json:"footprint,omitempty"`
	// Events is the size of the workload that ran.
	Events int `json:"events"`
	// Safety is the planned length of the safety phase; a fault that a
	// slow engine made start late still plays out in full after it.
	Safety  time.Duration `json:"safety_ns"`
	History []history.Op  `json:"-"`
}

// Verdicts of a run.
const (
	VerdictPass          = "PASS"
	VerdictFail          = "FAIL"
	VerdictInconclusive  = "INCONCLUSIVE"
	VerdictNotApplicable = "N/A"
)

// Verdict is the run's verdict in a word: N/A for a scenario that did not
// run against the relay, FAIL when a checker or a check of the scenario
// failed (whatever else happened), INCONCLUSIVE when nothing failed but a
// fault could not bite, PASS otherwise.
func (r Result) Verdict() string {
	switch {
	case r.NotApplicable != "":
		return VerdictNotApplicable
	case r.Valid:
		return VerdictPass
	case len(r.Problems) == 0 && len(r.Inconclusive) > 0:
		return VerdictInconclusive
	}
	return VerdictFail
}
