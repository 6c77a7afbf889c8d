package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/outboxlab/outboxlab/workload"

	"github.com/outboxlab/outboxlab/report"
	"github.com/outboxlab/outboxlab/scenarios"
)

func runVerb() verb {
	return verb{
		name:    "run",
		summary: "run chaos scenarios on containers against a relay",
		args:    "[--scenario NAME]... [--relay RELAY [--capabilities LIST]] [--seed S] [--events N | --duration D] [--json] [--out DIR]",
		about: `Runs named chaos scenarios on real PostgreSQL, RabbitMQ and toxiproxy
containers (built by ` + "`make images`" + `; a Docker engine is needed): a workload,
a fault schedule drawn from the seed, a heal-and-drain phase and the
checkers. --scenario may be repeated; without it every scenario of the
catalogue runs. --relay is ours, a mutant's name, image:REF for any relay
image that follows the black-box contract, or cmd:COMMAND for one run as a
host process (its arguments split as a shell splits words, single and
double quotes included, but no shell runs it). Before any container
starts, the relay's image must be in the local Docker engine (ours come
from ` + "`make images`" + `) or the command's program must be found, as a path or
on PATH. A live progress line shows events committed and delivered,
the active faults, the phase and the time left. A failed verdict prints the
violated invariant, the offending events, the seed and the replay command,
and exits 1. --out DIR writes scenarios.json, the histories and run.html.`,
		define: func(fs *flag.FlagSet) func(context.Context, *stdio, deps) int {
			o := &runOptions{}
			fs.Var(&o.scenarios, "scenario", "a scenario `NAME` to run; repeat for several (default: the whole catalogue)")
			fs.StringVar(&o.relay, "relay", "ours", "the `RELAY` under test: ours, a mutant name, image:REF or cmd:COMMAND")
			fs.StringVar(&o.capabilities, "capabilities", "", "what an image: or cmd: relay promises beyond the core guarantee: a comma-separated `LIST` of parks, fenced, sweeps, failpoints, records, lease=DURATION, or none (default none)")
			fs.Var(&o.seed, "seed", "the `seed` of the workload and fault schedule (default: drawn from the clock and printed)")
			fs.IntVar(&o.events, "events", 0, "events the workload stages (default: the scenario's own)")
			fs.DurationVar(&o.duration, "duration", 0, "length of the safety phase, instead of --events (default: the scenario's own)")
			fs.BoolVar(&o.json, "json", false, "print the results as JSON instead of a table")
			fs.StringVar(&o.out, "out", "", "write the results bundle (scenarios.json, histories, run.html) to `DIR`")
			fs.BoolVar(&o.list, "list", false, "list the scenarios of the catalogue and exit")
			return o.run
		},
	}
}

type runOptions struct {
	scenarios stringList
	relay     string
	// capabilities is what an image: or cmd: relay declares.
	capabilities string
	seed         seedFlag
	events       int
	duration     time.Duration
	json         bool
	out          string
	list         bool
}

func (o *runOptions) run(ctx context.Context, std *stdio, d deps) int {
	if o.events < 0 || o.duration < 0 {
		return usageErr(std, "run", "--events and --duration must not be negative")
	}
	if o.events > 0 && o.duration > 0 {
		return usageErr(std, "run", "give --events or --duration, not both")
	}
	relay, err := parseRelay(o.relay)
	if err != nil {
		return usageErr(std, "run", "%v", err)
	}
	if o.capabilities != "" {
		if relay.Image == "" && len(relay.Command) == 0 {
			return usageErr(std, "run", "--capabilities is for image: and cmd: relays; %s declares its own", relay.Name)
		}
		if relay, err = relay.WithCapabilities(o.capabilities); err != nil {
			return usageErr(std, "run", "--capabilities: %v", err)
		}
	}
	if o.list {
		for _, n := range d.scenarioNames() {
			fmt.Fprintln(std.out, n)
		}
		return exitOK
	}
	if code := d.needDocker(ctx, std, "run"); code != exitOK {
		return code
	}
	names := []string(o.scenarios)
	known := d.scenarioNames()
	if len(names) == 0 {
		names = known
	}
	for _, n := range names {
		if !slices.Contains(known, n) {
			return usageErr(std, "run", "unknown scenario %q (known: %s)", n, strings.Join(known, ", "))
		}
	}
	if code := d.needRelay(ctx, std, "run", relay); code != exitOK {
		return code
	}
	start := std.now()
	seed := o.seed.orRandom(start)
	if o.json {
		fmt.Fprintf(std.err, "SEED=%d\n", seed)
	} else {
		fmt.Fprintf(std.out, "SEED=%d\n", seed)
	}
	var meta report.Meta
	if o.out != "" {
		meta = report.CollectMeta(ctx, start)
	}
	specs := make([]runSpec, len(names))
	for i, n := range names {
		specs[i] = runSpec{Scenario: n, Seed: seed, Relay: relay, Variant: workload.Outbox, Events: o.events, Duration: o.duration}
	}
	_, results, code := runScenarios(ctx, std, d, "run", specs, o.json)
	if code != exitOK {
		return code
	}
	if len(results) == 0 {
		return unavailable(std, "run", "no scenario could run with relay %s", relay.Name)
	}

	failed, inconclusive := 0, 0
	for _, r := range results {
		switch r.Verdict() {
		case scenarios.VerdictFail:
			failed++
		case scenarios.VerdictInconclusive:
			inconclusive++
		}
	}
	if o.json {
		b, err := json.MarshalIndent(results, "", "  ")
		if err != nil {
			return unavailable(std, "run", "encoding results: %v", err)
		}
		fmt.Fprintln(std.out, string(b))
	} else {
		countsTable(std.out, results, func(r scenarios.Result) string { return r.Scenario }, "scenario")
	}
	w := std.out
	if o.json {
		w = std.err
	}
	for _, r := range results {
		if r.Verdict() == scenarios.VerdictInconclusive {
			fmt.Fprintf(w, "\nINCONCLUSIVE scenario %s (relay %s), seed %d: no checker failed, but a fault could not test what it claims to:\n", r.Scenario, r.Relay, r.Seed)
			for _, why := range r.Inconclusive {
				fmt.Fprintf(w, "  %s\n", why)
			}
			fmt.Fprintf(w, "  replay: %s\n", r.Replay)
		}
		if r.Verdict() != scenarios.VerdictFail {
			continue
		}
		fmt.Fprintln(w)
		report.WriteFailure(w, report.Failure{
			What: fmt.Sprintf("scenario %s (relay %s)", r.Scenario, r.Relay), Seed: r.Seed, Report: r.Report,
			Problems: r.Problems, History: r.History, Replay: r.Replay,
		})
	}
	if o.out != "" {
		file := report.ScenarioFile{Meta: meta}
		var runs []report.Run
		for i, r := range results {
			run := toRun(r, fmt.Sprintf("%s (relay %s)", r.Scenario, r.Relay))
			run.ExpectFail = false
			runs = append(runs, run)
			sr, err := toBundle(o.out, i, r, run.Note)
			if err != nil {
				return unavailable(std, "run", "%v", err)
			}
			file.Runs = append(file.Runs, sr)
		}
		path, err := writeHTML(o.out, "run.html", report.Page{Title: "outboxlab chaos scenarios", Meta: meta, Runs: runs})
		if err != nil {
			return unavailable(std, "run", "%v", err)
		}
		file.HTML = path
		if err := report.WriteFile(o.out, report.FileScenarios, file); err != nil {
			return unavailable(std, "run", "%v", err)
		}
		fmt.Fprintf(w, "\nHTML report: %s\n", path)
	}
	if failed > 0 {
		fmt.Fprintf(w, "%d of %d scenarios failed\n", failed, len(results))
		return exitFail
	}
	if inconclusive > 0 {
		fmt.Fprintf(w, "%d of %d scenarios inconclusive, none failed\n", inconclusive, len(results))
		return exitInconclusive
	}
	return exitOK
}
