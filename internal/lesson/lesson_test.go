package lesson

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/outboxlab/outboxlab/checker"
	"github.com/outboxlab/outboxlab/history"
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
// its lesson teaches and every other case passed. A case that is this
// repository's relay and consumer, unchanged, on a scenario of the
// catalogue is what the scenarios' TestCatalogue runs on every seed it
// is given; it runs here only in the long mode (OUTBOXLAB_LONG=1).
func TestLessons(t *testing.T) {
	if testing.Short() {
		t.Skip("needs Docker")
	}
	env := testenv.StartT(t, testenv.Options{})
	catalogued := map[string]bool{}
	for _, n := range scenarios.Names() {
		catalogued[n] = true
	}
	long := os.Getenv("OUTBOXLAB_LONG") == "1"
	for _, l := range All() {
		t.Run(l.Name, func(t *testing.T) {
			sc, ok := scenarios.Lookup(l.Scenario)
			if !ok {
				t.Fatalf("no scenario %s", l.Scenario)
			}
			for _, c := range l.Cases {
				if plain := !c.Contrast && c.Relay.Name == "" && c.Consumer == nil && c.Mode == ""; plain && catalogued[l.Scenario] && !long {
					t.Logf("%s: our relay and consumer on %s, which TestCatalogue runs", c.Label, l.Scenario)
					continue
				}
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

// TestDeliveryLatency measures from each event's commit to its first
// delivery, over the events delivered.
func TestDeliveryLatency(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	op := func(ms int, f history.Func, events ...string) history.Op {
		return history.Op{Time: t0.Add(time.Duration(ms) * time.Millisecond), Type: history.OK, F: f, Events: events}
	}
	res := scenarios.Result{History: []history.Op{
		op(0, history.Commit, "e1", "e2"), op(10, history.Commit, "e3"), op(20, history.Commit, "e4"),
		op(100, history.Deliver, "e1"), op(300, history.Deliver, "e2"), op(410, history.Deliver, "e3"),
		op(900, history.Deliver, "e1"), // a duplicate: the first delivery counts
		// e4 is never delivered: it does not count
	}}
	p50, p99 := deliveryLatency(res)
	if p50 != 300*time.Millisecond || p99 != 400*time.Millisecond {
		t.Errorf("p50 %s, p99 %s; want 300ms and 400ms", p50, p99)
	}
	if p50, p99 := deliveryLatency(scenarios.Result{}); p50 != 0 || p99 != 0 {
		t.Errorf("no delivery: %s %s, want zeros", p50, p99)
	}
}

func TestCount(t *testing.T) {
	for _, tc := range []struct {
		got, want string
	}{
		{count(1, "event"), "1 event"},
		{count(2, "event"), "2 events"},
		{count(0, "extra delivery"), "0 extra deliveries"},
		{count(1, "extra delivery"), "1 extra delivery"},
		{count(3, "of them"), "3 of them"},
		{count(1, "poison event was", "poison events were"), "1 poison event was"},
		{count(4, "poison event was", "poison events were"), "4 poison events were"},
	} {
		if tc.got != tc.want {
			t.Errorf("%q, want %q", tc.got, tc.want)
		}
	}
}
