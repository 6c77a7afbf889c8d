// Command outboxlab is how people meet the harness: it plays the dual-write
// demo, runs chaos scenarios on containers, checks target files, runs the
// deterministic simulation, hunts mutants, benchmarks the relay and writes
// the reports.
//
//	outboxlab demo                      the dual-write story on real containers
//	outboxlab run --scenario NAME ...   chaos scenarios against a relay
//	outboxlab validate --target FILE    a target file checked, no containers
//	outboxlab sim --seeds N             the deterministic simulation, no Docker
//	outboxlab mutants                   the mutant catalogue and who kills what
//	outboxlab bench                     relay throughput and latency
//	outboxlab soak                      a relay's outbox aged by a million events
//	outboxlab report --in DIR           REPORT.md from a results bundle
//	outboxlab help [VERB]               usage
//
// Exit codes, the same on every verb: 0 when every verdict passed, 1 when
// one failed (the violated invariant, the offending events, the seed and
// the replay command are printed), 2 for bad usage, an environment that
// cannot run the verb (no Docker engine, missing images) or a run
// interrupted by SIGINT or SIGTERM before it found a failure (it says so,
// and cleans up what it started; a second signal exits at once), 3 for an
// inconclusive run. A simulation interrupted after some seeds failed
// prints those failures and exits 1.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, cancel := context.WithCancelCause(context.Background())
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		sig := <-sigs
		// The first signal ends the run, which still removes its
		// containers; a second one gets the default action: exit now.
		signal.Reset(os.Interrupt, syscall.SIGTERM)
		name := "SIGTERM"
		if sig == os.Interrupt {
			name = "SIGINT"
		}
		cancel(fmt.Errorf("%w by %s", errInterrupted, name))
	}()
	code := run(ctx, production(), os.Args[1:], os.Stdout, os.Stderr)
	cancel(nil)
	os.Exit(code)
}
