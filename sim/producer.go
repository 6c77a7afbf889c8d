package sim

import (
	"context"
	"errors"

	"github.com/outboxlab/outboxlab/workload"

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

// runJob runs one business transaction in the run's producer mode. The
// Commit invoke is recorded when the transaction begins, naming every
// event it will stage; a transaction that ends before COMMIT (its
// producer crashed, its link was cut) completes as failed: the database
// rolls it back when the connection drops.
func (w *world) runJob(p *proc, j job) {
	mode := w.v.mode()
	v := p.enter(callBegin)
	if failed(v) {
		return
	}
	evs := make([]outbox.Event, j.Events)
	events := make([]string, j.Events)
	for i := range evs {
		evs[i] = w.newEvent()
		events[i] = evs[i].ID.String()
	}
	h := p.invoke(history.Commit, events, history.Meta{})
	abort := func(err error) {
		p.complete(h, history.Fail, events, history.Meta{}, err)
	}
	if p.dbDown() {
		abort(errLinkDown)
		return
	}
	tx := w.store.Begin()
	for _, e := range evs {
		if v := p.enter(callStage); failed(v) {
			tx.Rollback()
			abort(errCrashed)
			return
		}
		if p.dbDown() {
			tx.Rollback()
			abort(errLinkDown)
			return
		}
		if mode == workload.Outbox {
			if err := tx.Stage(e); err != nil {
				w.err = err
				tx.Rollback()
				abort(err)
				return
			}
		}
	}
	if mode == workload.PublishThenCommit {
		for _, e := range evs {
			c, err := p.pub.publish(messageOf(e), relay.DefaultPublishOptions())
			if err == nil {
				err = c.Wait(context.Background())
			}
			if err != nil {
				tx.Rollback()
				abort(err)
				return
			}
		}
	}
	for i := 0; i < j.Hold && w.producing && !p.dying; i++ {
		p.idle()
	}
	if !w.commit(p, h, tx, events, j.Rollback) {
		return
	}
	switch mode {
	case workload.CommitThenPublish:
		for _, e := range evs {
			c, err := p.pub.publish(messageOf(e), relay.DefaultPublishOptions())
			if err != nil {
				return
			}
			if c.Wait(context.Background()) != nil {
				return
			}
		}
	case workload.Optimistic:
		for _, e := range evs {
			c, err := p.pub.publish(messageOf(e), relay.PublishOptions{Mandatory: true})
			if err != nil {
				return
			}
			c.abandon()
		}
	}
}

// commit ends the transaction opened by the Commit invoke h and records
// its outcome; it reports whether the transaction definitely committed
// and the producer knows it.
func (w *world) commit(p *proc, h uint64, tx *Tx, events []string, rollback bool) bool {
	v := p.enter(callCommit)
	if failed(v) {
		// The process died before sending COMMIT: the database rolls the
		// transaction back when the connection drops.
		tx.Rollback()
		p.complete(h, history.Fail, events, history.Meta{}, errCrashed)
		return false
	}
	if rollback {
		tx.Rollback()
		p.complete(h, history.Fail, events, history.Meta{}, errRolledBack)
		return false
	}
	if p.dbDown() {
		// The link fails around COMMIT: it may or may not have reached
		// the database, and the producer cannot tell.
		if w.frng.Float64() < w.sw.LostReply {
			w.commitRows(tx)
			w.events += len(events)
		} else {
			tx.Rollback()
		}
		p.complete(h, history.Info, events, history.Meta{}, errLinkDown)
		return false
	}
	w.commitRows(tx)
	w.events += len(events)
	if v == vCrashAfter {
		p.complete(h, history.Info, events, history.Meta{}, errCrashed)
		return false
	}
	p.complete(h, history.OK, events, history.Meta{}, nil)
	return true
}

// commitRows commits tx; a transaction that staged rows notifies the
// listening relays, as outbox.Stage with Notify does.
func (w *world) commitRows(tx *Tx) {
	staged := tx.Len() > 0
	if err := tx.Commit(); err != nil {
		w.err = err
		return
	}
	w.progress()
	if staged {
		w.notify()
	}
}
