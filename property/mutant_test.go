package property

import (
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/outboxlab/outboxlab/mutant"
)

// TestMutantsShrinkWithRapid runs the rapid state machine of this package
// over every mutant it can express and lets rapid shrink the failure: each
// must fail, and its counterexample must be short. It cross-checks the
// mutant package's own shrinker, whose counts the kill matrix reports
// (logged side by side). Two mutants are left to the matrix: the machine
// here has no action that unbinds the queue (ignore-return) or holds a
// transaction open while later ones commit (offset-claim).
func TestMutantsShrinkWithRapid(t *testing.T) {
	if testing.Short() {
		t.Skip("rapid shrinks 13 mutants; the kill matrix covers -short")
	}
	setFlag(t, "rapid.nofailfile", "true")
	// consumer-ack-before-commit needs a consumer to take a delivery while
	// its database link is cut; rapid's random machines found that within
	// 2000 cases about half the time, so it gets ten times as many (a
	// mutant that fails early stops at once, so the others do not pay).
	setFlag(t, "rapid.checks", "20000")
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
			rec := &recorder{name: t.Name()}
			var last *machine
			v := m.Variant()
			rapid.Check(rec, func(rt *rapid.T) { run(rt, v, func(mc *machine) { last = mc }) })
			if !rec.Failed() {
				t.Fatalf("the property passed %s; rapid said:\n%s", m.Name, strings.Join(rec.logs, "\n"))
			}
			if last == nil || len(last.trace) == 0 || len(last.trace) > 15 {
				t.Fatalf("counterexample of %d actions, want 1 to 15; rapid said:\n%s", len(last.trace), strings.Join(rec.logs, "\n"))
			}
			r := ours[m.Name]
			t.Logf("%-30s rapid: %d action(s); kill matrix: %d %s", m.Name, len(last.trace), r.Steps, r.StepsOf)
			t.Logf("rapid's counterexample:\n  %s", strings.Join(last.trace, "\n  "))
		})
	}
}
