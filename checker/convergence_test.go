package checker

import (
	"slices"
	"strings"
	"testing"
)

// TestConvergence feeds the convergence checker the applies of two
// entities' versions, in order and out of order, with projections that
// kept the newest version and ones where an older apply overwrote it.
func TestConvergence(t *testing.T) {
	cfg := Config{Versions: map[string]EntityVersion{
		"a1": {"o1", 1}, "a2": {"o1", 2}, "a3": {"o1", 3},
		"b1": {"o2", 1}, "b2": {"o2", 2},
	}}
	// o1's version 3 is applied before version 2 (out of order); o2's in
	// order, with a duplicate of version 1 at the end.
	h := build().
		consume("consumer-1", "a1", "a3").consume("consumer-2", "a2").
		consume("consumer-1", "b1", "b2").applyDup("consumer-2", "b1").h()

	guarded := State{Projection: map[string]int{"o1": 3, "o2": 2}}
	r := Convergence(h, guarded, cfg)
	if !r.Valid || r.Skipped {
		t.Fatalf("a projection at every entity's newest version: %+v", r)
	}
	if r.Counts["out_of_order"] != 1 || r.Counts["entities"] != 2 {
		t.Errorf("counts = %v, want 1 out of order (o1's version 2), 2 entities", r.Counts)
	}

	lastWins := State{Projection: map[string]int{"o1": 2, "o2": 2}}
	r = Convergence(h, lastWins, cfg)
	if r.Valid || !slices.Equal(r.Offending, []string{"a3"}) || !strings.Contains(r.Reasons["a3"], "o1 ended at version 2") {
		t.Errorf("a projection that the late version 2 overwrote: %+v", r)
	}

	invented := State{Projection: map[string]int{"o1": 3, "o2": 2, "o9": 1}}
	if r = Convergence(h, invented, cfg); r.Valid || !slices.Contains(r.Offending, "o9") {
		t.Errorf("a projection of an entity no event updated: %+v", r)
	}

	behind := State{Projection: map[string]int{"o1": 3}}
	if r = Convergence(h, behind, cfg); r.Valid || !slices.Contains(r.Offending, "b2") {
		t.Errorf("a projection missing an entity that was applied: %+v", r)
	}

	if r = Convergence(h, State{}, cfg); !r.Skipped {
		t.Errorf("no projection: %+v, want skipped", r)
	}
	if r = Convergence(h, guarded, Config{}); !r.Skipped {
		t.Errorf("no versions: %+v, want skipped", r)
	}
	rep := Check(h, lastWins, cfg)
	if rep.Counts.OutOfOrder != 1 {
		t.Errorf("Counts.OutOfOrder = %d, want 1", rep.Counts.OutOfOrder)
	}
	if f, ok := rep.Result(NameConvergence); !ok || f.Valid {
		t.Errorf("Check's convergence result: %+v", f)
	}
}
