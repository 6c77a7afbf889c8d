package rvoutbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"

	"github.com/outboxlab/outboxlab/outbox"
	"github.com/outboxlab/outboxlab/target/river/rvoutbox"
	"github.com/outboxlab/outboxlab/testenv/pgserver"
)

// TestSchema checks the schema without a database: it is an own schema
// of River's fixed table, and its rows view reads the table it is given
// and shows the lease end only with a rescue-after.
func TestSchema(t *testing.T) {
	s := rvoutbox.Schema()
	if err := s.Validate(); err != nil || !s.Own() || s.ReturnsID || s.Table != rvoutbox.TableName {
		t.Fatalf("Schema: own %v, returns ids %v, table %q, %v", s.Own(), s.ReturnsID, s.Table, err)
	}
	row := outbox.MustParseTable("outboxlab_observed_row")
	view := s.Rows(row)
	if !strings.Contains(view, row.Ident()) || strings.Contains(view, rvoutbox.TableName) {
		t.Errorf("the rows view does not read only the table it is given:\n%s", view)
	}
	if !strings.Contains(view, "attempted_at + interval '4000000 microseconds'") {
		t.Errorf("the rows view's lease end is not attempted_at + %s:\n%s", rvoutbox.RescueAfter, view)
	}
	if v := (rvoutbox.Options{}).Rows(row); !strings.Contains(v, "THEN NULL::timestamptz END AS locked_until") {
		t.Errorf("without a rescue-after the rows view shows a lease end:\n%s", v)
	}
	ctx := context.Background()
	wrong := outbox.MustParseTable("rv.orders_outbox")
	if _, err := s.Stage(ctx, nil, wrong, outbox.Event{ID: uuid.New(), Type: "order.placed"}); err == nil {
		t.Error("Stage accepted a table River does not use")
	}
	if err := s.Migrate(ctx, nil, wrong); err == nil {
		t.Error("Migrate accepted a table River does not use")
	}
}

// row is one row of the rows view.
type row struct {
	id                    uuid.UUID
	typ                   string
	processed, faulted    *time.Time
	attempts              int
	occurred              time.Time
	lockedBy              *string
	lockedAt, lockedUntil *time.Time
}

func readRows(ctx context.Context, t *testing.T, db *pgxpool.Pool, query string) []row {
	t.Helper()
	rows, err := db.Query(ctx, query)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []row
	for rows.Next() {
		var r row
		if err := rows.Scan(&r.id, &r.typ, &r.processed, &r.faulted, &r.attempts, &r.occurred, &r.lockedBy, &r.lockedAt, &r.lockedUntil); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// recorder is a River worker that keeps the args of every attempt it
// is given, fails the first, and holds the next until release closes.
type recorder struct {
	river.WorkerDefaults[rvoutbox.Args]
	working chan struct{}
	release chan struct{}

	mu  sync.Mutex
	got []rvoutbox.Args
}

func (r *recorder) Work(ctx context.Context, job *river.Job[rvoutbox.Args]) error {
	r.mu.Lock()
	r.got = append(r.got, job.Args)
	n := len(r.got)
	r.mu.Unlock()
	if n == 1 {
		return errors.New("the first attempt fails")
	}
	select {
	case r.working <- struct{}{}:
	default:
	}
	select {
	case <-r.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (r *recorder) attempts() []rvoutbox.Args {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]rvoutbox.Args(nil), r.got...)
}

// soon retries a failed job 10 ms later.
type soon struct{}

func (soon) NextRetry(*rivertype.JobRow) time.Time { return time.Now().Add(10 * time.Millisecond) }

// TestSchemaOnPostgreSQL migrates River into a schema twice, stages one
// rolled-back and one committed event through River's client, and
// checks the rows view: the committed event alone, pending, with its type
// and the time it was inserted; also over a relation of one row named in
// place of the table. River's own client then works the job: the
// worker gets the event's args, fails once (one attempt used up), holds
// the job while the view shows it leased by the client for RescueAfter,
// and completes it, after which the view shows it processed.
func TestSchemaOnPostgreSQL(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL")
	}
	srv := pgserver.StartT(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db := srv.SchemaPoolT(t, "rv")
	table := outbox.MustParseTable("rv." + rvoutbox.TableName)
	s := rvoutbox.Schema()
	for range 2 {
		if err := s.Create(ctx, db, table); err != nil {
			t.Fatal(err)
		}
	}
	var elsewhere []string
	r, err := db.Query(ctx, `SELECT n.nspname || '.' || c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relname LIKE 'river%' AND n.nspname <> 'rv'
UNION ALL SELECT n.nspname || '.' || t.typname FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
WHERE t.typname LIKE 'river%' AND n.nspname <> 'rv'`)
	if err == nil {
		for r.Next() {
			var name string
			if err := r.Scan(&name); err != nil {
				t.Fatal(err)
			}
			elsewhere = append(elsewhere, name)
		}
		err = r.Err()
	}
	if err != nil || len(elsewhere) > 0 {
		t.Fatalf("River's objects outside the schema: %v, %v", elsewhere, err)
	}

	corr := uuid.New()
	kept := outbox.Event{ID: uuid.New(), Type: "order.placed", Payload: json.RawMessage(`{"order_id":"o1","amount":3}`), CorrelationID: &corr}
	dropped := outbox.Event{ID: uuid.New(), Type: "order.paid", Payload: json.RawMessage(`{"order_id":"o2","amount":4}`)}
	var before, after time.Time
	for _, c := range []struct {
		e      outbox.Event
		commit bool
	}{{dropped, false}, {kept, true}} {
		tx, err := db.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		before = time.Now().Truncate(time.Microsecond)
		if id, err := s.Stage(ctx, tx, table, c.e); err != nil || id != "" {
			t.Fatalf("Stage = %q, %v", id, err)
		}
		after = time.Now()
		if c.commit {
			err = tx.Commit(ctx)
		} else {
			err = tx.Rollback(ctx)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, query := range []string{s.Rows(table),
		`WITH outboxlab_observed_row AS (SELECT * FROM ` + table.Ident() + `) ` + s.Rows(outbox.MustParseTable("outboxlab_observed_row"))} {
		got := readRows(ctx, t, db, query)
		if len(got) != 1 || got[0].id != kept.ID || got[0].typ != kept.Type || got[0].attempts != 0 ||
			got[0].occurred.Before(before) || got[0].occurred.After(after) {
			t.Fatalf("rows = %+v, want only %s (%s, 0 attempts, occurred between %s and %s)", got, kept.ID, kept.Type, before, after)
		}
		if g := got[0]; g.processed != nil || g.faulted != nil || g.lockedBy != nil || g.lockedAt != nil || g.lockedUntil != nil {
			t.Errorf("the pending row shows processed %v, faulted %v, held by %v from %v until %v", g.processed, g.faulted, g.lockedBy, g.lockedAt, g.lockedUntil)
		}
	}

	// River's own client works the job: one failed attempt, then one held
	// while the rows view is read, then completed.
	w := &recorder{working: make(chan struct{}, 1), release: make(chan struct{})}
	workers := river.NewWorkers()
	if err := river.AddWorkerSafely(workers, w); err != nil {
		t.Fatal(err)
	}
	client, err := river.NewClient(riverpgxv5.New(db), &river.Config{
		ID:                "relay-t",
		Schema:            table.Schema(),
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 1}},
		Workers:           workers,
		FetchCooldown:     10 * time.Millisecond,
		FetchPollInterval: 50 * time.Millisecond,
		RetryPolicy:       soon{},
		Logger:            slog.New(slog.DiscardHandler),
		TestOnly:          true,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := client.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() {
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer scancel()
		if err := client.Stop(sctx); err != nil {
			t.Errorf("stopping River's client: %v", err)
		}
	}()
	select {
	case <-w.working:
	case <-time.After(10 * time.Second):
		close(w.release)
		t.Fatalf("River's client did not work the job twice within 10 s: it got %+v", w.attempts())
	}
	got := readRows(ctx, t, db, s.Rows(table))
	if len(got) != 1 {
		close(w.release)
		t.Fatalf("rows while the job runs = %+v", got)
	}
	if g := got[0]; g.attempts != 1 || g.processed != nil || g.lockedBy == nil || *g.lockedBy != "relay-t" ||
		g.lockedAt == nil || g.lockedUntil == nil || g.lockedUntil.Sub(*g.lockedAt) != rvoutbox.RescueAfter {
		t.Errorf("the running job shows %d attempts, processed %v, held by %v from %v until %v; want 1 attempt, held by relay-t for %s",
			g.attempts, g.processed, g.lockedBy, g.lockedAt, g.lockedUntil, rvoutbox.RescueAfter)
	}
	close(w.release)

	deadline := time.Now().Add(10 * time.Second)
	for got = readRows(ctx, t, db, s.Rows(table)); len(got) == 1 && got[0].processed == nil && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
		got = readRows(ctx, t, db, s.Rows(table))
	}
	if len(got) != 1 || got[0].processed == nil || got[0].faulted != nil || got[0].attempts != 1 ||
		got[0].lockedBy != nil || got[0].lockedAt != nil || got[0].lockedUntil != nil {
		t.Fatalf("rows after the job completed = %+v, want %s processed after 1 attempt, held by nobody", got, kept.ID)
	}

	args := w.attempts()
	if len(args) != 2 {
		t.Fatalf("the worker got %d attempts, want 2: %+v", len(args), args)
	}
	var want, payload any
	_ = json.Unmarshal(kept.Payload, &want)
	for _, a := range args {
		err := json.Unmarshal(a.Payload, &payload)
		if err != nil || a.EventID != kept.ID || a.Type != kept.Type || a.CorrelationID != corr.String() || !reflect.DeepEqual(payload, want) {
			t.Errorf("the worker got %+v (payload %v, %v); want %s with its type, payload and correlation id", a, payload, err, kept.ID)
		}
	}
}
