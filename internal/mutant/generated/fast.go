package generated

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/outboxlab/outboxlab/internal/mutant"
	"github.com/outboxlab/outboxlab/internal/sim"
)

// Tiers that kill a generated mutant.
const (
	TierSim  = "sim"  // the simulation on the fakes
	TierSQL  = "sql"  // the SQL-faithful simulation
	TierUnit = "unit" // the mutated package's tests with -short
	// TierStore is the store's behaviour suite (relay/storetest) on
	// PostgreSQL under a simulated clock, run on a SQL mutant's statements.
	TierStore = "store"
)

// Kill is what the fast tier did to the code it ran: Tier is empty when
// nothing killed it.
type Kill struct {
	Tier    string  `json:"tier,omitempty"`
	Checker string  `json:"checker,omitempty"`
	Seed    uint64  `json:"seed,omitempty"`
	Seconds float64 `json:"seconds"`
	// Seeds counts the simulation seeds run, on both backends.
	Seeds int `json:"seeds"`
	// Detail is the failing checkers' verdict, or a failing test's
	// output, shortened.
	Detail string `json:"detail,omitempty"`
	// Replay, for a kill on the container tier, is the command that
	// judges the mutant there again.
	Replay string `json:"replay,omitempty"`
}

// Exposures returns the swarms the fast tier rotates through, seed by
// seed: the seed's own swarm, then each catalogue mutant's exposure
// (poison rows, skewed clocks, short leases, sweeps, ...), so that a few
// seeds reach every statement and branch the catalogue's bugs live in.
func Exposures() []func(*sim.Swarm) {
	out := []func(*sim.Swarm){nil}
	for _, m := range mutant.All() {
		out = append(out, m.Exposure.Tune)
	}
	return out
}

// FastTier runs the simulation on the fakes over simSeeds seeds from
// first, then, when sql is not nil, the SQL-faithful simulation over
// sqlSeeds seeds, on the code the process was built from, and stops at
// the first seed some checker fails. A run the harness could not finish
// is an error.
func FastTier(ctx context.Context, sql *sim.SQL, simSeeds, sqlSeeds int, first uint64) (Kill, error) {
	return fastTier(ctx, sql, simSeeds, sqlSeeds, first, 0)
}

// fastTier is FastTier from the skip-th seed of each backend on: the
// seeds skip, skip+1, ... after first, with the exposures FastTier gives
// them, so that a run split in two parts runs what one run would.
func fastTier(ctx context.Context, sql *sim.SQL, simSeeds, sqlSeeds int, first uint64, skip int) (Kill, error) {
	start := time.Now()
	ex := Exposures()
	var k Kill
	for _, tier := range []struct {
		name  string
		seeds int
		sql   *sim.SQL
	}{{TierSim, simSeeds, nil}, {TierSQL, sqlSeeds, sql}} {
		if tier.name == TierSQL && sql == nil {
			continue
		}
		for i := skip; i < skip+tier.seeds; i++ {
			if err := ctx.Err(); err != nil {
				return k, err
			}
			seed := first + uint64(i)
			res := sim.Run(seed, sim.Options{Tune: ex[i%len(ex)], SQL: tier.sql})
			k.Seeds++
			if res.Err != nil {
				return k, fmt.Errorf("%s tier, seed %d: %w", tier.name, seed, res.Err)
			}
			if res.Valid {
				continue
			}
			var failed, detail []string
			for _, r := range res.Report.Results {
				if !r.Valid && !r.Skipped {
					failed = append(failed, r.Checker)
					detail = append(detail, r.Checker+": "+r.Detail)
				}
			}
			k.Tier, k.Seed, k.Checker = tier.name, seed, strings.Join(failed, ",")
			k.Detail = shorten(strings.Join(detail, "; "), 300)
			k.Seconds = time.Since(start).Seconds()
			return k, nil
		}
	}
	k.Seconds = time.Since(start).Seconds()
	return k, nil
}

func shorten(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
