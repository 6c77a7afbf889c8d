package checker

import (
	"fmt"
	"math"

	"github.com/outboxlab/outboxlab/history"
)

// Names under which duplicates are attributed to causes other than a named
// fault window.
const (
	// CauseCrash prefixes a Crash record's process: "crash relay-a".
	CauseCrash = "crash"
	// CauseRestart prefixes a Restart record's process: "restart relay-a".
	CauseRestart = "restart"
	// CauseRequeue is a consumer's failed Apply of the event, which
	// requeued the delivery.
	CauseRequeue = "requeue"
	// CauseUnconfirmed is a Publish of the event that was never confirmed
	// (fail, info or left open), after which the broker may hold it anyway.
	CauseUnconfirmed = "unconfirmed-publish"
)

// DuplicateDeliveries counts the events published (Publish ok) or delivered
// (Deliver record, per queue) more than once and explains each extra one. A
// duplicate at record d is explained when, between the start of its event's
// journey and d, something happened that may repeat a publish or a
// delivery:
//
//   - a fault window was open at some point (a FaultStart..FaultStop span
//     overlapping the interval), except clock faults: leases and backoff run
//     on the database clock, so a skewed process clock explains nothing;
//   - some process crashed or restarted (a Crash or Restart record);
//   - for a delivery, a consumer's Apply of the event failed (it was
//     requeued);
//   - a Publish of the event went unconfirmed (the broker may hold it).
//
// The journey starts when a relay first took the event: its first Claim ok
// or its first Publish invoke, whichever came first (a relay paused after
// its claim publishes late, after another relay claimed and published the
// event, so the pause precedes the first publish). When no relay records
// claims or publishes (a black-box relay), it starts at the event's first
// Commit invoke, or else at its first record. Each explained duplicate is attributed to the
// cause that began last before it (a fault's name, "crash <process>",
// "restart <process>", "requeue", "unconfirmed-publish") and counted in
// Result.By. Unexplained duplicates fail the run: a relay that duplicates
// with nothing to provoke it is broken even when consumers absorb it.
func DuplicateDeliveries(h []history.Op, s State, cfg Config) Result {
	return analyze(h, s, cfg).duplicateDeliveries()
}

func (a *analysis) duplicateDeliveries() Result {
	v := a.verdict(NameDuplicateDeliveries)
	v.by = map[string]int{}
	judge := func(e *event, kind string, dups []history.Op, delivery bool) {
		from := e.first
		switch {
		case e.publishInvoke >= 0 || len(e.claims) > 0:
			from = math.MaxInt64
			if e.publishInvoke >= 0 {
				from = e.publishInvoke
			}
			if len(e.claims) > 0 {
				from = min(from, e.claims[0].Index)
			}
		case e.commitInvoke >= 0:
			from = e.commitInvoke
		}
		for i, d := range dups[1:] {
			v.counts["duplicate_"+kind]++
			cause, ok := a.explain(e, from, d.Index, delivery)
			if ok {
				v.counts["explained"]++
				v.by[cause]++
				continue
			}
			v.counts["unexplained"]++
			v.offend(e.id, "%s %d times (#%d by %s, then #%d by %s); no fault, crash, requeue or unconfirmed publish between #%d and #%d",
				kind, len(dups), dups[i].Index, dups[i].Process, d.Index, d.Process, from, d.Index)
		}
	}
	for _, id := range a.ids {
		e := a.events[id]
		if len(e.publishOK) > 1 {
			judge(e, "published", e.publishOK, false)
		}
	}
	for _, g := range a.deliveriesByQueue() {
		if len(g.ops) > 1 {
			judge(a.events[g.id], "delivered", g.ops, true)
		}
	}
	if len(v.by) == 0 {
		v.by = nil
	}
	return v.result(fmt.Sprintf("%d duplicate publishes, %d duplicate deliveries, %d explained",
		v.counts["duplicate_published"], v.counts["duplicate_delivered"], v.counts["explained"]))
}

// explain finds the cause of a duplicate of e at index to, looking back to
// index from; it returns the cause that began last.
func (a *analysis) explain(e *event, from, to int64, delivery bool) (string, bool) {
	best, bestAt := "", int64(-1)
	consider := func(cause string, at int64) {
		if at > bestAt {
			best, bestAt = cause, at
		}
	}
	for _, w := range a.windows {
		if w.start <= to && w.end >= from && w.class() != history.ClassClock {
			consider(w.name, w.start)
		}
	}
	for _, c := range a.crashes {
		if c.Index < from || c.Index > to {
			continue
		}
		if c.F == history.Crash {
			consider(CauseCrash+" "+c.Process, c.Index)
		} else {
			consider(CauseRestart+" "+c.Process, c.Index)
		}
	}
	if delivery {
		for _, f := range e.applyFailed {
			if f.Index >= from && f.Index <= to {
				consider(CauseRequeue, f.Index)
			}
		}
	}
	for _, p := range e.unconfirmed {
		if at := p.Start().Index; at >= from && at <= to {
			consider(CauseUnconfirmed, at)
		}
	}
	return best, bestAt >= 0
}
