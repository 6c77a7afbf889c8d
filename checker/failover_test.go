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
			if res.Valid || len(res.Offending) != 2 || !strings.Contains(res.Reasons["a"], "it was delivered") || !strings.Contains(res.Reasons["c"], "never delivered") {
				t.Errorf("synchronous standby: %+v: want a and c offending", res)
			}
			continue
		}
		if !res.Valid || res.Skipped || len(res.Noted) != 2 || len(res.Offending) != 0 {
			t.Errorf("asynchronous standby: %+v: want a and c noted, not failed", res)
		}
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
