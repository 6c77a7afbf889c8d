package checker

import (
	"fmt"
	"time"

	"github.com/outboxlab/outboxlab/history"
)

// Retention checks that only processed rows leave the outbox, and only
// after Retention by the database clock.
//
// From the history, for every Sweep ok that names the rows it deleted: a
// row must have been marked processed before (a Mark ok naming it, or a
// Mark whose outcome is unknown), must not have been parked, and its
// earliest Mark ok must be at least Retention older than the sweep. The age
// is measured between the two records' "db_time=..." values; else between
// their op times when one process recorded both with no clock fault in
// between; else from State.DBStart to the sweep's db_time; else it is not
// checked (counted as "age_unchecked").
//
// From the final state, when the run stages rows (Features.Stages) and read
// the outbox: a committed event whose row is gone must not have been parked;
// when the history records relay marks, it must have been marked; without
// Features.Sweeps no row may be gone at all (with Features.Deletes, a
// row gone that was not parked is the relay's mark of it, and Lost
// judges it); and it must not be gone
// before Retention could have passed, that is State.DBNow minus the earliest
// time it can have been processed (its earliest Mark ok's db_time, else
// State.DBStart) must reach Retention.
func Retention(h []history.Op, s State, cfg Config) Result { return analyze(h, s, cfg).retention() }

func (a *analysis) retention() Result {
	v := a.verdict(NameRetention)
	finalState := a.cfg.Features.Stages && a.state.Outbox != nil
	sweeps := 0
	for _, id := range a.ids {
		e := a.events[id]
		for _, sw := range e.sweeps {
			sweeps++
			a.judgeSweep(v, e, sw)
		}
		if finalState && e.row == nil && e.proven() && !a.undoneByFailover(e) {
			v.counts["gone"]++
			a.judgeGone(v, e)
		}
	}
	v.counts["swept"] = sweeps
	if sweeps == 0 && !finalState {
		return skipped(NameRetention, "no sweep records and no final outbox state")
	}
	return v.result(fmt.Sprintf("%d rows swept by record, %d committed rows gone at the end, retention %s",
		sweeps, v.counts["gone"], a.cfg.Retention))
}

func (a *analysis) judgeSweep(v *verdict, e *event, sw history.Op) {
	if !sw.Cutoff.IsZero() && !sw.DBTime.IsZero() && sw.DBTime.Sub(sw.Cutoff) < a.cfg.Retention {
		v.offend(e.id, "swept by %s at #%d with a cutoff %s before its statement; retention is %s",
			sw.Process, sw.Index, sw.DBTime.Sub(sw.Cutoff), a.cfg.Retention)
		return
	}
	for _, p := range e.parks {
		if p.Index < sw.Index {
			v.offend(e.id, "faulted row (parked at #%d) deleted by %s's sweep at #%d", p.Index, sw.Process, sw.Index)
			return
		}
	}
	marked := false
	for _, p := range e.markTries {
		if p.Start().Index < sw.Index {
			marked = true
			break
		}
	}
	if !marked {
		v.offend(e.id, "pending row deleted by %s's sweep at #%d before any mark", sw.Process, sw.Index)
		return
	}
	var mark *history.Op
	for i := range e.marks {
		if e.marks[i].Index < sw.Index {
			mark = &e.marks[i]
			break
		}
	}
	if mark == nil {
		v.counts["age_unchecked"]++
		return
	}
	var age time.Duration
	mt, st := mark.DBTime, sw.DBTime
	mok, sok := !mt.IsZero(), !st.IsZero()
	switch {
	case mok && sok:
		age = st.Sub(mt)
	case mark.Process == sw.Process && !a.clockFaultBetween(mark.Index, sw.Index, sw.Process):
		age = sw.Time.Sub(mark.Time)
	case sok && !a.state.DBStart.IsZero():
		age = st.Sub(a.state.DBStart) // the mark came after the start
	default:
		v.counts["age_unchecked"]++
		return
	}
	if age < a.cfg.Retention {
		v.offend(e.id, "swept by %s at #%d at most %s after its mark at #%d; retention is %s",
			sw.Process, sw.Index, age, mark.Index, a.cfg.Retention)
	}
}

func (a *analysis) judgeGone(v *verdict, e *event) {
	if len(e.parks) > 0 {
		v.offend(e.id, "faulted row (parked at #%d by %s) gone from the outbox", e.parks[0].Index, e.parks[0].Process)
		return
	}
	if a.cfg.Features.Deletes {
		// Its delete was its mark: whether the event got out is Lost's.
		v.counts["deleted_on_publish"]++
		return
	}
	if !a.cfg.Features.Sweeps {
		v.offend(e.id, "row gone from the outbox, and the relay does not sweep")
		return
	}
	if a.hasMarks && len(e.markTries) == 0 {
		v.offend(e.id, "row gone from the outbox without ever being marked processed")
		return
	}
	if a.state.DBNow.IsZero() {
		v.counts["age_unchecked"]++
		return
	}
	from, what := a.state.DBStart, "the run's start"
	for _, m := range e.marks {
		if !m.DBTime.IsZero() {
			from, what = m.DBTime, fmt.Sprintf("its mark at #%d", m.Index)
			break
		}
	}
	if from.IsZero() {
		v.counts["age_unchecked"]++
		return
	}
	if age := a.state.DBNow.Sub(from); age < a.cfg.Retention {
		v.offend(e.id, "row gone from the outbox %s after %s; retention is %s", age, what, a.cfg.Retention)
	}
}
