package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/outboxlab/outboxlab/workload"

	"github.com/outboxlab/outboxlab/internal/report"
	"github.com/outboxlab/outboxlab/scenarios"
)

// Demo defaults: one seed, so that `make demo` tells the same story each
// time, and a workload small enough to finish in well under 3 minutes.
const (
	demoScenario = scenarios.DualWrite
	demoSeed     = 42
	demoEvents   = 90
	demoOut      = ".build/demo"
)

// demoVariants are the producers the demo compares, the unsafe ones first.
var demoVariants = []workload.Mode{workload.PublishThenCommit, workload.CommitThenPublish, workload.Outbox}

var variantHow = map[workload.Mode]string{
	workload.PublishThenCommit: "publishes the event, then commits the business write",
	workload.CommitThenPublish: "commits the business write, then publishes the event inline",
	workload.Outbox:            "stages the event in the business transaction; a relay publishes it after COMMIT",
	workload.Optimistic:        "commits, then publishes without waiting for a confirm",
}

func demoVerb() verb {
	return verb{
		name:    "demo",
		summary: "play the dual-write story on real containers (what `make demo` runs)",
		args:    "[--lesson NAME|all] [--seed S] [--events N] [--duration D] [--json] [--out DIR]",
		about: `Runs the same workload under the same faults (the broker goes down, a
producer dies right after a COMMIT, some requests roll back) against three
producers: publish-then-commit, commit-then-publish and the outbox, on real
PostgreSQL, RabbitMQ and toxiproxy containers (built by ` + "`make images`" + `;
a Docker engine is needed). It prints a side-by-side table (committed,
delivered, lost, phantom, duplicate deliveries, duplicate effects) with one
sentence per row on what happened and why, and writes an HTML report with a
timeline of every event; it ends by naming that report. The unsafe rows are
expected to lose or invent events; the command exits 1 only when the outbox
row does.

--lesson NAME runs a lesson instead: one question of the outbox pattern's
guarantee table (at-least-once: exactly once? no, the consumer dedupes),
answered live by one scenario of the catalogue run against cases that get
the answer wrong (contrasts) and cases that get it right, with the same
workload and seed; --lesson all runs every lesson. It prints each case's
counts with one sentence built from them and writes lesson-NAME.html, and
exits 0 only when every contrast failed by the checker its lesson teaches
and every other case passed.`,
		define: func(fs *flag.FlagSet) func(context.Context, *stdio, deps) int {
			o := &demoOptions{}
			o.seed = seedFlag{v: demoSeed, set: true}
			fs.Var(&o.seed, "seed", "the `seed` of the workload and the faults")
			fs.IntVar(&o.events, "events", demoEvents, "events each producer tries to send")
			fs.DurationVar(&o.duration, "duration", 0, "length of each run's safety phase (default: the scenario's own)")
			fs.BoolVar(&o.json, "json", false, "print the rows as JSON instead of the table")
			fs.StringVar(&o.out, "out", demoOut, "write demo.json, the histories and demo.html (or a lesson's page) to `DIR`")
			fs.StringVar(&o.lesson, "lesson", "", "run the lesson `NAME` (or all) instead of the dual-write story")
			return func(ctx context.Context, std *stdio, d deps) int {
				fs.Visit(func(f *flag.Flag) { o.eventsSet = o.eventsSet || f.Name == "events" })
				return o.run(ctx, std, d)
			}
		},
	}
}

type demoOptions struct {
	seed      seedFlag
	events    int
	eventsSet bool
	duration  time.Duration
	json      bool
	out       string
	lesson    string
}

// demoRow is one producer's line of the demo, as --json prints it.
type demoRow struct {
	Variant string `json:"variant"`
	report.ScenarioRun
}

func (o *demoOptions) run(ctx context.Context, std *stdio, d deps) int {
	if o.lesson != "" {
		if o.json {
			return usageErr(std, "demo", "--json prints the dual-write story's rows; a lesson prints its table")
		}
		if o.events < 1 || o.duration < 0 {
			return usageErr(std, "demo", "--events must be at least 1 and --duration not negative")
		}
		return o.runLessons(ctx, std, d)
	}
	if o.events < 1 {
		return usageErr(std, "demo", "--events must be at least 1")
	}
	if o.duration < 0 {
		return usageErr(std, "demo", "--duration must not be negative")
	}
	if o.out == "" {
		return usageErr(std, "demo", "--out must name a directory: the demo always writes its report")
	}
	if err := checkOutDir(o.out); err != nil {
		return unavailable(std, "demo", "--out %s: %v", o.out, err)
	}
	if code := d.needDocker(ctx, std, "demo"); code != exitOK {
		return code
	}
	if code := d.needRelay(ctx, std, "demo", scenarios.RelayUnderTest{Name: "ours"}); code != exitOK {
		return code
	}
	start := std.now()
	seed := o.seed.v
	w := std.out
	if o.json {
		w = std.err
	}
	fmt.Fprintf(w, "SEED=%d\n", seed)
	if !o.json {
		demoIntro(w, seed, o.events)
	}
	specs := make([]runSpec, len(demoVariants))
	for i, v := range demoVariants {
		specs[i] = runSpec{Scenario: demoScenario, Seed: seed, Relay: scenarios.RelayUnderTest{Name: "ours"},
			Variant: v, Events: o.events, Duration: o.duration}
	}
	specs, results, code, _ := runScenarios(ctx, std, d, "demo", specs, false, nil)
	if code != exitOK {
		return code
	}
	if len(results) != len(demoVariants) {
		return unavailable(std, "demo", "only %d of the %d producers could run", len(results), len(demoVariants))
	}
	meta := report.CollectMeta(ctx, start)
	replay := fmt.Sprintf("%s demo --seed %d --events %d", replayPrefix, seed, o.events)
	if o.duration > 0 {
		replay += fmt.Sprintf(" --duration %s", o.duration)
	}
	for i := range results {
		// The demo's scenario is assembled by the command: the demo
		// itself replays it.
		results[i].Replay = replay
	}

	runs := make([]report.Run, len(results))
	file := report.ScenarioFile{Meta: meta}
	for i, r := range results {
		runs[i] = toRun(r, string(specs[i].Variant))
		sr, err := toBundle(o.out, i, r, runs[i].Note)
		if err != nil {
			return unavailable(std, "demo", "%v", err)
		}
		file.Runs = append(file.Runs, sr)
	}
	page := report.Page{
		Title: "outboxlab demo: the dual-write problem",
		Intro: fmt.Sprintf("The same workload (%d events, seed %d) and the same faults (the broker goes down, a producer dies "+
			"right after a COMMIT, some requests roll back) against three ways of getting an event from a business "+
			"transaction to a message broker. Only the outbox neither loses nor invents events.", o.events, seed),
		Meta: meta, Runs: runs,
	}
	path, err := writeHTML(o.out, "demo.html", page)
	if err != nil {
		return unavailable(std, "demo", "%v", err)
	}
	file.HTML = path
	if err := report.WriteFile(o.out, report.FileDemo, file); err != nil {
		return unavailable(std, "demo", "%v", err)
	}

	if o.json {
		rows := make([]demoRow, len(file.Runs))
		for i, r := range file.Runs {
			rows[i] = demoRow{Variant: r.Variant, ScenarioRun: r}
		}
		b, err := json.MarshalIndent(rows, "", "  ")
		if err != nil {
			return unavailable(std, "demo", "encoding rows: %v", err)
		}
		fmt.Fprintln(std.out, string(b))
	} else {
		demoTable(std.out, results, runs)
	}

	code = exitOK
	for i, r := range results {
		if specs[i].Variant != workload.Outbox {
			continue
		}
		if !r.Valid || r.Counts.Lost > 0 || r.Counts.Phantom > 0 {
			fmt.Fprintln(w)
			report.WriteFailure(w, report.Failure{
				What: "the outbox producer in the demo", Seed: r.Seed, Report: r.Report, Problems: r.Problems,
				History: r.History, Replay: r.Replay,
			})
			code = exitFail
		}
	}
	fmt.Fprintf(w, "\nHTML report: %s\n", path)
	fmt.Fprintf(w, "took %s\n", std.now().Sub(start).Round(time.Second))
	return code
}

func demoIntro(w io.Writer, seed uint64, events int) {
	fmt.Fprintf(w, `
The dual-write problem, on real PostgreSQL and RabbitMQ.

A service must commit a business write and tell the world about it. Three
producers try, with the same workload (%d events, seed %d) and the same
faults: the broker goes down for a while, a producer dies right after a
COMMIT, and some requests roll back.
`, events, seed)
	for _, v := range demoVariants {
		fmt.Fprintf(w, "  %-20s %s\n", v, variantHow[v])
	}
	fmt.Fprintln(w)
}

// demoTable prints the side-by-side table, each row followed by its
// sentence.
func demoTable(w io.Writer, results []scenarios.Result, runs []report.Run) {
	fmt.Fprintln(w)
	countsTable(w, results, func(_ int, r scenarios.Result) string { return r.Variant }, "producer")
	fmt.Fprintln(w)
	for i, r := range results {
		fmt.Fprintf(w, "%s: %s\n", r.Variant, runs[i].Note)
	}
}
