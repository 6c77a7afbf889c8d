// Command outboxlab is how people meet the harness: it plays the dual-write
// demo, runs chaos scenarios on containers, runs the deterministic
// simulation, hunts mutants, benchmarks the relay and writes the reports.
//
//	outboxlab demo                      the dual-write story on real containers
//	outboxlab run --scenario NAME ...   chaos scenarios against a relay
//	outboxlab sim --seeds N             the deterministic simulation, no Docker
//	outboxlab mutants                   the mutant catalogue and who kills what
//	outboxlab bench                     relay throughput and latency
//	outboxlab report --in DIR           REPORT.md from a results bundle
//	outboxlab help [VERB]               usage
//
// Exit codes: 0 when every verdict passed, 1 when one failed (the violated
// invariant, the offending events, the seed and the replay command are
// printed), 2 for bad usage or an environment that cannot run the verb (no
// Docker engine, missing images).
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, production(), os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
