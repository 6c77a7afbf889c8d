package generated

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"

	"github.com/outboxlab/outboxlab/internal/sim"
	"github.com/outboxlab/outboxlab/testenv/pgserver"
)

// WorkerArgs are what a mutant's fast tier runs: SimSeeds seeds on the
// fakes, then SQLSeeds on the SQL-faithful tier (0: none), from Seed, on
// the server whose maintenance database PGURL names (empty: one started
// for the run).
type WorkerArgs struct {
	SimSeeds, SQLSeeds int
	Seed               uint64
	PGURL              string
}

// WorkerEnv names the JSON-encoded WorkerArgs with which the test binary
// of relay or consumer, built for a Go mutant, runs the fast tier instead
// of its tests (their TestMain calls WorkerMain): one build of the mutated
// package serves both the fast tier and the unit tier.
const WorkerEnv = "OUTBOXLAB_GENERATED_FAST_TIER"

// WorkerMain runs the fast tier when WorkerEnv is set and returns the exit
// code, with ok true; with WorkerEnv unset it does nothing and ok is false.
// The verdict (a Kill) goes to stdout as JSON; exit code 2 says the
// harness could not run.
func WorkerMain() (code int, ok bool) {
	v := os.Getenv(WorkerEnv)
	if v == "" {
		return 0, false
	}
	var a WorkerArgs
	if err := json.Unmarshal([]byte(v), &a); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", WorkerEnv, err)
		return 2, true
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := RunWorker(ctx, a, os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "fast tier: %v\n", err)
		return 2, true
	}
	return 0, true
}

// RunWorker runs the fast tier on the code the process was built from and
// writes what killed it (a Kill) to w as JSON.
func RunWorker(ctx context.Context, a WorkerArgs, w io.Writer) error {
	k, err := FastTier(ctx, nil, a.SimSeeds, 0, a.Seed)
	if err != nil {
		return err
	}
	if k.Tier == "" && a.SQLSeeds > 0 {
		url := a.PGURL
		if url == "" {
			srv, err := pgserver.Start(ctx)
			if err != nil {
				return fmt.Errorf("starting PostgreSQL: %w", err)
			}
			defer srv.Close()
			url = srv.AdminURL()
		}
		b, err := sim.NewSQL(ctx, url)
		if err != nil {
			return err
		}
		defer b.Close()
		sk, err := FastTier(ctx, b, 0, a.SQLSeeds, a.Seed)
		if err != nil {
			return err
		}
		sk.Seeds += k.Seeds
		sk.Seconds += k.Seconds
		k = sk
	}
	return json.NewEncoder(w).Encode(k)
}
