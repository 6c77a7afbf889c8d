package checker

import (
	"fmt"
	"maps"
	"slices"

	"github.com/outboxlab/outboxlab/history"
)

// Convergence checks what an outbox does not promise and a consumer must
// cope with: events of one entity reach the consumers in any order (no
// strict order inside one context), so a consumer that keeps an entity's
// state must end at the newest version it applied, whatever the order it
// applied them in. For a workload whose events update entities
// (Config.Versions) and consumers that keep a projection of them
// (State.Projection), every entity of which an event was applied must end
// at the highest version applied, and no entity at a version no applied
// event carries. A consumer that assumes order (the last apply wins)
// fails when an older version was applied after a newer one; one that
// guards against staleness (apply only what is newer) passes.
//
// Counts: "entities" checked, and "out_of_order", the events first
// applied after a newer version of their entity had been.
func Convergence(h []history.Op, s State, cfg Config) Result {
	return analyze(h, s, cfg).convergence()
}

func (a *analysis) convergence() Result {
	if len(a.cfg.Versions) == 0 {
		return skipped(NameConvergence, "the workload's events update no entities")
	}
	if a.state.Projection == nil {
		return skipped(NameConvergence, "no consumer keeps a projection of the entities")
	}
	v := a.verdict(NameConvergence)
	newest := map[string]EntityVersion{} // entity -> newest version applied so far
	newestID := map[string]string{}      // entity -> the event that carried it
	first := map[string]bool{}
	outOfOrder := 0
	for _, op := range a.ops {
		if op.F != history.Apply || op.Type != history.OK {
			continue
		}
		for _, id := range op.Events {
			ev, ok := a.cfg.Versions[id]
			if !ok {
				continue
			}
			if !first[id] && !op.Duplicate {
				first[id] = true
				if ev.Version < newest[ev.Entity].Version {
					outOfOrder++
				}
			}
			if ev.Version > newest[ev.Entity].Version {
				newest[ev.Entity], newestID[ev.Entity] = ev, id
			}
		}
	}
	for _, entity := range slices.Sorted(maps.Keys(newest)) {
		want, got := newest[entity].Version, a.state.Projection[entity]
		if got != want {
			v.offend(newestID[entity], "%s ended at version %d, and version %d (this event) was applied: an older version applied after it overwrote it", entity, got, want)
		}
	}
	for _, entity := range slices.Sorted(maps.Keys(a.state.Projection)) {
		if _, ok := newest[entity]; !ok {
			v.offend(entity, "%s is at version %d in the projection, and no event of it was applied", entity, a.state.Projection[entity])
		}
	}
	v.counts["entities"] = len(newest)
	v.counts["out_of_order"] = outOfOrder
	return v.result(fmt.Sprintf("%d entities, each at the newest version applied; %d events first applied after a newer version of their entity", len(newest), outOfOrder))
}
