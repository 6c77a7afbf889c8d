package outbox_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxlab/outboxlab/outbox"
	"github.com/outboxlab/outboxlab/testenv/pgserver"
)

// TestPublicOutboxIsOutbox migrates public.outbox and outbox, one table,
// on a throwaway local PostgreSQL: the table gets one pending index, not
// one per name, and a Stage with NOTIFY under either name wakes a
// listener of the other.
func TestPublicOutboxIsOutbox(t *testing.T) {
	srv := pgserver.StartT(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, err := pgxpool.New(ctx, srv.AdminURL())
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	public, bare := outbox.MustParseTable("public.outbox"), outbox.MustParseTable("outbox")
	for _, tb := range []outbox.Table{public, bare, public} {
		if err := outbox.Migrate(ctx, pool, tb); err != nil {
			t.Fatalf("migrating %s: %v", tb, err)
		}
	}
	var indexes []string
	rows, err := pool.Query(ctx, `SELECT indexname FROM pg_indexes WHERE schemaname = 'public' AND tablename = 'outbox' ORDER BY indexname`)
	if err != nil {
		t.Fatal(err)
	}
	if indexes, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		t.Fatal(err)
	}
	if want := []string{"outbox_parked_idx", "outbox_pending_idx", "outbox_pkey", "outbox_processed_idx"}; !slices.Equal(indexes, want) {
		t.Errorf("indexes of public.outbox migrated under both names: %v, want %v", indexes, want)
	}

	for _, tc := range []struct{ stage, listen outbox.Table }{{public, bare}, {bare, public}} {
		conn, err := pgx.Connect(ctx, srv.AdminURL())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{tc.listen.Channel()}.Sanitize()); err != nil {
			t.Fatal(err)
		}
		e, err := outbox.NewEvent("order.placed", map[string]int{"n": 1})
		if err != nil {
			t.Fatal(err)
		}
		err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			return outbox.Stage(ctx, tx, tc.stage, e, outbox.StageOptions{Notify: true})
		})
		if err != nil {
			t.Fatalf("staging into %s: %v", tc.stage, err)
		}
		wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
		n, err := conn.WaitForNotification(wctx)
		wcancel()
		if err != nil {
			t.Errorf("a Stage into %s did not wake a listener of %s within 10s: %v", tc.stage, tc.listen, err)
		} else if n.Channel != tc.listen.Channel() {
			t.Errorf("notified on %s, want %s", n.Channel, tc.listen.Channel())
		}
		_ = conn.Close(ctx)
	}
}
