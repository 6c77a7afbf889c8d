package bench

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxlab/outboxlab/outbox"
	"github.com/outboxlab/outboxlab/testenv"
)

// shared is the environment of the package's tests and benchmarks, started
// by the first one that needs it and removed when they all end.
var shared testenv.Shared

// TestMain runs the tests and benchmarks, removes the environment and fails
// the package if a goroutine was left behind.
func TestMain(m *testing.M) {
	os.Exit(shared.Main(m))
}

// sharedEnv returns the package's environment, starting it once. It skips
// under -short and, unless OUTBOXLAB_REQUIRE_DOCKER is set, when no Docker
// engine answers.
func sharedEnv(tb testing.TB) *testenv.Env {
	tb.Helper()
	return shared.Get(tb)
}

// testDB is one test's schema with a migrated outbox table.
type testDB struct {
	pool  *pgxpool.Pool
	table outbox.Table
}

var schemaSeq struct {
	mu sync.Mutex
	n  int
}

// newTestDB creates a schema of its own for tb, migrates an outbox table
// named name in it, and drops the schema when tb ends.
func newTestDB(tb testing.TB, env *testenv.Env, name string) *testDB {
	tb.Helper()
	schemaSeq.mu.Lock()
	schemaSeq.n++
	schema := fmt.Sprintf("bench_test_%d", schemaSeq.n)
	schemaSeq.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, err := pgxpool.New(ctx, env.DirectDatabaseURL())
	if err != nil {
		tb.Fatalf("connecting: %v", err)
	}
	drop := func(ctx context.Context) error {
		if _, err := pool.Exec(ctx, `DROP SCHEMA IF EXISTS `+pgx.Identifier{schema}.Sanitize()+` CASCADE`); err != nil {
			return err
		}
		_, err := pool.Exec(ctx, `DELETE FROM public.outbox_migrations WHERE table_name LIKE $1`, schema+".%")
		if err != nil && !isUndefinedTable(err) {
			return err
		}
		return nil
	}
	if err := drop(ctx); err != nil {
		tb.Fatalf("dropping schema %s: %v", schema, err)
	}
	table := outbox.MustParseTable(schema + "." + name)
	if err := outbox.Migrate(ctx, pool, table); err != nil {
		tb.Fatalf("migrating %s: %v", table, err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := drop(ctx); err != nil {
			tb.Errorf("dropping schema %s: %v", schema, err)
		}
		pool.Close()
	})
	return &testDB{pool: pool, table: table}
}
