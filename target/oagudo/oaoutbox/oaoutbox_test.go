package oaoutbox_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	_ "github.com/jackc/pgx/v5/stdlib"
	oa "github.com/oagudo/outbox"

	"github.com/outboxlab/outboxlab/outbox"
	"github.com/outboxlab/outboxlab/target/oagudo/oaoutbox"
	"github.com/outboxlab/outboxlab/testenv/pgserver"
)

// capture is a MessagePublisher that keeps what the library's reader
// hands it.
type capture struct {
	mu   sync.Mutex
	msgs []oa.Message
}

func (c *capture) Publish(_ context.Context, m *oa.Message) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.msgs = append(c.msgs, *m)
	return nil
}

func (c *capture) got() []oa.Message {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]oa.Message(nil), c.msgs...)
}

// TestSchemaOnPostgreSQL stages through the library's writer inside a
// pgx transaction: a rolled-back event leaves nothing, a committed one
// shows in the rows view with its type and occurred_at, the
// transaction's search path is as it was, and the library's own reader
// publishes it (id, payload, metadata) and deletes its row.
func TestSchemaOnPostgreSQL(t *testing.T) {
	srv := pgserver.StartT(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db := srv.SchemaPoolT(t, "oa")
	table := outbox.MustParseTable("oa.orders_outbox")
	s := oaoutbox.Schema()
	if err := s.Validate(); err != nil || !s.Own() {
		t.Fatalf("Schema: own %v, %v", s.Own(), err)
	}
	for range 2 {
		if err := s.Create(ctx, db, table); err != nil {
			t.Fatal(err)
		}
	}
	corr := uuid.New()
	at := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	kept := outbox.Event{ID: uuid.New(), Type: "order.placed", Payload: json.RawMessage(`{"order_id":"o1","amount":3}`), CorrelationID: &corr, OccurredAt: at}
	dropped := outbox.Event{ID: uuid.New(), Type: "order.paid", Payload: json.RawMessage(`{"order_id":"o2","amount":4}`)}
	for _, c := range []struct {
		e      outbox.Event
		commit bool
	}{{dropped, false}, {kept, true}} {
		tx, err := db.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var before, after string
		_ = tx.QueryRow(ctx, `SHOW search_path`).Scan(&before)
		if _, err := s.Stage(ctx, tx, table, c.e); err != nil {
			t.Fatal(err)
		}
		_ = tx.QueryRow(ctx, `SHOW search_path`).Scan(&after)
		if before != after {
			t.Errorf("the search path was %q before Stage and %q after", before, after)
		}
		if c.commit {
			err = tx.Commit(ctx)
		} else {
			err = tx.Rollback(ctx)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	rows, err := db.Query(ctx, s.Rows(table))
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		id       uuid.UUID
		typ      string
		attempts int
		occurred time.Time
	}
	var got []row
	for rows.Next() {
		var r row
		var processed, faulted, lockedAt, lockedUntil *time.Time
		var lockedBy *string
		if err := rows.Scan(&r.id, &r.typ, &processed, &faulted, &r.attempts, &r.occurred, &lockedBy, &lockedAt, &lockedUntil); err != nil {
			t.Fatal(err)
		}
		if processed != nil || faulted != nil || lockedBy != nil || lockedAt != nil || lockedUntil != nil {
			t.Errorf("row %s shows columns the library does not keep", r.id)
		}
		got = append(got, r)
	}
	if rows.Err() != nil {
		t.Fatal(rows.Err())
	}
	if len(got) != 1 || got[0].id != kept.ID || got[0].typ != kept.Type || got[0].attempts != 0 || !got[0].occurred.Equal(at) {
		t.Fatalf("rows = %+v, want only %s (%s, 0 attempts, occurred at %s)", got, kept.ID, kept.Type, at)
	}

	// The library's reader, on a connection whose search path finds its
	// table, publishes the row and deletes it.
	sqlDB, err := sql.Open("pgx", srv.AdminURL()+"&search_path=oa")
	if err != nil {
		t.Fatal(err)
	}
	defer sqlDB.Close()
	pub := &capture{}
	r := oa.NewReader(oa.NewDBContext(sqlDB, oa.SQLDialectPostgres, oa.WithTableName(table.Name())), pub, oa.WithInterval(50*time.Millisecond))
	r.Start()
	deadline := time.Now().Add(10 * time.Second)
	for len(pub.got()) == 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if err := r.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	msgs := pub.got()
	if len(msgs) == 0 {
		t.Fatal("the library's reader published nothing")
	}
	var meta oaoutbox.Metadata
	if err := json.Unmarshal(msgs[0].Metadata, &meta); err != nil || msgs[0].ID != kept.ID || string(msgs[0].Payload) != string(kept.Payload) ||
		meta.Type != kept.Type || meta.CorrelationID != corr.String() {
		t.Errorf("published %+v (metadata %+v, %v); want %s with its payload, type and correlation id", msgs[0], meta, err, kept.ID)
	}
	var left int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM `+table.Ident()).Scan(&left); err != nil || left != 0 {
		t.Errorf("%d rows left after the reader published, %v; the library deletes what it published", left, err)
	}
}
