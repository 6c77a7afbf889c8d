package checker

import (
	"fmt"
	"time"

	"github.com/outboxlab/outboxlab/history"
)

// Parking checks how the relay deals with failing rows:
//
//   - a healthy (non-poison) event is never faulted: its row does not end
//     faulted and no Park ok or parking Retry ok names it; unless every
//     attempt it consumed was recorded while a fault of class history.ClassOther
//     was open (a nack storm, an unbound queue: the broker refused the
//     message, a row-level failure by the relay's rules), counted as
//     "parked_by_refusals";
//   - a broker outage consumes no attempt: no Retry ok of a healthy event is
//     recorded while a fault of class history.ClassBroker that affects the retrying
//     relay is open. A fault with Targets affects those processes only;
//     one without affects every process. Judged of a relay that parks
//     (Features.Parks) or declares an attempt limit: of one that does
//     neither, an attempt has no consequence;
//   - with Features.Parks, a healthy event's final row that shows attempts
//     the history does not explain (no Retry recorded, the relay records
//     nothing) while no fault of class other was open in the run: an
//     outage consumed attempts, seen in the rows alone;
//   - when the relay declares an attempt limit (Config.MaxAttempts), no
//     Retry ok reports more attempts than it, a Retry ok at the limit
//     parks (with Features.Parks), and no row ends faulted with more; a
//     relay that declares none is not judged by anyone's limit;
//   - with Features.Parks, every poison event that committed ends parked:
//     its row ends faulted, or (when the state has no outbox) a relay
//     recorded parking it; a poison event must not be published;
//   - with Config.Backoff, successive Retry oks of one event are spaced by
//     at least Backoff(attempts of the first). The spacing is measured on
//     the database clock when both records carry DBTime; else on the
//     recording process's clock when one process recorded both and no clock
//     fault affecting it was open between them; else it is not checked (counted as
//     "backoff_unchecked"); and a Retry ok that did not park and carries
//     both its database time and the row's next eligible time (Until) sets
//     that time exactly Backoff(attempts) later, to the millisecond: a
//     backoff longer than the declared one delays every retry, one shorter
//     retries too soon.
func Parking(h []history.Op, s State, cfg Config) Result { return analyze(h, s, cfg).parking() }

func (a *analysis) parking() Result {
	v := a.verdict(NameParking)
	maxAtt := a.cfg.MaxAttempts
	for _, id := range a.ids {
		e := a.events[id]
		if e.poison {
			v.counts["poison"]++
		}
		if e.parked() {
			v.counts["parked"]++
		}
		v.counts["retries"] += len(e.retries)

		if !e.poison {
			refused := a.refusedEachTime(e)
			if refused && e.parked() {
				v.counts["parked_by_refusals"]++
			}
			switch {
			case refused:
			case e.row != nil && e.row.FaultedAt != nil:
				v.offend(id, "healthy event parked: row faulted after %d attempts", e.row.Attempts)
			case len(e.parks) > 0:
				v.offend(id, "healthy event parked by %s at #%d", e.parks[0].Process, e.parks[0].Index)
			}
			// What the final row reveals of a relay that records nothing:
			// a healthy row's attempts come only from row-level failures,
			// and with no refusal (a fault of class other) in the run
			// there were none.
			if len(e.retries) == 0 && e.row != nil && e.row.Attempts > 0 && e.row.FaultedAt == nil &&
				a.cfg.Features.Parks && !a.anyRefusal() {
				v.counts["attempts_without_cause"]++
				v.offend(id, "healthy row ended with %d attempt(s) although nothing in the run refused it (no fault of class other): an outage consumed attempts", e.row.Attempts)
			}
			for _, r := range e.retries {
				if !a.cfg.Features.Parks && maxAtt == 0 {
					// Attempts have no consequence for a relay that
					// neither parks nor declares a limit.
					break
				}
				if w, in := a.brokerOutageAt(r.Index, r.Process); in {
					v.counts["retries_in_broker_outage"]++
					v.offend(id, "attempt consumed during broker outage %q: retry by %s at #%d (%s)", w.name, r.Process, r.Index, r.Meta)
				}
			}
		}
		for _, r := range e.retries {
			n, ok := r.Attempts, r.Attempts > 0 && maxAtt > 0
			switch {
			case ok && n > maxAtt:
				v.offend(id, "retry at #%d reports %d attempts, above the limit %d", r.Index, n, maxAtt)
			case ok && n >= maxAtt && !r.Parked && a.cfg.Features.Parks:
				v.offend(id, "retry at #%d reached the limit (%d attempts) without parking", r.Index, n)
			}
		}
		if maxAtt > 0 && e.row != nil && e.row.FaultedAt != nil && e.row.Attempts > maxAtt {
			v.offend(id, "row faulted after %d attempts, above the limit %d", e.row.Attempts, maxAtt)
		}
		if e.poison && a.cfg.Features.Parks && e.proven() {
			switch {
			case len(e.publishOK) > 0:
				v.offend(id, "poison event published by %s at #%d instead of parked", e.publishOK[0].Process, e.publishOK[0].Index)
			case a.state.Outbox != nil && e.row == nil:
				v.offend(id, "poison row gone from the outbox instead of parked")
			case a.state.Outbox != nil && e.row.FaultedAt == nil:
				v.offend(id, "poison row not parked: %s", e.fate())
			case a.state.Outbox == nil && len(e.parks) == 0:
				v.offend(id, "poison event never parked")
			}
		}
		if a.cfg.Backoff != nil {
			a.checkBackoff(v, e)
		}
	}
	return v.result(fmt.Sprintf("%d poison, %d parked, %d retries", v.counts["poison"], v.counts["parked"], v.counts["retries"]))
}

// refusedEachTime reports that every attempt a healthy event consumed was
// consumed while a fault of class history.ClassOther affecting the retrying relay
// was open: a nack storm, an unbound queue, a broker refusing messages. By
// the relay's rules those are row-level failures, so such an event may be
// parked without the relay being at fault.
func (a *analysis) refusedEachTime(e *event) bool {
	if len(e.retries) == 0 {
		return false
	}
	for _, p := range e.parks {
		if p.F == history.Park {
			return false // parked at once, as only poison is
		}
	}
	for _, r := range e.retries {
		in := false
		for _, w := range a.windows {
			if w.start <= r.Index && r.Index <= w.end && w.class() == history.ClassOther && a.hits(w, r.Process) {
				in = true
				break
			}
		}
		if !in {
			return false
		}
	}
	return true
}

// anyRefusal reports whether the run had a fault of class other (a nack
// storm, an unbound queue): the only faults that make healthy rows fail
// at the row level.
func (a *analysis) anyRefusal() bool {
	for _, w := range a.windows {
		if w.class() == history.ClassOther {
			return true
		}
	}
	return false
}

// brokerOutageAt returns a broker fault window that affects process at
// index i.
func (a *analysis) brokerOutageAt(i int64, process string) (window, bool) {
	for _, w := range a.windows {
		if w.start <= i && i <= w.end && w.class() == history.ClassBroker && a.hits(w, process) {
			return w, true
		}
	}
	return window{}, false
}

// clockFaultBetween reports a clock fault affecting process open at some
// point between two indexes.
func (a *analysis) clockFaultBetween(from, to int64, process string) bool {
	for _, w := range a.windows {
		if w.start <= to && w.end >= from && w.class() == history.ClassClock && a.hits(w, process) {
			return true
		}
	}
	return false
}

// backoffSlack is how far a recorded next eligible time may stray from
// the declared backoff: the database's clock has microseconds, records
// keep them.
const backoffSlack = time.Millisecond

func (a *analysis) checkBackoff(v *verdict, e *event) {
	for _, r := range e.retries {
		if r.Parked || r.Attempts <= 0 || r.Until.IsZero() || r.DBTime.IsZero() {
			continue
		}
		v.counts["next_eligible_checked"]++
		got, want := r.Until.Sub(r.DBTime), a.cfg.Backoff(r.Attempts)
		if d := got - want; d > backoffSlack || d < -backoffSlack {
			v.offend(e.id, "retry #%d by %s after attempt %d made the row eligible %s later; backoff is %s", r.Index, r.Process, r.Attempts, got, want)
		}
	}
	for i := 1; i < len(e.retries); i++ {
		r1, r2 := e.retries[i-1], e.retries[i]
		if r1.Parked {
			v.offend(e.id, "retried at #%d after it was parked at #%d", r2.Index, r1.Index)
			continue
		}
		n := r1.Attempts
		if n <= 0 {
			v.counts["backoff_unchecked"]++
			continue
		}
		var gap time.Duration
		t1, t2 := r1.DBTime, r2.DBTime
		switch {
		case !t1.IsZero() && !t2.IsZero():
			gap = t2.Sub(t1)
		case r1.Process == r2.Process && !a.clockFaultBetween(r1.Index, r2.Index, r1.Process):
			gap = r2.Time.Sub(r1.Time)
		default:
			v.counts["backoff_unchecked"]++
			continue
		}
		v.counts["backoff_checked"]++
		if want := a.cfg.Backoff(n); gap < want {
			v.offend(e.id, "retried %s after attempt %d (#%d, then #%d); backoff is %s", gap, n, r1.Index, r2.Index, want)
		}
	}
}
