package checker

import (
	"fmt"

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
	return v.result(fmt.Sprintf("%d lease-bound writes checked against later claims", writes))
}
