package scenarios

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/outboxlab/outboxlab/workload"

	"github.com/outboxlab/outboxlab/contract"
	"github.com/outboxlab/outboxlab/relay"
	"github.com/outboxlab/outboxlab/testenv"
)

var (
	seedFlag = flag.String("seed", "", "seed of every scenario run (default: drawn from the clock and printed)")
	longFlag = flag.Bool("long", false, "long mode: bigger workloads, longer safety phases, more seeds (also "+LongEnv+"=1)")
)

// shared is the environment every test of the package runs in, one run
// after another: starting the containers is the slow part.
var shared = testenv.Shared{Options: EnvOptions()}

// TestMain parses the package's flags, runs the tests, removes the
// environment and fails the package if a goroutine was left behind.
func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(shared.Main(m))
}

// sharedEnv returns the package's environment, starting it on first use.
// It skips under -short, and without Docker unless OUTBOXLAB_REQUIRE_DOCKER
// is set.
func sharedEnv(t *testing.T) *testenv.Env {
	t.Helper()
	return shared.Get(t)
}

// baseSeed is the seed of every run of the test binary.
var baseSeed = sync.OnceValues(func() (uint64, error) {
	if *seedFlag != "" {
		return strconv.ParseUint(*seedFlag, 10, 64)
	}
	return uint64(time.Now().UnixNano()) % 1_000_000_000, nil
})

// seeds returns the seeds each scenario runs with: the -seed flag, or one
// drawn from the clock once for the whole test binary; three consecutive
// ones in long mode.
func seeds(t *testing.T) []uint64 {
	t.Helper()
	base, err := baseSeed()
	if err != nil {
		t.Fatalf("-seed: %v", err)
	}
	if long() {
		return []uint64{base, base + 1, base + 2}
	}
	return []uint64{base}
}

func long() bool { return *longFlag || LongFromEnv() }

func runOptions(t *testing.T, seed uint64) Options {
	return Options{Seed: seed, Long: long(), Log: func(s string) { t.Log(s) }}
}

// summary collects one line per run for the table a test prints last.
type summary struct {
	mu   sync.Mutex
	rows []Result
}

func (s *summary) add(r Result) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rows = append(s.rows, r)
}

func (s *summary) print(t *testing.T, total time.Duration) {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "scenario\tvariant\tseed\tverdict\ttime\tdrain\tcommitted\trolled back\tindet.\tdelivered\tdup deliv.\tdup effects\tlost\tphantom\tparked\tfaults (hits)")
	for _, r := range s.rows {
		v := "PASS"
		if !r.Valid {
			v = "FAIL"
		}
		var faults []string
		for _, f := range r.Faults {
			faults = append(faults, fmt.Sprintf("%s=%d", f.Name, f.Hits))
		}
		c := r.Counts
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\n",
			r.Scenario, r.Variant, r.Seed, v, r.Duration.Round(100*time.Millisecond), r.DrainTime.Round(100*time.Millisecond),
			c.Committed, c.RolledBack, c.Indeterminate, c.Delivered, c.DuplicateDeliveries, c.DuplicateEffects,
			c.Lost, c.Phantom, c.Parked, strings.Join(faults, ", "))
	}
	tw.Flush()
	t.Logf("%d runs in %s\n%s", len(s.rows), total.Round(time.Second), b.String())
}

// TestCatalogue runs every scenario against this repository's relay: each
// must pass every checker with every intended fault fired.
func TestCatalogue(t *testing.T) {
	env := sharedEnv(t)
	began := time.Now()
	var sum summary
	for _, sc := range Catalogue() {
		t.Run(sc.Name, func(t *testing.T) {
			for _, seed := range seeds(t) {
				res, err := Run(context.Background(), env, sc, runOptions(t, seed))
				if err != nil {
					t.Fatalf("SEED=%d: %v\nreplay: %s", seed, err, res.ReplayTest)
				}
				sum.add(res)
				requireValid(t, res)
				if (sc.Faults != nil || len(sc.WorkloadFaults) > 0) && len(res.Faults) == 0 {
					t.Errorf("%s reports no fault at all", sc.Name)
				}
				requireObservedAgrees(t, res)
			}
		})
	}
	sum.print(t, time.Since(began))
}

// requireObservedAgrees fails t unless the run observed the outbox and
// the broker and what it observed of our relay (claims, marks, retries,
// parks, sweeps and publishes) agrees with the relay's own records.
func requireObservedAgrees(t *testing.T, res Result) {
	t.Helper()
	o := res.Observed
	if !o.Known || o.Merged || o.Ops == 0 {
		t.Errorf("SEED=%d %s: observed %+v; want the outbox observed, %d relay operations seen, kept apart from the relay's records", res.Seed, res.Scenario, o, o.Ops)
	}
	if !o.Broker.Known || o.Broker.Publishes == 0 {
		t.Errorf("SEED=%d %s: the broker's observation %+v; want every publish of the relay seen", res.Seed, res.Scenario, o.Broker)
	}
	if len(o.Disagreements) > 0 {
		t.Errorf("SEED=%d %s: what was observed of the relay disagrees with its records in %d places:\n  %s", res.Seed, res.Scenario,
			len(o.Disagreements), strings.Join(o.Disagreements, "\n  "))
	}
}

// requireValid fails t unless res passed with every fault fired.
func requireValid(t *testing.T, res Result) {
	t.Helper()
	for _, f := range res.Faults {
		if f.Hits == 0 {
			t.Errorf("fault %s never fired", f.Name)
		}
	}
	if !res.Valid {
		t.Errorf("SEED=%d %s failed:\n  %s\n%s\nreplay: %s\n        %s", res.Seed, res.Scenario,
			strings.Join(res.Problems, "\n  "), res.Report.Summary(), res.Replay, res.ReplayTest)
	}
}

// TestUnsafeVariants runs each unsafe producer variant under the
// scenarios that expose it: every such run must report the events the
// variant really lost or invented, and so fail.
func TestUnsafeVariants(t *testing.T) {
	env := sharedEnv(t)
	began := time.Now()
	var sum summary
	for _, v := range []workload.Mode{workload.PublishThenCommit, workload.CommitThenPublish, workload.Optimistic} {
		t.Run(string(v), func(t *testing.T) {
			exposing := 0
			for _, sc := range Catalogue() {
				if !slices.Contains(sc.Exposes, v) {
					continue
				}
				exposing++
				t.Run(sc.Name, func(t *testing.T) {
					seed := seeds(t)[0]
					opts := runOptions(t, seed)
					opts.Mode = v
					res, err := Run(context.Background(), env, sc, opts)
					if err != nil {
						t.Fatalf("SEED=%d: %v", seed, err)
					}
					sum.add(res)
					c := res.Counts
					t.Logf("%s under %s: %d committed, %d delivered, %d lost, %d phantom", v, sc.Name, c.Committed, c.Delivered, c.Lost, c.Phantom)
					switch {
					case v == workload.PublishThenCommit && c.Phantom == 0:
						t.Errorf("SEED=%d: publish-then-commit produced no phantom event under %s\nreplay: %s", seed, sc.Name, res.ReplayTest)
					case v != workload.PublishThenCommit && c.Lost == 0:
						t.Errorf("SEED=%d: %s lost no event under %s\nreplay: %s", seed, v, sc.Name, res.ReplayTest)
					}
					if res.Valid {
						t.Errorf("SEED=%d: %s passed %s", seed, v, sc.Name)
					}
					for _, f := range res.Faults {
						if f.Hits == 0 {
							t.Errorf("fault %s never fired", f.Name)
						}
					}
				})
			}
			if exposing == 0 {
				t.Errorf("no scenario of the catalogue exposes %s", v)
			}
		})
	}
	sum.print(t, time.Since(began))
}

// TestBlackBoxImage runs this repository's relay image as any other relay
// image would run: through the black-box path, with its features declared
// and no failpoints assumed.
func TestBlackBoxImage(t *testing.T) {
	env := sharedEnv(t)
	rut := RelayUnderTest{Name: "black-box " + testenv.ImageRelay, Image: testenv.ImageRelay,
		Promises: contract.Promises{Parks: true, Fenced: true, Sweeps: true, Locking: contract.Lease(0)}}
	for _, name := range []string{Baseline, BrokerDown} {
		t.Run(name, func(t *testing.T) {
			sc, _ := Lookup(name)
			opts := runOptions(t, seeds(t)[0])
			opts.Relay = rut
			var (
				mu     sync.Mutex
				phases = map[string]bool{}
				most   int
			)
			opts.Progress = func(p Progress) {
				mu.Lock()
				defer mu.Unlock()
				phases[p.Phase] = true
				most = max(most, p.Delivered)
			}
			res, err := Run(context.Background(), env, sc, opts)
			if err != nil {
				t.Fatal(err)
			}
			if res.Relay != rut.Name {
				t.Errorf("result names relay %q, want %q", res.Relay, rut.Name)
			}
			requireValid(t, res)
			mu.Lock()
			defer mu.Unlock()
			if !phases["safety"] || most == 0 {
				t.Errorf("progress reported phases %v and at most %d deliveries; want the safety phase and some deliveries", phases, most)
			}
		})
	}
	t.Run("not applicable", func(t *testing.T) {
		sc, _ := Lookup(CrashBeforeMark)
		opts := runOptions(t, 1)
		opts.Relay = rut
		opts.Relay.Promises = contract.Promises{Parks: true}
		if _, err := Run(context.Background(), env, sc, opts); !errors.Is(err, ErrNotApplicable) {
			t.Fatalf("crash-between-publish-and-mark with a relay that declares neither failpoints nor a locking style: err = %v, want ErrNotApplicable", err)
		}
	})
}

// TestBlackBoxCommand runs the relay as a host process given as a command,
// built from ./cmd/relay.
func TestBlackBoxCommand(t *testing.T) {
	env := sharedEnv(t)
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("building ./cmd/relay needs the go command: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "relay")
	build := exec.Command(goBin, "build", "-o", bin, "github.com/outboxlab/outboxlab/cmd/relay")
	build.Dir = ".."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building ./cmd/relay: %v\n%s", err, out)
	}
	rut := RelayUnderTest{Name: "command relay", Command: []string{bin},
		Promises: contract.Promises{Parks: true, Fenced: true, Sweeps: true, Failpoints: true, Records: true, Locking: contract.Lease(0)}}
	// broker-down cuts the processes' link; crash-between-publish-and-mark
	// kills one at a failpoint and starts it again.
	for _, name := range []string{BrokerDown, CrashBeforeMark} {
		t.Run(name, func(t *testing.T) {
			sc, _ := Lookup(name)
			opts := runOptions(t, seeds(t)[0])
			opts.Relay = rut
			res, err := Run(context.Background(), env, sc, opts)
			if err != nil {
				t.Fatal(err)
			}
			requireValid(t, res)
		})
	}
}

// TestClusterCatalogue runs the broker cluster scenarios, one after
// another on one cluster environment (formed once, about 25 s): each
// passes with its fault fired. A catalogue scenario is refused on that
// environment, and a cluster scenario on the single broker's. The long
// mode runs all six; otherwise the three whose faults act on a node in
// three different ways run (killed, frozen, cut off the network), and
// the node lost with its data and the two restarts, which take the
// longest, are left to the long mode and the campaigns, which keeps
// make test within its time.
func TestClusterCatalogue(t *testing.T) {
	env := testenv.StartT(t, EnvOptionsFor(ClusterCatalogue()[0]))
	// The probe, which a run of this process makes once per relay, on the
	// cluster's list of nodes as a run started there first makes it.
	if err := Probe(context.Background(), env, RelayUnderTest{}.resolve(), func(s string) { t.Log(s) }); err != nil {
		t.Errorf("the setup probe on a broker cluster: %v", err)
	}
	if _, err := Run(context.Background(), env, Catalogue()[0], runOptions(t, 1)); err == nil {
		t.Errorf("%s ran on a cluster environment", Catalogue()[0].Name)
	}
	short := []string{ClusterLeaderKill, ClusterNodePause, ClusterPartition}
	for _, sc := range ClusterCatalogue() {
		if !long() && !slices.Contains(short, sc.Name) {
			t.Logf("%s: in the long mode only (OUTBOXLAB_LONG=1)", sc.Name)
			continue
		}
		t.Run(sc.Name, func(t *testing.T) {
			for _, seed := range seeds(t) {
				res, err := Run(context.Background(), env, sc, runOptions(t, seed))
				if err != nil {
					t.Fatalf("SEED=%d: %v\nreplay: %s", seed, err, res.Replay)
				}
				requireValid(t, res)
				if len(res.Faults) == 0 {
					t.Errorf("%s reports no fault at all", sc.Name)
				}
				if res.Queue != relay.QueueQuorum {
					t.Errorf("%s ran on %q queues, want quorum", sc.Name, res.Queue)
				}
			}
		})
	}
	if _, err := Run(context.Background(), sharedEnv(t), ClusterCatalogue()[0], runOptions(t, 1)); err == nil {
		t.Errorf("%s ran on the single broker", ClusterCatalogue()[0].Name)
	}
}

// TestDatabaseCatalogue changes the database and the deployment under
// our relay, each scenario on an environment of its own: it fails the
// database over (PostgreSQL with a standby of its replication): with an
// asynchronous standby the failover undoes acknowledged commits, counted
// apart, and the relay loses none of the rest; with a synchronous one it
// undoes none. It restores the database into a new server, and upgrades
// the relay from outboxlab/relay:prev with outbox migration 004 between,
// version N+1 publishing rows that N left.
func TestDatabaseCatalogue(t *testing.T) {
	for _, sc := range DatabaseCatalogue() {
		t.Run(sc.Name, func(t *testing.T) {
			env := testenv.StartT(t, EnvOptionsFor(sc))
			for _, seed := range seeds(t) {
				res, err := Run(context.Background(), env, sc, runOptions(t, seed))
				if err != nil {
					t.Fatalf("SEED=%d: %v\nreplay: %s", seed, err, res.Replay)
				}
				requireValid(t, res)
				if len(res.Inconclusive) > 0 {
					t.Errorf("SEED=%d %s inconclusive: %q\nreplay: %s", seed, sc.Name, res.Inconclusive, res.Replay)
				}
				undone := res.Counts.FailoverLost + res.Counts.FailoverPhantom
				switch {
				case sc.Standby == testenv.ReplicationSync && undone != 0:
					t.Errorf("SEED=%d %s: a synchronous failover undid %d acknowledged commits", seed, sc.Name, undone)
				case sc.Standby == testenv.ReplicationAsync && undone == 0:
					t.Errorf("SEED=%d %s: the asynchronous failover undid nothing", seed, sc.Name)
				}
				if sc.Name == RollingUpgrade && !slices.ContainsFunc(res.Unchecked, func(u string) bool {
					return strings.Contains(u, "ours replaced "+testenv.ImageRelayPrev)
				}) {
					t.Errorf("SEED=%d %s: no replacement of %s noted: %q", seed, sc.Name, testenv.ImageRelayPrev, res.Unchecked)
				}
			}
		})
	}
}

// TestSetupProbe checks the setup probe on containers with the Python
// example relay: its own target file round-trips, and so does the same
// outbox keyed by a bigint identity whose stage returns the key
// (RETURNING), which the rows view shows as id and the relay publishes as
// message_id. Refused before any scenario, wrapping ErrMapping and naming
// the column or delivery field: that outbox with a stage that returns no
// key (the rows view shows one the stage was never given), with a stage
// that returns another column than the rows view's id, and with a
// delivery identity that looks where the key is not; and the relay with
// a delivery identity it never sets.
func TestSetupProbe(t *testing.T) {
	env := sharedEnv(t)
	for _, tc := range probeVariants(t) {
		t.Run(tc.name, func(t *testing.T) {
			u, err := ParseTarget([]byte(tc.file), "../examples/pyrelay")
			if err != nil {
				t.Fatal(err)
			}
			u.Name = "pyrelay-probe-" + strings.ReplaceAll(tc.name, " ", "-")
			err = Probe(context.Background(), env, u, func(s string) { t.Log(s) })
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("a mapping that round-trips: %v", err)
			case tc.want != "" && (!errors.Is(err, ErrMapping) || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("err = %v; want ErrMapping naming %q", err, tc.want)
			}
			t.Logf("probe: %v", err)
		})
	}
}

// probeCase is a variant of the pyrelay target file for the setup probe.
type probeCase struct {
	name, file string
	want       string // "" for a mapping that round-trips
}

// probeVariants are the target files TestSetupProbe probes, made from
// examples/pyrelay/target.yaml.
func probeVariants(t *testing.T) []probeCase {
	t.Helper()
	data, err := os.ReadFile("../examples/pyrelay/target.yaml")
	if err != nil {
		t.Fatal(err)
	}
	base := string(data)
	replace := func(text string, pairs ...string) string {
		t.Helper()
		for i := 0; i < len(pairs); i += 2 {
			if !strings.Contains(text, pairs[i]) {
				t.Fatalf("the pyrelay target file changed: %q is not in it, and the probe's variants no longer apply", pairs[i])
			}
			text = strings.Replace(text, pairs[i], pairs[i+1], 1)
		}
		return text
	}
	const (
		uuidKey   = "event_id    uuid PRIMARY KEY,"
		stageCols = "INSERT INTO {table} (event_id, kind, body, trace_id, created_at)\n    VALUES (:id, :type, :payload, :correlation_id, :occurred_at)"
	)
	bigint := replace(base, uuidKey, "event_id    bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,",
		stageCols, "INSERT INTO {table} (kind, body, trace_id, created_at)\n    VALUES (:type, :payload, :correlation_id, :occurred_at)\n    RETURNING event_id")
	return []probeCase{
		{"round-trips", base, ""},
		{"bigint identity the stage returns", bigint, ""},
		{"bigint key the stage never returns",
			replace(base, uuidKey, "seq         bigint GENERATED ALWAYS AS IDENTITY,\n      "+uuidKey, "SELECT event_id AS id,", "SELECT seq AS id,"),
			"outbox.rows: the rows view's id is not the id the stage was given"},
		{"stage returns another column than the rows view's id", replace(bigint, "RETURNING event_id", "RETURNING created_at"),
			"outbox.rows: the rows view's id is not the id the stage returned"},
		{"delivery identity where the key is not", replace(bigint, "id: message_id", "id: body:order_id"),
			`delivery.id body:order_id: the probe event's delivery (routing key "order.placed") carries "probe" there, not the id`},
		{"delivery identity never set", replace(base, "id: message_id", "id: header:x-event-id"),
			`delivery.id header:x-event-id: the probe event's delivery (routing key "order.placed") carries "" there`},
	}
}

// TestSetupProbeVariants keeps the target files TestSetupProbe probes
// valid without containers: each passes CheckTarget, and those keyed by
// the bigint identity return it.
func TestSetupProbeVariants(t *testing.T) {
	for _, tc := range probeVariants(t) {
		c, err := check(t, tc.file)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if returns := strings.Contains(tc.file, "RETURNING"); c.Relay.Outbox.ReturnsID != returns {
			t.Errorf("%s: returns the database's ids %v, want %v", tc.name, c.Relay.Outbox.ReturnsID, returns)
		}
	}
}

// BenchmarkObservation runs the baseline scenario against our relay with
// the outbox observed and without, side by side at one seed: the ratio of
// their times is what observing costs a run. Both must pass.
//
//	go test -run '^$' -bench Observation -benchtime 3x ./scenarios/
func BenchmarkObservation(b *testing.B) {
	env := shared.Get(b)
	sc, _ := Lookup(Baseline)
	for _, c := range []struct {
		name       string
		unobserved bool
	}{{"observed", false}, {"unobserved", true}} {
		b.Run(c.name, func(b *testing.B) {
			for range b.N {
				res, err := Run(context.Background(), env, sc, Options{Seed: 1, Unobserved: c.unobserved})
				if err != nil || !res.Valid {
					b.Fatalf("baseline %s: %v %v", c.name, err, res.Problems)
				}
				if res.Observed.Known == c.unobserved {
					b.Fatalf("baseline %s: observed %+v", c.name, res.Observed)
				}
			}
		})
	}
}
