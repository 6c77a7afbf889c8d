package oatarget_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxlab/outboxlab/chaos"
	"github.com/outboxlab/outboxlab/history"
	"github.com/outboxlab/outboxlab/outbox"
	"github.com/outboxlab/outboxlab/target/oagudo/oaoutbox"
	"github.com/outboxlab/outboxlab/testenv/pgserver"
	"github.com/outboxlab/outboxlab/workload"
)

// optimisticDB is a schema with the library's table and a business
// table, on a real PostgreSQL.
func optimisticDB(t *testing.T) (context.Context, *pgxpool.Pool, outbox.Table) {
	t.Helper()
	srv := pgserver.StartT(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	db := srv.SchemaPoolT(t, "oa")
	table := outbox.MustParseTable("oa.orders_outbox")
	if err := oaoutbox.OptimisticSchema().Create(ctx, db, table); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(ctx, `CREATE TABLE oa.business (id uuid PRIMARY KEY, event_id uuid NOT NULL, note text)`); err != nil {
		t.Fatal(err)
	}
	return ctx, db, table
}

func pending(t *testing.T, ctx context.Context, db *pgxpool.Pool) int {
	t.Helper()
	var n int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM oa.orders_outbox`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func events(n int) []outbox.Event {
	corr := uuid.New()
	out := make([]outbox.Event, n)
	for i := range out {
		out[i] = outbox.Event{ID: uuid.New(), Type: "order.placed", Payload: json.RawMessage(`{"n":1}`),
			OccurredAt: time.Now().Add(-time.Second).UTC(), CorrelationID: &corr}
	}
	return out
}

// TestOptimisticWriterPublishesAfterCommit: the library's managed writer
// stores the events in the producer's transaction, sends its COMMIT once,
// then publishes each committed event through the producer's publish
// (its id, type, payload and correlation id intact) and deletes them on
// the producer's database link; a publish that fails leaves its event
// and the ones after it to the reader, and the ones before it are
// deleted.
func TestOptimisticWriterPublishesAfterCommit(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL")
	}
	ctx, db, table := optimisticDB(t)
	commit := oaoutbox.OptimisticSchema().Commit
	run := func(t *testing.T, evs []outbox.Event, failAt int) (published []outbox.Event, sends int) {
		t.Helper()
		tx, err := db.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		done := make(chan struct{})
		var once sync.Once
		c := outbox.Commit{Tx: tx, Table: table, Events: evs,
			Send: func(ctx context.Context) error { sends++; return tx.Commit(ctx) },
			Publish: func(ctx context.Context, e outbox.Event) error {
				mu.Lock()
				defer mu.Unlock()
				published = append(published, e)
				if len(published) == failAt {
					if failAt == 1 {
						// Nothing to delete: the writer is done.
						once.Do(func() { close(done) })
					}
					return errors.New("the broker refused")
				}
				return nil
			},
			After: func(ctx context.Context, fn func(pgx.Tx) error) error {
				defer once.Do(func() { close(done) })
				return pgx.BeginFunc(ctx, db, fn)
			}}
		if err := commit(ctx, c); err != nil {
			t.Fatal(err)
		}
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatal("the writer neither deleted nor failed a publish within 30 s")
		}
		mu.Lock()
		defer mu.Unlock()
		return published, sends
	}
	t.Run("published and deleted", func(t *testing.T) {
		evs := events(3)
		published, sends := run(t, evs, 0)
		if sends != 1 {
			t.Errorf("COMMIT sent %d times, want once", sends)
		}
		if len(published) != len(evs) {
			t.Fatalf("published %d events, want %d", len(published), len(evs))
		}
		for i, e := range published {
			if e.ID != evs[i].ID || e.Type != evs[i].Type || string(e.Payload) != string(evs[i].Payload) || *e.CorrelationID != *evs[i].CorrelationID {
				t.Errorf("published %+v, want %+v", e, evs[i])
			}
		}
		if n := pending(t, ctx, db); n != 0 {
			t.Errorf("%d rows left after the writer published them all, want 0", n)
		}
	})
	t.Run("a failed publish leaves the rest", func(t *testing.T) {
		before := pending(t, ctx, db)
		published, _ := run(t, events(3), 2)
		if len(published) != 2 {
			t.Fatalf("published %d events, want 2: the writer stops at its first failure", len(published))
		}
		if n := pending(t, ctx, db) - before; n != 2 {
			t.Errorf("%d rows pending, want 2: the one published before the failure is deleted, the failed one and the one after it are the reader's", n)
		}
	})
	t.Run("an event the writer cannot store sends no COMMIT", func(t *testing.T) {
		tx, err := db.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		sent := false
		err = commit(ctx, outbox.Commit{Tx: tx, Table: table, Events: []outbox.Event{{ID: uuid.New(), Payload: json.RawMessage(`{}`)}},
			Send: func(ctx context.Context) error { sent = true; return tx.Commit(ctx) }})
		if err == nil || sent {
			t.Errorf("an event without a type: error %v, COMMIT sent %v; want an error and no COMMIT", err, sent)
		}
	})
}

// TestProducerCommitsThroughTheWriter runs a producer of the workload over
// the optimistic schema: its transactions commit through the library's
// writer and are recorded as commits, a transaction it rolls back leaves
// nothing, and once it stopped, or without a publisher, the writer's
// publishes are refused and leave the rows to the reader, recorded as no
// publish at all.
func TestProducerCommitsThroughTheWriter(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL")
	}
	ctx, db, table := optimisticDB(t)
	rec := &history.Recorder{}
	p := &workload.Producer{Name: "producer-1", Mode: workload.Outbox, Rec: rec, Now: chaos.NewClock(0).Now, StampOccurredAt: true}
	p.Store = workload.PG{DB: db, Table: table, Business: "oa.business", Schema: oaoutbox.OptimisticSchema(), Producer: p}
	if err := p.Do(ctx, workload.Txn{Events: events(2)}); err != nil {
		t.Fatal(err)
	}
	if err := p.Do(ctx, workload.Txn{Events: events(1), Rollback: true}); !errors.Is(err, workload.ErrRolledBack) {
		t.Fatalf("a rolled-back transaction: %v, want ErrRolledBack", err)
	}
	p.Stop()
	if n := pending(t, ctx, db); n != 2 {
		t.Errorf("%d rows, want the 2 committed ones, which no publisher took", n)
	}
	var commits, publishes int
	for _, op := range rec.Ops() {
		switch {
		case op.F == history.Commit && op.Type == history.OK:
			commits++
		case op.F == history.Publish:
			publishes++
		}
	}
	if commits != 1 || publishes != 0 {
		t.Errorf("%d commits ok and %d publish records, want 1 and 0:\n%v", commits, publishes, rec.Ops())
	}
}
