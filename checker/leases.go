package checker

import (
	"fmt"
	"slices"
	"time"

	"github.com/outboxlab/outboxlab/history"
)

// Leases checks the leases a relay's records show on the database clock,
// from the claims that carry them (a Claim ok with DBTime = locked_at and
// Until = locked_until) and the retries that carry a row's next eligible
// time (a Retry ok with DBTime and Until):
//
//   - no relay claims a row whose lease is live: a claim's locked_at must
//     not be before the locked_until that the row's previous claim or
//     retry left (a retry that left none freed the row at its own
//     time), whoever made it (unless that was a claim by the same
//     relay, which then extended its own lease; or a retry of the row whose outcome
//     is unknown came in between: it may have left another one; or the
//     database was killed in between, a fault of class db and kind kill:
//     claims commit asynchronously, and a crash may undo one already
//     acknowledged);
//   - with Features.Fenced, a relay marks a row only under its own lease:
//     a Mark ok by P naming the row carries a processed_at (DBTime)
//     before the end of the lease P's latest claim of it took, and no
//     other relay claimed the row between that claim and the mark (on
//     the database clock);
//   - with Config.Lease, a claim's recorded lease (locked_until minus
//     locked_at, both on the database clock) is the declared lease, to
//     the millisecond: a lease computed from another clock, or in
//     another unit, shows there at the first claim;
//   - with Features.Fenced, a write the relay reports fenced (Meta.Fenced
//     on a Mark ok) left the rows it names out of its ok, so the
//     lost-lease count is what the fence kept.
//
// Histories without such records (a relay that records nothing, the
// simulation, whose claims carry no database time) skip the checker.
func Leases(h []history.Op, s State, cfg Config) Result { return analyze(h, s, cfg).leases() }

// leaseEvent is a record that set a row's locked_until.
type leaseEvent struct {
	op    history.Op
	at    time.Time // the statement's database time
	until time.Time // the locked_until it left
}

func (a *analysis) leases() Result {
	v := a.verdict(NameLeases)
	claims, marks := 0, 0
	for _, id := range a.ids {
		e := a.events[id]
		var evs []leaseEvent
		for _, c := range e.claims {
			if !c.DBTime.IsZero() && !c.Until.IsZero() {
				evs = append(evs, leaseEvent{c, c.DBTime, c.Until})
			}
		}
		for _, r := range e.retries {
			switch {
			case r.DBTime.IsZero():
			case !r.Until.IsZero():
				evs = append(evs, leaseEvent{r, r.DBTime, r.Until})
			default:
				// A retry that left no next eligible time in the row (a
				// relay whose rows show a hold only while it holds one)
				// gave the row up at once.
				evs = append(evs, leaseEvent{r, r.DBTime, r.DBTime})
			}
		}
		if len(evs) == 0 {
			continue
		}
		slices.SortStableFunc(evs, func(x, y leaseEvent) int { return x.at.Compare(y.at) })
		for i, ev := range evs {
			if ev.op.F != history.Claim {
				continue
			}
			claims++
			if l := a.cfg.Lease; l > 0 {
				v.counts["claim_leases_checked"]++
				if d := ev.until.Sub(ev.at) - l; d > leaseSlack || d < -leaseSlack {
					v.offend(id, "claimed by %s at #%d at %s for %s on the database clock (until %s); the relay declares a lease of %s",
						ev.op.Process, ev.op.Index, fmtDB(ev.at), ev.until.Sub(ev.at), fmtDB(ev.until), l)
				}
			}
			if i == 0 {
				continue
			}
			prev := evs[i-1]
			if slices.ContainsFunc(e.retryUnknown, func(at int64) bool { return at > prev.op.Index && at < ev.op.Index }) {
				// A retry whose outcome is unknown may have set another
				// locked_until in between.
				v.counts["claims_unchecked"]++
				continue
			}
			if ev.at.Before(prev.until) && prev.op.F == history.Claim && prev.op.Process == ev.op.Process {
				// The relay that holds the lease took the row again: it
				// extended its own lease, which no other relay held.
				v.counts["extensions"]++
				continue
			}
			if ev.at.Before(prev.until) && a.dbKilledBetween(prev.op.Index, ev.op.Index) {
				// Claims commit asynchronously (relay.PGStore): a database
				// killed after the earlier claim was acknowledged may have
				// undone it, and freed the row for this one.
				v.counts["claims_after_db_kill"]++
				continue
			}
			if ev.at.Before(prev.until) {
				v.offend(id, "claimed by %s at #%d at %s while the lease %s left at #%d ran until %s (%s early)",
					ev.op.Process, ev.op.Index, fmtDB(ev.at), prev.op.Process, prev.op.Index, fmtDB(prev.until), prev.until.Sub(ev.at))
			}
		}
		if !a.cfg.Features.Fenced {
			continue
		}
		for _, m := range e.marks {
			if m.DBTime.IsZero() {
				continue
			}
			marks++
			var own *leaseEvent
			for i := range evs {
				if evs[i].op.F == history.Claim && evs[i].op.Process == m.Process && !evs[i].at.After(m.DBTime) {
					own = &evs[i]
				}
			}
			if own == nil {
				v.offend(id, "marked by %s at #%d at %s without a claim of its own before it on the database clock", m.Process, m.Index, fmtDB(m.DBTime))
				continue
			}
			if !m.DBTime.Before(own.until) {
				v.offend(id, "marked by %s at #%d at %s, after the lease of its claim #%d ended at %s",
					m.Process, m.Index, fmtDB(m.DBTime), own.op.Index, fmtDB(own.until))
				continue
			}
			for _, ev := range evs {
				if ev.op.F == history.Claim && ev.op.Process != m.Process && ev.at.After(own.at) && ev.at.Before(m.DBTime) {
					v.offend(id, "marked by %s at #%d at %s, after %s claimed it at #%d at %s",
						m.Process, m.Index, fmtDB(m.DBTime), ev.op.Process, ev.op.Index, fmtDB(ev.at))
					break
				}
			}
		}
	}
	v.counts["claims_checked"] = claims
	v.counts["marks_checked"] = marks
	if claims == 0 && marks == 0 {
		return skipped(NameLeases, "no claim records with their lease on the database clock")
	}
	return v.result(fmt.Sprintf("%d claims against the leases before them, %d marks against their own lease, on the database clock", claims, marks))
}

// dbKilledBetween reports whether a database kill (a fault of class db
// and kind kill) may have undone what the record at index from
// acknowledged, before the record at index to: it had not taken effect
// yet at from (its start's ok comes after), and it began before to.
func (a *analysis) dbKilledBetween(from, to int64) bool {
	return slices.ContainsFunc(a.windows, func(w window) bool {
		return undoesWrites(w.fault) && w.took > from && w.start < to
	})
}

// leaseSlack is how far a claim's recorded lease may stray from the
// declared one: the database's clock has microseconds, records keep them.
const leaseSlack = time.Millisecond

func fmtDB(t time.Time) string { return t.UTC().Format("15:04:05.000000") }
