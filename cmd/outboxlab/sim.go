package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"time"

	"github.com/outboxlab/outboxlab/testenv/pgserver"

	"github.com/outboxlab/outboxlab/campaign"
	"github.com/outboxlab/outboxlab/report"
	"github.com/outboxlab/outboxlab/sim"
)

// simReportRuns bounds the failing seeds drawn in the HTML report.
const simReportRuns = 3

func simVerb() verb {
	return verb{
		name:    "sim",
		summary: "run the deterministic simulation over many seeds (no Docker needed)",
		args:    "[--seeds N] [--seed S] [--shard K/N] [--mutant NAME] [--sql] [--json] [--out DIR]",
		about: `Runs the production relay and consumer against in-memory PostgreSQL and
RabbitMQ fakes under a seeded scheduler that crashes, pauses, cuts and skews
them, for --seeds consecutive seeds from --seed, and checks every history.
The same seed gives the same history byte for byte. It prints SEED= and the
swarm parameters first, then the summary; with --json only the summary, as
one JSON object. A failing seed prints the violated invariant, its first
offending events with their timelines and the command that replays it alone.
With --out DIR it writes sim.json, the histories of the failing seeds, and
sim.html, an HTML report of the failing seeds (or of the one seed run).
--shard K/N runs only the K-th of N contiguous blocks of the seeds (their
sizes differ by at most one; the N shards together run every seed once), so
that N machines share a campaign; without the flag, OUTBOXLAB_SHARD=K/N or
a Kubernetes Indexed Job's JOB_COMPLETION_INDEX (0-based) with
OUTBOXLAB_SHARDS=N choose the shard. The summary names the shard and its
first seed, and the replay command runs the shard's seeds alone.
--sql runs the SQL-faithful tier instead of the fakes: the production
PostgreSQL store, inbox and staging (LISTEN/NOTIFY included) on a fresh
database per seed of throwaway PostgreSQL servers, one per CPU, started
from the local server binaries (or the outboxlab/postgres container when
they are missing), with the database clock under the simulation's control.
It is slower (seconds per seed, not milliseconds) and prints the same
summary.`,
		define: func(fs *flag.FlagSet) func(context.Context, *stdio, deps) int {
			o := &simOptions{}
			fs.IntVar(&o.seeds, "seeds", 1, "how many consecutive seeds to run (`N`)")
			fs.Var(&o.seed, "seed", "the first `seed` (default: drawn from the clock and printed)")
			fs.StringVar(&o.shard, "shard", "", "run only shard `K/N` of the seeds (default: from OUTBOXLAB_SHARD, or JOB_COMPLETION_INDEX with OUTBOXLAB_SHARDS; else all)")
			fs.StringVar(&o.mutant, "mutant", "", "simulate the named mutant instead of the production relay")
			fs.BoolVar(&o.sql, "sql", false, "run the SQL-faithful tier on throwaway PostgreSQL servers instead of the fakes")
			fs.BoolVar(&o.json, "json", false, "print only the summary, as JSON")
			fs.StringVar(&o.out, "out", "", "write the results bundle (sim.json, histories, sim.html) to `DIR`")
			return o.run
		},
	}
}

type simOptions struct {
	seeds  int
	seed   seedFlag
	shard  string
	mutant string
	sql    bool
	json   bool
	out    string
}

// simJSON is the summary --json prints: the simulation's summary, with
// first_failure_seed null when no seed failed, and the share of the
// campaign that ran.
type simJSON struct {
	sim.Summary
	// FirstFailureSeed shadows the summary's, which is 0 when none
	// failed (0 is a seed too).
	FirstFailureSeed *uint64 `json:"first_failure_seed"`
	// FirstSeed is the first seed this run ran; null when its shard was
	// empty. The run ran Seeds seeds from it, when it was not interrupted.
	FirstSeed *uint64 `json:"first_seed"`
	// Shard is the share of the campaign that ran, K/N ("1/1": all).
	Shard string `json:"shard"`
}

func (o *simOptions) replay(seed uint64, n int) string {
	s := fmt.Sprintf("%s sim --seeds %d --seed %d", replayPrefix, n, seed)
	if o.mutant != "" {
		s += " --mutant " + o.mutant
	}
	if o.sql {
		s += " --sql"
	}
	return s
}

func (o *simOptions) run(ctx context.Context, std *stdio, d deps) int {
	if o.seeds < 1 {
		return usageErr(std, "sim", "--seeds must be at least 1, not %d", o.seeds)
	}
	shard, err := campaign.Resolve(o.shard, d.getenv)
	if err != nil {
		if o.shard != "" {
			return usageErr(std, "sim", "--shard: %v", err)
		}
		return usageErr(std, "sim", "%v", err)
	}
	opts := sim.Options{}
	if o.mutant != "" {
		var code int
		if opts, code = d.mutants.lookup(std, "sim", o.mutant); code != exitOK {
			return code
		}
	}
	start := std.now()
	if o.sql {
		backend, stop, err := startSQLTier(ctx)
		if err != nil {
			fmt.Fprintf(std.err, "outboxlab sim: --sql: %v\n", err)
			return exitUsage
		}
		defer func() {
			if err := stop(); err != nil {
				fmt.Fprintf(std.err, "outboxlab sim: --sql: %v\n", err)
			}
		}()
		opts.SQL = backend
	}
	campaignFirst := o.seed.orRandom(start)
	if uint64(o.seeds-1) > math.MaxUint64-campaignFirst {
		return usageErr(std, "sim", "--seeds %d from --seed %d would pass the largest seed, %d: give at most %d seeds from there, or a lower --seed",
			o.seeds, campaignFirst, uint64(math.MaxUint64), math.MaxUint64-campaignFirst+1)
	}
	lo, hi := shard.Range(o.seeds)
	n := hi - lo
	first := campaignFirst + uint64(lo)
	part := report.Part{Shard: shard.String(), Campaign: o.replay(campaignFirst, o.seeds), Cells: n}
	if n == 0 {
		// Fewer seeds than shards: this one has nothing to do, and its
		// bundle says so, for the merge of the shards.
		if o.out != "" {
			file := report.SimFile{Meta: report.CollectMeta(ctx, start), First: first, Mutant: o.mutant, Replay: part.Campaign, Part: &part, Tier: o.tier()}
			if err := report.WriteFile(o.out, report.FileSim, file); err != nil {
				fmt.Fprintf(std.err, "outboxlab sim: %v\n", err)
				return exitUsage
			}
		}
		if o.json {
			return o.printJSON(std, simJSON{Shard: shard.String()})
		}
		// No seed ran, so none passed: no verdict is printed.
		fmt.Fprintf(std.out, "shard %s of %d seeds from %d is empty: there are fewer seeds than shards; no seed ran, no verdict\n", shard, o.seeds, campaignFirst)
		return exitOK
	}
	header := sim.Describe(first, opts)
	if !o.json {
		fmt.Fprintln(std.out, header)
		if !shard.IsWhole() {
			fmt.Fprintf(std.out, "shard %s of seeds %d..%d: seeds %d..%d (%d of %d)\n",
				shard, campaignFirst, campaignFirst+uint64(o.seeds)-1, first, first+uint64(n)-1, n, o.seeds)
		} else if n > 1 {
			fmt.Fprintf(std.out, "seeds %d..%d (each draws its own swarm; the first is shown)\n", first, first+uint64(n)-1)
		}
	}
	var meta report.Meta
	if o.out != "" {
		meta = report.CollectMeta(ctx, start)
	}

	// A run allocates and drops whole worlds: collecting less often is
	// worth more than the memory it keeps, unless GOGC says otherwise.
	if os.Getenv("GOGC") == "" {
		defer debug.SetGCPercent(debug.SetGCPercent(400))
	}
	pr := newProgress(std, false)
	done := make(chan sim.Summary, 1)
	go func() { done <- sim.RunMany(ctx, first, n, opts) }()
	tick := time.NewTicker(200 * time.Millisecond)
	var sum sim.Summary
wait:
	for {
		select {
		case sum = <-done:
			break wait
		case <-tick.C:
			pr.Update(fmt.Sprintf("sim: %d seeds from %d, %s elapsed", n, first, std.now().Sub(start).Round(time.Second)))
		}
	}
	tick.Stop()
	pr.Clear()
	if ctx.Err() != nil {
		return interrupted(std, ctx, "sim", fmt.Sprintf("%d of %d seeds from %d finished, no verdict", sum.Seeds, n, first))
	}

	if o.json {
		js := simJSON{Summary: sum, FirstSeed: &first, Shard: shard.String()}
		if sum.Failed > 0 {
			js.FirstFailureSeed = &sum.FirstFailureSeed
		}
		if code := o.printJSON(std, js); code != exitOK {
			return code
		}
	} else {
		first := "none"
		if sum.Failed > 0 {
			first = fmt.Sprint(sum.FirstFailureSeed)
		}
		fmt.Fprintf(std.out, "seeds=%d failed=%d seeds/s=%.1f steps/seed=%.1f events=%d first_failure_seed=%s history_sha256=%s\n",
			sum.Seeds, sum.Failed, sum.SeedsPerSec, sum.StepsPerSeed, sum.Events, first, sum.HistorySHA256)
	}

	if o.out != "" {
		if err := o.writeBundle(meta, part, first, n, sum, opts); err != nil {
			fmt.Fprintf(std.err, "outboxlab sim: %v\n", err)
			return exitUsage
		}
		if !o.json {
			fmt.Fprintf(std.out, "results: %s, report: %s\n", filepath.Join(o.out, report.FileSim), filepath.Join(o.out, "sim.html"))
		}
	}

	if sum.Failed == 0 {
		if !o.json {
			fmt.Fprintln(std.out, "PASS")
		}
		return exitOK
	}
	w := std.out
	if o.json {
		w = std.err
	}
	var failing []string
	for _, f := range sum.Failures {
		failing = append(failing, fmt.Sprint(f.Seed))
	}
	more := ""
	if sum.Failed > len(sum.Failures) {
		more = ", ..."
	}
	fmt.Fprintf(w, "%d of %d seeds failed: %s%s\n", sum.Failed, sum.Seeds, strings.Join(failing, ", "), more)
	f := sum.Failures[0]
	var problems []string
	if f.Err != nil {
		problems = append(problems, f.Err.Error())
	}
	what := fmt.Sprintf("simulation seed %d", f.Seed)
	if f.Variant != "" {
		what += " (" + f.Variant + ")"
	}
	if err := report.WriteFailure(w, report.Failure{
		What: what, Seed: f.Seed, Report: f.Report, Problems: problems, History: f.History, Replay: o.replay(f.Seed, 1),
	}); err != nil {
		fmt.Fprintf(std.err, "outboxlab sim: %v\n", err)
	}
	return exitFail
}

// printJSON prints the --json summary.
func (o *simOptions) printJSON(std *stdio, js simJSON) int {
	b, err := json.Marshal(js)
	if err != nil {
		fmt.Fprintf(std.err, "outboxlab sim: encoding the summary: %v\n", err)
		return exitUsage
	}
	fmt.Fprintln(std.out, string(b))
	return exitOK
}

// tier is the report's name of the tier the batch ran on.
func (o *simOptions) tier() string {
	if o.sql {
		return report.SimTierSQL
	}
	return ""
}

// writeBundle writes sim.json, the failing histories and sim.html.
// The seeds are n from first: the run's shard, part of the campaign.
func (o *simOptions) writeBundle(meta report.Meta, part report.Part, first uint64, n int, sum sim.Summary, opts sim.Options) error {
	file := report.SimFile{Meta: meta, First: first, Mutant: o.mutant, Summary: sum, Replay: o.replay(first, n), Part: &part, Tier: o.tier()}
	var runs []report.Run
	for _, f := range sum.Failures {
		rel, err := report.WriteHistory(o.out, fmt.Sprintf("sim-seed-%d.jsonl", f.Seed), f.History)
		if err != nil {
			return err
		}
		run := report.FromSim(f, o.replay(f.Seed, 1))
		file.Failures = append(file.Failures, report.SimFailure{Seed: f.Seed, Problems: run.Problems, Replay: run.Replay, History: rel})
		if len(runs) < simReportRuns {
			run.ExpectFail = o.mutant != ""
			runs = append(runs, run)
		}
	}
	if n == 1 && len(runs) == 0 {
		runs = append(runs, report.FromSim(sim.Run(first, opts), o.replay(first, 1)))
	}
	if err := report.WriteFile(o.out, report.FileSim, file); err != nil {
		return err
	}
	title := fmt.Sprintf("outboxlab simulation: %d seeds from %d", sum.Seeds, first)
	intro := fmt.Sprintf("%d of %d seeds failed.", sum.Failed, sum.Seeds)
	if sum.Failed > len(runs) && len(runs) > 0 {
		intro += fmt.Sprintf(" The first %d failing seeds are drawn below.", len(runs))
	}
	if len(runs) == 0 {
		intro += " No seed failed, so no run is drawn: run one seed (--seeds 1) to see its timeline."
	}
	return report.WriteHTMLFile(filepath.Join(o.out, "sim.html"), report.Page{Title: title, Intro: intro, Meta: meta, Runs: runs})
}

// startSQLTier starts one throwaway PostgreSQL server per CPU and the SQL
// tier's backend on them; stop removes both.
func startSQLTier(ctx context.Context) (*sim.SQL, func() error, error) {
	servers, err := pgserver.StartMany(ctx, runtime.GOMAXPROCS(0))
	if err != nil {
		return nil, nil, err
	}
	backend, err := sim.NewSQL(ctx, pgserver.AdminURLs(servers)...)
	if err != nil {
		return nil, nil, errors.Join(err, pgserver.CloseAll(servers))
	}
	return backend, func() error { return errors.Join(backend.Close(), pgserver.CloseAll(servers)) }, nil
}
