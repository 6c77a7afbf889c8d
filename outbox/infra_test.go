package outbox_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxlab/outboxlab/outbox"
)

// TestEdgeTableNamesMigrateAndStage is a container test (PostgreSQL;
// skipped under -short): Outbox beside outbox and two 63-byte names that
// share their first 62 bytes, in one schema, each get both indexes of
// migration 001, and a Stage with NOTIFY commits in each and wakes a
// listener on that table's channel only.
func TestEdgeTableNamesMigrateAndStage(t *testing.T) {
	env := shared.Get(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pool, err := pgxpool.New(ctx, env.DirectDatabaseURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close) // after the drops below: cleanups run last first

	schema := fmt.Sprintf("names_%d", time.Now().UnixNano())
	long := strings.Repeat("n", 63)
	var tables []outbox.Table
	for _, name := range []string{"Outbox", "outbox", long, long[:62] + "m"} {
		tables = append(tables, outbox.MustParseTable(schema+"."+name))
	}
	t.Cleanup(func() {
		cctx, ccancel := context.WithTimeout(context.Background(), time.Minute)
		defer ccancel()
		for _, tb := range tables {
			if err := outbox.Drop(cctx, pool, tb, true); err != nil {
				t.Errorf("dropping %s: %v", tb, err)
			}
		}
	})
	for _, tb := range tables {
		// Twice: the second run applies nothing and breaks nothing.
		for range 2 {
			if err := outbox.Migrate(ctx, pool, tb); err != nil {
				t.Fatalf("migrating %s: %v", tb, err)
			}
		}
	}
	for _, tb := range tables {
		rows, err := pool.Query(ctx, `SELECT indexname FROM pg_indexes WHERE schemaname = $1 AND tablename = $2`, tb.Schema(), tb.Name())
		if err != nil {
			t.Fatal(err)
		}
		got, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{tb.PendingIndex(), tb.ProcessedIndex()} {
			if !slices.Contains(got, want) {
				t.Errorf("%s has indexes %q, not %q", tb, got, want)
			}
		}
		if len(got) != 3 { // the primary key and the two
			t.Errorf("%s has indexes %q, want its primary key and two more", tb, got)
		}
	}

	listener, err := pgx.Connect(ctx, env.DirectDatabaseURL())
	if err != nil {
		t.Fatal(err)
	}
	defer listener.Close(context.Background())
	for _, tb := range tables {
		if _, err := listener.Exec(ctx, "LISTEN "+pgx.Identifier{tb.Channel()}.Sanitize()); err != nil {
			t.Fatalf("LISTEN %s: %v", tb.Channel(), err)
		}
	}
	for _, tb := range tables {
		ev, err := outbox.NewEvent("order.placed", map[string]string{"table": tb.String()})
		if err != nil {
			t.Fatal(err)
		}
		err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			return outbox.Stage(ctx, tx, tb, ev, outbox.StageOptions{Notify: true})
		})
		if err != nil {
			t.Fatalf("staging in %s with NOTIFY: %v", tb, err)
		}
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+tb.Ident()+` WHERE id = $1`, ev.ID).Scan(&n); err != nil || n != 1 {
			t.Errorf("%s holds %d rows of the staged event (%v), want 1", tb, n, err)
		}
		wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
		note, err := listener.WaitForNotification(wctx)
		wcancel()
		if err != nil {
			t.Fatalf("no notification after staging in %s: %v", tb, err)
		}
		if note.Channel != tb.Channel() {
			t.Errorf("staging in %s notified %q, want %q", tb, note.Channel, tb.Channel())
		}
	}
}
