// Package suite runs outboxlab's chaos catalogue against an outbox from a
// team's own `go test`, in the style of watermill's tests.TestPubSub: one
// call, one subtest per applicable scenario.
//
//	func TestOutbox(t *testing.T) {
//		suite.Run(t, suite.Target{Relay: scenarios.RelayUnderTest{
//			Name:     "my-relay",
//			Command:  []string{"./bin/my-relay"},
//			Promises: contract.Promises{Parks: true, Locking: contract.RowLocks},
//		}}, suite.Options{})
//	}
//
// A team's own scenarios, built as scenarios.Scenario values with their
// own faults and checks, run the same way through Options.Custom.
//
// Each scenario is a subtest named for it, so `go test -run
// 'TestOutbox/broker-down'` selects one; `-short` skips them all (they
// start containers: PostgreSQL, RabbitMQ and toxiproxy from outboxlab's
// images, `make images` in the outboxlab repository). A failed scenario
// prints the violated promises, the seed and the go test command that
// replays it (-outboxlab.seed=N);
// a scenario the target cannot run (it needs a promise the relay does not
// make: failpoints, a lease locking style) and a run whose fault could
// not bite (INCONCLUSIVE) are skipped with the reason, never passed.
package suite

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outboxlab/outboxlab/internal/argv"
	"github.com/outboxlab/outboxlab/scenarios"
	"github.com/outboxlab/outboxlab/testenv"
)

// Target is the outbox under test: a relay (an image, a command, or
// outboxlab's own relay, the zero Relay) and the outbox it reads, the
// harness's table of the black-box contract (docs/contract.md §3) or one
// with its own schema (Relay.Outbox, Relay.Identity; scenarios.LoadTarget
// reads both from a target file).
type Target struct {
	// Relay is the relay under test; its Promises say what it promises
	// (a contract.Promises: its locking style, parking, fencing,
	// failpoints, records, attempt limit, backoff...), and so which
	// scenarios apply and what the checkers expect of it; its Outbox and
	// Identity say how events are staged, read back and recognised. The
	// zero value is outboxlab's relay.
	Relay scenarios.RelayUnderTest
}

// Options tunes a suite run. The zero value runs every scenario of the
// one-node catalogue once, on a seed from -outboxlab.seed or the clock.
type Options struct {
	// Scenarios names the scenarios to run; empty: the whole one-node
	// catalogue (scenarios.Names), unless Custom gives scenarios. Cluster
	// scenarios (cluster-...) run when named, on a cluster environment of
	// their own; so do the consumers' (scenarios.ConsumerNames) and the
	// database's and the deployment's (scenarios.DatabaseNames: a
	// failover runs on a PostgreSQL with a streaming standby).
	Scenarios []string
	// Custom are scenarios of the team's own, built as scenarios.Scenario
	// values (a workload, Faults, Check), run after the named ones, each
	// as a subtest named for it: beside the catalogue's when Scenarios
	// names some, instead of them when it names none. Their names must
	// be set, and differ from each other's and the named scenarios'.
	Custom []scenarios.Scenario
	// Seed is the first seed; 0 takes -outboxlab.seed, else the clock.
	Seed uint64
	// Seeds is how many consecutive seeds each scenario runs on (default
	// 1).
	Seeds int
	// Long runs bigger workloads over longer safety phases.
	Long bool
	// Timeout bounds each scenario run (default 10 minutes).
	Timeout time.Duration
	// RequireAll fails a scenario the target cannot run (not applicable)
	// and a run whose fault could not bite (INCONCLUSIVE) instead of
	// skipping them, for a CI that wants the whole catalogue judged.
	RequireAll bool
}

var seedFlag = flag.String("outboxlab.seed", "", "the first seed of outboxlab's suite (default: from the clock)")

// Run runs the scenarios against target, one subtest per scenario and
// seed, on environments it starts and removes (one for the one-node
// scenarios, one more when cluster scenarios are named).
func Run(t *testing.T, target Target, opts Options) {
	t.Helper()
	scs, err := selected(opts)
	if err != nil {
		t.Fatalf("suite: %v", err)
	}
	first, err := firstSeed(opts.Seed, time.Now())
	if err != nil {
		t.Fatalf("suite: %v", err)
	}
	seeds := max(opts.Seeds, 1)
	timeout := opts.Timeout
	if timeout <= 0 {
		timeout = 10 * time.Minute
	}
	relay := target.Relay
	if relay.Name == "" && relay.Image == "" && len(relay.Command) == 0 {
		relay = scenarios.Ours()
	}
	t.Logf("SEED=%d relay=%s scenarios=%d seeds=%d", first, relay.Name, len(scs), seeds)

	envs := &envs{t: t}
	for _, sc := range scs {
		t.Run(sc.Name, func(t *testing.T) {
			if testing.Short() {
				t.Skip("suite: starts containers (skipped with -short)")
			}
			env := envs.get(t, scenarios.EnvOptionsFor(sc))
			for k := range seeds {
				seed := first + uint64(k)
				ctx, cancel := context.WithTimeout(context.Background(), timeout)
				res, err := scenarios.Run(ctx, env, sc, scenarios.Options{
					Seed: seed, Relay: relay, Long: opts.Long, Log: func(line string) { t.Log(line) },
				})
				cancel()
				judge(t, res, err, opts.RequireAll, testReplay(t.Name(), seed, first, opts.Seed != 0, opts.Long))
			}
		})
	}
}

// selected returns the scenarios opts selects, in the order they run:
// the named ones (the one-node catalogue when none is named and Custom is
// empty), then Custom.
func selected(opts Options) ([]scenarios.Scenario, error) {
	names := opts.Scenarios
	if len(names) == 0 && len(opts.Custom) == 0 {
		names = scenarios.Names()
	}
	var scs []scenarios.Scenario
	for _, n := range names {
		sc, ok := scenarios.Lookup(n)
		if !ok {
			return nil, fmt.Errorf("no scenario %q (the catalogue: %s; the cluster tier: %s; the consumers: %s; the database and the deployment: %s)", n,
				strings.Join(scenarios.Names(), ", "), strings.Join(scenarios.ClusterNames(), ", "),
				strings.Join(scenarios.ConsumerNames(), ", "), strings.Join(scenarios.DatabaseNames(), ", "))
		}
		scs = append(scs, sc)
	}
	seen := map[string]bool{}
	for _, sc := range scs {
		seen[sc.Name] = true
	}
	for i, sc := range opts.Custom {
		switch {
		case sc.Name == "":
			return nil, fmt.Errorf("Options.Custom[%d] has no Name", i)
		case seen[sc.Name]:
			return nil, fmt.Errorf("scenario %q is selected twice: subtests and their replays need distinct names", sc.Name)
		}
		seen[sc.Name] = true
		scs = append(scs, sc)
	}
	return scs, nil
}

// reporter is what judge needs of a subtest (*testing.T).
type reporter interface {
	Helper()
	Logf(format string, args ...any)
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
	Skipf(format string, args ...any)
}

// judge turns one run's outcome into the subtest's: a failure with its
// evidence and replay, a skip for what could not be judged, or with
// requireAll a failure for that too. replay is the subtest's go test
// command, which runs any relay again, one that the run verb cannot name
// (a schema in Go code, a program built into a temporary directory) or
// a target file named relative to the test's package included, where
// the run verb's command (res.Replay) works only from outboxlab's own
// checkout, and not for those.
func judge(t reporter, res scenarios.Result, err error, requireAll bool, replay string) {
	t.Helper()
	unjudged := t.Skipf
	if requireAll {
		unjudged = t.Fatalf
	}
	switch v := res.Verdict(); {
	case err != nil && isNotApplicable(err):
		unjudged("not applicable: %v", err)
	case err != nil:
		t.Fatalf("SEED=%d %s could not run: %v\nreplay: %s", res.Seed, res.Scenario, err, replay)
	case v == scenarios.VerdictFail:
		t.Errorf("SEED=%d %s against %s FAILED:\n  %s\n%s\nreplay: %s", res.Seed, res.Scenario, res.Relay,
			strings.Join(res.Problems, "\n  "), res.Report.Summary(), replay)
	case v == scenarios.VerdictInconclusive:
		unjudged("SEED=%d %s INCONCLUSIVE: %s\nreplay: %s", res.Seed, res.Scenario, strings.Join(res.Inconclusive, "; "), replay)
	default:
		t.Logf("SEED=%d %s PASS: committed %d, delivered %d, duplicate deliveries %d (unexplained %d)", res.Seed, res.Scenario,
			res.Counts.Committed, res.Counts.Delivered, res.Counts.DuplicateDeliveries, res.Counts.UnexplainedDuplicates)
	}
}

// testReplay is the go test command, from the root of the test's module,
// that runs the subtest name again: on seed through -outboxlab.seed, or,
// when Options.Seed fixes the first seed in the code (fixed), on the same
// seeds from first, which the command cannot change. The long mode that
// OUTBOXLAB_LONG turned on is turned on again; the one Options.Long turns
// on is in the code.
func testReplay(name string, seed, first uint64, fixed, long bool) string {
	var b strings.Builder
	if !long && scenarios.LongFromEnv() {
		b.WriteString(scenarios.LongEnv + "=1 ")
	}
	parts := strings.Split(name, "/")
	for i, p := range parts {
		parts[i] = "^" + regexp.QuoteMeta(p) + "$"
	}
	fmt.Fprintf(&b, "go test %s -run %s -count=1", packageDir(), argv.QuoteArg(strings.Join(parts, "/")))
	switch {
	case !fixed:
		fmt.Fprintf(&b, " -args -outboxlab.seed=%d", seed)
	case seed != first:
		fmt.Fprintf(&b, " # Options.Seed starts it at seed %d, and seed %d is its run %d", first, seed, seed-first+1)
	}
	return b.String()
}

// packageDir is the directory of the test's package relative to the root
// of its module ("./examples/pyrelay"), where go test runs the test
// binary; "." when it is the root, or when no go.mod is found above it.
func packageDir() string {
	wd, err := os.Getwd()
	if err != nil {
		return "."
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			rel, err := filepath.Rel(dir, wd)
			if err != nil || rel == "." {
				return "."
			}
			return "./" + filepath.ToSlash(rel)
		}
		if filepath.Dir(dir) == dir {
			return "."
		}
	}
}

func isNotApplicable(err error) bool { return errors.Is(err, scenarios.ErrNotApplicable) }

// firstSeed is opts.Seed, else -outboxlab.seed (or OUTBOXLAB_SEED), else
// drawn from now.
func firstSeed(given uint64, now time.Time) (uint64, error) {
	if given != 0 {
		return given, nil
	}
	s := *seedFlag
	if s == "" {
		s = os.Getenv("OUTBOXLAB_SEED")
	}
	if s == "" {
		return uint64(now.UnixNano()) % 1_000_000_000, nil
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("seed %q: %w", s, err)
	}
	return v, nil
}

// envs starts each environment a scenario needs once, for the whole run,
// on the first subtest that needs it, and removes it when the parent test
// ends (its logs' tails printed first if a subtest failed).
type envs struct {
	t    *testing.T
	mu   sync.Mutex
	keys []string
	envs []*testenv.Env
	errs []error
}

func (e *envs) get(sub *testing.T, opts testenv.Options) *testenv.Env {
	sub.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	key := scenarios.EnvKey(opts)
	i := slices.Index(e.keys, key)
	if i < 0 {
		opts.Logf = e.t.Logf
		env, err := testenv.Start(context.Background(), opts)
		e.keys, e.envs, e.errs = append(e.keys, key), append(e.envs, env), append(e.errs, err)
		i = len(e.keys) - 1
		if err == nil {
			e.t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				defer cancel()
				if e.t.Failed() {
					env.LogTails(ctx, e.t.Logf, 40)
				}
				if err := env.Close(ctx); err != nil {
					e.t.Errorf("suite: %v", err)
				}
			})
		}
	}
	if err := e.errs[i]; err != nil {
		if errors.Is(err, testenv.ErrDockerUnavailable) && os.Getenv(testenv.RequireDockerEnv) == "" {
			sub.Skipf("suite: skipping: %v (set %s=1 to fail instead, or run go test -short)", err, testenv.RequireDockerEnv)
		}
		sub.Fatalf("suite: starting the environment: %v", err)
	}
	return e.envs[i]
}

// TargetFile returns the target a target file describes
// (scenarios.LoadTarget), failing t if it does not load. When relayPkg is
// set and the tests are not short (which skip every container test), the
// relay's command is built from that Go package (a path as `go build`
// takes it, relative to the test's directory) into the test's temporary
// directory and run instead of the file's program, so that the run
// tests the source beside it and not a binary a build left.
func TargetFile(t *testing.T, path, relayPkg string) Target {
	t.Helper()
	u, err := scenarios.LoadTarget(path)
	if err != nil {
		t.Fatal(err)
	}
	if relayPkg != "" && !testing.Short() {
		if len(u.Command) == 0 {
			t.Fatalf("target file %s: relayPkg %s given for a relay that is not a command", path, relayPkg)
		}
		bin := filepath.Join(t.TempDir(), filepath.Base(u.Command[0]))
		if out, err := exec.Command("go", "build", "-o", bin, relayPkg).CombinedOutput(); err != nil {
			t.Fatalf("building the relay %s: %v\n%s", relayPkg, err, out)
		}
		u.Command[0] = bin
	}
	return Target{Relay: u}
}
