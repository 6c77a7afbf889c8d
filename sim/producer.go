package sim

import (
	"context"
	"errors"

	"github.com/outboxlab/outboxlab/history"
	"github.com/outboxlab/outboxlab/outbox"
	"github.com/outboxlab/outboxlab/relay"
)

// errRolledBack is the failure a deliberate rollback records.
var errRolledBack = errors.New("rolled back by the business logic")

// job is one business transaction a producer runs.
type job struct {
	// Events is how many events the transaction stages.
	Events int
	// Rollback rolls the transaction back instead of committing.
	Rollback bool
	// Hold keeps the transaction open for this many steps before it ends.
	Hold int
}

// nextJob returns the producer's next transaction: drawn from the
// workload, or from its queue when the world is driven by hand.
func (w *world) nextJob(p *proc) (job, bool) {
	if !w.producing {
		return job{}, false
	}
	if w.driven {
		if len(p.jobs) == 0 {
			return job{}, false
		}
		j := p.jobs[0]
		p.jobs = p.jobs[1:]
		return j, true
	}
	j := job{Events: 1 + w.wrng.IntN(w.sw.TxMax), Rollback: w.wrng.Float64() < w.sw.Rollback}
	if w.wrng.Float64() < w.sw.LongTx {
		j.Hold = 1 + w.wrng.IntN(30)
	}
	return j, true
}

// producerBody runs transactions until the workload stops.
func (w *world) producerBody(p *proc) {
	for !p.dying {
		j, ok := w.nextJob(p)
		if !ok {
			if w.driven && w.producing {
				p.idle()
				continue
			}
			return
		}
		w.runJob(p, j)
	}
}

func messageOf(e outbox.Event) relay.Message {
	return relay.MessageOf(relay.Row{ID: e.ID, Type: e.Type, Payload: e.Payload, CorrelationID: e.CorrelationID})
}

// runJob runs one business transaction in the run's producer mode.
func (w *world) runJob(p *proc, j job) {
	mode := w.v.Producer
	if failed(p.enter(callBegin)) || p.dbDown() {
		return
	}
	tx := w.store.Begin()
	events := make([]string, 0, j.Events)
	msgs := make([]relay.Message, 0, j.Events)
	for range j.Events {
		if failed(p.enter(callStage)) || p.dbDown() {
			tx.Rollback()
			return
		}
		e := w.newEvent()
		if mode == Outbox {
			if err := tx.Stage(e); err != nil {
				w.err = err
				tx.Rollback()
				return
			}
		}
		events = append(events, e.ID.String())
		msgs = append(msgs, messageOf(e))
	}
	if mode == PublishThenCommit {
		for _, m := range msgs {
			c, err := p.pub.publish(m, true)
			if err != nil {
				tx.Rollback()
				return
			}
			if err := c.Wait(context.Background()); err != nil {
				tx.Rollback()
				return
			}
		}
	}
	for i := 0; i < j.Hold && w.producing && !p.dying; i++ {
		p.idle()
	}
	if !w.commit(p, tx, events, j.Rollback) {
		return
	}
	switch mode {
	case CommitThenPublish:
		for _, m := range msgs {
			c, err := p.pub.publish(m, true)
			if err != nil {
				return
			}
			if c.Wait(context.Background()) != nil {
				return
			}
		}
	case OptimisticPublish:
		for _, m := range msgs {
			c, err := p.pub.publish(m, false)
			if err != nil {
				return
			}
			c.abandon()
		}
	}
}

// commit ends a transaction and records it; it reports whether the
// transaction definitely committed and the producer knows it.
func (w *world) commit(p *proc, tx *Tx, events []string, rollback bool) bool {
	v := p.enter(callCommit)
	switch v {
	case vDead:
		tx.Rollback()
		return false
	case vCrashBefore:
		// The process died before sending COMMIT: the database rolls the
		// transaction back when the connection drops.
		h := p.invoke(history.Commit, events, "")
		tx.Rollback()
		p.complete(h, history.Fail, events, "", errCrashed)
		return false
	}
	h := p.invoke(history.Commit, events, "")
	if rollback {
		tx.Rollback()
		p.complete(h, history.Fail, events, "", errRolledBack)
		return false
	}
	if p.dbDown() {
		// The link fails around COMMIT: it may or may not have reached
		// the database, and the producer cannot tell.
		if w.frng.Float64() < w.sw.LostReply {
			w.commitRows(tx)
		} else {
			tx.Rollback()
		}
		p.complete(h, history.Info, events, "", errLinkDown)
		return false
	}
	w.commitRows(tx)
	w.events += len(events)
	if v == vCrashAfter {
		p.complete(h, history.Info, events, "", errCrashed)
		return false
	}
	p.complete(h, history.OK, events, "", nil)
	return true
}

func (w *world) commitRows(tx *Tx) {
	if err := tx.Commit(); err != nil {
		w.err = err
		return
	}
	w.progress()
}
