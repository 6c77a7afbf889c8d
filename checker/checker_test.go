package checker

import (
	"bytes"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/outboxlab/outboxlab/history"
)

// fullRun is a run with a bit of everything and no violation.
func fullRun() *hb {
	return build().phase(history.PhaseSafety).
		commit("producer-1", "e1", "e2").
		commitFail("producer-2", "r1").
		commitInfo("producer-2", "u1"). // recovered below
		commitInfo("producer-1", "u2"). // never seen
		commit("producer-1", "p1").     // poison
		claim("relay-a", "e1", "e2", "u1", "p1").park("relay-a", "p1").
		publish("relay-a", "e1").publish("relay-a", "e2").
		crash("relay-a").restart("relay-a").
		relay("relay-a", "e1", "e2", "u1").
		consume("consumer-1", "e1", "e2", "u1").
		deliver("consumer-1", "e2").applyDup("consumer-1", "e2").
		phase(history.PhaseLiveness).phase(history.PhaseCheck)
}

func fullState() State {
	return State{
		Outbox:  rows(processedRow("e1", t0), processedRow("e2", t0), processedRow("u1", t0), faultedRow("p1", 0)),
		Effects: map[string]int{"e1": 1, "e2": 1, "u1": 1},
		DBStart: t0, DBNow: t0.Add(time.Minute),
	}
}

func fullConfig() Config {
	return Config{
		Poison:        map[string]bool{"p1": true},
		LivenessBound: time.Minute,
		Backoff:       func(int) time.Duration { return time.Second },
		Features:      Features{Stages: true, Parks: true, Fenced: true, Sweeps: true},
	}
}

func TestCheckCleanRun(t *testing.T) {
	rep := Check(fullRun().h(), fullState(), fullConfig())
	if !rep.Valid {
		t.Fatalf("clean run failed:\n%s", rep.Summary())
	}
	want := Counts{
		Events: 6, Committed: 3, RolledBack: 1, Indeterminate: 2, Recovered: 1, Delivered: 3,
		Publishes: 5, DuplicatePublishes: 2, Deliveries: 4, DuplicateDeliveries: 1,
		DuplicatesBy: map[string]int{"restart relay-a": 3}, Poison: 1, Parked: 1,
	}
	got := rep.Counts
	gotBy, wantBy := got.DuplicatesBy, want.DuplicatesBy
	got.DuplicatesBy, want.DuplicatesBy = nil, nil
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Counts =\n%+v\nwant\n%+v", got, want)
	}
	if !maps.Equal(gotBy, wantBy) {
		t.Errorf("DuplicatesBy = %v, want %v", gotBy, wantBy)
	}
	names := make([]string, len(rep.Results))
	for i, r := range rep.Results {
		names[i] = r.Checker
	}
	wantNames := []string{NameWellFormed, NameLost, NamePhantom, NameUnexpected, NameDuplicateDeliveries,
		NameDuplicateEffects, NameParking, NameRetention, NameFencing, NameLeases, NameLiveness, NameCausalOrder, NameConvergence, NameFailover}
	if !slices.Equal(names, wantNames) {
		t.Errorf("checkers = %v, want %v", names, wantNames)
	}
	if s := rep.Summary(); !strings.HasPrefix(s, "VERDICT: PASS") {
		t.Errorf("Summary of a clean run:\n%s", s)
	}
}

func TestCheckFailsWhenAnyCheckerFails(t *testing.T) {
	cases := []struct {
		name    string
		mutate  func(b *hb, s *State)
		checker string
		id      string
	}{
		{"lost", func(b *hb, s *State) { b.commit("producer-3", "l1"); s.Outbox["l1"] = pendingRow("l1", 0) }, NameLost, "l1"},
		{"phantom", func(b *hb, s *State) { b.commitFail("producer-3", "f1").consume("consumer-1", "f1") }, NamePhantom, "f1"},
		{"unexpected", func(b *hb, s *State) { b.deliver("consumer-1", "x1") }, NameUnexpected, "x1"},
		{"duplicate delivery", func(b *hb, s *State) {
			b.commit("producer-3", "d1").relay("relay-b", "d1").consume("consumer-1", "d1").deliver("consumer-1", "d1")
			s.Outbox["d1"] = processedRow("d1", t0)
			s.Effects["d1"] = 1
		}, NameDuplicateDeliveries, "d1"},
		{"duplicate effect", func(b *hb, s *State) { s.Effects["e1"] = 2 }, NameDuplicateEffects, "e1"},
		{"parking", func(b *hb, s *State) { s.Outbox["e1"] = faultedRow("e1", 5) }, NameParking, "e1"},
		{"retention", func(b *hb, s *State) { delete(s.Outbox, "e1") }, NameRetention, "e1"},
		{"fencing", func(b *hb, s *State) { b.claim("relay-b", "e1").mark("relay-a", "e1") }, NameFencing, "e1"},
		{"liveness", func(b *hb, s *State) {
			b.commit("producer-3", "z1").wait(2*time.Minute).relay("relay-b", "z1").consume("consumer-1", "z1")
			s.Outbox["z1"] = processedRow("z1", t0)
			s.Effects["z1"] = 1
		}, NameLiveness, "z1"},
		{"causal order", func(b *hb, s *State) { b.causedCommit("hop-1", "nope", "c1") }, NameCausalOrder, "c1"},
		{"malformed", func(b *hb, s *State) { b.ok("producer-1", history.Commit, "e1") }, NameWellFormed, "e1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b, s := fullRun(), fullState()
			c.mutate(b, &s)
			rep := Check(b.h(), s, fullConfig())
			if rep.Valid {
				t.Fatalf("Valid report for a run with a %s violation:\n%s", c.name, rep.Summary())
			}
			r, ok := rep.Result(c.checker)
			if !ok || r.Valid || !slices.Contains(r.Offending, c.id) {
				t.Errorf("%s result = %+v, want %s offending", c.checker, r, c.id)
			}
			found := false
			for _, f := range rep.Failed() {
				found = found || f.Checker == c.checker
			}
			if !found {
				t.Errorf("Failed() lacks %s", c.checker)
			}
			sum := rep.Summary()
			if !strings.HasPrefix(sum, "VERDICT: FAIL") || !strings.Contains(sum, "FAIL "+c.checker+":") || !strings.Contains(sum, c.id) {
				t.Errorf("Summary does not show the %s violation of %s:\n%s", c.checker, c.id, sum)
			}
		})
	}
}

func TestCheckCountsViolations(t *testing.T) {
	h := build().
		commit("producer-1", "e1", "l1", "l2").
		invoke("producer-1", history.Commit, "f1").publish("producer-1", "f1").fail("producer-1", history.Commit, "f1").
		relay("relay-a", "e1").relay("relay-b", "e1"). // unexplained duplicate
		consume("consumer-1", "e1", "f1", "x1").h()
	rep := Check(h, State{Effects: map[string]int{"e1": 2, "f1": 1, "x1": 1}}, Config{})
	c := rep.Counts
	if c.Lost != 2 || c.Phantom != 1 || c.Unexpected != 1 || c.DuplicateEffects != 1 || c.UnexplainedDuplicates != 1 {
		t.Errorf("lost/phantom/unexpected/dup effects/unexplained = %d/%d/%d/%d/%d, want 2/1/1/1/1",
			c.Lost, c.Phantom, c.Unexpected, c.DuplicateEffects, c.UnexplainedDuplicates)
	}
	if c.Committed != 3 || c.RolledBack != 1 || c.Delivered != 3 {
		t.Errorf("committed/rolled back/delivered = %d/%d/%d, want 3/1/3", c.Committed, c.RolledBack, c.Delivered)
	}
	if rep.Valid {
		t.Error("Valid report for a run with violations")
	}
}

func TestCheckCountsLostLeases(t *testing.T) {
	h := build().commit("producer-1", "e1", "e2").claim("relay-a", "e1", "e2").publish("relay-a", "e1").
		publish("relay-a", "e2").fault("pause relay-a", history.ClassProcess, "relay-a").claim("relay-b", "e2").
		markLost("relay-a", []string{"e1", "e2"}, "e1").publish("relay-b", "e2").mark("relay-b", "e2").
		heal("pause relay-a").consume("consumer-1", "e1", "e2").h()
	rep := Check(h, State{}, Config{Features: Features{Fenced: true}})
	if !rep.Valid {
		t.Fatalf("run with a fenced lost lease failed:\n%s", rep.Summary())
	}
	if rep.Counts.LostLeases != 1 || rep.Counts.DuplicatePublishes != 1 || rep.Counts.DuplicatesBy["pause relay-a"] != 1 {
		t.Errorf("lost leases %d, duplicate publishes %d, by %v; want 1, 1, pause relay-a=1",
			rep.Counts.LostLeases, rep.Counts.DuplicatePublishes, rep.Counts.DuplicatesBy)
	}
}

func TestSummaryShowsFirstOffenders(t *testing.T) {
	b := build()
	var ids []string
	for i := range 8 {
		id := "lost-" + string(rune('a'+i))
		ids = append(ids, id)
		b.commit("producer-1", id)
	}
	rep := Check(b.h(), State{}, Config{})
	sum := rep.Summary()
	for _, id := range ids[:5] {
		if !strings.Contains(sum, id+": committed at #") {
			t.Errorf("Summary lacks %s with its reason:\n%s", id, sum)
		}
	}
	if strings.Contains(sum, ids[5]) || !strings.Contains(sum, "... and 3 more") {
		t.Errorf("Summary should show 5 offenders and elide 3:\n%s", sum)
	}
	if rep.String() != sum {
		t.Error("String differs from Summary")
	}
}

func TestCheckReadsRecordedJSONL(t *testing.T) {
	var rec history.Recorder
	for _, op := range fullRun().h() {
		op.Index = 0
		rec.Record(op)
	}
	var buf bytes.Buffer
	if err := history.WriteJSONL(&buf, rec.Ops()); err != nil {
		t.Fatal(err)
	}
	h, err := history.ReadJSONL(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if rep := Check(h, fullState(), fullConfig()); !rep.Valid {
		t.Errorf("recorded and re-read clean run failed:\n%s", rep.Summary())
	}
}

// BenchmarkCheck measures a run of 10,000 events through two relays with
// faults and crashes along the way.
func BenchmarkCheck(b *testing.B) {
	hist := build()
	st := State{Outbox: map[string]RowState{}, Effects: map[string]int{}, DBStart: t0}
	for i := range 10_000 {
		id := fmt.Sprintf("e%05d", i)
		relay := []string{"relay-a", "relay-b"}[i%2]
		hist.commit("producer-1", id).relay(relay, id).consume("consumer-1", id)
		if i%500 == 0 {
			hist.fault("broker-down", history.ClassBroker).crash(relay).restart(relay).heal("broker-down").relay(relay, id)
		}
		st.Outbox[id] = processedRow(id, t0)
		st.Effects[id] = 1
	}
	h := hist.phase(history.PhaseLiveness).h()
	st.DBNow = hist.now
	cfg := Config{Features: Features{Stages: true, Parks: true, Fenced: true, Sweeps: true}}
	b.ResetTimer()
	for b.Loop() {
		if rep := Check(h, st, cfg); !rep.Valid {
			b.Fatalf("benchmark run failed:\n%s", rep.Summary())
		}
	}
}
