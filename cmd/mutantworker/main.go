// Command mutantworker runs the fast tier, the simulation on the fakes
// and the SQL-faithful simulation, on the code it was built from and
// prints what killed it as JSON (generated.Kill). The generated mutants
// (mutant/generated) build it with `go build -overlay`, one mutated file
// replaced, so that the mutant runs in a process of its own. It exits 0
// whatever the verdict, and 2 when the harness could not run.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"

	"github.com/outboxlab/outboxlab/mutant/generated"
	"github.com/outboxlab/outboxlab/sim"
	"github.com/outboxlab/outboxlab/testenv/pgserver"
)

func main() {
	simSeeds := flag.Int("sim-seeds", 300, "seeds on the fakes")
	sqlSeeds := flag.Int("sql-seeds", 30, "seeds on the SQL-faithful tier (0: none)")
	seed := flag.Uint64("seed", 1, "the first seed")
	pgURL := flag.String("pg-url", "", "the maintenance database of a PostgreSQL server to run the SQL tier on (empty: start one)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, *simSeeds, *sqlSeeds, *seed, *pgURL); err != nil {
		fmt.Fprintf(os.Stderr, "mutantworker: %v\n", err)
		os.Exit(2)
	}
}

func run(ctx context.Context, simSeeds, sqlSeeds int, first uint64, pgURL string) error {
	k, err := generated.FastTier(ctx, nil, simSeeds, 0, first)
	if err != nil {
		return err
	}
	if k.Tier == "" && sqlSeeds > 0 {
		if pgURL == "" {
			srv, err := pgserver.Start(ctx)
			if err != nil {
				return fmt.Errorf("starting PostgreSQL: %w", err)
			}
			defer srv.Close()
			pgURL = srv.AdminURL()
		}
		b, err := sim.NewSQL(ctx, pgURL)
		if err != nil {
			return err
		}
		defer b.Close()
		sk, err := generated.FastTier(ctx, b, 0, sqlSeeds, first)
		if err != nil {
			return err
		}
		sk.Seeds += k.Seeds
		sk.Seconds += k.Seconds
		k = sk
	}
	return json.NewEncoder(os.Stdout).Encode(k)
}
