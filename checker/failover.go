package checker

import (
	"fmt"
	"slices"

	"github.com/outboxlab/outboxlab/history"
)

// KindFailover is the kind of a fault that fails the database over to a
// standby (the primary killed, the standby promoted): like a kill, it
// may undo what the primary acknowledged, and with asynchronous
// replication it may undo acknowledged commits too.
const KindFailover = "failover"

// undoesWrites reports whether a fault of class db may have undone
// writes the database acknowledged: a kill (asynchronous commits lost in
// the crash) or a failover (whatever the standby had not received).
func undoesWrites(f history.Fault) bool {
	return f.Class == history.ClassDB && (f.Kind == "kill" || f.Kind == KindFailover)
}

// failedOver reports whether the history holds a failover of the
// database that took effect.
func (a *analysis) failedOver() bool {
	return slices.ContainsFunc(a.windows, func(w window) bool {
		return w.fault.Class == history.ClassDB && w.fault.Kind == KindFailover
	})
}

// failoverDied returns the index by which a failover of the database
// had killed the old primary (its start's completion), 0 without one: an
// operation that began before it may have run on the old primary.
func (a *analysis) failoverDied() int64 {
	for _, w := range a.windows {
		if w.fault.Class == history.ClassDB && w.fault.Kind == KindFailover {
			return w.took
		}
	}
	return 0
}

// undoneByFailover reports whether e's commit was acknowledged and then
// lost by a failover: the run failed the database over, the final state
// lists the business rows that survived (State.Business), and e's is not
// among them.
func (a *analysis) undoneByFailover(e *event) bool {
	return a.state.Business != nil && e.proven() && !a.state.Business[e.id] && a.failedOver()
}

// escaped reports that the event got past the database: the broker
// confirmed its publish, or a consumer received or applied it, whatever
// became of the consumer's own writes.
func (e *event) escaped() bool {
	if len(e.publishOK) > 0 || len(e.deliverOK) > 0 {
		return true
	}
	return slices.ContainsFunc(e.applies, func(p history.Pair) bool { return p.Done != nil && p.Done.Type == history.OK })
}

// Failover finds what a failover of the database (a fault of kind
// KindFailover) undid of the producers' acknowledged commits: events
// whose commit the producer saw acknowledged and whose business row does
// not exist after the failover. Of these, an event that never got past
// the database is lost by the failover, not by the relay (Lost leaves it
// to this check), and an event that did (the broker confirmed it, a
// consumer received or applied it) is a phantom of the failover: the
// world downstream acted on a change the database no longer has.
// With Config.SyncReplication both are violations (a synchronous standby
// has every acknowledged commit); with asynchronous replication they are
// what the deployment risks, counted and listed, not failed. Skipped
// without a failover or without State.Business.
func Failover(h []history.Op, s State, cfg Config) Result { return analyze(h, s, cfg).failover() }

func (a *analysis) failover() Result {
	if !a.failedOver() {
		return skipped(NameFailover, "no failover of the database")
	}
	if a.state.Business == nil {
		return skipped(NameFailover, "the business rows were not read after the failover")
	}
	v := a.verdict(NameFailover)
	lost, phantom, survived := 0, 0, 0
	for _, id := range a.ids {
		e := a.events[id]
		if !e.proven() {
			continue
		}
		if !a.undoneByFailover(e) {
			survived++
			continue
		}
		why := fmt.Sprintf("%s, its business row is gone after the failover", committedHow(e))
		if e.escaped() {
			phantom++
			why += ", and it reached the broker: " + e.fate()
		} else {
			lost++
			why += ", never delivered"
		}
		if a.cfg.SyncReplication {
			v.offend(id, "%s", why)
		} else {
			// Asynchronous replication promises no more: listed, not
			// failed.
			v.note(id, "%s", why)
		}
	}
	v.counts["failover_lost"] = lost
	v.counts["failover_phantom"] = phantom
	v.counts["survived"] = survived
	return v.result(fmt.Sprintf("%d acknowledged commits survived the failover; %d were lost by it before they reached the broker, %d reached the broker and then were lost by it (phantoms of the failover)", survived, lost, phantom))
}
