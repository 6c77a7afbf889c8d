package checker

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

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

// CauseLeaseExpired names a duplicate whose row was claimed again after
// the lease of an earlier claim had run out on the database clock, with
// no mark of it in between.
const CauseLeaseExpired = "lease-expired"

// CauseUnlocked names a duplicate of a relay that declares it takes no
// lock of a row (Features.Unlocked): two of its replicas published the
// row, as nothing keeps them from reading it at once.
const CauseUnlocked = "unlocked"

// CauseMarkFailed names a duplicate whose row the relay that held it
// tried to mark and could not (the mark failed, or its outcome is
// unknown): the row stayed pending and was published again.
const CauseMarkFailed = "mark-failed"

// DuplicateDeliveries counts the events published (Publish ok) or
// delivered (Deliver record, per queue) more than once and explains each
// extra one by a cause that touched that event's row or delivery. A fault
// window that merely overlapped the event's journey explains nothing by
// itself. The causes, for an extra copy at record d:
//
//   - a second publish (an extra Publish ok, or an extra delivery the
//     broker did not flag as a redelivery) is explained by:
//   - an earlier Publish of the event that was never confirmed (fail,
//     info or left open): the broker may hold it anyway
//     (CauseUnconfirmed);
//   - the relay that held the row (from its Claim ok, or its Publish
//     invoke, of the event to its Mark ok naming it, or to d when it
//     never marked it) crashed or restarted then ("crash <relay>",
//     "restart <relay>"), or a fault of any class but clock hit that relay
//     then (a pause, a kill, a cut or slow link: the fault's name);
//   - the database was killed (a fault of class db and kind kill) after
//     a claim or mark of the row was acknowledged and before the row was
//     claimed again: asynchronous commits may be undone (the fault's
//     name);
//   - the row was claimed again after an earlier claim's lease had run
//     out on the database clock (Claim ok DBTime >= the earlier Until)
//     with no mark of it in between (CauseLeaseExpired);
//   - for a relay that takes no lock of a row (Features.Unlocked), the
//     row was published by two relay processes, at any point of the
//     history (CauseUnlocked); a replica that publishes one row twice
//     is not explained by it;
//   - a redelivery (Deliver with Redelivered) is explained by a failed
//     Apply of the event (CauseRequeue), or by a crash, restart or fault
//     (not clock) of a consumer that had an earlier delivery of it,
//     between that delivery and d; failing those, as a second publish:
//     the broker pushes copies to a consumer's prefetch before the
//     consumer takes them, and flags a copy redelivered when that
//     channel closes, so the copy of a second publish may arrive flagged.
//
// When no relay recorded anything of the event (a black-box relay that
// writes no records), a second publish is explained by the evidence that
// remains: a fault (not clock) that hit a relay (one of Config.Relays, a
// process that recorded relay operations, or every process for a fault
// without targets) while the event was in flight, between its first
// Commit invoke and d; failing that, for a relay that takes no lock of a
// row (Features.Unlocked) run as two replicas or more, CauseUnlocked.
// Such duplicates are counted as "explained_without_records".
//
// Each explained duplicate is attributed to the cause that began last
// before it (an expired lease only when nothing else explains it: it is
// the consequence of what kept the holder from marking), counted in
// Result.By. Unexplained duplicates fail the run: a
// relay that duplicates with nothing to provoke it is broken even when
// consumers absorb it. They are counted in Result.Counts["unexplained"]
// and in Result.Unexplained by the fault windows their journey overlapped
// ("none" when it overlapped none), which explain nothing but say where
// to look.
func DuplicateDeliveries(h []history.Op, s State, cfg Config) Result {
	return analyze(h, s, cfg).duplicateDeliveries()
}

func (a *analysis) duplicateDeliveries() Result {
	v := a.verdict(NameDuplicateDeliveries)
	v.by = map[string]int{}
	unexplained := map[string]int{}
	relays := a.relayProcesses()
	judge := func(e *event, kind string, dups []history.Op, delivery bool) {
		for i, d := range dups[1:] {
			prev := dups[i]
			v.counts["duplicate_"+kind]++
			var (
				cause string
				ok    bool
			)
			switch {
			case delivery && d.Redelivered:
				cause, ok = a.redeliveryCause(e, d)
				if !ok && (len(e.claims) > 0 || e.publishInvoke >= 0 || len(e.publishOK) > 0) {
					// The copy may be another publish's that the broker
					// pushed ahead to a consumer's prefetch and requeued
					// when that channel closed, before the consumer took
					// it.
					cause, ok = a.republishCause(e, d.Index)
				}
			case len(e.claims) > 0 || e.publishInvoke >= 0 || len(e.publishOK) > 0:
				cause, ok = a.republishCause(e, d.Index)
			default:
				cause, ok = a.blackBoxCause(e, d.Index, relays)
				if ok {
					v.counts["explained_without_records"]++
				}
			}
			if ok {
				v.counts["explained"]++
				v.by[cause]++
				continue
			}
			v.counts["unexplained"]++
			near := a.nearFaults(e, d.Index)
			for _, n := range near {
				unexplained[n]++
			}
			what := "a second publish"
			if delivery && d.Redelivered {
				what = "a redelivery"
			}
			v.offend(e.id, "%s %d times (#%d by %s, then #%d by %s): %s with no cause that touched this row (no unconfirmed publish of it, no crash, restart or fault of a relay while it held it, no expired lease, no requeue); fault windows in its journey: %s",
				kind, len(dups), prev.Index, prev.Process, d.Index, d.Process, what, strings.Join(near, ", "))
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
	res := v.result(fmt.Sprintf("%d duplicate publishes, %d duplicate deliveries, %d explained by a cause that touched their row",
		v.counts["duplicate_published"], v.counts["duplicate_delivered"], v.counts["explained"]))
	if len(unexplained) > 0 {
		res.Unexplained = unexplained
	}
	return res
}

// consider keeps the cause that began last: the one whose effect on the
// row (at) came last, and of two at once, the fault window that opened
// last (began).
type considered struct {
	cause     string
	at, began int64
}

func (c *considered) consider(cause string, at int64) { c.considerWindow(cause, at, at) }

func (c *considered) considerWindow(cause string, at, began int64) {
	if at > c.at || (at == c.at && began > c.began) {
		c.cause, c.at, c.began = cause, at, began
	}
}

func (c *considered) found() (string, bool) { return c.cause, c.at >= 0 }

// hold is a span in which one relay held an event's row: from its claim
// (or its publish, when no claim of it is recorded) to its mark of it.
type hold struct {
	process  string
	from, to int64
}

// holds returns the spans in which relays held e's row, up to index to.
func (a *analysis) holds(e *event, to int64) []hold {
	var out []hold
	end := func(p string, from int64) int64 {
		for _, m := range e.marks {
			if m.Process == p && m.Index > from {
				return min(m.Index, to)
			}
		}
		return to
	}
	claimed := map[string]bool{}
	for _, c := range e.claims {
		if c.Index < to {
			out = append(out, hold{c.Process, c.Index, end(c.Process, c.Index)})
			claimed[c.Process] = true
		}
	}
	// A relay whose claim record was lost (it died before writing it out),
	// or that leaves none (a relay holding row locks, seen publishing at
	// the broker), held the row from its publish; but not by the last
	// publish before to when an earlier one was made: that is the second
	// publish being explained, and what happened to its publisher then
	// says nothing of why the row was published again.
	var published []*history.Op
	for _, p := range a.pairs {
		inv := p.Invoke
		if inv == nil || inv.F != history.Publish || inv.Index >= to || claimed[inv.Process] || !slices.Contains(inv.Events, e.id) {
			continue
		}
		published = append(published, inv)
	}
	slices.SortFunc(published, func(x, y *history.Op) int { return cmp.Compare(x.Index, y.Index) })
	if len(published) > 1 {
		published = published[:len(published)-1]
	}
	for _, inv := range published {
		out = append(out, hold{inv.Process, inv.Index, end(inv.Process, inv.Index)})
	}
	return out
}

// republishCause explains a second publish of e, at index to.
func (a *analysis) republishCause(e *event, to int64) (string, bool) {
	c := considered{at: -1, began: -1}
	for _, p := range e.unconfirmed {
		if at := p.Start().Index; at < to {
			c.consider(CauseUnconfirmed, at)
		}
	}
	for _, h := range a.holds(e, to) {
		for _, cr := range a.crashes {
			if cr.Process == h.process && cr.Index >= h.from && cr.Index <= h.to {
				if cr.F == history.Crash {
					c.consider(CauseCrash+" "+cr.Process, cr.Index)
				} else {
					c.consider(CauseRestart+" "+cr.Process, cr.Index)
				}
			}
		}
		for _, w := range a.windows {
			if w.class() != history.ClassClock && a.hits(w, h.process) && w.start <= h.to && w.end >= h.from {
				c.considerWindow(w.name, max(w.start, h.from), w.start)
			}
		}
	}
	// The holder's own mark of the row that did not succeed: its
	// connection to the database broke under it, say, after a restart.
	for _, p := range a.pairs {
		inv := p.Invoke
		if inv == nil || inv.F != history.Mark || inv.Index >= to || p.Outcome() == history.OK || !slices.Contains(inv.Events, e.id) {
			continue
		}
		c.consider(CauseMarkFailed+" "+inv.Process, inv.Index)
	}
	// The database was killed after a claim or mark of the row was
	// acknowledged (before the kill had taken effect: the acknowledgement
	// may come between the kill's invoke and its ok) and before the row
	// was claimed again: claims and marks
	// commit asynchronously (relay.PGStore), so the crash may have undone
	// them and freed the row.
	for _, w := range a.windows {
		if !undoesWrites(w.fault) || w.start >= to {
			continue
		}
		// An acknowledgement the kill had not yet overtaken (before its
		// start's ok), then a claim after the kill began.
		undone := func(x history.Op) bool {
			return x.Index < w.took && slices.ContainsFunc(e.claims, func(y history.Op) bool {
				return y.Index > max(x.Index, w.start) && y.Index < to
			})
		}
		if slices.ContainsFunc(e.claims, undone) || slices.ContainsFunc(e.marks, undone) {
			c.consider(w.name, w.start)
		}
	}
	if cause, ok := c.found(); ok {
		return cause, true
	}
	// A lease that ran out is the consequence of what kept its holder
	// from marking the row; it explains the duplicate only when nothing
	// recorded says what that was.
	for i, c2 := range e.claims {
		if c2.Index >= to || c2.DBTime.IsZero() {
			continue
		}
		for _, c1 := range e.claims[:i] {
			if c1.Until.IsZero() || c2.DBTime.Before(c1.Until) || a.markedBetween(e, c1.Index, c2.Index) {
				continue
			}
			c.consider(CauseLeaseExpired, c2.Index)
		}
	}
	if cause, ok := c.found(); ok || !a.cfg.Features.Unlocked {
		return cause, ok
	}
	// Nothing keeps a second replica off a row the first is publishing.
	// Every publish counts, also one recorded after to: the broker's
	// tap may stamp a publish after a consumer took its copy.
	publishers := map[string]bool{}
	for _, p := range a.pairs {
		if inv := p.Invoke; inv != nil && inv.F == history.Publish && slices.Contains(inv.Events, e.id) {
			publishers[inv.Process] = true
		}
	}
	if len(publishers) > 1 {
		return CauseUnlocked, true
	}
	return c.found()
}

// markedBetween reports a Mark ok naming e between two indexes.
func (a *analysis) markedBetween(e *event, from, to int64) bool {
	for _, m := range e.marks {
		if m.Index > from && m.Index < to {
			return true
		}
	}
	return false
}

// redeliveryCause explains a redelivery d of e: the broker had handed
// the same copy to a consumer before (any earlier delivery of e may have
// been that copy), and that consumer's apply failed, or it crashed,
// restarted or was hit by a fault before it acked.
func (a *analysis) redeliveryCause(e *event, d history.Op) (string, bool) {
	c := considered{at: -1, began: -1}
	for _, f := range e.applyFailed {
		if f.Index < d.Index {
			c.consider(CauseRequeue, f.Index)
		}
	}
	for _, q := range e.deliverOK {
		if q.Index >= d.Index {
			continue
		}
		for _, cr := range a.crashes {
			if cr.Process == q.Process && cr.Index >= q.Index && cr.Index <= d.Index {
				if cr.F == history.Crash {
					c.consider(CauseCrash+" "+cr.Process, cr.Index)
				} else {
					c.consider(CauseRestart+" "+cr.Process, cr.Index)
				}
			}
		}
		for _, w := range a.windows {
			if w.class() != history.ClassClock && a.hits(w, q.Process) && w.start <= d.Index && w.end >= q.Index {
				c.considerWindow(w.name, max(w.start, q.Index), w.start)
			}
		}
	}
	return c.found()
}

// blackBoxCause explains a second publish of an event no relay recorded
// anything of: a fault that hit a relay while the event was in flight.
func (a *analysis) blackBoxCause(e *event, to int64, relays []string) (string, bool) {
	from := e.first
	if e.commitInvoke >= 0 {
		from = e.commitInvoke
	}
	c := considered{at: -1, began: -1}
	for _, w := range a.windows {
		if w.class() == history.ClassClock || w.start > to || w.end < from {
			continue
		}
		hitsRelay := len(w.fault.Targets) == 0
		for _, r := range relays {
			hitsRelay = hitsRelay || w.fault.Hits(r)
		}
		if hitsRelay {
			c.considerWindow(w.name, max(w.start, from), w.start)
		}
	}
	if cause, ok := c.found(); ok || !a.cfg.Features.Unlocked || len(relays) < 2 {
		return cause, ok
	}
	// Unseen publishes of a relay that locks nothing: any two of its
	// replicas may have published the row.
	return CauseUnlocked, true
}

// nearFaults names the fault windows (clock faults included) open at some
// point of e's journey up to index to, or "none".
func (a *analysis) nearFaults(e *event, to int64) []string {
	from := e.first
	if e.commitInvoke >= 0 {
		from = e.commitInvoke
	}
	var out []string
	for _, w := range a.windows {
		if w.start <= to && w.end >= from && !slices.Contains(out, w.name) {
			out = append(out, w.name)
		}
	}
	if len(out) == 0 {
		return []string{"none"}
	}
	return out
}

// relayProcesses returns the run's relay processes: Config.Relays and
// every process that recorded a relay operation.
func (a *analysis) relayProcesses() []string {
	out := slices.Clone(a.cfg.Relays)
	for _, op := range a.ops {
		switch op.F {
		case history.Claim, history.Mark, history.Retry, history.Park, history.Sweep:
			if !slices.Contains(out, op.Process) {
				out = append(out, op.Process)
			}
		}
	}
	return out
}
