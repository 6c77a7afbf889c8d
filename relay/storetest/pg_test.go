package storetest_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxlab/outboxlab/outbox"
	"github.com/outboxlab/outboxlab/relay"
	"github.com/outboxlab/outboxlab/relay/storetest"
)

// TestPGStore runs the suite against relay.PGStore on PostgreSQL: each case
// gets a schema of its own with a migrated outbox table. Time passes for
// real: Advance waits, polling now() of the database, until the database
// clock has moved far enough. Unit is one second: a case checks that a row
// is not yet claimable a few statements after a retry, and on a loaded
// machine two statements can be hundreds of milliseconds apart, so a unit
// must be well above that (the longest case waits about ten seconds).
// The cases run at the same time, each in its schema, so that their waits
// overlap.
func TestPGStore(t *testing.T) {
	base := databaseURL(t)
	storetest.RunParallel(t, func(t *testing.T) storetest.Backend {
		pool, table := newSchema(t, base)
		s := relay.NewPGStore(pool, table)
		now := func(t testing.TB) time.Time {
			t.Helper()
			n, err := s.DBNow(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
		return pgBackend(s, pool, table, storetest.Backend{
			Advance: func(t testing.TB, d time.Duration) {
				t.Helper()
				until := now(t).Add(d)
				deadline := time.Now().Add(d + 10*time.Second)
				for now(t).Before(until) {
					if time.Now().After(deadline) {
						t.Fatalf("the database clock did not advance by %s", d)
					}
					time.Sleep(10 * time.Millisecond)
				}
			},
			Unit: time.Second,
		})
	})
}

// databaseURL returns the PostgreSQL the test uses: OUTBOX_TEST_DATABASE_URL
// when set, else the shared test environment; it skips under -short.
func databaseURL(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("needs PostgreSQL (skipped with -short)")
	}
	if u := os.Getenv("OUTBOX_TEST_DATABASE_URL"); u != "" {
		return u
	}
	return sharedDatabaseURL(t)
}

var schemaSeq atomic.Int64

// newSchema creates a schema of its own for one case, migrates an outbox
// table in it, and drops it when the case ends.
func newSchema(t *testing.T, base string) (*pgxpool.Pool, outbox.Table) {
	t.Helper()
	schema := fmt.Sprintf("storetest_%d_%d", os.Getpid(), schemaSeq.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatalf("connecting to PostgreSQL: %v", err)
	}
	defer admin.Close(ctx)
	ident := pgx.Identifier{schema}.Sanitize()
	if _, err := admin.Exec(ctx, `DROP SCHEMA IF EXISTS `+ident+` CASCADE; CREATE SCHEMA `+ident); err != nil {
		t.Fatalf("creating schema %s: %v", schema, err)
	}
	pool, err := pgxpool.New(ctx, base)
	if err != nil {
		t.Fatalf("pool: %v", err)
	}
	table := outbox.MustParseTable(schema + ".outbox")
	if err := outbox.Migrate(ctx, pool, table); err != nil {
		t.Fatalf("migrating %s: %v", table, err)
	}
	t.Cleanup(func() {
		pool.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, base)
		if err != nil {
			t.Logf("dropping %s: %v", schema, err)
			return
		}
		defer c.Close(ctx)
		if _, err := c.Exec(ctx, `DROP SCHEMA IF EXISTS `+ident+` CASCADE`); err != nil && !strings.Contains(err.Error(), "does not exist") {
			t.Logf("dropping %s: %v", schema, err)
		}
		_, _ = c.Exec(ctx, `DELETE FROM public.outbox_migrations WHERE table_name = $1`, table.String())
	})
	return pool, table
}
