package scenarios

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxlab/outboxlab/chaos"
	"github.com/outboxlab/outboxlab/consumer"
	"github.com/outboxlab/outboxlab/history"
	"github.com/outboxlab/outboxlab/outbox"
	"github.com/outboxlab/outboxlab/workload"
)

// recordingInbox is one consumer process's inbox: consumer.PGInbox, with
// every delivery and apply recorded in the history. In a pipeline its
// effect also stages the next hop's event in the same transaction, and
// records that commit, caused by the event consumed.
type recordingInbox struct {
	r       *run
	process string
	bc      *boundedCtx
	// queue names the consumer's queue when the run has several.
	queue string
	inner consumer.Inbox
	// dialer is the consumer's own path to the broker, which a fault can
	// cut without cutting the other consumers.
	dialer *chaos.Dialer
	// applying is the time (UnixNano) the apply in hand began, 0 when
	// none is; applyEnd is when its effect's hold (Scenario.ApplyHold)
	// ends, about when it commits.
	applying, applyEnd atomic.Int64

	// staged is set by the effect during one Apply; a consumer process
	// handles one delivery at a time.
	mu     sync.Mutex
	staged *stagedCommit
}

// stagedCommit is the next hop's event staged by one Apply.
type stagedCommit struct {
	ids []string
	// failed: staging itself failed, so the transaction rolled back.
	failed bool
}

var _ consumer.Inbox = (*recordingInbox)(nil)

func (in *recordingInbox) record(op history.Op) {
	op.Process = in.process
	in.r.rec.Record(op)
}

// Apply records the delivery, applies it through PGInbox, and records the
// outcome. A failed apply is recorded as info (the commit may have gone
// through) and delayed a little before the delivery is requeued, so that
// an unreachable database does not spin the broker. Where the relay's
// outbox gives its rows ids of the database's, the delivery's id is one
// of them: the event it stands for is what the history records and the
// inbox and the effect apply.
func (in *recordingInbox) Apply(ctx context.Context, m consumer.Message) (bool, error) {
	m.ID = in.bc.ids.Event(m.ID)
	ids := []string{m.ID}
	now := time.Now()
	in.applyEnd.Store(now.Add(in.r.sc.holdFor(m.ID)).UnixNano())
	in.applying.Store(now.UnixNano())
	defer in.applying.Store(0)
	in.record(history.Op{Type: history.OK, F: history.Deliver, Events: ids,
		Meta: history.Meta{Queue: in.queue, Redelivered: m.Redelivered}})
	in.record(history.Op{Type: history.Invoke, F: history.Apply, Events: ids})
	in.mu.Lock()
	in.staged = nil
	in.mu.Unlock()

	dup, err := in.inner.Apply(ctx, m)

	in.mu.Lock()
	st := in.staged
	in.mu.Unlock()
	if st != nil {
		op := history.Op{Type: history.OK, F: history.Commit, Events: st.ids}
		if err != nil {
			op.Error = err.Error()
			var pgErr *pgconn.PgError
			if st.failed || errors.As(err, &pgErr) {
				op.Type = history.Fail
			} else {
				op.Type = history.Info
			}
		}
		in.record(op)
	}
	if err != nil {
		in.record(history.Op{Type: history.Info, F: history.Apply, Events: ids, Error: err.Error()})
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
		return false, err
	}
	in.record(history.Op{Type: history.OK, F: history.Apply, Events: ids, Meta: history.Meta{Duplicate: dup}})
	in.r.applied.Add(1)
	return dup, nil
}

// effect records the consumer's effect, projects the entity an event
// updates when the workload has entities (keeping the newest version,
// unless the consumer under test projects otherwise) and, for a hop of a
// pipeline, stages the event of the next context in the same
// transaction.
func (in *recordingInbox) effect() consumer.Effect {
	base := consumer.RecordEffect(in.bc.inbox)
	var project consumer.Effect
	if in.r.plan.Versions != nil {
		// Independent contexts feed one projection, kept under the first
		// context's name.
		name := in.bc.inbox
		if in.r.sc.Independent {
			name = in.r.contexts[0].inbox
		}
		project = consumer.ProjectNewest(name, workloadVersion)
		if cu := in.r.opts.Consumer; cu != nil && cu.Project != nil {
			project = cu.Project(name, workloadVersion)
		}
	}
	next := in.bc.next
	return func(ctx context.Context, tx pgx.Tx, m consumer.Message) error {
		if err := base(ctx, tx, m); err != nil {
			return err
		}
		if hold := in.r.sc.holdFor(m.ID); hold > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(hold):
			}
		}
		// The state is written after the work the hold stands for, as a
		// handler writes it once it knows it: the write takes the
		// entity's row lock only then, so that two applies of one entity
		// write in the order they finish.
		if project != nil {
			if err := project(ctx, tx, m); err != nil {
				return err
			}
		}
		if next == nil {
			return nil
		}
		ev := nextEvent(next, m)
		st := &stagedCommit{ids: []string{ev.ID.String()}}
		in.mu.Lock()
		in.staged = st
		in.mu.Unlock()
		in.record(history.Op{Type: history.Invoke, F: history.Commit, Events: st.ids, Meta: history.Meta{CausedBy: []string{m.ID}}})
		store := workload.PG{Table: next.table, Notify: true, Schema: in.r.relay.Outbox, IDs: next.ids}
		if _, err := store.Stage(ctx, tx, ev); err != nil {
			st.failed = true
			return err
		}
		return nil
	}
}

// workloadVersion reads the entity and version of a workload event.
func workloadVersion(m consumer.Message) (string, int, bool) {
	return workload.EntityVersion(m.Payload)
}

// nextEvent is the event a hop stages in context next on consuming m: its
// id is derived from m's, so a redelivery stages the same event.
func nextEvent(next *boundedCtx, m consumer.Message) outbox.Event {
	id := uuid.NewSHA1(uuid.NameSpaceOID, []byte(next.name+"/"+m.ID))
	return outbox.Event{ID: id, Type: m.Type, Payload: append([]byte(nil), m.Payload...)}
}
