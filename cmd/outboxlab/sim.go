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

	"github.com/outboxlab/outboxlab/internal/campaign"
	"github.com/outboxlab/outboxlab/internal/report"
	"github.com/outboxlab/outboxlab/internal/sim"
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
sim.html, an HTML report of the failing seeds (or of the one seed run);
DIR is checked before any seed runs, and sim.json is written before the
first seed and again as seeds finish (each new failure, and every second),
so that a killed run keeps what it found. An interrupted run (SIGINT,
SIGTERM) prints the failures found so far with their replay and exits 1;
one that found none exits 2 without a verdict.
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
	campaignFirst := o.seed.orRandom(start)
	if uint64(o.seeds-1) > math.MaxUint64-campaignFirst {
		return usageErr(std, "sim", "--seeds %d from --seed %d would pass the largest seed, %d: give at most %d seeds from there, or a lower --seed",
			o.seeds, campaignFirst, uint64(math.MaxUint64), math.MaxUint64-campaignFirst+1)
	}
	lo, hi := shard.Range(o.seeds)
	n := hi - lo
	first := campaignFirst + uint64(lo)
	part := report.Part{Shard: shard.String(), Campaign: o.replay(campaignFirst, o.seeds), Cells: n}
	// The bundle is written before any seed runs, so that a directory it
	// cannot be written to is found now, and again as the seeds finish.
	var bundle *simBundle
	if o.out != "" {
		bundle = &simBundle{o: o, meta: report.CollectMeta(ctx, start), part: part, first: first, n: n, histories: map[uint64]string{}}
		stopped := report.SimRunning
		if n == 0 {
			stopped = ""
		}
		if err := bundle.write(sim.Summary{}, stopped); err != nil {
			fmt.Fprintf(std.err, "outboxlab sim: --out %s: %v\n", o.out, err)
			return exitUsage
		}
	}
	if n == 0 {
		// Fewer seeds than shards: this one has nothing to do, and its
		// bundle says so, for the merge of the shards.
		if o.json {
			return o.printJSON(std, simJSON{Shard: shard.String()})
		}
		// No seed ran, so none passed: no verdict is printed.
		fmt.Fprintf(std.out, "shard %s of %d seeds from %d is empty: there are fewer seeds than shards; no seed ran, no verdict\n", shard, o.seeds, campaignFirst)
		return exitOK
	}
	if o.sql {
		if removed, err := pgserver.RemoveStale(); err != nil {
			fmt.Fprintf(std.err, "outboxlab sim: --sql: removing the servers' directories left by dead runs: %v\n", err)
		} else if len(removed) > 0 {
			fmt.Fprintf(std.err, "outboxlab sim: --sql: removed %d PostgreSQL data directories left by dead runs: %s\n", len(removed), strings.Join(removed, ", "))
		}
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

	// A run allocates and drops whole worlds: collecting less often is
	// worth more than the memory it keeps, unless GOGC says otherwise.
	if os.Getenv("GOGC") == "" {
		defer debug.SetGCPercent(debug.SetGCPercent(400))
	}
	pr := newProgress(std, false)
	// The bundle follows the seeds as they finish: a kill keeps every
	// failure found before it. Its first error is reported at the end.
	var bundleErr error
	progress := func(sum sim.Summary) {
		if bundle != nil && bundleErr == nil {
			bundleErr = bundle.write(sum, report.SimRunning)
		}
	}
	done := make(chan sim.Summary, 1)
	go func() { done <- sim.RunManyReporting(ctx, first, n, opts, progress) }()
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

	// An interrupt keeps what was found: the seeds that finished, and
	// their failures, which are a verdict of their own.
	stopped := ""
	if ctx.Err() != nil {
		cause := context.Cause(ctx)
		if cause == nil {
			cause = ctx.Err()
		}
		stopped = fmt.Sprintf("%v after %d of %d seeds", cause, sum.Seeds, n)
		if sum.Failed == 0 {
			if bundle != nil && bundleErr == nil {
				bundleErr = bundle.finish(sum, stopped, opts)
			}
			if bundleErr != nil {
				fmt.Fprintf(std.err, "outboxlab sim: %v\n", bundleErr)
			}
			return interrupted(std, ctx, "sim", fmt.Sprintf("%d of %d seeds from %d finished, none failed: no verdict", sum.Seeds, n, first))
		}
		interrupted(std, ctx, "sim", fmt.Sprintf("%d of %d seeds from %d finished, and %d of them failed: the failures found so far follow", sum.Seeds, n, first, sum.Failed))
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
	// The verdict is printed before the bundle is written: a bundle that
	// cannot be written loses no failure, and exits 1 all the same.
	if sum.Failed > 0 {
		o.printFailures(std, sum)
	}
	if bundle != nil {
		if bundleErr == nil {
			bundleErr = bundle.finish(sum, stopped, opts)
		}
		if bundleErr != nil {
			fmt.Fprintf(std.err, "outboxlab sim: %v\n", bundleErr)
		} else if !o.json {
			fmt.Fprintf(std.out, "results: %s, report: %s\n", filepath.Join(o.out, report.FileSim), filepath.Join(o.out, "sim.html"))
		}
	}
	switch {
	case sum.Failed > 0:
		return exitFail
	case bundleErr != nil:
		return exitUsage
	}
	if !o.json {
		fmt.Fprintln(std.out, "PASS")
	}
	return exitOK
}

// printFailures prints which seeds of sum failed, and the first one's
// violated invariant, offending events and replay command: on stdout, or
// on stderr with --json.
func (o *simOptions) printFailures(std *stdio, sum sim.Summary) {
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

// simBundle is the results bundle of a simulation batch, written as the
// batch runs: sim.json and the histories of the failures kept so far,
// then, at the end, sim.html.
type simBundle struct {
	o     *simOptions
	meta  report.Meta
	part  report.Part
	first uint64
	n     int
	// histories are the history files written, by seed.
	histories map[uint64]string
}

// write writes the histories of the failures of sum not written yet, then
// sim.json of sum; stopped is SimFile.Stopped.
func (b *simBundle) write(sum sim.Summary, stopped string) error {
	file := report.SimFile{Meta: b.meta, First: b.first, Mutant: b.o.mutant, Summary: sum, Replay: b.o.replay(b.first, b.n),
		Part: &b.part, Tier: b.o.tier(), Stopped: stopped}
	for _, f := range sum.Failures {
		rel, ok := b.histories[f.Seed]
		if !ok {
			var err error
			if rel, err = report.WriteHistory(b.o.out, fmt.Sprintf("sim-seed-%d.jsonl", f.Seed), f.History); err != nil {
				return err
			}
			b.histories[f.Seed] = rel
		}
		run := report.FromSim(f, b.o.replay(f.Seed, 1))
		file.Failures = append(file.Failures, report.SimFailure{Seed: f.Seed, Problems: run.Problems, Replay: run.Replay, History: rel})
	}
	return report.WriteFile(b.o.out, report.FileSim, file)
}

// finish writes the bundle of sum, the batch as it ended (stopped says
// why it ended early, "" when every seed ran), and sim.html.
func (b *simBundle) finish(sum sim.Summary, stopped string, opts sim.Options) error {
	if err := b.write(sum, stopped); err != nil {
		return err
	}
	var runs []report.Run
	for _, f := range sum.Failures {
		if len(runs) == simReportRuns {
			break
		}
		run := report.FromSim(f, b.o.replay(f.Seed, 1))
		run.ExpectFail = b.o.mutant != ""
		runs = append(runs, run)
	}
	if b.n == 1 && sum.Seeds == 1 && len(runs) == 0 {
		runs = append(runs, report.FromSim(sim.Run(b.first, opts), b.o.replay(b.first, 1)))
	}
	title := fmt.Sprintf("outboxlab simulation: %d seeds from %d", sum.Seeds, b.first)
	intro := fmt.Sprintf("%d of %d seeds failed.", sum.Failed, sum.Seeds)
	if stopped != "" {
		intro = fmt.Sprintf("The batch of %d seeds stopped early (%s): ", b.n, stopped) + intro
	}
	if sum.Failed > len(runs) && len(runs) > 0 {
		intro += fmt.Sprintf(" The first %d failing seeds are drawn below.", len(runs))
	}
	if len(runs) == 0 {
		intro += " No seed failed, so no run is drawn: run one seed (--seeds 1) to see its timeline."
	}
	return report.WriteHTMLFile(filepath.Join(b.o.out, "sim.html"), report.Page{Title: title, Intro: intro, Meta: b.meta, Runs: runs})
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
