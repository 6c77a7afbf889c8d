package sim

import (
	"context"
	"fmt"
	"time"

	"github.com/outboxlab/outboxlab/workload"

	"github.com/outboxlab/outboxlab/history"
	"github.com/outboxlab/outboxlab/outbox"
	"github.com/outboxlab/outboxlab/relay"
)

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

// runJob runs one business transaction through workload.Producer, the
// producer of every tier, over the simulated store and broker: the
// transaction's calls and its publishes are this process's steps.
func (w *world) runJob(p *proc, j job) {
	evs := make([]outbox.Event, j.Events)
	for i := range evs {
		evs[i] = w.newEvent()
	}
	pr := workload.Producer{
		Name:      p.name,
		Store:     producerStore{p: p},
		Mode:      w.v.mode(),
		Publisher: producerPub{p: p},
		Rec:       producerRec{p: p},
		Now:       p.Now,
		Stamp:     p.w.clock.Now,
		Pause:     func(_ context.Context, d time.Duration) error { p.hold(d); return nil },
	}
	hold := time.Duration(j.Hold) * (w.sw.StepTime/2 + time.Millisecond)
	_ = pr.Do(context.Background(), workload.Txn{Events: evs, Rollback: j.Rollback, Hold: hold})
}

// hold keeps the producer's transaction open for d of database time, or
// until the workload stops or the process dies.
func (p *proc) hold(d time.Duration) {
	until := p.w.clock.Now().Add(d)
	for p.w.producing && !p.dying && p.w.clock.Now().Before(until) {
		p.idle()
	}
}

// producerRec records a producer's operations in the world's history,
// except while its process is torn down at the end of a run.
type producerRec struct{ p *proc }

func (r producerRec) Record(op history.Op) history.Op {
	if r.p.silent {
		return op
	}
	r.p.w.record(op)
	return op
}

// producerStore is the simulated database as a producer's workload.Store.
type producerStore struct{ p *proc }

// notSent is a crashed process's error for a call it never made.
var notSent = fmt.Errorf("%w: %w", errCrashed, workload.ErrNotSent)

func (s producerStore) Begin(ctx context.Context) (workload.Tx, error) {
	p := s.p
	if v := p.enter(callBegin); failed(v) {
		return nil, notSent
	}
	if p.dbDown() {
		return nil, errLinkDown
	}
	if p.db != nil {
		return s.sqlBegin(ctx)
	}
	return &producerTx{p: p, tx: p.w.store.Begin()}, nil
}

// producerTx is one business transaction on the simulated store, or on
// the SQL tier workload.PG's on the process's connection. On the fake its
// business write is implicit: the world counts the events a committed
// transaction carried.
type producerTx struct {
	p      *proc
	tx     *Tx
	sql    workload.Tx
	events int
	staged int
}

func (t *producerTx) Write(ctx context.Context, e outbox.Event, stage bool) error {
	p := t.p
	if v := p.enter(callStage); failed(v) {
		return errCrashed
	}
	if p.dbDown() {
		return errLinkDown
	}
	t.events++
	if p.db != nil {
		return t.sqlWrite(ctx, e, stage)
	}
	if stage {
		if err := t.tx.Stage(e); err != nil {
			p.w.err = err
			return err
		}
	}
	return nil
}

// Commit ends the transaction: a crash before COMMIT rolls it back; a cut
// link around COMMIT leaves it committed or not, and the producer cannot
// tell; a crash right after COMMIT commits it unseen.
func (t *producerTx) Commit(context.Context) error {
	p, w := t.p, t.p.w
	v := p.enter(callCommit)
	if failed(v) {
		t.rollback()
		return notSent
	}
	if p.dbDown() {
		if w.frng.Float64() < w.sw.LostReply {
			t.commitRows()
		} else {
			t.rollback()
		}
		return errLinkDown
	}
	t.commitRows()
	if v == vCrashAfter {
		return errCrashed
	}
	return nil
}

func (t *producerTx) Rollback(context.Context) error { t.rollback(); return nil }

func (t *producerTx) rollback() {
	if t.p.db != nil {
		t.sqlEnd(false)
		return
	}
	t.tx.Rollback()
}

// Kill is a no-op: the simulation crashes a producer at its calls.
func (t *producerTx) Kill() {}

// commitRows commits the transaction; one that staged rows notifies the
// listening relays, as outbox.Stage with Notify does.
func (t *producerTx) commitRows() {
	if t.p.db != nil {
		t.sqlEnd(true)
		return
	}
	w := t.p.w
	staged := t.tx.Len() > 0
	if err := t.tx.Commit(); err != nil {
		w.err = err
		return
	}
	w.events += t.events
	w.progress()
	if staged {
		w.notify()
	}
}

// producerPub is a producer's publisher for the unsafe dual writes: the
// process's broker channel, unrecorded (the producer records its
// publishes itself), with the default publish options.
type producerPub struct{ p *proc }

func (pp producerPub) Publish(_ context.Context, m relay.Message) (relay.Confirmation, error) {
	c, err := (&pubPort{p: pp.p, quiet: true}).publish(m, relay.DefaultPublishOptions())
	if err != nil {
		return nil, err
	}
	return c, nil
}
