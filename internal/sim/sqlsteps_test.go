package sim

import (
	"testing"

	"github.com/outboxlab/outboxlab/history"
)

// overlappingApplies counts the applies of an event invoked by one
// consumer while another consumer's apply of the same event was open
// (invoked, not yet completed).
func overlappingApplies(h []history.Op) int {
	open := map[string]map[string]bool{} // event -> processes applying it
	n := 0
	for _, op := range h {
		if op.F != history.Apply || len(op.Events) == 0 {
			continue
		}
		e := op.Events[0]
		if op.Type == history.Invoke {
			if len(open[e]) > 0 && !open[e][op.Process] {
				n++
			}
			if open[e] == nil {
				open[e] = map[string]bool{}
			}
			open[e][op.Process] = true
			continue
		}
		delete(open[e], op.Process)
	}
	return n
}

// TestSQLConsumerStatementsInterleave runs seeds of the SQL tier with two
// consumers and consumer crashes and cuts, which put one event in two
// consumers' hands: their applies must overlap in some seed, each
// statement being a step of its own, and every seed must pass. On the
// fakes an apply is one step, and no two overlap.
func TestSQLConsumerStatementsInterleave(t *testing.T) {
	s := sqlTier(t)
	tune := func(sw *Swarm) {
		sw.Consumers, sw.ConsumerWeight = 2, 4
		sw.Faults = append(sw.Faults, FaultRate{Fault: FaultKill, Rate: 0.03, MaxSteps: 20},
			FaultRate{Fault: FaultBrokerCut, Rate: 0.03, MaxSteps: 20})
	}
	overlaps, fakes := 0, 0
	for seed := uint64(1); seed <= 12; seed++ {
		res := Run(seed, Options{SQL: s, Tune: tune})
		if res.Err != nil || !res.Valid {
			t.Fatalf("seed %d failed (err %v):\n%s", seed, res.Err, res.Report.Summary())
		}
		overlaps += overlappingApplies(res.History)
		fakes += overlappingApplies(Run(seed, Options{Tune: tune}).History)
	}
	t.Logf("12 seeds: %d applies overlapped another consumer's apply of the same event on the SQL tier, %d on the fakes", overlaps, fakes)
	if overlaps == 0 {
		t.Fatal("no two consumers' applies of one event overlapped: the SQL tier ran each apply as one step")
	}
	if fakes != 0 {
		t.Fatalf("%d applies overlapped on the fakes, where an apply is one step", fakes)
	}
}

// SQLTier is sqlTier for the package's external tests.
var SQLTier = sqlTier
