package scenarios

import (
	"fmt"

	"github.com/outboxlab/outboxlab/contract"
	"github.com/outboxlab/outboxlab/workload"

	"maps"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/outboxlab/outboxlab/checker"
	"github.com/outboxlab/outboxlab/testenv"
)

// LinkAppBroker is the link from the producers to the broker, used by the
// unsafe variants that publish inline. EnvOptions declares it; in an
// environment without it they publish through the relay's link.
const LinkAppBroker = "app-broker"

// EnvOptions returns the environment the catalogue runs in: the default
// links plus app->broker.
func EnvOptions() testenv.Options {
	return testenv.Options{Links: []testenv.Link{{Name: LinkAppBroker, Service: testenv.ServiceBroker}}}
}

// EnvOptionsFor returns the environment sc runs in: EnvOptions, with a
// broker cluster for a scenario with BrokerNodes.
func EnvOptionsFor(sc Scenario) testenv.Options {
	o := EnvOptions()
	if sc.BrokerNodes > 1 {
		o.BrokerNodes = sc.BrokerNodes
	}
	o.Standby = sc.Standby
	return o
}

// EnvKey names the environment opts describes, so that scenarios that
// need the same one share it: its broker nodes and its standby.
func EnvKey(opts testenv.Options) string {
	return fmt.Sprintf("nodes=%d standby=%s", opts.BrokerNodes, opts.Standby)
}

// envFits reports why env cannot run sc, or nil: a cluster scenario
// needs a cluster of its size, the others the single broker.
func envFits(env *testenv.Env, sc Scenario) error {
	cl := env.Cluster()
	switch {
	case sc.BrokerNodes > 1 && (cl == nil || cl.Len() != sc.BrokerNodes):
		return fmt.Errorf("scenario %s runs on a %d-node broker cluster (EnvOptionsFor), and this environment has none of that size", sc.Name, sc.BrokerNodes)
	case sc.BrokerNodes < 2 && cl != nil:
		return fmt.Errorf("scenario %s runs on the single broker, and this environment has a cluster", sc.Name)
	case sc.Standby != env.Replication():
		return fmt.Errorf("scenario %s runs on a PostgreSQL with a standby of replication %q (EnvOptionsFor), and this environment's is %q", sc.Name, sc.Standby, env.Replication())
	}
	return nil
}

// LongEnv is the environment variable that turns the long mode on
// ("1" or "true"): bigger workloads, longer safety phases, more seeds.
const LongEnv = "OUTBOXLAB_LONG"

// LongFromEnv reports whether LongEnv asks for the long mode.
func LongFromEnv() bool {
	b, err := strconv.ParseBool(strings.TrimSpace(os.Getenv(LongEnv)))
	return err == nil && b
}

// Relay timings every relay replica gets (the relay under test's Env
// overrides them). They are short so that faults, lease expiries and
// backoffs fit in a run of seconds; a relay that follows the black-box
// contract but not these variables needs its own equivalents in Env.
const (
	PollInterval   = 100 * time.Millisecond
	Lease          = 4 * time.Second
	PublishTimeout = time.Second
	StoreTimeout   = 2 * time.Second
	BackoffBase    = 100 * time.Millisecond
	BackoffMax     = 2 * time.Second
	MaxAttempts    = 3
	BatchSize      = 20
)

// TimingEnv returns the relay settings of every replica as OUTBOX_*
// variables.
func TimingEnv() map[string]string {
	return map[string]string{
		contract.EnvPollInterval:   PollInterval.String(),
		contract.EnvLease:          Lease.String(),
		contract.EnvPublishTimeout: PublishTimeout.String(),
		contract.EnvStoreTimeout:   StoreTimeout.String(),
		contract.EnvBackoffBase:    BackoffBase.String(),
		contract.EnvBackoffMax:     BackoffMax.String(),
		contract.EnvMaxAttempts:    strconv.Itoa(MaxAttempts),
		contract.EnvBatchSize:      strconv.Itoa(BatchSize),
		contract.EnvTypes:          workload.TypesSpec,
		contract.EnvLogLevel:       "info",
	}
}

// OurBudgets are the budgets this repository's relay declares: its
// producers' p99 at most three times the control's; over an outage, at
// most a quarter of a core, 20 lines of output, 100 statements and 20
// TCP connections a second per replica (it retries every poll interval,
// 100 ms under the harness, and a failed tick logs a line and opens a
// connection to the service that is down); and events flowing again
// within 10 s of the heal.
var OurBudgets = contract.Budgets{ProducerP99: 3, OutageCPU: 0.25, OutageLogs: 20, OutageStatements: 100, OutageConnects: 20, Resume: 10 * time.Second}

// ourPromises are the promises of this repository's relay, run with the
// settings setting reads: every capability, with the lease, the attempt
// limit and the backoff it is given, and OurBudgets. It declares no retention: it sweeps
// after the OUTBOX_RETENTION it gets, which the checkers judge it by.
func ourPromises(setting func(string) string) contract.Promises {
	p := contract.Promises{Parks: true, Fenced: true, Sweeps: true, Failpoints: true, Records: true, Locking: contract.Lease(0), Budgets: OurBudgets}
	if d, err := time.ParseDuration(setting(contract.EnvLease)); err == nil && d > 0 {
		p.Locking = contract.Lease(d)
	}
	if n, err := strconv.Atoi(setting(contract.EnvMaxAttempts)); err == nil && n > 0 {
		p.Attempts = n
	}
	base, errB := time.ParseDuration(setting(contract.EnvBackoffBase))
	max, errM := time.ParseDuration(setting(contract.EnvBackoffMax))
	if errB == nil && errM == nil && base > 0 && max >= base {
		p.Backoff = contract.Backoff{Base: base, Max: max}
	}
	return p
}

// OurFeatures are the checker's features of this repository's relay on
// the outbox it stages into: Ours's promises, as the checkers take them.
var OurFeatures = checker.Config{Features: checker.Features{Stages: true}}.WithPromises(Ours().Promises).Features

// Ours returns the relay under test by default: this repository's relay
// image, with the promises it makes under the harness's settings (every
// capability, a lease of Lease, MaxAttempts, BackoffBase and BackoffMax).
func Ours() RelayUnderTest {
	return RelayUnderTest{Name: "ours", Image: testenv.ImageRelay, Promises: ourPromises(RelayUnderTest{}.setting)}
}

// resolve fills in the defaults of a relay under test: no image and no
// command means this repository's image (the one with the mutants under
// Mutants), with its promises under the settings it gets unless others
// are declared (a mutant keeps the promises of the relay it mutates).
func (u RelayUnderTest) resolve() RelayUnderTest {
	u.Env = maps.Clone(u.Env)
	if u.Image == "" && len(u.Command) == 0 {
		u.Image = u.ImageRef()
		if u.Promises == (contract.Promises{}) {
			u.Promises = ourPromises(u.setting)
		}
		if u.Name == "" {
			u.Name = "ours"
		}
	}
	if u.Name == "" {
		if u.Image != "" {
			u.Name = u.Image
		} else {
			u.Name = strings.Join(u.Command, " ")
		}
	}
	return u
}

// ImageRef is the image the relay runs from: the one given, else ours
// (its mutants build when Mutants is set); "" for a relay run as a
// command.
func (u RelayUnderTest) ImageRef() string {
	switch {
	case len(u.Command) > 0:
		return ""
	case u.Image != "":
		return u.Image
	case u.Mutants:
		return testenv.ImageRelayMutants
	}
	return testenv.ImageRelay
}

// setting returns the value of an OUTBOX_* setting every replica of the
// run gets: the relay under test's own, else the scenario's, else
// TimingEnv's.
func (r *run) setting(name string) string {
	if v, ok := r.relay.Env[name]; ok {
		return v
	}
	if v, ok := r.sc.RelayEnv[name]; ok {
		return v
	}
	return TimingEnv()[name]
}

// setting returns the value of an OUTBOX_* setting a replica gets.
func (u RelayUnderTest) setting(name string) string {
	if v, ok := u.Env[name]; ok {
		return v
	}
	return TimingEnv()[name]
}
