package lesson

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/outboxlab/outboxlab/checker"
	"github.com/outboxlab/outboxlab/scenarios"
	"github.com/outboxlab/outboxlab/testenv"
)

// TestJudge: a contrast is judged right only when it failed by the
// checker it teaches, and any other case only when it passed; an
// inconclusive run is never right.
func TestJudge(t *testing.T) {
	failedBy := func(name string) scenarios.Result {
		r := scenarios.Result{Problems: []string{name + ": broken"}}
		r.Report = checker.Report{Results: []checker.Result{{Checker: name, Valid: false, Detail: "broken"}}}
		return r
	}
	passed := scenarios.Result{Valid: true}
	inconclusive := scenarios.Result{Inconclusive: []string{"the fault could not bite"}}
	contrast := Case{Contrast: true, Teaches: checker.NameDuplicateEffects}
	right := Case{Teaches: checker.NameDuplicateEffects}
	for _, tc := range []struct {
		name string
		c    Case
		res  scenarios.Result
		ok   bool
		why  string
	}{
		{"contrast failed by what it teaches", contrast, failedBy(checker.NameDuplicateEffects), true, "applied"},
		{"contrast failed by something else", contrast, failedBy(checker.NameLost), false, "expected to fail duplicate-effects and failed lost"},
		{"contrast passed", contrast, passed, false, "expected to fail duplicate-effects and passed"},
		{"contrast inconclusive", contrast, inconclusive, false, "inconclusive"},
		{"right case passed", right, passed, true, "absorbed"},
		{"right case failed", right, failedBy(checker.NameDuplicateEffects), false, "expected to pass"},
		{"right case inconclusive", right, inconclusive, false, "inconclusive"},
	} {
		ok, why := tc.c.Judge(tc.res)
		if ok != tc.ok || !strings.Contains(why, tc.why) {
			t.Errorf("%s: %v %q; want %v and %q", tc.name, ok, why, tc.ok, tc.why)
		}
	}
}

// TestLessons runs every lesson on containers, as `outboxlab demo
// --lesson all` does, and checks that each contrast failed by the checker
// its lesson teaches and every other case passed.
func TestLessons(t *testing.T) {
	if testing.Short() {
		t.Skip("needs Docker")
	}
	env := testenv.StartT(t, testenv.Options{})
	for _, l := range All() {
		t.Run(l.Name, func(t *testing.T) {
			sc, ok := scenarios.Lookup(l.Scenario)
			if !ok {
				t.Fatalf("no scenario %s", l.Scenario)
			}
			for _, c := range l.Cases {
				ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
				res, err := scenarios.Run(ctx, env, sc, scenarios.Options{Seed: Seed, Relay: c.Relay, Mode: c.Mode, Consumer: c.Consumer})
				cancel()
				if err != nil {
					t.Fatalf("%s: %v", c.Label, err)
				}
				if ok, why := c.Judge(res); !ok {
					t.Errorf("%s: %s\nreplay: %s", c.Label, why, res.Replay)
				} else {
					t.Logf("%s: %s: %s", c.Label, res.Verdict(), why)
				}
			}
		})
	}
}
