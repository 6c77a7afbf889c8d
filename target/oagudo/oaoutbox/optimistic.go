package oaoutbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"

	"github.com/jackc/pgx/v5"
	oa "github.com/oagudo/outbox"

	"github.com/outboxlab/outboxlab/outbox"
)

// OptimisticName names OptimisticSchema in reports and errors.
const OptimisticName = "oagudo-outbox-optimistic"

// OptimisticSchema is Schema with the library's optimistic publishing:
// a producer's business transaction ends in the library's managed
// Writer.Write, made with WithOptimisticPublisher and the library's
// default optimistic timeout (10 s), which stores the events in the
// transaction, commits it and then, in a goroutine of its own, publishes
// each stored message in created_at order through the producer's link to
// the broker, stopping at the first failure, and deletes the ones the
// broker confirmed in one DELETE on the producer's database link
// (outbox.Schema.Commit). The reader publishes whatever that leaves. A
// message whose scheduled_at is after the library's now when the
// goroutine starts (a producer whose clock runs ahead) is left to the
// reader.
//
// The library runs its writer over a DB of its own interface: here the
// producer's transaction is the one its BeginTx returns, its Commit
// sends the producer's COMMIT, and its statements outside a transaction
// (the DELETE) run through outbox.Commit.After. The library names its
// table without a schema; the table's schema comes first on the search
// path of each.
func OptimisticSchema() outbox.Schema {
	s := Schema()
	s.Name = OptimisticName
	s.Commit = commitOptimistically
	return s
}

// commitOptimistically is OptimisticSchema's Commit.
func commitOptimistically(ctx context.Context, c outbox.Commit) error {
	msgs := make([]*oa.Message, 0, len(c.Events))
	for _, e := range c.Events {
		m, err := Message(e)
		if err != nil {
			return fmt.Errorf("staging event %s: %w", e.ID, err)
		}
		msgs = append(msgs, m)
	}
	if _, err := searchFirst(ctx, c.Tx, c.Table); err != nil {
		return fmt.Errorf("staging in %s: %w", c.Table, err)
	}
	var opts []oa.WriterOption
	if c.Publish != nil {
		opts = append(opts, oa.WithOptimisticPublisher(eventPublisher(c.Publish)))
	}
	db := &producerDB{c: c}
	w := oa.NewWriter(oa.NewDBContextWithDB(db, oa.SQLDialectPostgres, oa.WithTableName(c.Table.Name())), opts...)
	return w.Write(ctx, func(ctx context.Context, _ oa.TxQueryer, mw oa.MessageWriter) error {
		for _, m := range msgs {
			if err := mw.Store(ctx, m); err != nil {
				return fmt.Errorf("staging event %s: %w", m.ID, err)
			}
		}
		return nil
	})
}

// eventPublisher is the library's MessagePublisher over the producer's
// publish: the message's event, as Event reads it.
type eventPublisher func(ctx context.Context, e outbox.Event) error

func (p eventPublisher) Publish(ctx context.Context, m *oa.Message) error {
	e, err := Event(m)
	if err != nil {
		return err
	}
	return p(ctx, e)
}

var _ oa.MessagePublisher = eventPublisher(nil)

// producerDB is the library's DB for one producer's transaction: BeginTx
// hands out that transaction, once; ExecContext runs a statement after
// it through outbox.Commit.After.
type producerDB struct {
	c     outbox.Commit
	mu    sync.Mutex
	begun bool
}

var errOneTx = errors.New("oaoutbox: the writer runs in the one business transaction of the producer")

func (d *producerDB) BeginTx(ctx context.Context, _ *sql.TxOptions) (oa.Tx, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.begun {
		return nil, errOneTx
	}
	d.begun = true
	return producerTx{pgxTx: pgxTx{d.c.Tx}, ctx: ctx, c: d.c}, nil
}

func (d *producerDB) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if d.c.After == nil {
		return nil, errors.New("oaoutbox: the producer runs no statement after its COMMIT")
	}
	var n int64
	err := d.c.After(ctx, func(tx pgx.Tx) error {
		if _, err := searchFirst(ctx, tx, d.c.Table); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, query, args...)
		n = tag.RowsAffected()
		return err
	})
	if err != nil {
		return nil, err
	}
	return result(n), nil
}

func (d *producerDB) QueryContext(context.Context, string, ...any) (*sql.Rows, error) {
	return nil, errQuery
}

// producerTx is the producer's transaction as the library's Tx: Commit
// sends the producer's COMMIT (outbox.Commit.Send) in the context the
// transaction began in.
type producerTx struct {
	pgxTx
	ctx context.Context
	c   outbox.Commit
}

func (t producerTx) Commit() error { return t.c.Send(t.ctx) }

func (t producerTx) Rollback() error { return t.c.Tx.Rollback(context.WithoutCancel(t.ctx)) }
