package relay_test

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxlab/outboxlab/outbox"
)

// dbEnv is one test's database: a pool whose search path is a schema of
// its own, and the outbox table migrated in it.
type dbEnv struct {
	URL    string // connection string with the schema as search_path
	Pool   *pgxpool.Pool
	Schema string
	Table  outbox.Table
}

var schemaSeq atomic.Int64

var nonIdent = regexp.MustCompile(`[^a-z0-9_]+`)

// baseDatabaseURL returns the database the integration tests use, or skips.
func baseDatabaseURL(t testing.TB) string {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test: needs PostgreSQL (skipped with -short)")
	}
	if u := os.Getenv("OUTBOX_TEST_DATABASE_URL"); u != "" {
		return u
	}
	return sharedEnv(t).DatabaseURL
}

// baseAMQPURL returns the broker the integration tests use, or skips.
func baseAMQPURL(t testing.TB) string {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test: needs RabbitMQ (skipped with -short)")
	}
	if u := os.Getenv("OUTBOX_TEST_AMQP_URL"); u != "" {
		return u
	}
	return sharedEnv(t).AMQPURL
}

// newDB creates a schema named after the test, migrates an outbox table in
// it, and drops the schema when the test ends.
func newDB(t testing.TB) *dbEnv {
	t.Helper()
	base := baseDatabaseURL(t)
	name := strings.ToLower(t.Name())
	name = nonIdent.ReplaceAllString(name, "_")
	if len(name) > 40 {
		name = name[len(name)-40:]
	}
	schema := fmt.Sprintf("t%d_%s", schemaSeq.Add(1), strings.Trim(name, "_"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatalf("connecting to test database: %v", err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, `DROP SCHEMA IF EXISTS `+pgx.Identifier{schema}.Sanitize()+` CASCADE`); err != nil {
		t.Fatalf("dropping schema: %v", err)
	}
	if _, err := admin.Exec(ctx, `CREATE SCHEMA `+pgx.Identifier{schema}.Sanitize()); err != nil {
		t.Fatalf("creating schema: %v", err)
	}
	url := withSearchPath(base, schema)
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatalf("pool: %v", err)
	}
	table := outbox.MustParseTable(schema + ".outbox")
	if err := outbox.Migrate(ctx, pool, table); err != nil {
		t.Fatalf("migrating: %v", err)
	}
	t.Cleanup(func() {
		pool.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, base)
		if err != nil {
			t.Logf("cleanup: %v", err)
			return
		}
		defer c.Close(ctx)
		if err := outbox.Drop(ctx, c, table, true); err != nil {
			t.Logf("cleanup: %v", err)
		}
	})
	return &dbEnv{URL: url, Pool: pool, Schema: schema, Table: table}
}

// withSearchPath adds search_path=schema to a URL or key=value string.
func withSearchPath(conn, schema string) string {
	if strings.Contains(conn, "://") {
		sep := "?"
		if strings.Contains(conn, "?") {
			sep = "&"
		}
		return conn + sep + "search_path=" + schema
	}
	return conn + " search_path=" + schema
}

// waitFor polls cond every 20 ms until it holds or the deadline passes,
// then fails the test with what.
func waitFor(t testing.TB, within time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		ok, err := cond()
		if err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", within, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
