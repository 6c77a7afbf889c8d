// Command mutantworker runs the fast tier, the simulation on the fakes
// and the SQL-faithful simulation, on the code it was built from and
// prints what killed it as JSON (generated.Kill). The generated mutants
// (mutant/generated) measure with it, built with -cover, what the fast
// tier reaches of the unmutated code; a Go mutant's own fast tier runs in
// the test binary of its package (generated.WorkerMain), built once with
// the mutated file in an overlay. It exits 0 whatever the verdict, and 2
// when the harness could not run.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"

	"github.com/outboxlab/outboxlab/internal/mutant/generated"
)

func main() {
	var a generated.WorkerArgs
	flag.IntVar(&a.SimSeeds, "sim-seeds", 300, "seeds on the fakes")
	flag.IntVar(&a.SQLSeeds, "sql-seeds", 30, "seeds on the SQL-faithful tier (0: none)")
	flag.Uint64Var(&a.Seed, "seed", 1, "the first seed")
	flag.StringVar(&a.PGURL, "pg-url", "", "the maintenance database of a PostgreSQL server to run the SQL tier on (empty: start one)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := generated.RunWorker(ctx, a, os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "mutantworker: %v\n", err)
		os.Exit(2)
	}
}
