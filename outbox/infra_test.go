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
// migrations 001 and 004, and a Stage with NOTIFY commits in each and wakes a
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
		for _, want := range []string{tb.PendingIndex(), tb.ProcessedIndex(), tb.ParkedIndex()} {
			if !slices.Contains(got, want) {
				t.Errorf("%s has indexes %q, not %q", tb, got, want)
			}
		}
		if len(got) != 4 { // the primary key and the three
			t.Errorf("%s has indexes %q, want its primary key and three more", tb, got)
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

// TestMigrateOutsideATransaction is a container test (PostgreSQL): the
// table of a version before 004 (MigrateTo 3) takes 004 while a writer
// holds a row of it (a concurrent build does not wait for a lock that
// blocks writes), a leftover invalid index of 004's name (a build that
// was interrupted) is dropped and built again, and 004 on a transaction
// fails naming what it needs.
func TestMigrateOutsideATransaction(t *testing.T) {
	ctx, pool := migratePool(t)
	tb := outbox.MustParseTable(fmt.Sprintf("upgrade_%d.outbox", time.Now().UnixNano()))
	t.Cleanup(func() {
		cctx, ccancel := context.WithTimeout(context.Background(), time.Minute)
		defer ccancel()
		if err := outbox.Drop(cctx, pool, tb, true); err != nil {
			t.Errorf("dropping %s: %v", tb, err)
		}
	})
	if err := outbox.MigrateTo(ctx, pool, tb, 3); err != nil {
		t.Fatal(err)
	}
	valid := func() (exists, ok bool) {
		err := pool.QueryRow(ctx, `SELECT count(*) > 0, coalesce(bool_and(i.indisvalid), false) FROM pg_index i
			JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE n.nspname = $1 AND c.relname = $2`, tb.Schema(), tb.ParkedIndex()).Scan(&exists, &ok)
		if err != nil {
			t.Fatal(err)
		}
		return exists, ok
	}
	if exists, _ := valid(); exists {
		t.Fatalf("MigrateTo 3 built %s, which 004 adds", tb.ParkedIndex())
	}
	ev, err := outbox.NewEvent("order.placed", map[string]string{"n": "1"})
	if err != nil {
		t.Fatal(err)
	}
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return outbox.Stage(ctx, tx, tb, ev, outbox.StageOptions{}) }); err != nil {
		t.Fatal(err)
	}
	// A relay's claim holds the row in a transaction that stays open
	// while 004 runs: a plain CREATE INDEX would wait for it.
	holder, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback(ctx)
	if _, err := holder.Exec(ctx, `UPDATE `+tb.Ident()+` SET locked_by = 'relay-a' WHERE id = $1`, ev.ID); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- outbox.Migrate(ctx, pool, tb) }()
	// CREATE INDEX CONCURRENTLY waits for the transactions that began
	// before it: it cannot end while the holder is open, but it must not
	// block writes meanwhile.
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	defer wcancel()
	for {
		var waiting bool
		if err := pool.QueryRow(wctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE query LIKE 'CREATE INDEX CONCURRENTLY%' AND state = 'active')`).Scan(&waiting); err != nil {
			t.Fatalf("waiting for the concurrent build to start: %v", err)
		}
		if waiting {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("Migrate returned %v before the transaction that holds a row ended", err)
		case <-time.After(20 * time.Millisecond):
		}
	}
	ev2, err := outbox.NewEvent("order.placed", map[string]string{"n": "2"})
	if err != nil {
		t.Fatal(err)
	}
	sctx, scancel := context.WithTimeout(ctx, 5*time.Second)
	defer scancel()
	if err := pgx.BeginFunc(sctx, pool, func(tx pgx.Tx) error { return outbox.Stage(sctx, tx, tb, ev2, outbox.StageOptions{}) }); err != nil {
		t.Fatalf("staging while 004 builds its index: %v", err)
	}
	if err := holder.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	if exists, ok := valid(); !exists || !ok {
		t.Fatalf("after Migrate, %s exists=%v valid=%v", tb.ParkedIndex(), exists, ok)
	}

	// An interrupted build leaves an invalid index: mark it so, forget
	// 004, and migrate again.
	if _, err := pool.Exec(ctx, `UPDATE pg_index SET indisvalid = false WHERE indexrelid = to_regclass($1)`, pgx.Identifier{tb.Schema(), tb.ParkedIndex()}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `DELETE FROM public.outbox_migrations WHERE table_name = $1 AND version = 4`, tb.String()); err != nil {
		t.Fatal(err)
	}
	if exists, ok := valid(); !exists || ok {
		t.Fatalf("the leftover: exists=%v valid=%v, want an invalid index", exists, ok)
	}
	if err := outbox.Migrate(ctx, pool, tb); err != nil {
		t.Fatal(err)
	}
	if exists, ok := valid(); !exists || !ok {
		t.Fatalf("after migrating over an invalid leftover, exists=%v valid=%v", exists, ok)
	}

	// On a transaction, 004 cannot run.
	if _, err := pool.Exec(ctx, `DELETE FROM public.outbox_migrations WHERE table_name = $1 AND version = 4`, tb.String()); err != nil {
		t.Fatal(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	err = outbox.Migrate(ctx, tx, tb)
	if err == nil || !strings.Contains(err.Error(), "not a transaction") {
		t.Fatalf("Migrate on a transaction = %v, want an error saying 004 runs outside one", err)
	}
}

// TestMigrateManyTablesAtOnce migrates eight tables at once, as tests
// and relays on one server do: eight new ones, which take 004 in the
// transaction that creates them, and then eight that exist at version
// 3, each building 004's index CONCURRENTLY under the lock. A Migrate
// that waited for the lock inside a transaction while another built the
// index deadlocked: the build waits for every older transaction to end.
func TestMigrateManyTablesAtOnce(t *testing.T) {
	ctx, pool := migratePool(t)
	schema := fmt.Sprintf("many_%d", time.Now().UnixNano())
	t.Cleanup(func() {
		cctx, ccancel := context.WithTimeout(context.Background(), time.Minute)
		defer ccancel()
		if err := outbox.Drop(cctx, pool, outbox.MustParseTable(schema+".t0"), true); err != nil {
			t.Errorf("dropping %s: %v", schema, err)
		}
		if _, err := pool.Exec(cctx, `DELETE FROM public.outbox_migrations WHERE split_part(table_name, '.', 1) = $1`, schema); err != nil {
			t.Error(err)
		}
	})
	table := func(kind string, i int) outbox.Table {
		return outbox.MustParseTable(fmt.Sprintf("%s.%s%d", schema, kind, i))
	}
	at := func(kind string, migrate func(tb outbox.Table) error) {
		t.Helper()
		errs := make(chan error, 8)
		for i := range 8 {
			go func() { errs <- migrate(table(kind, i)) }()
		}
		for range 8 {
			if err := <-errs; err != nil {
				t.Error(err)
			}
		}
	}
	at("new", func(tb outbox.Table) error { return outbox.Migrate(ctx, pool, tb) })
	for i := range 8 {
		if err := outbox.MigrateTo(ctx, pool, table("old", i), 3); err != nil {
			t.Fatal(err)
		}
	}
	at("old", func(tb outbox.Table) error { return outbox.Migrate(ctx, pool, tb) })
	var valid int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
		JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relname LIKE '%parked_idx' AND i.indisvalid`, schema).Scan(&valid); err != nil {
		t.Fatal(err)
	}
	if valid != 16 {
		t.Errorf("%d valid indexes of the parked rows, want 16", valid)
	}
}

// migratePool returns a pool on the package's PostgreSQL, closed when the
// test ends, and a context that ends two minutes from now.
func migratePool(t *testing.T) (context.Context, *pgxpool.Pool) {
	t.Helper()
	env := shared.Get(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	pool, err := pgxpool.New(ctx, env.DirectDatabaseURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return ctx, pool
}
