package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/outboxlab/outboxlab/checker"
	"github.com/outboxlab/outboxlab/contract"
	"github.com/outboxlab/outboxlab/footprint"
	"github.com/outboxlab/outboxlab/internal/argv"
	"github.com/outboxlab/outboxlab/internal/campaign"
	"github.com/outboxlab/outboxlab/internal/report"
	"github.com/outboxlab/outboxlab/scenarios"
	"github.com/outboxlab/outboxlab/workload"
)

func runVerb() verb {
	return verb{
		name:    "run",
		summary: "run chaos scenarios on containers against a relay",
		args:    "[--scenario NAME]... [--relay RELAY [--capabilities LIST] | --target FILE] [--seeds N] [--seed S] [--shard K/N] [--events N | --duration D] [--queue TYPE] [--require-all] [--json] [--out DIR]",
		about: `Runs named chaos scenarios on real PostgreSQL, RabbitMQ and toxiproxy
containers (built by ` + "`make images`" + `; a Docker engine is needed): a workload,
a fault schedule drawn from the seed, a heal-and-drain phase and the
checkers. --scenario may be repeated; without it every scenario of the
catalogue runs. --relay is ours, a mutant's name, watermill (watermill's
SQL forwarder with its own outbox tables, image
outboxlab/watermill-relay:dev, judged by the core guarantee alone),
river (River used as an outbox: jobs inserted in the business
transaction, published by River's workers in .build/bin/river-relay,
which ` + "`make build`" + ` writes; river-retry the same with a capped
exponential retry policy), image:REF for any relay image that follows the black-box contract, or
cmd:COMMAND for one run as a host process (its arguments split as a shell
splits words, single and double quotes included, but no shell runs it). --target FILE puts an
outbox with its own schema under test instead: a YAML file that gives its
migration, staging and row-reading SQL, its relay (image or command), how
a delivery names its event and what the relay promises. Before any container
starts, the relay's image must be in the local Docker engine (ours come
from ` + "`make images`" + `) or the command's program must be found, as a path or
on PATH. A live progress line shows events committed and delivered,
the active faults, the phase and the time left. A failed verdict prints the
violated invariant, the offending events, the seed and the replay command,
and exits 1. --seeds N runs every chosen scenario on N consecutive seeds
from --seed: the campaign's cells are scenario × seed, scenario by
scenario. --shard K/N runs only the K-th of N contiguous blocks of those
cells (the N shards together run each cell once); without the flag,
OUTBOXLAB_SHARD=K/N or a Kubernetes Indexed Job's JOB_COMPLETION_INDEX
(0-based) with OUTBOXLAB_SHARDS=N choose the shard. --out DIR writes
scenarios.json, the histories and run.html; scenarios.json is rewritten
atomically as each cell finishes, so an interrupt, a crash or an error in
a later cell keeps every finished cell, and its "unfinished" list names
the cells that did not finish. The broker cluster scenarios (cluster-...)
run only when named, on a three-node RabbitMQ cluster with quorum queues;
--queue classic runs them with classic queues instead, the contrast.
Every chosen scenario has a row in the results: one the relay cannot run
(it needs a promise the relay does not declare) is N/A with the reason,
one whose fault could not bite is INCONCLUSIVE (exit 3 when nothing
failed); --require-all turns either into a failure (exit 1), for a CI
that wants the whole catalogue judged, and its last line names each with
why.`,
		define: func(fs *flag.FlagSet) func(context.Context, *stdio, deps) int {
			o := &runOptions{}
			fs.Var(&o.scenarios, "scenario", "a scenario `NAME` to run; repeat for several (default: the whole catalogue)")
			o.relay = givenString{v: "ours"}
			fs.Var(&o.relay, "relay", "the `RELAY` under test: ours, a mutant name, watermill, river, river-retry, image:REF or cmd:COMMAND")
			fs.StringVar(&o.target, "target", "", "a target `FILE` (YAML): an outbox with its own table, staging SQL and relay, instead of --relay (see docs/targets.md)")
			fs.StringVar(&o.capabilities, "capabilities", "", "what an image: or cmd: relay promises beyond the core guarantee: a comma-separated `LIST` of "+strings.Join(contract.Capabilities, ", ")+", or none (default none)")
			fs.Var(&o.seed, "seed", "the first `seed` of the workload and fault schedule (default: drawn from the clock and printed)")
			fs.IntVar(&o.seeds, "seeds", 1, "how many consecutive seeds each scenario runs on (`N`)")
			fs.StringVar(&o.shard, "shard", "", "run only shard `K/N` of the scenario × seed cells (default: from OUTBOXLAB_SHARD, or JOB_COMPLETION_INDEX with OUTBOXLAB_SHARDS; else all)")
			fs.IntVar(&o.events, "events", 0, "events the workload stages (default: the scenario's own)")
			fs.DurationVar(&o.duration, "duration", 0, "length of the safety phase, instead of --events (default: the scenario's own)")
			fs.BoolVar(&o.json, "json", false, "print the results as JSON instead of a table")
			fs.StringVar(&o.out, "out", "", "write the results bundle (scenarios.json, histories, run.html) to `DIR`")
			fs.BoolVar(&o.list, "list", false, "list the scenarios of the catalogue and exit")
			fs.BoolVar(&o.requireAll, "require-all", false, "fail the run (exit 1) when a scenario is not applicable to the relay or inconclusive, naming each with why, instead of reporting it")
			fs.StringVar(&o.queue, "queue", "", "with cluster- scenarios only, the consumer queues' `TYPE`: quorum (default) or classic, the non-replicated contrast")
			return o.run
		},
	}
}

type runOptions struct {
	scenarios stringList
	relay     givenString
	// target is a target file, instead of relay.
	target string
	// capabilities is what an image: or cmd: relay declares.
	capabilities string
	seed         seedFlag
	seeds        int
	shard        string
	events       int
	duration     time.Duration
	json         bool
	out          string
	list         bool
	queue        string
	// requireAll fails a run with a scenario that was not applicable or
	// inconclusive.
	requireAll bool
}

func (o *runOptions) run(ctx context.Context, std *stdio, d deps) int {
	if o.events < 0 || o.duration < 0 {
		return usageErr(std, "run", "--events and --duration must not be negative")
	}
	if o.events > 0 && o.duration > 0 {
		return usageErr(std, "run", "give --events or --duration, not both")
	}
	relay, err := parseRelay(o.relay.v)
	if err != nil {
		return usageErr(std, "run", "%v", err)
	}
	if o.target != "" {
		if o.relay.set {
			return usageErr(std, "run", "give --target or --relay, not both: a target file names its relay (--relay %s)", o.relay.v)
		}
		if o.capabilities != "" {
			return usageErr(std, "run", "--capabilities is for image: and cmd: relays; a target file declares its own (capabilities:)")
		}
		if relay, err = scenarios.LoadTarget(o.target); err != nil {
			return usageErr(std, "run", "%v", err)
		}
	}
	if o.capabilities != "" {
		if relay.Replay != "" || relay.Image == "" && len(relay.Command) == 0 {
			return usageErr(std, "run", "--capabilities is for image: and cmd: relays; %s declares its own", relay.Name)
		}
		if relay.Promises, err = contract.Parse(o.capabilities); err != nil {
			return usageErr(std, "run", "--capabilities: %v", err)
		}
	}
	if o.list {
		// The catalogue, which runs without --scenario, then the broker
		// cluster scenarios, which run only when named.
		for _, n := range d.scenarioNames() {
			fmt.Fprintln(std.out, n)
		}
		for _, n := range scenarios.ClusterNames() {
			fmt.Fprintf(std.out, "%s  %s\n", n, clusterListNote)
		}
		for _, n := range scenarios.ConsumerNames() {
			fmt.Fprintf(std.out, "%s  %s\n", n, consumerListNote)
		}
		for _, sc := range scenarios.DatabaseCatalogue() {
			fmt.Fprintf(std.out, "%s  %s\n", sc.Name, databaseListNote(sc))
		}
		return exitOK
	}
	if o.seeds < 1 {
		return usageErr(std, "run", "--seeds must be at least 1, not %d", o.seeds)
	}
	shard, err := campaign.Resolve(o.shard, d.getenv)
	if err != nil {
		if o.shard != "" {
			return usageErr(std, "run", "--shard: %v", err)
		}
		return usageErr(std, "run", "%v", err)
	}
	names := []string(o.scenarios)
	known := d.scenarioNames()
	if len(names) == 0 {
		names = known
	}
	// The broker cluster scenarios, the consumers' and the database's
	// run when named;
	// the default is the catalogue.
	allowed := append(append(append(slices.Clone(known), scenarios.ClusterNames()...), scenarios.ConsumerNames()...), scenarios.DatabaseNames()...)
	for _, n := range names {
		if !slices.Contains(allowed, n) {
			return usageErr(std, "run", "unknown scenario %q (known: %s)", n, strings.Join(allowed, ", "))
		}
	}
	if o.queue != "" {
		if !slices.Contains(scenarios.QueueTypes, o.queue) {
			return usageErr(std, "run", "--queue %q: want one of %s", o.queue, strings.Join(scenarios.QueueTypes, ", "))
		}
		for _, n := range names {
			if !slices.Contains(scenarios.ClusterNames(), n) {
				return usageErr(std, "run", "--queue is for the broker cluster scenarios (%s), not %s", strings.Join(scenarios.ClusterNames(), ", "), n)
			}
		}
	}
	start := std.now()
	seed := o.seed.orRandom(start)
	cells, err := campaign.Cells(names, seed, o.seeds)
	if err != nil {
		return usageErr(std, "run", "%v", err)
	}
	mine := campaign.Select(shard, cells)
	if code := d.needDocker(ctx, std, "run"); code != exitOK {
		return code
	}
	if code := d.needRelay(ctx, std, "run", relay); code != exitOK {
		return code
	}
	if up := relay.PlannedUpgrade(); up != nil && slices.Contains(names, scenarios.RollingUpgrade) {
		// The other version of the upgrade must start too.
		for _, v := range []scenarios.Version{up.From, up.To} {
			if v.Image == "" && len(v.Command) == 0 {
				continue
			}
			if code := d.needRelay(ctx, std, "run", scenarios.RelayUnderTest{Name: v.Name, Image: v.Image, Command: v.Command}); code != exitOK {
				return code
			}
		}
	}
	w := std.out
	if o.json {
		w = std.err
	}
	fmt.Fprintf(w, "SEED=%d\n", seed)
	if !shard.IsWhole() {
		lo, hi := shard.Range(len(cells))
		if lo == hi {
			fmt.Fprintf(w, "shard %s of %d cells (scenario × seed) is empty: there are fewer cells than shards\n", shard, len(cells))
		} else {
			fmt.Fprintf(w, "shard %s of %d cells (scenario × seed): cells %d..%d, %s to %s\n", shard, len(cells), lo+1, hi, mine[0], mine[len(mine)-1])
		}
	}
	var bundle *cellWriter
	if o.out != "" && o.target != "" {
		if err := checkOutputs([]output{{"--out", filepath.Join(o.out, report.FileScenarios)}, {"--out", filepath.Join(o.out, "run.html")}}, []string{o.target}); err != nil {
			return usageErr(std, "run", "%v", err)
		}
	}
	if o.out != "" {
		part := report.Part{Shard: shard.String(), Campaign: o.campaignCommand(names, seed, relay), Cells: len(mine)}
		if bundle, err = newCellWriter(o.out, report.CollectMeta(ctx, start), part, relay.Name, mine); err != nil {
			return unavailable(std, "run", "%v", err)
		}
	}
	if len(mine) == 0 {
		if bundle != nil {
			if _, err := bundle.finish(""); err != nil {
				return unavailable(std, "run", "%v", err)
			}
		}
		// Nothing ran, so nothing passed: no verdict is printed.
		fmt.Fprintln(w, "no cell ran, no verdict")
		return exitOK
	}
	specs := make([]runSpec, len(mine))
	for i, c := range mine {
		specs[i] = runSpec{Scenario: c.Scenario, Seed: c.Seed, Relay: relay, Variant: workload.Outbox, Events: o.events, Duration: o.duration, QueueType: o.queue}
	}
	// rows are the outcomes in the order of specs, the scenarios that
	// were not applicable included: every chosen scenario has its row.
	var rows []scenarios.Result
	done := func(i int, out runOutcome) error {
		r := out.result()
		if r.Scenario == "" {
			r.Scenario, r.Seed = specs[i].Scenario, specs[i].Seed
		}
		if r.Relay == "" {
			r.Relay = relay.Name
		}
		rows = append(rows, r)
		if bundle != nil {
			return bundle.done(i, out)
		}
		return nil
	}
	_, _, code, stopped := runScenarios(ctx, std, d, "run", specs, o.json, done)
	if bundle != nil {
		path, err := bundle.finish(stopped)
		switch {
		case err != nil:
			fmt.Fprintf(std.err, "outboxlab run: %v\n", err)
			if code == exitOK {
				code = exitUsage
			}
		case code != exitOK:
			fmt.Fprintf(std.err, "outboxlab run: %d of %d cells finished; they are in %s (and %s); %d did not finish\n",
				len(mine)-len(bundle.unfinished()), len(mine), filepath.Join(o.out, report.FileScenarios), path, len(bundle.unfinished()))
		}
	}
	if code != exitOK {
		return code
	}

	failed, inconclusive, notApplicable := 0, 0, 0
	for _, r := range rows {
		switch r.Verdict() {
		case scenarios.VerdictFail:
			failed++
		case scenarios.VerdictInconclusive:
			inconclusive++
		case scenarios.VerdictNotApplicable:
			notApplicable++
		}
	}
	if o.json {
		out := make([]jsonResult, len(rows))
		for i, r := range rows {
			out[i] = jsonResult{Result: r, Verdict: r.Verdict()}
		}
		b, err := json.MarshalIndent(out, "", "  ")
		if err != nil {
			return unavailable(std, "run", "encoding results: %v", err)
		}
		fmt.Fprintln(std.out, string(b))
	} else {
		countsTable(std.out, rows, func(_ int, r scenarios.Result) string { return runName(r, o.seeds > 1) }, "scenario")
		footprintLines(std.out, rows, o.seeds > 1)
		failoverLines(std.out, rows, o.seeds > 1)
		changeLines(std.out, rows, o.seeds > 1)
	}
	for _, r := range rows {
		if r.Verdict() == scenarios.VerdictNotApplicable {
			fmt.Fprintf(w, "\nN/A scenario %s (relay %s), seed %d: not run, nothing judged: %s\n", r.Scenario, r.Relay, r.Seed, r.NotApplicable)
		}
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
	if bundle != nil {
		fmt.Fprintf(w, "\nHTML report: %s\n", bundle.file.HTML)
	}
	// With --require-all, as suite.Options.RequireAll, a scenario that was
	// not applicable or inconclusive fails the run: the summary names
	// each with why.
	unjudged := inconclusive + notApplicable
	notJudged := func() string {
		return fmt.Sprintf("%d of %d scenarios not judged (%d not applicable, %d inconclusive), and --require-all wants every one judged: %s",
			unjudged, len(rows), notApplicable, inconclusive, unjudgedList(rows))
	}
	switch {
	case failed > 0 && o.requireAll && unjudged > 0:
		fmt.Fprintf(w, "%d of %d scenarios failed; %s\n", failed, len(rows), notJudged())
		return exitFail
	case failed > 0:
		fmt.Fprintf(w, "%d of %d scenarios failed\n", failed, len(rows))
		return exitFail
	case o.requireAll && unjudged > 0:
		fmt.Fprintln(w, notJudged())
		return exitFail
	case notApplicable == len(rows):
		// Nothing ran, so nothing passed: no verdict (exit 2), and each
		// row above says why.
		return unavailable(std, "run", "no scenario could run with relay %s: %s", relay.Name, unjudgedList(rows))
	case inconclusive > 0:
		fmt.Fprintf(w, "%d of %d scenarios inconclusive, none failed", inconclusive, len(rows))
		if notApplicable > 0 {
			fmt.Fprintf(w, ", %d not applicable to relay %s", notApplicable, relay.Name)
		}
		fmt.Fprintln(w)
		return exitInconclusive
	case notApplicable > 0:
		fmt.Fprintf(w, "%d of %d scenarios passed, %d not applicable to relay %s: %s\n", len(rows)-notApplicable, len(rows), notApplicable, relay.Name,
			strings.Join(naNames(rows), ", "))
	}
	return exitOK
}

// jsonResult is a row of run --json: the scenario's result with its
// verdict in a word (PASS, FAIL, INCONCLUSIVE or N/A).
type jsonResult struct {
	scenarios.Result
	Verdict string `json:"verdict"`
}

// unjudgedList names the rows that were not applicable or inconclusive,
// each with why: the seeds of one scenario that were not judged for one
// reason are named together.
func unjudgedList(rows []scenarios.Result) string {
	type group struct {
		scenario, verdict, why string
		seeds                  []string
	}
	var groups []*group
	for _, r := range rows {
		var why string
		switch r.Verdict() {
		case scenarios.VerdictNotApplicable:
			why = r.NotApplicable
		case scenarios.VerdictInconclusive:
			why = strings.Join(r.Inconclusive, "; ")
		default:
			continue
		}
		i := slices.IndexFunc(groups, func(g *group) bool { return g.scenario == r.Scenario && g.verdict == r.Verdict() && g.why == why })
		if i < 0 {
			groups = append(groups, &group{scenario: r.Scenario, verdict: r.Verdict(), why: why})
			i = len(groups) - 1
		}
		groups[i].seeds = append(groups[i].seeds, fmt.Sprint(r.Seed))
	}
	parts := make([]string, len(groups))
	for i, g := range groups {
		seeds := "seed " + g.seeds[0]
		if len(g.seeds) > 1 {
			seeds = "seeds " + strings.Join(g.seeds, ", ")
		}
		verdict := "not applicable"
		if g.verdict == scenarios.VerdictInconclusive {
			verdict = "inconclusive"
		}
		parts[i] = fmt.Sprintf("%s (%s) %s: %s", g.scenario, seeds, verdict, g.why)
	}
	return strings.Join(parts, "; ")
}

// naNames names the scenarios of rows that were not applicable, each once.
func naNames(rows []scenarios.Result) []string {
	var names []string
	for _, r := range rows {
		if r.Verdict() == scenarios.VerdictNotApplicable && !slices.Contains(names, r.Scenario) {
			names = append(names, r.Scenario)
		}
	}
	return names
}

// clusterListNote follows each broker cluster scenario that `run --list`
// prints: unlike the catalogue's, they run only when named.
const clusterListNote = "(runs only when named with --scenario, on a three-node broker cluster)"

// consumerListNote follows a consumer scenario in run --list.
const consumerListNote = "(runs only when named with --scenario; it puts the consumers under test, whatever the relay)"

// givenString is a string flag that remembers whether it was given, so
// that a flag given with its default value is told from one not given.
type givenString struct {
	v   string
	set bool
}

func (s *givenString) String() string { return s.v }

func (s *givenString) Set(v string) error {
	s.v, s.set = v, true
	return nil
}

// campaignCommand is the command that runs the whole campaign, every
// shard of it: the scenarios on the seeds from seed against relay.
func (o *runOptions) campaignCommand(names []string, seed uint64, relay scenarios.RelayUnderTest) string {
	cmd := scenarios.ReplayCommand(names[0], seed, relay, o.events, o.duration) + scenarios.QueueArg(o.queue)
	var more strings.Builder
	for _, n := range names[1:] {
		more.WriteString(" --scenario " + argv.QuoteArg(n))
	}
	fmt.Fprintf(&more, " --seeds %d --seed ", o.seeds)
	return strings.Replace(cmd, " --seed ", more.String(), 1)
}

// footprintLines prints, per run with a relay, what the relay cost the
// producers against the control phase and its replicas' figures over
// each outage (footprint.Summary).
func footprintLines(w io.Writer, rows []scenarios.Result, seeds bool) {
	first := true
	for _, r := range rows {
		if r.Footprint == nil {
			continue
		}
		if first {
			fmt.Fprintln(w, "\nfootprint (the producers' transaction p99 with the relay and in the control phase without it; each replica over each outage and 5s after):")
			first = false
		}
		name := runName(r, seeds)
		for i, line := range footprint.Summary(*r.Footprint) {
			if i == 0 {
				fmt.Fprintf(w, "  %s: %s\n", name, line)
				continue
			}
			fmt.Fprintf(w, "    %s\n", line)
		}
	}
}

// runName names a run in the lines under the table: its scenario, and
// its seed when the run had several.
func runName(r scenarios.Result, seeds bool) string {
	if seeds {
		return fmt.Sprintf("%s seed %d", r.Scenario, r.Seed)
	}
	return r.Scenario
}

// failoverLines prints, per run whose database failed over, what the
// failover undid of the acknowledged commits and of the consumers'
// applies (an event applied again after the failover undid its first
// apply), event by event (at most failoverShown of each).
func failoverLines(w io.Writer, rows []scenarios.Result, seeds bool) {
	const failoverShown = 5
	first := true
	for _, r := range rows {
		// The commits first, then the applies, whatever the report's order.
		for _, name := range []string{checker.NameFailover, checker.NameDuplicateEffects} {
			for _, c := range r.Report.Results {
				if c.Checker != name || c.Skipped || name == checker.NameDuplicateEffects && len(c.Noted) == 0 {
					continue
				}
				if first {
					fmt.Fprintln(w, "\nfailover (the acknowledged commits and the consumers' applies that the failover of the database undid):")
					first = false
				}
				fmt.Fprintf(w, "  %s: %s\n", runName(r, seeds), c.Detail)
				ids := append(slices.Clone(c.Offending), c.Noted...)
				for i, id := range ids {
					if i == failoverShown {
						fmt.Fprintf(w, "    ... and %d more (in the bundle's scenarios.json)\n", len(ids)-failoverShown)
						break
					}
					fmt.Fprintf(w, "    %s: %s\n", id, c.Reasons[id])
				}
			}
		}
	}
}

// databaseListNote follows a scenario of the database's and the
// deployment's changes in run --list.
func databaseListNote(sc scenarios.Scenario) string {
	if sc.Standby != "" {
		return "(runs only when named with --scenario, on a PostgreSQL with a streaming standby)"
	}
	return "(runs only when named with --scenario)"
}

// changeLines prints, per run of a scenario that changes the database or
// the deployment under the relay (Result.Database), what its own check
// noted of the change: how many commits the failover cut off, the
// transaction ids a restore started from, which version replaced which
// in an upgrade.
func changeLines(w io.Writer, rows []scenarios.Result, seeds bool) {
	first := true
	for _, r := range rows {
		if r.Database == "" {
			continue
		}
		for _, u := range r.Unchecked {
			name, rest, _ := strings.Cut(u, ": ")
			if name != r.Scenario && !strings.HasPrefix(r.Scenario, name+"-") {
				continue
			}
			if first {
				fmt.Fprintln(w, "\nwhat changed under the relay:")
				first = false
			}
			if name == r.Scenario {
				u = rest // the run's name says it
			}
			fmt.Fprintf(w, "  %s: %s\n", runName(r, seeds), u)
		}
	}
}
