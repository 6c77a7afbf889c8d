package sim

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxlab/outboxlab/testenv"
	"github.com/outboxlab/outboxlab/testenv/pgserver"
)

var (
	sqlOnce    sync.Once
	sqlBackend *SQL
	sqlServers []*pgserver.Server
	sqlErr     error
)

// sqlTier returns the SQL backend the package's tests share: one
// throwaway server per CPU, stopped by TestMain. It skips the test when
// no server can be started.
func sqlTier(t *testing.T) *SQL {
	t.Helper()
	sqlOnce.Do(func() {
		ctx := context.Background()
		bin, err := pgserver.BinDir()
		if err != nil {
			sqlErr = err
			return
		}
		var urls []string
		for range runtime.GOMAXPROCS(0) {
			srv, err := pgserver.StartLocal(ctx, bin)
			if err != nil {
				sqlErr = err
				return
			}
			sqlServers = append(sqlServers, srv)
			urls = append(urls, srv.AdminURL())
		}
		sqlBackend, sqlErr = NewSQL(ctx, urls...)
	})
	if sqlErr != nil {
		if os.Getenv(testenv.RequireDockerEnv) != "" {
			t.Fatalf("no PostgreSQL for the SQL tier (%s is set): %v", testenv.RequireDockerEnv, sqlErr)
		}
		t.Skipf("no PostgreSQL for the SQL tier: %v", sqlErr)
	}
	return sqlBackend
}

func closeSQLTier() {
	if sqlBackend != nil {
		_ = sqlBackend.Close()
	}
	for _, srv := range sqlServers {
		_ = srv.Close()
	}
}

func TestSQLSeed(t *testing.T) {
	s := sqlTier(t)
	for seed := uint64(1); seed <= 3; seed++ {
		res := Run(seed, Options{SQL: s})
		if res.Err != nil {
			t.Fatalf("seed %d: %v", seed, res.Err)
		}
		t.Logf("seed %d: %d steps, %d events, %d ops, valid %v", seed, res.Steps, res.Events, len(res.History), res.Valid)
		if !res.Valid {
			t.Fatalf("seed %d failed:\n%s", seed, res.Report.Summary())
		}
		a, b := jsonl(t, res.History), jsonl(t, Run(seed, Options{SQL: s}).History)
		if !bytes.Equal(a, b) {
			t.Fatalf("seed %d: two runs differ", seed)
		}
	}
}

// TestSQLSwarm runs seeds of the production system on the SQL tier
// twice: none may fail, and the two summaries must agree on the history
// hash.
func TestSQLSwarm(t *testing.T) {
	s := sqlTier(t)
	n := 24
	if testing.Short() {
		n = 8
	}
	a := RunMany(context.Background(), 100, n, Options{SQL: s})
	for _, f := range a.Failures {
		t.Errorf("seed %d failed (err %v):\n%s", f.Seed, f.Err, f.Report.Summary())
	}
	b := RunMany(context.Background(), 100, n, Options{SQL: s})
	if a.HistorySHA256 != b.HistorySHA256 || a.Events != b.Events || a.StepsPerSeed != b.StepsPerSeed {
		t.Fatalf("two runs of the same seeds differ: %s/%d/%.1f vs %s/%d/%.1f",
			a.HistorySHA256, a.Events, a.StepsPerSeed, b.HistorySHA256, b.Events, b.StepsPerSeed)
	}
	t.Logf("%d seeds, %.1f seeds/s, %.0f steps/seed, %d events, history %s", a.Seeds, a.SeedsPerSec, a.StepsPerSeed, a.Events, a.HistorySHA256)
}

// TestSQLDiffersFromFakes guards the SQL tier against running the fakes:
// its histories differ from the fakes' for the same seed (occurred_at is
// the transaction's start on PostgreSQL, the staging time on the fake).
func TestSQLDiffersFromFakes(t *testing.T) {
	s := sqlTier(t)
	differ := false
	for seed := uint64(1); seed <= 5 && !differ; seed++ {
		differ = !bytes.Equal(jsonl(t, Run(seed, Options{}).History), jsonl(t, Run(seed, Options{SQL: s}).History))
	}
	if !differ {
		t.Fatal("seeds 1..5 have the same histories on the fakes and on PostgreSQL")
	}
}

// TestSimclock checks that the simulated clock shadows now() and its
// kin for unqualified calls and for the column defaults the migrations
// created, on a run's database.
func TestSimclock(t *testing.T) {
	s := sqlTier(t)
	ctx := context.Background()
	d, err := s.open(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := d.close(); err != nil {
			t.Error(err)
		}
	}()
	c := d.harness
	at := time.Date(2031, 2, 3, 4, 5, 6, 789012000, time.UTC)
	if _, err := c.Exec(ctx, `SELECT set_config('simclock.now', $1, false)`, clockText(at)); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"now()", "transaction_timestamp()", "statement_timestamp()", "clock_timestamp()"} {
		var got time.Time
		if err := c.QueryRow(ctx, `SELECT `+f).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if !got.Equal(at) {
			t.Errorf("%s = %s, want the simulated %s", f, got, at)
		}
	}
	var real time.Time
	if err := c.QueryRow(ctx, `SELECT pg_catalog.now()`).Scan(&real); err != nil {
		t.Fatal(err)
	}
	if real.Equal(at) {
		t.Fatal("pg_catalog.now() reads the simulated clock too: the test proves nothing")
	}
	// Column defaults bound to simclock.now() when the migrations ran:
	// shown without simclock on the path, they name it.
	if _, err := c.Exec(ctx, `SET search_path = pg_catalog, public`); err != nil {
		t.Fatal(err)
	}
	rows, err := c.Query(ctx, `SELECT c.relname || '.' || a.attname, pg_get_expr(d.adbin, d.adrelid)
FROM pg_attrdef d JOIN pg_attribute a ON a.attrelid = d.adrelid AND a.attnum = d.adnum
JOIN pg_class c ON c.oid = d.adrelid
WHERE pg_get_expr(d.adbin, d.adrelid) LIKE '%now()%' ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	defaults := map[string]string{}
	var col, expr string
	if _, err := pgx.ForEachRow(rows, []any{&col, &expr}, func() error { defaults[col] = expr; return nil }); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"outbox.occurred_at", "inbox.received_at", "effects.applied_at", "outbox_migrations.applied_at"} {
		if got, ok := defaults[want]; !ok || got != "simclock.now()" {
			t.Errorf("default of %s = %q, want simclock.now()", want, got)
		}
	}
	if _, err := c.Exec(ctx, `INSERT INTO inbox (consumer, message_id) VALUES ('t', 'm')`); err != nil {
		t.Fatal(err)
	}
	var received time.Time
	if err := c.QueryRow(ctx, `SELECT received_at FROM inbox WHERE consumer = 't'`).Scan(&received); err != nil {
		t.Fatal(err)
	}
	if !received.Equal(at) {
		t.Errorf("received_at = %s, want the simulated %s", received, at)
	}
}

// TestNoUnshadowableClock fails when the production SQL uses a clock that
// simclock cannot shadow: current_timestamp and its kin are keywords, not
// functions a search_path finds.
func TestNoUnshadowableClock(t *testing.T) {
	re := regexp.MustCompile(`(?i)\b(current_timestamp|current_time|current_date|localtimestamp|localtime)\b`)
	files := []string{"../../relay/postgres.go", "../../consumer/postgres.go", "../../outbox/outbox.go", "../../workload/producer.go", "pgraw.go"}
	for _, glob := range []string{"../../outbox/migration/*.sql", "../../consumer/migration/*.sql"} {
		m, err := filepath.Glob(glob)
		if err != nil || len(m) == 0 {
			t.Fatalf("no files match %s: %v", glob, err)
		}
		files = append(files, m...)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if m := re.Find(b); m != nil {
			t.Errorf("%s uses %s, which the SQL tier's clock cannot shadow: use now()", f, m)
		}
	}
}
