package sim_test

import (
	"context"
	"testing"

	"github.com/outboxlab/outboxlab/workload"

	"github.com/outboxlab/outboxlab/checker"
	"github.com/outboxlab/outboxlab/mutant"
	"github.com/outboxlab/outboxlab/sim"
)

// TestProductionPasses runs the production relay and consumer over many
// seeds: every one must pass every checker.
func TestProductionPasses(t *testing.T) {
	n := 300
	if testing.Short() {
		n = 100
	}
	s := sim.RunMany(context.Background(), 1, n, sim.Options{})
	for _, f := range s.Failures {
		t.Errorf("%s\n%s", f.Header(), f.Report.Summary())
	}
	if s.Failed > 0 {
		t.Fatalf("%d of %d seeds failed", s.Failed, s.Seeds)
	}
}

// regressions are seeds that once caught a bug of the production relay,
// with what they caught. Each must pass now.
var regressions = []struct {
	seed uint64
	bug  string
}{
	{25890, "a relay paused past its lease re-claimed its own rows while their first publishes were still " +
		"awaiting confirms, published them again and counted two attempts for one nack"},
}

// TestRegressions replays the seeds of regressions.
func TestRegressions(t *testing.T) {
	for _, r := range regressions {
		res := sim.Run(r.seed, sim.Options{})
		if !res.Valid {
			t.Errorf("seed %d (%s) fails again:\n%s", r.seed, r.bug, res.Report.Summary())
		}
	}
}

// TestSwarmFaultsFire checks that every fault the swarm draws fires in some
// seed, and that faults produce the effects they exist for.
func TestSwarmFaultsFire(t *testing.T) {
	hits := map[sim.Fault]int{}
	counts := checker.Counts{}
	for seed := uint64(1); seed <= 100; seed++ {
		r := sim.Run(seed, sim.Options{})
		for f, n := range r.Hits {
			hits[f] += n
		}
		c := r.Report.Counts
		counts.DuplicateDeliveries += c.DuplicateDeliveries
		counts.LostLeases += c.LostLeases
		counts.Parked += c.Parked
		counts.Indeterminate += c.Indeterminate
		counts.RolledBack += c.RolledBack
	}
	for _, f := range sim.SwarmFaults {
		if hits[f] == 0 {
			t.Errorf("fault %s never fired in 100 seeds", f)
		}
	}
	if counts.DuplicateDeliveries == 0 || counts.LostLeases == 0 || counts.Parked == 0 || counts.Indeterminate == 0 || counts.RolledBack == 0 {
		t.Errorf("100 seeds saw no duplicates, lost leases, parked rows, indeterminate commits or rollbacks: %+v", counts)
	}
}

// TestVariantsAreCaught runs the simulation's swarm over the unsafe
// producer modes and over mutants of the catalogue, each with the faults
// that expose it: every one must fail some seed, on the checker named.
func TestVariantsAreCaught(t *testing.T) {
	lookup := func(name string) sim.Variant {
		m, ok := mutant.Lookup(name)
		if !ok {
			t.Fatalf("no mutant %q in the catalogue", name)
		}
		return m.Variant()
	}
	cases := []struct {
		v       sim.Variant
		faults  []sim.Fault
		checker string
	}{
		{lookup("mark-before-publish"), []sim.Fault{sim.FaultKill}, checker.NameLost},
		{lookup("consumer-no-dedupe"), []sim.Fault{sim.FaultKill, sim.FaultBrokerRestart}, checker.NameDuplicateEffects},
		{lookup("broker-down-consumes-attempts"), []sim.Fault{sim.FaultBrokerDown}, checker.NameParking},
		{sim.Variant{Name: "publish-then-commit", Producer: workload.PublishThenCommit}, nil, checker.NamePhantom},
		{sim.Variant{Name: "commit-then-publish", Producer: workload.CommitThenPublish}, []sim.Fault{sim.FaultKill, sim.FaultBrokerDown}, checker.NameLost},
		{sim.Variant{Name: "optimistic-publish", Producer: workload.Optimistic}, []sim.Fault{sim.FaultBrokerRestart}, checker.NameLost},
	}
	for _, c := range cases {
		t.Run(c.v.Name, func(t *testing.T) {
			opts := sim.Options{Variant: c.v, Tune: func(sw *sim.Swarm) {
				sw.Rollback = max(sw.Rollback, 0.2)
				for _, f := range c.faults {
					sw.Faults = append(sw.Faults, sim.FaultRate{Fault: f, Rate: 0.05, MaxSteps: 20})
				}
			}}
			s := sim.RunMany(context.Background(), 1, 50, opts)
			if s.Failed == 0 {
				t.Fatalf("%s passed 50 seeds", c.v.Name)
			}
			caught := false
			for _, f := range s.Failures {
				if r, ok := f.Report.Result(c.checker); ok && !r.Valid {
					caught = true
				}
			}
			if !caught {
				t.Errorf("%s failed %d seeds, but never on %s; first: %s\n%s", c.v.Name, s.Failed, c.checker,
					s.Failures[0].Header(), s.Failures[0].Report.Summary())
			}
			t.Logf("%s: %d of %d seeds failed, first %d", c.v.Name, s.Failed, s.Seeds, s.FirstFailureSeed)
		})
	}
}
