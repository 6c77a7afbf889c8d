package checker

import (
	"fmt"

	"github.com/outboxlab/outboxlab/history"
)

// Lost finds events that committed and never arrived. An event must arrive
// when its commit completed ok, or when its commit's outcome is unknown but
// the event showed up (its row exists, a relay claimed or published it):
// such a "recovered" event committed after all. It arrived when a consumer
// applied it (an Apply ok, a duplicate-absorbed one included, or an effect
// in State.Effects; with Config.BrokerOnly, also a Publish ok, a Deliver or
// a message still queued). A poison event is accounted for instead when it
// ended parked or reached a consumer (a Deliver record) whatever became of
// it there, or, of a relay that does not declare Features.Parks (it
// retries poison for ever), when its row is still pending in the outbox
// at the end; Parking judges how it got there. Events of definitely failed or
// unknown, unseen commits are never lost.
func Lost(h []history.Op, s State, cfg Config) Result { return analyze(h, s, cfg).lost() }

func (a *analysis) lost() Result {
	v := a.verdict(NameLost)
	must := 0
	for _, id := range a.ids {
		e := a.events[id]
		if !e.proven() {
			continue
		}
		if a.undoneByFailover(e) {
			// The database lost its commit: Failover judges it.
			v.counts["undone_by_failover"]++
			continue
		}
		must++
		if e.delivered(a.cfg.BrokerOnly) {
			continue
		}
		if e.poison && (e.parked() || len(e.deliverOK) > 0) {
			continue
		}
		if e.poison && !a.cfg.Features.Parks && e.row != nil && e.row.ProcessedAt == nil && e.row.FaultedAt == nil {
			// A relay that parks nothing keeps retrying it: still in the
			// outbox, not lost.
			continue
		}
		v.offend(id, "%s, never delivered: %s", committedHow(e), e.fate())
	}
	v.counts["must_deliver"] = must
	return v.result(fmt.Sprintf("%d committed events must be delivered", must))
}

func committedHow(e *event) string {
	if e.status == committed {
		return fmt.Sprintf("committed at #%d", e.commitOK)
	}
	return "commit indeterminate but the event showed up"
}

// Phantom finds events that showed up although their transaction
// definitely did not commit: every Commit that staged them failed, and yet a
// row of theirs exists, a relay claimed, marked or published them, a
// consumer received or applied them, or they sit in a queue. A publish
// before the producer saw its COMMIT acknowledged is not phantom when the
// commit then completes ok; an event of an indeterminate commit that shows
// up is recovered, not phantom. Events never staged at all are Unexpected.
func Phantom(h []history.Op, s State, cfg Config) Result { return analyze(h, s, cfg).phantom() }

func (a *analysis) phantom() Result {
	v := a.verdict(NamePhantom)
	n := 0
	for _, id := range a.ids {
		e := a.events[id]
		if e.status == rolledBack {
			n++
		}
		if e.status == rolledBack && e.observed() {
			v.offend(id, "every commit failed (%d), yet it showed up: %s", len(e.commits), e.fate())
		}
	}
	return v.result(fmt.Sprintf("%d rolled-back events must never show up", n))
}

// Unexpected finds events that showed up without ever being staged: no
// Commit invoke names them, yet they have a row, were published, delivered,
// applied or queued. A relay or broker that invents or corrupts event ids
// fails here.
func Unexpected(h []history.Op, s State, cfg Config) Result { return analyze(h, s, cfg).unexpected() }

func (a *analysis) unexpected() Result {
	v := a.verdict(NameUnexpected)
	n := 0
	for _, id := range a.ids {
		e := a.events[id]
		if e.observed() {
			n++
		}
		if e.status == notStaged && e.observed() {
			v.offend(id, "never staged by any commit, yet it showed up: %s", e.fate())
		}
	}
	return v.result(fmt.Sprintf("%d events seen must have been staged", n))
}

// DuplicateEffects finds events whose effect was applied more than once:
// State.Effects above 1, or two Apply ok records not flagged "duplicate".
// Each is a failure: duplicates are the consumer's to absorb. One case
// is not the consumer's: after a failover to an asynchronous standby, an
// apply that began on the old primary may have been undone with the
// rest of what the standby never received (its effect and its inbox row
// together), and the redelivery applied the event again on the new
// primary. An event applied once before the primary died and once after
// it, with one effect in the final state, is noted, not failed.
func DuplicateEffects(h []history.Op, s State, cfg Config) Result {
	return analyze(h, s, cfg).duplicateEffects()
}

func (a *analysis) duplicateEffects() Result {
	v := a.verdict(NameDuplicateEffects)
	n := 0
	died := a.failoverDied()
	for _, id := range a.ids {
		e := a.events[id]
		if e.applied() {
			n++
		}
		var fresh []history.Pair
		for _, p := range e.applies {
			if p.Done != nil && p.Done.Type == history.OK && !p.Done.Duplicate {
				fresh = append(fresh, p)
			}
		}
		switch {
		case e.effects > 1:
			v.offend(id, "%d effects in the effects table", e.effects)
		case len(fresh) == 2 && died > 0 && !a.cfg.SyncReplication && e.effectsKnown && e.effects == 1 &&
			fresh[0].Invoke.Index < died && fresh[1].Invoke.Index > died:
			v.note(id, "applied with effect twice: #%d by %s began before the primary died, and the failover undid it (one effect in the new primary's effects table); #%d by %s applied it again",
				fresh[0].Done.Index, fresh[0].Done.Process, fresh[1].Done.Index, fresh[1].Done.Process)
		case len(fresh) > 1:
			v.offend(id, "applied with effect %d times (#%d by %s, then #%d by %s)",
				len(fresh), fresh[0].Done.Index, fresh[0].Done.Process, fresh[1].Done.Index, fresh[1].Done.Process)
		}
	}
	detail := fmt.Sprintf("%d applied events must have one effect each", n)
	if len(v.noted) > 0 {
		detail += fmt.Sprintf("; %d applied again after the failover undid their first apply", len(v.noted))
	}
	return v.result(detail)
}
