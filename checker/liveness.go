package checker

import (
	"fmt"
	"time"

	"github.com/outboxlab/outboxlab/history"
)

// Liveness checks that the backlog drains once faults are healed. From the
// first Phase record with Value "liveness" (heal done, workload stopped),
// every event that must be delivered (see Lost; poison events excepted) is
// delivered within Config.LivenessBound, or by the end of the run when the
// bound is zero. An event's delivery time is the Time of its first Apply ok
// (with BrokerOnly and no Apply, of its first Deliver, else its first
// Publish ok); the runner that records the phase and the consumers share the
// harness's clock, so these times compare. An event applied but with no
// timed record (an effect only) counts as delivered in time ("untimed").
// Counts["drain_ms"] is the time from the phase to the last first delivery.
// With Features.Stages, a delivered event whose row the final state shows
// still pending (neither processed nor faulted) fails too: the drain ended
// with a backlog, which the relay would publish again for ever.
func Liveness(h []history.Op, s State, cfg Config) Result { return analyze(h, s, cfg).liveness() }

func (a *analysis) liveness() Result {
	if a.livePhase == nil {
		return skipped(NameLiveness, "no liveness phase in the history")
	}
	v := a.verdict(NameLiveness)
	start := a.livePhase.Time
	bound := a.cfg.LivenessBound
	var drain time.Duration
	for _, id := range a.ids {
		e := a.events[id]
		if !e.proven() || e.poison || a.undoneByFailover(e) {
			// A commit a failover undid is Failover's to judge.
			continue
		}
		v.counts["checked"]++
		at, timed := a.deliveredAt(e)
		switch {
		case !e.delivered(a.cfg.BrokerOnly):
			v.offend(id, "never delivered after the liveness phase at #%d: %s", a.livePhase.Index, e.fate())
		case a.cfg.Features.Stages && e.row != nil && e.row.ProcessedAt == nil && e.row.FaultedAt == nil:
			// Delivered, but the backlog never drained: the row is still
			// pending, so it will be published again, and again.
			v.counts["still_pending"]++
			v.offend(id, "delivered, but its outbox row is still pending at the end of the run (never marked processed): the backlog did not drain")
		case !timed:
			v.counts["untimed"]++
		default:
			late := at.Sub(start)
			drain = max(drain, late)
			if bound > 0 && late > bound {
				v.offend(id, "first delivered %s after the liveness phase; bound is %s", late, bound)
			}
		}
	}
	v.counts["drain_ms"] = int(drain / time.Millisecond)
	b := "end of run"
	if bound > 0 {
		b = bound.String()
	}
	return v.result(fmt.Sprintf("drain time %s (bound %s) over %d events", drain, b, v.counts["checked"]))
}

// deliveredAt returns the time of e's first delivery record.
func (a *analysis) deliveredAt(e *event) (time.Time, bool) {
	if len(e.applyOK) > 0 {
		return e.applyOK[0].Time, true
	}
	if a.cfg.BrokerOnly {
		if len(e.deliverOK) > 0 {
			return e.deliverOK[0].Time, true
		}
		if len(e.publishOK) > 0 {
			return e.publishOK[0].Time, true
		}
	}
	return time.Time{}, false
}
