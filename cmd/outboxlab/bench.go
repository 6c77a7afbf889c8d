package main

import (
	"context"
	"flag"
	"time"
)

// benchRunner runs the relay benchmark; nil until the benchmark is built.
var benchRunner func(ctx context.Context, o *benchOptions, std *stdio) int

func benchVerb() verb {
	return verb{
		name:    "bench",
		summary: "measure the relay's throughput and latency on containers",
		args:    "[--relay RELAY] [--events N | --duration D] [--json] [--out DIR]",
		about: `Measures the relay under test on real PostgreSQL and RabbitMQ containers
(built by ` + "`make images`" + `; a Docker engine is needed): events per second from
COMMIT to the consumer, and the latency from COMMIT to apply (p50, p99,
max), with no fault injected. --relay is ours, image:REF or cmd:COMMAND.
--out DIR writes bench.json, the table REPORT.md shows.`,
		define: func(fs *flag.FlagSet) func(context.Context, *stdio) int {
			o := &benchOptions{}
			fs.StringVar(&o.relay, "relay", "ours", "the `RELAY` under test: ours, image:REF or cmd:COMMAND")
			fs.IntVar(&o.events, "events", 0, "events to send (default: the benchmark's own)")
			fs.DurationVar(&o.duration, "duration", 0, "how long to send, instead of --events")
			fs.BoolVar(&o.json, "json", false, "print the results as JSON")
			fs.StringVar(&o.out, "out", "", "write bench.json to `DIR`")
			return o.run
		},
	}
}

type benchOptions struct {
	relay    string
	events   int
	duration time.Duration
	json     bool
	out      string
}

func (o *benchOptions) run(ctx context.Context, std *stdio) int {
	if o.events < 0 || o.duration < 0 {
		return usageErr(std, "bench", "--events and --duration must not be negative")
	}
	if o.events > 0 && o.duration > 0 {
		return usageErr(std, "bench", "give --events or --duration, not both")
	}
	if _, err := parseRelay(o.relay); err != nil {
		return usageErr(std, "bench", "%v", err)
	}
	if code := needDocker(ctx, std, "bench"); code != exitOK {
		return code
	}
	if benchRunner == nil {
		return unavailable(std, "bench", "the benchmark is not built in this version")
	}
	return benchRunner(ctx, o, std)
}
