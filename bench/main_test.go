package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/outboxlab/outboxlab/internal/testenv"
	"github.com/outboxlab/outboxlab/outbox"
)

// shared is the environment of the package's tests and benchmarks, started
// by the first one that needs it and removed when they all end.
var shared struct {
	once sync.Once
	env  *testenv.Env
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if shared.env != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		if err := shared.env.Close(ctx); err != nil {
			fmt.Fprintf(os.Stderr, "bench: removing the environment: %v\n", err)
			code = 1
		}
		cancel()
	}
	if code == 0 {
		if err := goleak.Find(
			// The toxiproxy client uses http.DefaultClient, whose idle
			// keep-alive connections outlive the environment.
			goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
			goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
			goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
		); err != nil {
			fmt.Fprintf(os.Stderr, "bench: goroutines left behind: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// sharedEnv returns the package's environment, starting it once. It skips
// under -short and, unless OUTBOXLAB_REQUIRE_DOCKER is set, when no Docker
// engine answers.
func sharedEnv(tb testing.TB) *testenv.Env {
	tb.Helper()
	if testing.Short() {
		tb.Skip("bench: needs PostgreSQL and RabbitMQ containers (skipped with -short)")
	}
	shared.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		shared.env, shared.err = testenv.Start(ctx, testenv.Options{})
	})
	if shared.err != nil {
		if errors.Is(shared.err, testenv.ErrDockerUnavailable) && os.Getenv("OUTBOXLAB_REQUIRE_DOCKER") == "" {
			tb.Skipf("bench: %v (set OUTBOXLAB_REQUIRE_DOCKER=1 to fail instead)", shared.err)
		}
		tb.Fatalf("bench: starting the environment: %v", shared.err)
	}
	return shared.env
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
