package checker

import (
	"fmt"
	"time"

	"github.com/outboxlab/outboxlab/history"
)

// Fencing checks, for a relay that promises it (Features.Fenced), that a
// relay whose lease was taken over changes nothing. For every Mark ok,
// Retry ok and Park ok by relay P naming event E, P must have claimed E
// (a Claim ok naming it) before, and no other relay may have claimed E
// between P's latest claim and P's write: after relay Q's claim the row is
// locked by Q, so P's write must affect no row and must not name E. Two
// claims of one row are ordered by their records, which holds as long as
// they are separated by at least the lease.
func Fencing(h []history.Op, s State, cfg Config) Result { return analyze(h, s, cfg).fencing() }

func (a *analysis) fencing() Result {
	if !a.cfg.Features.Fenced {
		return skipped(NameFencing, "the relay does not promise fenced writes")
	}
	v := a.verdict(NameFencing)
	writes := 0
	for _, id := range a.ids {
		e := a.events[id]
		var ws []history.Op
		ws = append(ws, e.marks...)
		ws = append(ws, e.retries...)
		for _, p := range e.parks {
			if p.F == history.Park {
				ws = append(ws, p)
			}
		}
		for _, w := range ws {
			writes++
			var own *history.Op
			for i := range e.claims {
				c := &e.claims[i]
				if c.Index < w.Index && c.Process == w.Process {
					own = c
				}
			}
			if own == nil {
				v.offend(id, "%s by %s at #%d without a claim of it", w.F, w.Process, w.Index)
				continue
			}
			for _, c := range e.claims {
				if c.Process != w.Process && c.Index > own.Index && c.Index < w.Index {
					v.offend(id, "%s by %s at #%d took effect after %s claimed it at #%d (%s's claim #%d had lost its lease)",
						w.F, w.Process, w.Index, c.Process, c.Index, w.Process, own.Index)
					break
				}
			}
		}
	}
	v.counts["writes"] = writes
	leases := a.leaseLengths(v)
	return v.result(fmt.Sprintf("%d lease-bound writes checked against later claims, %d leases against the declared lease", writes, leases))
}

// leaseLengths judges what the final rows reveal of a relay's leases, also
// of one that records nothing: a row claimed once and never retried keeps
// the lease of its claim in locked_at and locked_until, both on the
// database clock, and that lease must be the one the relay declares
// (Config.Lease; within a tenth, or a second). A relay that computes its
// lease from its own clock shows its clock's offset there. It returns how
// many rows it judged.
func (a *analysis) leaseLengths(v *verdict) int {
	if a.cfg.Lease <= 0 {
		return 0
	}
	slack := max(a.cfg.Lease/10, time.Second)
	n := 0
	for _, id := range a.ids {
		e := a.events[id]
		r := e.row
		if r == nil || r.Attempts != 0 || r.LockedAt == nil || r.LockedUntil == nil {
			continue
		}
		n++
		if d := r.LockedUntil.Sub(*r.LockedAt); d < a.cfg.Lease-slack || d > a.cfg.Lease+slack {
			v.offend(id, "leased for %s by the database clock (locked_at %s, locked_until %s); the relay declares a lease of %s",
				d, r.LockedAt.UTC().Format(time.RFC3339Nano), r.LockedUntil.UTC().Format(time.RFC3339Nano), a.cfg.Lease)
		}
	}
	v.counts["leases_checked"] = n
	return n
}
