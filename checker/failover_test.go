package checker

import (
	"strings"
	"testing"

	"github.com/outboxlab/outboxlab/history"
)

// failoverHistory commits a, b and c; a is delivered before the
// database fails over, b is delivered after; c never is. The final state
// says which business rows survived.
func failoverHistory() []history.Op {
	f := history.Fault{Name: "database failover", Kind: KindFailover, Class: history.ClassDB}
	b := build().commit("producer-1", "a", "b", "c").relay("relay-a", "a").consume("consumer-1", "a")
	b.faults[f.Name] = f
	b.rec("nemesis", history.Info, history.FaultStart, history.Meta{Fault: &f})
	return b.heal(f.Name).relay("relay-a", "b").consume("consumer-1", "b").h()
}

func TestFailover(t *testing.T) {
	h := failoverHistory()
	// a's and c's rows are gone: the standby had not received them.
	st := State{Business: map[string]bool{"b": true}}
	for _, sync := range []bool{false, true} {
		cfg := Config{SyncReplication: sync}
		rep := Check(h, st, cfg)
		var res Result
		for _, r := range rep.Results {
			if r.Checker == NameFailover {
				res = r
			}
		}
		if rep.Counts.FailoverLost != 1 || rep.Counts.FailoverPhantom != 1 || rep.Counts.Lost != 0 {
			t.Errorf("sync %t: counts %+v: want c lost and a a phantom by the failover, none lost by the relay", sync, rep.Counts)
		}
		if sync {
			if res.Valid || len(res.Offending) != 2 || !strings.Contains(res.Reasons["a"], "it reached the broker") || !strings.Contains(res.Reasons["c"], "never delivered") {
				t.Errorf("synchronous standby: %+v: want a and c offending", res)
			}
			continue
		}
		if !res.Valid || res.Skipped || len(res.Noted) != 2 || len(res.Offending) != 0 {
			t.Errorf("asynchronous standby: %+v: want a and c noted, not failed", res)
		}
	}
	// Their rows are gone from the outbox too, with the failover: not a
	// sweep of the relay's, and no backlog left to drain.
	done := h[len(h)-1].Time
	withRows := State{Business: st.Business, Outbox: map[string]RowState{"b": {ID: "b", ProcessedAt: &done}}}
	lh := append(h, history.Op{Process: "runner", Type: history.Info, F: history.Phase, Index: int64(len(h) + 1), Time: h[len(h)-1].Time, Meta: history.Meta{Phase: "liveness"}})
	staged := Config{Features: Features{Stages: true}}
	for _, r := range []Result{Retention(lh, withRows, staged), Liveness(lh, withRows, staged)} {
		if !r.Valid {
			t.Errorf("%s after a failover: %+v", r.Checker, r)
		}
	}
	if r := Retention(lh, State{Outbox: withRows.Outbox}, staged); r.Valid {
		t.Errorf("rows gone without a failover: %+v", r)
	}
	// Without the business rows, or without a failover, nothing is judged.
	if r := Failover(h, State{}, Config{SyncReplication: true}); !r.Skipped {
		t.Errorf("no business rows read: %+v", r)
	}
	plain := build().commit("producer-1", "a").relay("relay-a", "a").consume("consumer-1", "a").h()
	if r := Failover(plain, State{Business: map[string]bool{}}, Config{SyncReplication: true}); !r.Skipped {
		t.Errorf("no failover: %+v", r)
	}
	// Without a failover, a missing business row does not excuse a loss.
	if r := Lost(build().commit("producer-1", "c").h(), State{Business: map[string]bool{}}, Config{}); r.Valid {
		t.Errorf("a commit never delivered, with no failover: %+v", r)
	}
}

// TestDuplicateEffectsAcrossAFailover: an event applied on the old
// primary during the standby's lag, then again on the new primary after
// the failover undid the first apply (with its inbox row), has one
// effect: noted with an asynchronous standby, not failed. Every other
// second apply still fails.
func TestDuplicateEffectsAcrossAFailover(t *testing.T) {
	f := history.Fault{Name: "database failover", Kind: KindFailover, Class: history.ClassDB}
	// a is applied on the old primary, which dies; the failover lost its
	// mark, so the relay publishes it again and consumer-2 applies it.
	across := func(second func(*hb) *hb) []history.Op {
		b := build().commit("producer-1", "a").relay("relay-a", "a").consume("consumer-1", "a")
		b.faults[f.Name] = f
		b.rec("nemesis", history.Invoke, history.FaultStart, history.Meta{Fault: &f})
		b.rec("nemesis", history.OK, history.FaultStart, history.Meta{Fault: &f})
		return second(b.heal(f.Name).relay("relay-a", "a")).h()
	}
	h := across(func(b *hb) *hb { return b.consume("consumer-2", "a") })
	one := State{Effects: map[string]int{"a": 1}, Business: map[string]bool{"a": true}}
	r := DuplicateEffects(h, one, Config{})
	if !r.Valid || len(r.Noted) != 1 || !strings.Contains(r.Reasons["a"], "the failover undid it") {
		t.Errorf("asynchronous standby, one effect left: %+v: want a noted, not failed", r)
	}
	bad := map[string]struct {
		h   []history.Op
		st  State
		cfg Config
	}{
		"a synchronous standby keeps every acknowledged apply": {h, one, Config{SyncReplication: true}},
		"two effects in the final state":                       {h, State{Effects: map[string]int{"a": 2}}, Config{}},
		"the effects table not read":                           {h, State{}, Config{}},
		"both applies on the new primary": {across(func(b *hb) *hb {
			return b.consume("consumer-2", "a").consume("consumer-1", "a")
		}), one, Config{}},
		"no failover, a plain database kill": {func() []history.Op {
			b := build().commit("producer-1", "a").relay("relay-a", "a").consume("consumer-1", "a").dbKill("kill")
			return b.heal("kill").relay("relay-a", "a").consume("consumer-2", "a").h()
		}(), one, Config{}},
	}
	for name, c := range bad {
		if r := DuplicateEffects(c.h, c.st, c.cfg); r.Valid || len(r.Offending) != 1 {
			t.Errorf("%s: %+v: want a offending", name, r)
		}
	}
}
