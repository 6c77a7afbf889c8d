package scenarios

import (
	"slices"
	"testing"
	"time"

	"github.com/outboxlab/outboxlab/checker"
	"github.com/outboxlab/outboxlab/history"
)

// TestCompareObserved feeds compareObserved records and observations
// that disagree, with and without a cause in the history, and checks that
// it reports exactly the disagreements nothing explains.
func TestCompareObserved(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	ok := func(s int, p string, f history.Func, events ...string) history.Op {
		return history.Op{Time: at(s), Process: p, Type: history.OK, F: f, Events: events}
	}
	parkedRetry := ok(5, "relay-a", history.Retry, "e5")
	parkedRetry.Parked = true
	dbKill := history.Op{Time: at(20), Process: "nemesis", Type: history.Info, F: history.FaultStart,
		Meta: history.Meta{Fault: &history.Fault{Name: "db-kill", Kind: "kill", Class: history.ClassDB}}}
	recorded := []history.Op{
		ok(1, "relay-a", history.Claim, "e1", "e2"),
		ok(2, "relay-a", history.Mark, "e1", "e2"),
		ok(3, "relay-b", history.Claim, "e3"),
		ok(4, "relay-b", history.Mark, "e3"),  // not observed: nothing explains it
		parkedRetry,                           // observed as a park
		ok(21, "relay-a", history.Mark, "e6"), // not observed, and after the db fault began
		{Time: at(8), Process: "relay-b", Type: history.Invoke, F: history.Mark, Events: []string{"e7"}},
		{Time: at(9), Process: "relay-b", Type: history.Info, F: history.Mark, Events: []string{"e7"}},
		dbKill,
		ok(22, "relay-a", history.Claim, "e8"), // after the db fault began: not explained
		{Time: at(30), Process: "relay-a", Type: history.Info, F: history.Crash},
		// a claim cut short: its record names no rows
		{Time: at(13), Process: "relay-c", Type: history.Invoke, F: history.Claim},
		{Time: at(14), Process: "relay-c", Type: history.Info, F: history.Claim},
		// a sweep cut short: its record names no rows either
		{Time: at(16), Process: "relay-c", Type: history.Invoke, F: history.Sweep},
		{Time: at(17), Process: "relay-c", Type: history.Info, F: history.Sweep},
	}
	observed := []history.Op{
		ok(1, "relay-a", history.Claim, "e1", "e2"),
		ok(2, "relay-a", history.Mark, "e1", "e2"),
		ok(3, "relay-b", history.Claim, "e3"),
		ok(5, "relay-a", history.Park, "e5"),
		ok(9, "relay-b", history.Mark, "e7"),           // recorded with an unknown outcome
		ok(12, "relay-b", history.Claim, "e9"),         // not recorded: nothing explains it
		ok(25, "relay-a", history.Claim, "e4"),         // not recorded, but relay-a crashed after it
		ok(13, "relay-c", history.Claim, "e10", "e11"), // the claim cut short
		ok(15, "relay-c", history.Claim, "e11"),        // one more: no record explains it
		ok(17, "relay-c", history.Sweep, "e12", "e13"), // the sweep cut short
		ok(18, "relay-b", history.Sweep, "e14"),        // not recorded: nothing explains it
	}
	got := compareObserved(recorded, observed, nil)
	want := []string{
		"relay-a claim of e8: recorded 1 times, observed 0",
		"relay-a mark of e6: recorded 1 times, observed 0",
		"relay-b claim of e9: observed 1 times, recorded 0",
		"relay-b mark of e3: recorded 1 times, observed 0",
		"relay-b sweep of e14: observed 1 times, recorded 0",
		"relay-c claim of e11: observed 2 times, recorded 0",
	}
	if !slices.Equal(got, want) {
		t.Errorf("disagreements:\n got %q\nwant %q", got, want)
	}

	// A database fault soon after a record explains that it was not
	// observed; one long after it does not.
	recorded = append(recorded, history.Op{Time: at(23), Process: "nemesis", Type: history.Info, F: history.FaultStart,
		Meta: history.Meta{Fault: &history.Fault{Name: "db-restart", Kind: "restart", Class: history.ClassDB}}})
	got = compareObserved(recorded, observed, nil)
	want = []string{"relay-b claim of e9: observed 1 times, recorded 0", "relay-b mark of e3: recorded 1 times, observed 0",
		"relay-b sweep of e14: observed 1 times, recorded 0", "relay-c claim of e11: observed 2 times, recorded 0"}
	if !slices.Equal(got, want) {
		t.Errorf("disagreements with a database fault after every record:\n got %q\nwant %q", got, want)
	}
	if got := compareObserved(observed, observed, nil); len(got) != 0 {
		t.Errorf("records that are the observations disagree with them: %q", got)
	}
}

// TestPairUpIsWellFormed: observed operations, single ok records, become
// invoke and ok pairs that the well-formedness checker accepts; the ok
// records alone it refuses.
func TestPairUpIsWellFormed(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ops := []history.Op{
		{Time: t0, Process: "relay-a", Type: history.OK, F: history.Claim, Events: []string{"e1"}},
		{Time: t0.Add(time.Second), Process: "relay-a", Type: history.OK, F: history.Mark, Events: []string{"e1"}},
	}
	if res := checker.WellFormed(history.Merge(ops), checker.State{}, checker.Config{}); res.Valid {
		t.Fatal("ok records without invokes are well formed; the check below proves nothing")
	}
	paired := pairUp(ops)
	if len(paired) != 4 || paired[0].Type != history.Invoke || paired[1].Type != history.OK {
		t.Fatalf("paired: %+v", paired)
	}
	if res := checker.WellFormed(history.Merge(paired), checker.State{}, checker.Config{}); !res.Valid {
		t.Errorf("paired observed operations are malformed: %s %v", res.Detail, res.Reasons)
	}
}

// TestCompareObservedPublishes compares recorded publishes with those the
// broker's tap saw: a confirmed publish the tap did not see disagrees,
// unless the tap was away then; a publish the tap saw that the relay
// recorded as failed or unknown, or not at all before it crashed, agrees.
func TestCompareObservedPublishes(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	op := func(s int, p string, typ history.Type, events ...string) history.Op {
		return history.Op{Time: at(s), Process: p, Type: typ, F: history.Publish, Events: events}
	}
	recorded := []history.Op{
		op(1, "relay-a", history.Invoke, "e1"), op(1, "relay-a", history.OK, "e1"), // seen
		op(2, "relay-a", history.Invoke, "e2"), op(2, "relay-a", history.OK, "e2"), // not seen
		op(3, "relay-a", history.Invoke, "e3"), op(3, "relay-a", history.OK, "e3"), // not seen, tap away
		op(4, "relay-b", history.Invoke, "e4"), op(4, "relay-b", history.Info, "e4"), // seen: unknown outcome
	}
	observed := []history.Op{
		op(1, "relay-a", history.Invoke, "e1"), op(1, "relay-a", history.OK, "e1"),
		op(4, "relay-b", history.Invoke, "e4"), op(4, "relay-b", history.OK, "e4"),
		op(5, "relay-b", history.Invoke, "e5"), op(5, "relay-b", history.OK, "e5"), // not recorded
	}
	away := func(t time.Time) bool { return t.Equal(at(3)) }
	got := compareObserved(recorded, observed, away)
	want := []string{
		"relay-a publish of e2: recorded 1 times, observed 0",
		"relay-b publish of e5: observed 1 times, recorded 0",
	}
	if !slices.Equal(got, want) {
		t.Errorf("disagreements:\n got %q\nwant %q", got, want)
	}
}
