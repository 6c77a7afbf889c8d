package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/outboxlab/outboxlab/internal/argv"
	"github.com/outboxlab/outboxlab/internal/campaign"
	"github.com/outboxlab/outboxlab/internal/mutant"
	"github.com/outboxlab/outboxlab/internal/mutant/infra"
	"github.com/outboxlab/outboxlab/internal/report"
	"github.com/outboxlab/outboxlab/scenarios"
)

func mutantsVerb() verb {
	return verb{
		name:    "mutants",
		summary: "run the mutant catalogue and print which checker kills which mutant",
		args:    "[--tier sim|infra|all] [--mutant NAME]... [--seeds N] [--seed S] [--shard K/N] [--json] [--out DIR] | --generated [--kind sql|go|all] [--sample N | --mutant ID...] [--seed S] [--sim-seeds N] [--sql-seeds N] [--workers N] [--containers=false] [--json] [--out DIR]",
		about: `Runs the reference relay and every mutant of the catalogue (realistic relay
bugs: publish before commit, mark before publish, no lease, ...) or the ones
named by --mutant under the harness, and prints the kill matrix: for each
mutant, whether it was killed, by which checker and scenario, on which seed,
the seconds it took and the actions of the shrunk counterexample. --tier sim
runs them in the deterministic simulation (no Docker), trying up to --seeds
seeds each; the reference must survive as many. --tier infra runs the
mutants that have an infrastructure form as relay containers under the
chaos scenarios that expose them (a Docker engine and ` + "`make images`" + ` are
needed); --tier all runs both. With --json the matrix is a JSON list of
{"mutant","killed","checker","scenario","seed","seconds","steps"}, the
reference included. A surviving mutant or a killed reference makes the
command exit 1. --shard K/N runs only the K-th of N contiguous blocks of
the matrix's cells: in the sim tier the reference, then each mutant; in
the infra tier each mutant with an infrastructure form, the reference
running what the shard's mutants ran. Without the flag, OUTBOXLAB_SHARD or
JOB_COMPLETION_INDEX with OUTBOXLAB_SHARDS choose it. --out DIR writes
mutants.json.

--generated generates the mutants instead: SQL mutants of every statement
of the store and the inbox, and Go operator mutants of relay/ and
consumer/ (--kind chooses), each run against the fast tier (the
simulation on the fakes over --sim-seeds seeds, the SQL-faithful tier over
--sql-seeds, the store's behaviour suite on PostgreSQL under a simulated
clock, then the tests with -short that reach the mutated line; a tier
that does not reach the line on the unmutated code is left out, and of
the simulation and those tests the one that cost less on the unmutated
code runs first; one local PostgreSQL server per worker) by --workers
workers (at most 2), stopping at the first kill, and prints per mutant
the tier, checker and seed that killed it and the seconds each step took;
a mutant that does not compile or prepare is invalid, not killed. A
survivor of the fast tier that no judgement explains (a gap) meets the
container tier, one at a time: the mutated package's tests on containers
(a failing one kills only if it passes on the unmutated code), then the
catalogue with the relay and the harness built from the mutated code
(a failed scenario kills; a Docker engine and the images of ` + "`make images`" + `
are needed; --containers=false, or no engine, leaves gaps as they are). --sample N runs N of them
chosen by --seed (default 1); --mutant ID runs the generated mutant with
that id (repeat for several), as a survivor's replay does. With --json it prints {"generated",
"killed_fast", "killed_all", "equivalent", "survivors": [{"id", "file",
"line", "diff", "judgement"}], ...}; survivors are judged by
mutant/generated/equivalent.txt (equivalent) and excluded.txt (a log
line is all they change: counted apart and out of the score), the others
are gaps. --out DIR writes
generated.json. A gap makes the command exit 1.`,
		define: func(fs *flag.FlagSet) func(context.Context, *stdio, deps) int {
			o := &mutantsOptions{}
			fs.StringVar(&o.tier, "tier", "sim", "where the mutants run: sim, infra or all")
			fs.Var(&o.mutants, "mutant", "a mutant `NAME` to run; repeat for several (default: the whole catalogue)")
			fs.IntVar(&o.seeds, "seeds", 2000, "simulation seeds tried per mutant, and survived by the reference (`N`)")
			fs.Var(&o.seed, "seed", "the first `seed` (default: drawn from the clock and printed)")
			fs.StringVar(&o.shard, "shard", "", "run only shard `K/N` of the matrix's cells (default: from OUTBOXLAB_SHARD, or JOB_COMPLETION_INDEX with OUTBOXLAB_SHARDS; else all)")
			fs.BoolVar(&o.json, "json", false, "print the kill matrix as JSON")
			fs.StringVar(&o.out, "out", "", "write mutants.json (generated.json with --generated) to `DIR`")
			fs.BoolVar(&o.generated, "generated", false, "generate the mutants and run them against the fast tier")
			fs.StringVar(&o.kind, "kind", "all", "with --generated, which mutants: sql, go or all")
			fs.IntVar(&o.sample, "sample", 0, "with --generated, run only `N` mutants chosen by --seed (0: all)")
			fs.IntVar(&o.simSeeds, "sim-seeds", 300, "with --generated, seeds on the fakes per Go mutant (`N`)")
			fs.IntVar(&o.sqlSeeds, "sql-seeds", 30, "with --generated, seeds on the SQL-faithful tier per mutant (`N`)")
			fs.IntVar(&o.workers, "workers", 1, "with --generated, mutants run at once (`N`, at most 2)")
			fs.BoolVar(&o.containers, "containers", true, "with --generated, run the fast tier's gaps on the container tier")
			return o.run
		},
	}
}

type mutantsOptions struct {
	tier    string
	mutants stringList
	seeds   int
	seed    seedFlag
	shard   string
	json    bool
	out     string

	generated                           bool
	kind                                string
	sample, simSeeds, sqlSeeds, workers int
	containers                          bool
}

func (o *mutantsOptions) run(ctx context.Context, std *stdio, d deps) int {
	if o.generated {
		return o.runGenerated(ctx, std, d)
	}
	tier, err := mutant.ParseTier(o.tier)
	if err != nil {
		return usageErr(std, "mutants", "--tier must be sim, infra or all, not %q", o.tier)
	}
	if o.seeds < 1 {
		return usageErr(std, "mutants", "--seeds must be at least 1, not %d", o.seeds)
	}
	shard, err := campaign.Resolve(o.shard, d.getenv)
	if err != nil {
		if o.shard != "" {
			return usageErr(std, "mutants", "--shard: %v", err)
		}
		return usageErr(std, "mutants", "%v", err)
	}
	if o.out != "" {
		if err := checkOutDir(o.out); err != nil {
			return unavailable(std, "mutants", "--out %s: %v", o.out, err)
		}
	}
	if tier != mutant.TierSim {
		if code := d.needDocker(ctx, std, "mutants"); code != exitOK {
			return code
		}
		// The infrastructure tier runs our relay and its mutants build.
		for _, u := range []scenarios.RelayUnderTest{{Name: "ours"}, {Name: "mutants", Mutants: true}} {
			if code := d.needRelay(ctx, std, "mutants", u); code != exitOK {
				return code
			}
		}
	}
	start := std.now()
	first := o.seed.orRandom(start)
	opts := mutant.Options{
		Mutants:       o.mutants,
		FirstSeed:     first,
		Seeds:         o.seeds,
		ExposureSeeds: min(100, o.seeds),
		Log:           func(s string) { fmt.Fprintln(std.err, s) },
		Shard:         shard,
	}
	selected, err := opts.Selected()
	if err != nil {
		return usageErr(std, "mutants", "%v", err)
	}
	cells := mutant.Cells(tier, selected)
	mine := campaign.Select(shard, cells)
	if tier != mutant.TierSim {
		opts.Infra = infra.Tier(infra.Options{})
	}
	if !o.json {
		fmt.Fprintf(std.out, "SEED=%d tier=%s seeds=%d\n", first, tier, o.seeds)
		if !shard.IsWhole() {
			var names []string
			for _, c := range mine {
				names = append(names, c.String())
			}
			fmt.Fprintf(std.out, "shard %s of %d cells: %d (%s)\n", shard, len(cells), len(mine), orNone(strings.Join(names, ", ")))
		}
	}
	var meta report.Meta
	if o.out != "" {
		meta = report.CollectMeta(ctx, start)
	}
	rows, err := mutant.RunMatrix(ctx, tier, opts)
	if ctx.Err() != nil {
		// A mutant that was not run to the end survived nothing.
		return interrupted(std, ctx, "mutants", fmt.Sprintf("%d rows of the kill matrix finished, no verdict", len(rows)))
	}
	if err != nil {
		if code := environmentErr(std, "mutants", err); code != 0 {
			return code
		}
		fmt.Fprintf(std.err, "outboxlab mutants: %v\n", err)
		return exitUsage
	}

	if o.json {
		b, err := json.Marshal(rows)
		if err != nil {
			fmt.Fprintf(std.err, "outboxlab mutants: encoding the matrix: %v\n", err)
			return exitUsage
		}
		fmt.Fprintln(std.out, string(b))
	} else {
		writeMatrix(std, rows)
	}
	verdict := exitOK
	for _, r := range rows {
		if r.Err != nil || r.Killed == (r.Mutant == mutant.Reference) {
			verdict = exitFail
		}
	}
	if o.out != "" {
		mf := mutantFile(meta, tier, rows)
		mf.Part = &report.Part{Shard: shard.String(), Campaign: o.campaignCommand(first), Cells: len(mine)}
		if err := report.WriteFile(o.out, report.FileMutants, mf); err != nil {
			fmt.Fprintf(std.err, "outboxlab mutants: %v\n", err)
			// A failed verdict stands without its file.
			if verdict == exitOK {
				return exitUsage
			}
		} else if !o.json {
			fmt.Fprintf(std.out, "results: %s\n", filepath.Join(o.out, report.FileMutants))
		}
	}
	if !o.json {
		if verdict == exitOK {
			fmt.Fprintln(std.out, "PASS: every mutant killed, the reference survived")
		} else {
			fmt.Fprintln(std.out, "FAIL: a mutant survived, or the reference was killed")
		}
	}
	return verdict
}

// campaignCommand is the command that runs the whole matrix, every shard
// of it, from the seed first.
func (o *mutantsOptions) campaignCommand(first uint64) string {
	cmd := fmt.Sprintf("%s mutants --tier %s", replayPrefix, o.tier)
	for _, m := range o.mutants {
		cmd += " --mutant " + argv.QuoteArg(m)
	}
	return cmd + fmt.Sprintf(" --seeds %d --seed %d", o.seeds, first)
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// writeMatrix prints the kill matrix as a table, then each
// counterexample and replay.
func writeMatrix(std *stdio, rows []mutant.Row) {
	tw := tabwriter.NewWriter(std.out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "tier\tmutant\tkilled\tchecker\tscenario\tseed\tseconds\tsteps")
	var secs []float64
	for _, r := range rows {
		killed := "no"
		switch {
		case r.Err != nil:
			killed = "error"
		case r.Killed:
			killed = "yes"
		}
		steps := "-"
		if r.Steps > 0 {
			steps = fmt.Sprintf("%d %s", r.Steps, r.StepsOf)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%.3f\t%s\n", r.Tier, r.Mutant, killed, dash(r.Checker), r.Scenario, r.Seed, r.Seconds, steps)
		if r.Tier == mutant.TierSim && r.Mutant != mutant.Reference && r.Killed {
			secs = append(secs, r.Seconds)
		}
	}
	tw.Flush()
	if len(secs) > 0 {
		sort.Float64s(secs)
		fmt.Fprintf(std.out, "median time to kill (sim): %.3fs over %d mutants\n", secs[len(secs)/2], len(secs))
	}
	for _, r := range rows {
		if r.Err != nil {
			fmt.Fprintf(std.out, "\n%s [%s]: could not run: %v\n", r.Mutant, r.Tier, r.Err)
			continue
		}
		if !r.Killed {
			continue
		}
		fmt.Fprintf(std.out, "\n%s [%s]: %s: %s\n", r.Mutant, r.Tier, r.Checker, r.Detail)
		if len(r.Counterexample) > 0 {
			fmt.Fprintf(std.out, "  shrunk counterexample:\n    %s\n", strings.Join(r.Counterexample, "\n    "))
		}
		if r.Replay != "" {
			fmt.Fprintf(std.out, "  replay: %s\n", r.Replay)
		}
	}
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// mutantFile is the matrix as report.FileMutants holds it. Rows of the
// infrastructure tier are named "<mutant> (infra)" when both tiers ran.
func mutantFile(meta report.Meta, tier mutant.Tier, rows []mutant.Row) report.MutantFile {
	mf := report.MutantFile{Meta: meta, Tier: string(tier)}
	seen := map[string]bool{}
	for _, r := range rows {
		if r.Checker != "" && !seen[r.Checker] {
			seen[r.Checker] = true
			mf.Checkers = append(mf.Checkers, r.Checker)
		}
		name := r.Mutant
		if tier == mutant.TierAll && r.Tier == mutant.TierInfra {
			name += " (infra)"
		}
		mr := report.MutantRow{Name: name, Seeds: r.Tried, Killed: r.Killed, Replay: r.Replay, Reference: r.Mutant == mutant.Reference,
			Checker: r.Checker, Scenario: r.Scenario, Seconds: r.Seconds, Steps: r.Steps}
		if m, ok := mutant.Lookup(r.Mutant); ok {
			mr.Description = m.Description
		} else {
			mr.Description = "the unmutated relay and consumer: must survive"
		}
		if r.Killed {
			mr.KilledBy = map[string]int{r.Checker: 1}
			mr.FirstKill = r.Seed
		}
		mf.Mutants = append(mf.Mutants, mr)
	}
	return mf
}
