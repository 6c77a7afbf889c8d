package storetest_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxlab/outboxlab/outbox"
	"github.com/outboxlab/outboxlab/relay"
	"github.com/outboxlab/outboxlab/relay/storetest"
	"github.com/outboxlab/outboxlab/testenv/pgserver"
)

// StatementsEnv names a JSON file of relay.PGStatements (fields left out
// keep the store's own text) that TestPGStoreSimulatedClock puts in place
// of the store's statements with UseStatements: how the generated SQL
// mutants (mutant/generated) run this suite on a changed statement.
// Unset, the suite runs the production statements.
const StatementsEnv = "OUTBOX_STORETEST_STATEMENTS"

// simClockSQL makes now() of a database the value in simclock.clock,
// which the test moves, ahead of pg_catalog on the search path. app_now()
// is the calling process's own clock, an hour ahead of the database's: no
// statement of the store may read it (the database clock is the only
// clock), and a statement that does (a generated mutant's, see
// sim.AppNowSQL) is off by that hour.
const simClockSQL = `CREATE SCHEMA simclock;
CREATE TABLE simclock.clock (t timestamptz NOT NULL);
INSERT INTO simclock.clock VALUES ('2026-01-01T00:00:00Z');
CREATE FUNCTION simclock.now() RETURNS timestamptz LANGUAGE sql STABLE
	AS $$ SELECT t FROM simclock.clock $$;
CREATE FUNCTION simclock.app_now() RETURNS timestamptz LANGUAGE sql STABLE
	AS $$ SELECT t + interval '1 hour' FROM simclock.clock $$;`

const simSearchPath = "public, simclock, pg_catalog"

var simTable = outbox.MustParseTable("outbox")

// TestPGStoreSimulatedClock runs the suite against relay.PGStore on a real
// PostgreSQL whose now() is a clock the test moves, so that Advance is
// instant and the whole suite takes about a second: it runs under -short
// when PostgreSQL's binaries are installed (testenv/pgserver), or on the
// server OUTBOX_TEST_DATABASE_URL names (a superuser's maintenance
// database). Each case gets a database of its own, copied from a template
// that holds the clock and the migrated outbox table. Statements are the
// store's own unless StatementsEnv names others.
func TestPGStoreSimulatedClock(t *testing.T) {
	admin := os.Getenv("OUTBOX_TEST_DATABASE_URL")
	if admin == "" {
		admin = pgserver.StartT(t).AdminURL()
	}
	var edit *relay.PGStatements
	if f := os.Getenv(StatementsEnv); f != "" {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatalf("%s: %v", StatementsEnv, err)
		}
		q := relay.NewPGStore(nil, simTable).Statements()
		if err := json.Unmarshal(b, &q); err != nil {
			t.Fatalf("%s: %v", StatementsEnv, err)
		}
		edit = &q
	}
	tmpl := newSimTemplate(t, admin)
	storetest.Run(t, func(t *testing.T) storetest.Backend {
		pool := tmpl.database(t)
		s := relay.NewPGStore(pool, simTable)
		if edit != nil {
			if err := s.UseStatements(*edit); err != nil {
				t.Fatalf("using the statements of %s: %v", StatementsEnv, err)
			}
		}
		return pgBackend(s, pool, simTable, storetest.Backend{
			Advance: func(t testing.TB, d time.Duration) {
				t.Helper()
				if _, err := pool.Exec(context.Background(), `UPDATE simclock.clock SET t = t + $1::bigint * interval '1 microsecond'`, d.Microseconds()); err != nil {
					t.Fatalf("advancing the clock: %v", err)
				}
			},
			Unit: time.Second,
		})
	})
}

// simTemplate is a template database with the simulated clock and the
// migrated outbox table.
type simTemplate struct {
	admin *url.URL
	name  string
	next  atomic.Int64
}

func newSimTemplate(t *testing.T, adminURL string) *simTemplate {
	t.Helper()
	u, err := url.Parse(adminURL)
	if err != nil {
		t.Fatalf("parsing the server's URL: %v", err)
	}
	var tag [4]byte
	_, _ = rand.Read(tag[:])
	st := &simTemplate{admin: u, name: "storetest_sim_" + hex.EncodeToString(tag[:])}
	ctx := context.Background()
	st.exec(t, `CREATE DATABASE `+pgx.Identifier{st.name}.Sanitize())
	t.Cleanup(func() { st.exec(t, `DROP DATABASE IF EXISTS `+pgx.Identifier{st.name}.Sanitize()+` WITH (FORCE)`) })
	conn, err := pgx.ConnectConfig(ctx, st.config(t, st.name).ConnConfig)
	if err != nil {
		t.Fatalf("connecting to the template: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, simClockSQL); err != nil {
		t.Fatalf("creating the simulated clock: %v", err)
	}
	if err := outbox.Migrate(ctx, conn, simTable); err != nil {
		t.Fatalf("migrating: %v", err)
	}
	return st
}

func (st *simTemplate) exec(t *testing.T, sql string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, st.admin.String())
	if err != nil {
		t.Fatalf("connecting to the server: %v", err)
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func (st *simTemplate) config(t *testing.T, db string) *pgxpool.Config {
	t.Helper()
	u := *st.admin
	u.Path = "/" + db
	cfg, err := pgxpool.ParseConfig(u.String())
	if err != nil {
		t.Fatalf("parsing the server's URL: %v", err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = simSearchPath
	// A statement waiting on a lock the suite holds elsewhere must not
	// wait for ever.
	cfg.ConnConfig.RuntimeParams["lock_timeout"] = "5s"
	// No index or bitmap scans: rows come in the order their statement's
	// ORDER BY asks for, or in the table's physical order, never in an
	// index's order by accident (a claim without its ORDER BY passes as
	// long as the planner picks the pending index; a bitmap scan meets a
	// row rewritten in place at its first place in the table, the root
	// of its HOT chain).
	for _, p := range []string{"enable_indexscan", "enable_indexonlyscan", "enable_bitmapscan"} {
		cfg.ConnConfig.RuntimeParams[p] = "off"
	}
	return cfg
}

// database creates a database from the template for one case and drops it
// when the case ends.
func (st *simTemplate) database(t *testing.T) *pgxpool.Pool {
	t.Helper()
	name := fmt.Sprintf("%s_%d", st.name, st.next.Add(1))
	st.exec(t, `CREATE DATABASE `+pgx.Identifier{name}.Sanitize()+` TEMPLATE `+pgx.Identifier{st.name}.Sanitize())
	pool, err := pgxpool.NewWithConfig(context.Background(), st.config(t, name))
	if err != nil {
		t.Fatalf("pool: %v", err)
	}
	t.Cleanup(func() {
		pool.Close()
		st.exec(t, `DROP DATABASE IF EXISTS `+pgx.Identifier{name}.Sanitize()+` WITH (FORCE)`)
	})
	return pool
}

// pgBackend fills what every PostgreSQL backend shares into b: the store,
// staging, the clock read, rows, row locks held elsewhere, concurrency.
func pgBackend(s *relay.PGStore, pool *pgxpool.Pool, table outbox.Table, b storetest.Backend) storetest.Backend {
	b.Store = s
	b.Concurrent = true
	b.Stage = func(t testing.TB, events ...outbox.Event) {
		t.Helper()
		ctx := context.Background()
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			for _, e := range events {
				if err := outbox.Stage(ctx, tx, table, e, outbox.StageOptions{}); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatalf("staging: %v", err)
		}
	}
	b.Now = func(t testing.TB) time.Time {
		t.Helper()
		n, err := s.DBNow(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	b.Row = func(t testing.TB, id uuid.UUID) (storetest.Row, bool) {
		t.Helper()
		var (
			r                               storetest.Row
			processed, faulted, lockedUntil *time.Time
			lockedBy                        *string
		)
		err := pool.QueryRow(context.Background(),
			`SELECT processed_at, faulted_at, attempts, locked_by, locked_until, occurred_at FROM `+table.Ident()+` WHERE id = $1`, id).
			Scan(&processed, &faulted, &r.Attempts, &lockedBy, &lockedUntil, &r.OccurredAt)
		if errors.Is(err, pgx.ErrNoRows) {
			return r, false
		}
		if err != nil {
			t.Fatalf("reading row %s: %v", id, err)
		}
		if processed != nil {
			r.ProcessedAt = *processed
		}
		if faulted != nil {
			r.FaultedAt = *faulted
		}
		if lockedUntil != nil {
			r.LockedUntil = *lockedUntil
		}
		if lockedBy != nil {
			r.LockedBy = *lockedBy
		}
		return r, true
	}
	b.Rewrite = func(t testing.TB, id uuid.UUID) {
		t.Helper()
		if _, err := pool.Exec(context.Background(), `UPDATE `+table.Ident()+` SET attempts = attempts WHERE id = $1`, id); err != nil {
			t.Fatalf("rewriting row %s: %v", id, err)
		}
	}
	b.FaultByHand = func(t testing.TB, id uuid.UUID) {
		t.Helper()
		if _, err := pool.Exec(context.Background(), `UPDATE `+table.Ident()+` SET faulted_at = now() WHERE id = $1`, id); err != nil {
			t.Fatalf("faulting row %s: %v", id, err)
		}
	}
	b.LockElsewhere = func(t testing.TB, id uuid.UUID) func() {
		t.Helper()
		ctx := context.Background()
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatalf("beginning the locking transaction: %v", err)
		}
		if _, err := tx.Exec(ctx, `SELECT 1 FROM `+table.Ident()+` WHERE id = $1 FOR UPDATE`, id); err != nil {
			_ = tx.Rollback(ctx)
			t.Fatalf("locking row %s: %v", id, err)
		}
		return func() { _ = tx.Rollback(ctx) }
	}
	return b
}
