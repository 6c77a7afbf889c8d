package sim

import (
	"bytes"
	"context"
	"sync"
	"testing"

	"github.com/outboxlab/outboxlab/testenv/pgserver"
)

var (
	sqlOnce    sync.Once
	sqlBackend *SQL
	sqlServer  *pgserver.Server
	sqlErr     error
)

// sqlTier returns the SQL backend the package's tests share: one
// throwaway server and template, stopped by TestMain. It skips the test
// when no server can be started.
func sqlTier(t *testing.T) *SQL {
	t.Helper()
	sqlOnce.Do(func() {
		ctx := context.Background()
		bin, err := pgserver.BinDir()
		if err != nil {
			sqlErr = err
			return
		}
		if sqlServer, sqlErr = pgserver.StartLocal(ctx, bin); sqlErr != nil {
			return
		}
		sqlBackend, sqlErr = NewSQL(ctx, sqlServer.AdminURL())
	})
	if sqlErr != nil {
		t.Skipf("no PostgreSQL for the SQL tier: %v", sqlErr)
	}
	return sqlBackend
}

func closeSQLTier() {
	if sqlBackend != nil {
		_ = sqlBackend.Close()
	}
	if sqlServer != nil {
		_ = sqlServer.Close()
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
