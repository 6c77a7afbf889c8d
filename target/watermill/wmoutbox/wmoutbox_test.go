package wmoutbox_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/components/forwarder"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxlab/outboxlab/outbox"
	"github.com/outboxlab/outboxlab/target/watermill/wmoutbox"
	"github.com/outboxlab/outboxlab/target/watermill/wmrelay"
	"github.com/outboxlab/outboxlab/testenv/pgserver"
)

func TestTablesBesideEachOther(t *testing.T) {
	tb := wmoutbox.For(outbox.MustParseTable("sc_run_1.orders_outbox"))
	if got, want := tb.Offsets.String(), "sc_run_1.sc_run_1_orders_outbox_offsets"; got != want {
		t.Errorf("offsets table %s, want %s", got, want)
	}
	if tb.Topic() != "orders_outbox" {
		t.Errorf("topic %q, want the messages table's name", tb.Topic())
	}
	long := wmoutbox.For(outbox.MustParseTable("sc_commit_order_inversion_123456_99." + strings.Repeat("x", 50)))
	if long.Offsets.Schema() != long.Messages.Schema() || len(long.Offsets.Name()) > outbox.MaxIdentifierLen {
		t.Errorf("offsets table %s of a long name: want it in the same schema, at most %d bytes", long.Offsets, outbox.MaxIdentifierLen)
	}
	if !strings.Contains(tb.Rows(), "'"+wmoutbox.ConsumerGroup+"'") {
		t.Errorf("Rows does not read the offset of consumer group %s:\n%s", wmoutbox.ConsumerGroup, tb.Rows())
	}
}

// row is a row of the rows view, in the harness's columns.
type row struct {
	id                           uuid.UUID
	typ                          string
	processed, faulted, occurred *time.Time
	attempts                     int
	lockedBy                     *string
	lockedAt, lockedUntil        *time.Time
}

func readRows(t *testing.T, ctx context.Context, db *pgxpool.Pool, view string) map[uuid.UUID]row {
	t.Helper()
	rows, err := db.Query(ctx, `SELECT id, message_type, processed_at, faulted_at, attempts, occurred_at, locked_by, locked_at, locked_until FROM `+view)
	if err != nil {
		t.Fatal(err)
	}
	out := map[uuid.UUID]row{}
	var r row
	_, err = pgx.ForEachRow(rows, []any{&r.id, &r.typ, &r.processed, &r.faulted, &r.attempts, &r.occurred, &r.lockedBy, &r.lockedAt, &r.lockedUntil}, func() error {
		out[r.id] = r
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// recorder is a watermill publisher that keeps what it is given.
type recorder struct {
	mu  sync.Mutex
	got map[string]*message.Message // by UUID
	top map[string]string           // topic by UUID
}

func (r *recorder) Publish(topic string, msgs ...*message.Message) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range msgs {
		r.got[m.UUID], r.top[m.UUID] = m, topic
	}
	return nil
}

func (r *recorder) Close() error { return nil }

// TestSchemaOnPostgreSQL runs the schema against a real PostgreSQL (the
// local binaries, under -short too) and a real forwarder on its SQL
// subscriber: Migrate creates watermill's tables (twice over), Stage
// inserts envelopes inside the caller's transaction (a rolled-back one
// leaves nothing), the rows view shows each event by its id and type,
// pending, with no attempt, fault or lease, and once the forwarder's
// consumer group acked them, processed at their created_at; what the
// forwarder publishes carries the event id as its UUID, the type as its
// topic, the payload and the correlation id.
func TestSchemaOnPostgreSQL(t *testing.T) {
	srv := pgserver.StartT(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db := srv.SchemaPoolT(t, "wm")
	table := outbox.MustParseTable("wm.orders_outbox")
	s := wmoutbox.Schema()
	if err := s.Validate(); err != nil || !s.Own() {
		t.Fatalf("Schema: own %v, %v", s.Own(), err)
	}
	for range 2 {
		if err := s.Create(ctx, db, table); err != nil {
			t.Fatal(err)
		}
	}
	corr := uuid.New()
	var committed []outbox.Event
	for i, typ := range []string{"order.placed", "order.paid", "audit.oversized"} {
		e, err := outbox.NewEvent(typ, map[string]any{"order_id": "o1", "amount": i})
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			e.CorrelationID = &corr
		}
		committed = append(committed, e)
	}
	if err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		for _, e := range committed {
			if dbID, err := s.StageIn(ctx, tx, table, e); err != nil || dbID != "" {
				return fmt.Errorf("staging %s: id %q, %v (watermill's rows keep the event's id)", e.ID, dbID, err)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	rolledBack, _ := outbox.NewEvent("order.placed", map[string]any{"order_id": "o2", "amount": 1})
	tx, err := db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.StageIn(ctx, tx, table, rolledBack); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.StageIn(ctx, nil, table, outbox.Event{ID: uuid.New(), Payload: []byte(`{}`)}); err == nil {
		t.Error("Stage accepted an event without a type")
	}

	view := table.RowsView().Ident()
	if _, err := db.Exec(ctx, `CREATE VIEW `+view+` AS `+s.Rows(table)); err != nil {
		t.Fatalf("creating the rows view: %v\n%s", err, s.Rows(table))
	}
	got := readRows(t, ctx, db, view)
	if len(got) != len(committed) {
		t.Fatalf("rows view shows %d rows, want the %d committed events", len(got), len(committed))
	}
	for _, e := range committed {
		r, ok := got[e.ID]
		switch {
		case !ok:
			t.Errorf("event %s not in the rows view", e.ID)
		case r.typ != e.Type || r.processed != nil || r.faulted != nil || r.attempts != 0 || r.occurred == nil ||
			r.lockedBy != nil || r.lockedAt != nil || r.lockedUntil != nil:
			t.Errorf("event %s: row %+v, want type %s, pending, no attempt, fault or lease, occurred_at set", e.ID, r, e.Type)
		}
	}

	// The forwarder of the replica (its subscriber configuration, a
	// recording publisher instead of RabbitMQ) acks them all.
	tables := wmoutbox.For(table)
	sub, err := wsql.NewSubscriber(wsql.BeginnerFromPgx(db), wmrelay.SubscriberConfig(tables, 20*time.Millisecond), watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{got: map[string]*message.Message{}, top: map[string]string{}}
	fwd, err := forwarder.NewForwarder(sub, rec, watermill.NopLogger{}, wmrelay.ForwarderConfig(tables))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- fwd.Run(ctx) }()
	deadline := time.Now().Add(20 * time.Second)
	for {
		n := 0
		for _, r := range readRows(t, ctx, db, view) {
			if r.processed != nil {
				n++
			}
		}
		if n == len(committed) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d rows processed after 20 s", n, len(committed))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := fwd.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for id, r := range readRows(t, ctx, db, view) {
		if !r.processed.Equal(*r.occurred) {
			t.Errorf("event %s: processed_at %s, want its created_at %s", id, r.processed, r.occurred)
		}
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.got) != len(committed) {
		t.Errorf("forwarded %d messages, want %d", len(rec.got), len(committed))
	}
	for _, e := range committed {
		m, ok := rec.got[e.ID.String()]
		if !ok {
			t.Errorf("event %s not forwarded under its id", e.ID)
			continue
		}
		if rec.top[m.UUID] != e.Type {
			t.Errorf("event %s forwarded to topic %q, want its type %s", e.ID, rec.top[m.UUID], e.Type)
		}
		if !json.Valid(m.Payload) || string(m.Payload) != string(e.Payload) {
			t.Errorf("event %s forwarded with payload %s, want %s", e.ID, m.Payload, e.Payload)
		}
		want := ""
		if e.CorrelationID != nil {
			want = e.CorrelationID.String()
		}
		if got := middleware.MessageCorrelationID(m); got != want {
			t.Errorf("event %s forwarded with correlation id %q, want %q", e.ID, got, want)
		}
	}
}
