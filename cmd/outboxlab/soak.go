package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"path/filepath"
	"time"

	"github.com/outboxlab/outboxlab/internal/bench"
	"github.com/outboxlab/outboxlab/internal/bench/result"
	"github.com/outboxlab/outboxlab/internal/report"
	"github.com/outboxlab/outboxlab/testenv"
)

// soakOnContainers runs a soak on a fresh environment.
func soakOnContainers(ctx context.Context, opts bench.SoakOptions, status func(string)) (result.Soak, error) {
	eopts := testenv.Options{Logf: func(format string, args ...any) { status("environment: " + fmt.Sprintf(format, args...)) }}
	status("environment: starting PostgreSQL, RabbitMQ and toxiproxy")
	env, err := testenv.Start(ctx, eopts)
	if err != nil {
		return result.Soak{}, fmt.Errorf("starting the environment: %w", err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), closeTimeout)
		defer cancel()
		_ = env.Close(cctx)
	}()
	return bench.Soak(ctx, env, opts)
}

func soakVerb() verb {
	return verb{
		name:    "soak",
		summary: "age a relay's outbox under a long stream of events, on containers",
		args:    "[--relay ours|watermill] [--events N] [--timeout D] [--json] [--out DIR]",
		about: `Pushes --events events (a million by default) through one relay's outbox on
real PostgreSQL and RabbitMQ containers (built by ` + "`make images`" + `), staging them
in chunks as the relay drains them, with at most 20,000 waiting, and
samples every 5 s: the events published a second, the claim statement's
mean execution time on the database (pg_stat_statements), the outbox
table's live and dead tuples, its size and its indexes', autovacuums, and
the sweep's statements, rows and time. From a third of the events
published to two thirds, a REPEATABLE READ transaction holds back vacuum.
It shows whether the claim stays fast as the table ages. --relay ours
(default) is this repository's relay, one replica, its sweep on with a
retention of 30 s; --relay watermill is watermill's SQL forwarder, which
deletes nothing. The run stops at --timeout (30 minutes) with what it
published then. The queue is purged at every sample: the soak measures
the table, not delivery. It prints the figures over time and how long the
run took; --out DIR writes soak.json and soak.html (the plots); --json
prints the result as JSON.`,
		define: func(fs *flag.FlagSet) func(context.Context, *stdio, deps) int {
			o := &soakOptions{}
			fs.StringVar(&o.relay, "relay", "ours", "the relay: ours or watermill")
			fs.IntVar(&o.events, "events", bench.DefaultSoakEvents, "how many events to push through (`N`)")
			fs.DurationVar(&o.timeout, "timeout", 30*time.Minute, "stop the run after `D`")
			fs.BoolVar(&o.json, "json", false, "print the result as JSON")
			fs.StringVar(&o.out, "out", "", "write soak.json and soak.html to `DIR`")
			return o.run
		},
	}
}

type soakOptions struct {
	relay   string
	events  int
	timeout time.Duration
	json    bool
	out     string
}

func (o *soakOptions) run(ctx context.Context, std *stdio, d deps) int {
	contender := map[string]string{"ours": bench.SoakRelay, "watermill": bench.SoakWatermill}[o.relay]
	switch {
	case contender == "":
		return usageErr(std, "soak", "--relay %q: want ours or watermill", o.relay)
	case o.events < 1:
		return usageErr(std, "soak", "--events must be at least 1, not %d", o.events)
	case o.timeout <= 0:
		return usageErr(std, "soak", "--timeout must be positive")
	}
	if o.out != "" {
		if err := checkOutDir(o.out); err != nil {
			return unavailable(std, "soak", "--out %s: %v", o.out, err)
		}
	}
	if code := d.needDocker(ctx, std, "soak"); code != exitOK {
		return code
	}
	start := std.now()
	w := std.out
	if o.json {
		w = std.err
	}
	fmt.Fprintf(w, "soak: relay %s, %d events\n", o.relay, o.events)
	opts := bench.SoakOptions{Contender: contender, Events: o.events, Timeout: o.timeout,
		Logf: func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }}
	res, err := d.soak(ctx, opts, func(line string) { fmt.Fprintln(w, line) })
	if ctx.Err() != nil {
		return interrupted(std, ctx, "soak", "the soak did not finish, no figures")
	}
	if err != nil {
		if code := environmentErr(std, "soak", err); code != 0 {
			return code
		}
		return unavailable(std, "soak", "%v", err)
	}
	if o.json {
		b, err := json.MarshalIndent(res, "", "  ")
		if err != nil {
			return unavailable(std, "soak", "encoding the result: %v", err)
		}
		fmt.Fprintln(std.out, string(b))
	} else {
		for _, line := range report.SoakSummary(res) {
			fmt.Fprintln(std.out, line)
		}
	}
	if o.out != "" {
		f := report.SoakFile{Meta: report.CollectMeta(ctx, start), Soak: res}
		if err := report.WriteSoakPlots(o.out, &f); err != nil {
			return unavailable(std, "soak", "%v", err)
		}
		if err := report.WriteFile(o.out, report.FileSoak, f); err != nil {
			return unavailable(std, "soak", "%v", err)
		}
		html := filepath.Join(o.out, "soak.html")
		if err := report.WriteSoakHTML(html, f); err != nil {
			return unavailable(std, "soak", "%v", err)
		}
		fmt.Fprintf(w, "results: %s, %s\n", filepath.Join(o.out, report.FileSoak), html)
	}
	return exitOK
}
