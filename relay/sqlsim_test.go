package relay_test

import (
	"context"
	"testing"

	"github.com/outboxlab/outboxlab/internal/mutant"
	"github.com/outboxlab/outboxlab/internal/sim"
	"github.com/outboxlab/outboxlab/relay"
	"github.com/outboxlab/outboxlab/testenv/pgserver"
)

// TestSQLTierSeesStatementRegressions changes one statement of PGStore at
// a time, as a careless edit of postgres.go would, and runs the
// SQL-faithful simulation on it: each regression must fail some seed's
// checks. The fake tier cannot see any of them, since its store is not
// PGStore: the same seeds pass there (they are the fake swarm's own).
func TestSQLTierSeesStatementRegressions(t *testing.T) {
	srv := pgserver.StartT(t)
	ctx := context.Background()
	const seeds = 40
	// Poison rows make the relay retry and park: the swarm of the
	// no-backoff mutant.
	poison, ok := mutant.Lookup("no-backoff")
	if !ok {
		t.Fatal("no no-backoff mutant")
	}
	// Relays paused in the middle of a batch lose leases: the swarm of
	// the unfenced-mark mutant.
	stall, ok := mutant.Lookup("unfenced-mark")
	if !ok {
		t.Fatal("no unfenced-mark mutant")
	}
	for _, c := range []struct {
		name, stmt, old, new string
		tune                 func(*sim.Swarm)
	}{
		{"claim-takes-live-leases", "claim", "locked_until < now()", "locked_until > now()", nil},
		{"backoff-in-the-past", "retry", "now() + least(", "now() - least(", poison.Exposure.Tune},
		{"sweep-keeps-old-deletes-new", "sweep", "processed_at < now() -", "processed_at > now() -", nil},
		// A thousand times the declared backoff: the retries' next
		// eligible times give it away even before a second retry.
		{"backoff-in-milliseconds", "retry", "interval '1 microsecond'", "interval '1 millisecond'", poison.Exposure.Tune},
		// The mark no longer checks that the lease is still running: a
		// relay that stalled past its lease marks rows it no longer holds.
		{"mark-after-the-lease", "mark", "AND locked_until > now()", "", stall.Exposure.Tune},
	} {
		t.Run(c.name, func(t *testing.T) {
			backend, err := sim.NewSQL(ctx, srv.AdminURL())
			if err != nil {
				t.Fatal(err)
			}
			defer backend.Close()
			var editErr error
			backend.EditStore = func(s *relay.PGStore) {
				if err := s.EditSQL(c.stmt, c.old, c.new); err != nil {
					editErr = err
				}
			}
			for seed := uint64(1); seed <= seeds; seed++ {
				if fake := sim.Run(seed, sim.Options{Tune: c.tune}); !fake.Valid {
					t.Fatalf("seed %d fails on the fakes, which do not run PGStore:\n%s", seed, fake.Report.Summary())
				}
				res := sim.Run(seed, sim.Options{Tune: c.tune, SQL: backend})
				if editErr != nil {
					t.Fatal(editErr)
				}
				if res.Err != nil {
					t.Fatalf("seed %d: %v", seed, res.Err)
				}
				if !res.Valid {
					var failed []string
					for _, r := range res.Report.Results {
						if !r.Valid && !r.Skipped {
							failed = append(failed, r.Checker)
						}
					}
					t.Logf("killed at seed %d by %v", seed, failed)
					return
				}
			}
			t.Fatalf("the SQL tier passed %d seeds with the %s statement changed", seeds, c.stmt)
		})
	}
}
