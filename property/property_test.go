package property

import (
	"flag"
	"fmt"
	"strings"
	"sync"
	"testing"

	"pgregory.net/rapid"

	"github.com/outboxlab/outboxlab/internal/mutant"
	"github.com/outboxlab/outboxlab/internal/sim"
	"github.com/outboxlab/outboxlab/testenv"
)

// This file holds the properties and the helpers they share; the state
// machines they run are in sim_test.go (over the simulation) and
// infra_test.go (over PostgreSQL and RabbitMQ).

// shrinkTime bounds rapid's shrinking in the tests that hold a shrunk
// counterexample to a length: that length is the shrinker's doing, not
// the machine's, so a slow or busy machine (make test runs these tests
// at the lowest priority beside the container tests) gets the time to
// finish. Shrinking takes seconds when it has a core.
const shrinkTime = "10m"

// TestSimProperty: whatever the actions, the production relay and
// consumer lose nothing, invent nothing and apply nothing twice.
func TestSimProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) { runSim(t, sim.Variant{}, nil) })
}

// TestMarkBeforePublishIsCaught runs the property over a relay that marks
// rows processed before it publishes them (the catalogue's
// mark-before-publish). The property must fail, and rapid must shrink the
// failure to a counterexample of at most 15 actions.
//
// After a failure rapid replays the shrunk case once more, last, to print
// it; the machine of the last case run is therefore the counterexample,
// and its trace is what rapid shrank.
func TestMarkBeforePublishIsCaught(t *testing.T) {
	setRapidFlag(t, "rapid.checks", "200")
	setRapidFlag(t, "rapid.shrinktime", shrinkTime)
	v := lookupMutant(t, "mark-before-publish").Variant()
	var last *simCase
	rec := checkFails(t, "a relay that marks rows before publishing them", func(rt *rapid.T) {
		runSim(rt, v, func(c *simCase) { last = c })
	})
	if last == nil {
		t.Fatal("no case ran")
	}
	trace := last.m.Trace()
	t.Logf("shrunk counterexample, %d action(s):\n  %s", len(trace), strings.Join(trace, "\n  "))
	t.Logf("rapid said:\n%s", rec)
	if len(trace) == 0 || len(trace) > 15 {
		t.Fatalf("counterexample has %d actions, want 1 to 15; rapid said:\n%s", len(trace), rec)
	}
}

// TestMutantsShrinkWithRapid runs the rapid state machine over the
// simulation against every mutant it can express and lets rapid shrink
// the failure: each must fail, and its counterexample must be short. It
// cross-checks the mutant package's own shrinker, whose counts the kill
// matrix reports (logged side by side). Two mutants are left to the
// matrix: the rapid machine has no action that unbinds the queue
// (ignore-return) or holds a transaction open while later ones commit
// (offset-claim).
func TestMutantsShrinkWithRapid(t *testing.T) {
	if testing.Short() {
		t.Skip("rapid shrinks 13 mutants; the kill matrix covers -short")
	}
	// consumer-ack-before-commit needs a consumer to take a delivery while
	// its database link is cut; rapid's random machines found that within
	// 2000 cases about half the time, so it gets ten times as many (a
	// mutant that fails early stops at once, so the others do not pay).
	setRapidFlag(t, "rapid.checks", "20000")
	setRapidFlag(t, "rapid.shrinktime", shrinkTime)
	skip := map[string]string{
		"ignore-return": "no unbind action",
		"offset-claim":  "no held transaction",
	}
	matrix, err := mutant.RunMatrix(t.Context(), mutant.TierSim, mutant.Options{Seeds: 200, ExposureSeeds: 1})
	if err != nil {
		t.Fatal(err)
	}
	ours := map[string]mutant.Row{}
	for _, r := range matrix {
		ours[r.Mutant] = r
	}
	for _, m := range mutant.All() {
		if why, ok := skip[m.Name]; ok {
			t.Logf("%-30s skipped: %s", m.Name, why)
			continue
		}
		t.Run(m.Name, func(t *testing.T) {
			var last *simCase
			v := m.Variant()
			rec := checkFails(t, m.Name, func(rt *rapid.T) { runSim(rt, v, func(c *simCase) { last = c }) })
			if last == nil {
				t.Fatalf("no case ran; rapid said:\n%s", rec)
			}
			trace := last.m.Trace()
			if len(trace) == 0 || len(trace) > 15 {
				t.Fatalf("counterexample of %d actions, want 1 to 15; rapid said:\n%s", len(trace), rec)
			}
			r := ours[m.Name]
			t.Logf("%-30s rapid: %d action(s); kill matrix: %d %s", m.Name, len(trace), r.Steps, r.StepsOf)
			t.Logf("rapid's counterexample:\n  %s", strings.Join(trace, "\n  "))
		})
	}
}

// TestInfraProperty is the property on real PostgreSQL and RabbitMQ: rapid
// draws sequences of commits and rollbacks, relay ticks, relay crashes at
// a failpoint, pauses past the lease, links cut and healed through
// toxiproxy and clocks skewed; after heal and drain the checkers must
// pass over the history and the state read from PostgreSQL and RabbitMQ,
// and after every action no outbox row of a rolled-back transaction may
// exist and no effect may be applied twice.
func TestInfraProperty(t *testing.T) {
	env := testenv.StartT(t, testenv.Options{})
	setRapidFlag(t, "rapid.checks", "12")
	setRapidFlag(t, "rapid.steps", "24")
	rapid.Check(t, func(rt *rapid.T) { runInfra(rt, env, mutant.RelayForm{}) })
	t.Run("mark before publish is caught", func(t *testing.T) {
		// The same property over the catalogue's mark-before-publish, whose
		// claim marks its rows at once: a publish that fails after the
		// claim loses the event, and the property must say so.
		setRapidFlag(t, "rapid.checks", "40")
		setRapidFlag(t, "rapid.shrinktime", "20s")
		form := lookupMutant(t, "mark-before-publish").Relay
		rec := checkFails(t, "a relay that marks rows processed when it claims them", func(rt *rapid.T) {
			runInfra(rt, env, form)
		})
		t.Logf("rapid's counterexample:\n%s", rec)
	})
}

// lookupMutant returns the catalogue's mutant named name.
func lookupMutant(t *testing.T, name string) mutant.Mutant {
	t.Helper()
	m, ok := mutant.Lookup(name)
	if !ok {
		t.Fatalf("no mutant %q in the catalogue", name)
	}
	return m
}

// checkFails runs prop under rapid on a recorder instead of t, for a
// property that must fail: the test fails when the property passes (what
// names the system that should have failed it). It returns the recorder,
// whose String is what rapid said. No fail file is written for the
// failure the test wants.
func checkFails(t *testing.T, what string, prop func(*rapid.T)) *recorder {
	t.Helper()
	setRapidFlag(t, "rapid.nofailfile", "true")
	rec := &recorder{name: t.Name()}
	rapid.Check(rec, prop)
	if !rec.Failed() {
		t.Fatalf("the property passed %s; rapid said:\n%s", what, rec)
	}
	return rec
}

// failCase fails a case after the actions of trace, one a line, with what
// went wrong.
func failCase(t *rapid.T, trace []string, what string) {
	t.Fatalf("after %d action(s):\n  %s\n%s", len(trace), strings.Join(trace, "\n  "), what)
}

// recorder is a rapid.TB that keeps what rapid reports instead of failing
// the test that runs it: rapid.Check takes a rapid.TB, so a test can run
// rapid on a property that must fail and look at the counterexample.
type recorder struct {
	name   string
	mu     sync.Mutex
	failed bool
	logs   []string
}

func (r *recorder) Helper()      {}
func (r *recorder) Name() string { return r.name }
func (r *recorder) Logf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.logs = append(r.logs, fmt.Sprintf(format, args...))
}
func (r *recorder) Log(args ...any)                  { r.Logf("%s", fmt.Sprint(args...)) }
func (r *recorder) Skipf(format string, args ...any) { r.Logf("skip: "+format, args...) }
func (r *recorder) Skip(args ...any)                 { r.Log(args...) }
func (r *recorder) SkipNow()                         {}
func (r *recorder) Errorf(format string, args ...any) {
	r.Logf(format, args...)
	r.Fail()
}
func (r *recorder) Error(args ...any)                 { r.Errorf("%s", fmt.Sprint(args...)) }
func (r *recorder) Fatalf(format string, args ...any) { r.Errorf(format, args...) }
func (r *recorder) Fatal(args ...any)                 { r.Error(args...) }
func (r *recorder) FailNow()                          { r.Fail() }
func (r *recorder) Fail() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failed = true
}
func (r *recorder) Failed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.failed
}

// String returns what rapid reported, one report a line.
func (r *recorder) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.logs, "\n")
}

// setRapidFlag sets a flag for the rest of the test, unless the command
// line gave it.
func setRapidFlag(t *testing.T, name, value string) {
	t.Helper()
	f := flag.Lookup(name)
	if f == nil {
		t.Fatalf("no flag %s", name)
	}
	given := false
	flag.Visit(func(g *flag.Flag) { given = given || g.Name == name })
	if given {
		return
	}
	prev := f.Value.String()
	if err := f.Value.Set(value); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Value.Set(prev) })
}
