package report

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/outboxlab/outboxlab/checker"
	"github.com/outboxlab/outboxlab/history"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// hb builds a history one record at a time.
type hb struct {
	ops []history.Op
	now time.Time
}

func (b *hb) at(d time.Duration) *hb { b.now = t0.Add(d); return b }

func (b *hb) rec(p string, typ history.Type, f history.Func, m history.Meta, ids ...string) *hb {
	b.ops = append(b.ops, history.Op{Index: int64(len(b.ops)), Time: b.now, Process: p, Type: typ, F: f,
		Events: slices.Clone(ids), Meta: m})
	return b
}

// Faults of the built histories.
var (
	brokerDown = history.Meta{Fault: &history.Fault{Name: "broker-down", Kind: "down", Class: history.ClassBroker}}
	killRelayA = history.Meta{Fault: &history.Fault{Name: "kill relay-a", Kind: "kill", Class: history.ClassProcess, Targets: []string{"relay-a"}}}
	dbDown     = history.Meta{Fault: &history.Fault{Name: "db-down", Kind: "down", Class: history.ClassDB}}
)

// journey records a whole delivery of id by relay-a and consumer-1.
func (b *hb) journey(id string, at time.Duration) *hb {
	return b.at(at).rec("producer-1", history.Invoke, history.Commit, history.Meta{}, id).
		rec("producer-1", history.OK, history.Commit, history.Meta{}, id).
		at(at+100*time.Millisecond).rec("relay-a", history.Invoke, history.Claim, history.Meta{}).
		rec("relay-a", history.OK, history.Claim, history.Meta{}, id).
		rec("relay-a", history.Invoke, history.Publish, history.Meta{}, id).
		at(at+200*time.Millisecond).rec("relay-a", history.OK, history.Publish, history.Meta{}, id).
		rec("relay-a", history.Invoke, history.Mark, history.Meta{}, id).
		rec("relay-a", history.OK, history.Mark, history.Meta{}, id).
		at(at+300*time.Millisecond).rec("consumer-1", history.OK, history.Deliver, history.Meta{}, id).
		rec("consumer-1", history.Invoke, history.Apply, history.Meta{}, id).
		at(at+400*time.Millisecond).rec("consumer-1", history.OK, history.Apply, history.Meta{}, id)
}

func marksOf(e EventLine) []Mark {
	var out []Mark
	for _, p := range e.Points {
		out = append(out, p.Mark)
	}
	return out
}

func TestBuildTimelineMarksEveryStepOfAJourney(t *testing.T) {
	b := &hb{}
	b.at(0).rec("runner", history.Info, history.Phase, history.Meta{Phase: history.PhaseSafety})
	b.journey("e1", time.Second)
	b.at(2*time.Second).rec("producer-1", history.Invoke, history.Commit, history.Meta{}, "e2").
		rec("producer-1", history.Fail, history.Commit, history.Meta{}, "e2")
	b.at(3*time.Second).rec("consumer-1", history.OK, history.Deliver, history.Meta{Redelivered: true}, "e1").
		rec("consumer-1", history.Invoke, history.Apply, history.Meta{}, "e1").
		rec("consumer-1", history.OK, history.Apply, history.Meta{Duplicate: true}, "e1")
	tl := BuildTimeline(b.ops, checker.Report{Valid: true}, 0)

	if tl.TotalEvents != 2 || len(tl.Events) != 2 {
		t.Fatalf("events = %d shown of %d, want 2 of 2", len(tl.Events), tl.TotalEvents)
	}
	want := []Mark{MarkStaged, MarkCommitted, MarkClaimed, MarkPublished, MarkConfirmed, MarkMarked,
		MarkDelivered, MarkApplied, MarkDelivered, MarkDeduped}
	if got := marksOf(tl.Events[0]); !slices.Equal(got, want) {
		t.Errorf("e1 marks = %v, want %v", got, want)
	}
	if got := marksOf(tl.Events[1]); !slices.Equal(got, []Mark{MarkStaged, MarkRolledBack}) {
		t.Errorf("e2 marks = %v", got)
	}
	if tl.Events[0].Outcome != MarkCommitted || tl.Events[1].Outcome != MarkRolledBack {
		t.Errorf("outcomes = %s, %s", tl.Events[0].Outcome, tl.Events[1].Outcome)
	}
	if len(tl.Deliveries) != 1 || !tl.Deliveries[0].Equal(t0.Add(1400*time.Millisecond)) {
		t.Errorf("deliveries = %v, want one at +1.4s", tl.Deliveries)
	}
	if len(tl.Latencies) != 1 || tl.Latencies[0].D != 400*time.Millisecond {
		t.Errorf("latencies = %v, want one of 400ms", tl.Latencies)
	}
	if len(tl.Phases) != 1 || tl.Phases[0].Name != "safety" {
		t.Errorf("phases = %v", tl.Phases)
	}
}

func TestBuildTimelineFaultWindows(t *testing.T) {
	b := &hb{}
	b.at(0).rec("nemesis", history.Info, history.FaultStart, brokerDown)
	b.at(time.Second).rec("nemesis", history.Invoke, history.FaultStart, killRelayA).
		rec("nemesis", history.OK, history.FaultStart, killRelayA)
	b.at(2*time.Second).rec("nemesis", history.Info, history.FaultStop, brokerDown)
	// A heal that failed leaves the fault on to the end.
	b.at(3*time.Second).rec("nemesis", history.Invoke, history.FaultStop, killRelayA).
		rec("nemesis", history.Info, history.FaultStop, killRelayA)
	// A start that failed opens nothing.
	b.at(4*time.Second).rec("nemesis", history.Fail, history.FaultStart, dbDown)
	b.at(5*time.Second).rec("runner", history.Info, history.Phase, history.Meta{Phase: history.PhaseCheck})
	tl := BuildTimeline(b.ops, checker.Report{Valid: true}, 0)
	want := []Window{
		{Name: "broker-down", Start: t0, Stop: t0.Add(2 * time.Second), Healed: true},
		{Name: "kill relay-a", Start: t0.Add(time.Second), Stop: t0.Add(5 * time.Second)},
	}
	if !slices.EqualFunc(tl.Windows, want, func(a, b Window) bool {
		return a.Name == b.Name && a.Start.Equal(b.Start) && a.Stop.Equal(b.Stop) && a.Healed == b.Healed
	}) {
		t.Errorf("windows = %+v\nwant %+v", tl.Windows, want)
	}
}

func TestBuildTimelineKeepsOffendingEventsBeyondTheLimit(t *testing.T) {
	b := &hb{}
	for i := range 30 {
		b.journey(eventID(i), time.Duration(i)*time.Second)
	}
	// The last event commits and is never delivered: lost.
	lost := "lost-event"
	b.at(40*time.Second).rec("producer-1", history.Invoke, history.Commit, history.Meta{}, lost).
		rec("producer-1", history.OK, history.Commit, history.Meta{}, lost)
	rep := checker.Check(b.ops, checker.State{}, checker.Config{})
	if rep.Valid {
		t.Fatalf("the checkers passed a history with a lost event:\n%s", rep.Summary())
	}
	tl := BuildTimeline(b.ops, rep, 10)
	if tl.TotalEvents != 31 || len(tl.Events) != 11 {
		t.Fatalf("shown %d of %d events, want 11 of 31", len(tl.Events), tl.TotalEvents)
	}
	last := tl.Events[len(tl.Events)-1]
	if last.ID != lost || !last.Offending() || last.Ordinal != 31 {
		t.Fatalf("last row = %+v, want the lost event, offending, ordinal 31", last)
	}
	if last.Violations[0].Checker != checker.NameLost {
		t.Errorf("violations = %+v, want %s", last.Violations, checker.NameLost)
	}
	for _, e := range tl.Events[:10] {
		if e.Offending() {
			t.Errorf("event %s is offending", e.ID)
		}
	}
}

func eventID(i int) string {
	return "00000000-0000-4000-8000-0000000000" + string(rune('a'+i/26)) + string(rune('a'+i%26))
}

func TestAxisTimesKeepSkewedRecordsBetweenTheirAnchors(t *testing.T) {
	ops := []history.Op{
		{Index: 0, Time: t0, Process: "runner", F: history.Phase},
		// relay-a's clock is 5 minutes ahead.
		{Index: 1, Time: t0.Add(5*time.Minute + time.Second), Process: "relay-a"},
		{Index: 2, Time: t0.Add(500 * time.Millisecond), Process: "relay-b"},
		{Index: 3, Time: t0.Add(2 * time.Second), Process: "consumer-1"},
		{Index: 4, Time: t0.Add(time.Hour), Process: "relay-a"},
	}
	got := AxisTimes(ops)
	want := []time.Time{t0, t0.Add(2 * time.Second / 3), t0.Add(500 * time.Millisecond), t0.Add(2 * time.Second), t0.Add(time.Hour)}
	for i := range want {
		if !got[i].Equal(want[i]) {
			t.Errorf("op %d at %s, want %s", i, got[i].Sub(t0), want[i].Sub(t0))
		}
	}
}

func TestGapsCompressIdleStretches(t *testing.T) {
	b := &hb{}
	b.journey("e1", 0).journey("e2", 10*time.Second).journey("e3", 3*time.Hour)
	tl := BuildTimeline(b.ops, checker.Report{Valid: true}, 0)
	if len(tl.Gaps) != 1 {
		t.Fatalf("gaps = %+v, want one", tl.Gaps)
	}
	g := tl.Gaps[0]
	if !g.From.Equal(t0.Add(10400*time.Millisecond)) || !g.To.Equal(t0.Add(3*time.Hour)) {
		t.Errorf("gap = %s..%s", g.From.Sub(t0), g.To.Sub(t0))
	}
	if tl.span() > time.Minute {
		t.Errorf("axis span %s: the 3h gap was not compressed", tl.span())
	}
	for _, d := range []time.Duration{0, 5 * time.Second, 10400 * time.Millisecond, time.Hour, 3 * time.Hour, 3*time.Hour + 400*time.Millisecond} {
		at := t0.Add(d)
		if back := tl.real(tl.virt(at)); back.Sub(at).Abs() > time.Millisecond {
			t.Errorf("real(virt(+%s)) = +%s", d, back.Sub(t0))
		}
	}
	if p1, p2 := tl.pos(t0.Add(time.Hour), 100), tl.pos(t0.Add(2*time.Hour), 100); !(p1 < p2) {
		t.Errorf("positions inside a gap do not increase: %v, %v", p1, p2)
	}
}

func TestShortIDsAreUniqueTails(t *testing.T) {
	ids := []string{"00000000-0000-4000-8000-000000000001", "00000000-0000-4000-8000-000000000002", "00000000-0000-4000-8000-100000000002"}
	got := shortIDs(ids)
	seen := map[string]bool{}
	for _, id := range ids {
		s := got[id]
		if seen[s] {
			t.Errorf("label %q is not unique", s)
		}
		seen[s] = true
		if !strings.HasSuffix(id, strings.TrimPrefix(s, "…")) {
			t.Errorf("label %q is not a tail of %s", s, id)
		}
	}
	if got[ids[0]] != "…000000000001" {
		t.Errorf("label = %q, want the shortest unique tail", got[ids[0]])
	}
}

func TestFmtOffset(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0: "0s", 30 * time.Minute: "+30m", 90 * time.Second: "+1m30s", 2 * time.Hour: "+2h",
		250 * time.Millisecond: "+250ms", 1500 * time.Millisecond: "+1.5s", 3*time.Hour + 40*time.Minute: "+3h40m",
	} {
		if got := fmtOffset(d); got != want {
			t.Errorf("fmtOffset(%s) = %q, want %q", d, got, want)
		}
	}
}
