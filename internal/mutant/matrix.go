package mutant

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/outboxlab/outboxlab/checker"
	"github.com/outboxlab/outboxlab/internal/campaign"
	"github.com/outboxlab/outboxlab/internal/sim"
)

// Tier is where the kill matrix runs.
type Tier string

// Tiers.
const (
	// TierSim runs every mutant in the deterministic simulation.
	TierSim Tier = "sim"
	// TierInfra runs the mutants that have an infrastructure form under
	// chaos scenarios on containers.
	TierInfra Tier = "infra"
	// TierAll runs both.
	TierAll Tier = "all"
)

// ParseTier returns the tier named s.
func ParseTier(s string) (Tier, error) {
	switch t := Tier(s); t {
	case TierSim, TierInfra, TierAll:
		return t, nil
	}
	return "", fmt.Errorf("unknown tier %q: want sim, infra or all", s)
}

// Row is one line of the kill matrix. Its JSON form has exactly the keys
// mutant, killed, checker, scenario, seed, seconds and steps.
type Row struct {
	// Mutant names the mutant, or Reference.
	Mutant string `json:"mutant"`
	// Killed is true when some checker failed a run of the mutant.
	Killed bool `json:"killed"`
	// Checker is the first checker (in checker.Check's order) that failed
	// the killing run; empty when nothing killed it.
	Checker string `json:"checker"`
	// Scenario says what ran: the simulation swarm and the faults it
	// forced, or the chaos scenario.
	Scenario string `json:"scenario"`
	// Seed is the killing seed; for a row that survived, the first seed
	// of the range it survived.
	Seed uint64 `json:"seed"`
	// Seconds is the wall-clock time from the start of the mutant's
	// search to its killing run's verdict (the whole search when it
	// survived).
	Seconds float64 `json:"seconds"`
	// Steps is the number of actions of the shrunk counterexample (see
	// StepsOf); 0 when none was found.
	Steps int `json:"steps"`

	// Tier is the tier the row comes from.
	Tier Tier `json:"-"`
	// Tried counts the seeds (simulation) or runs (infrastructure) that
	// ran.
	Tried int `json:"-"`
	// StepsOf says what Steps counts: "actions" of the state machine's
	// shrunk counterexample, or "scheduler steps" of the shortest safety
	// phase at which the killing seed still kills, for a mutant whose
	// fault the state machine cannot inject.
	StepsOf string `json:"-"`
	// Counterexample is the shrunk counterexample, one action a line.
	Counterexample []string `json:"-"`
	// Replay is the command that runs the killing seed again.
	Replay string `json:"-"`
	// Detail is the killing checker's one-line detail, or why the row
	// could not be produced.
	Detail string `json:"-"`
	// Err reports a run that could not be carried out; the row then says
	// nothing about the mutant.
	Err error `json:"-"`
}

// Options tunes RunMatrix. The zero value runs the whole catalogue with
// the defaults documented on each field.
type Options struct {
	// Mutants selects mutants by name; empty means the whole catalogue.
	// The reference always runs.
	Mutants []string
	// FirstSeed is the first seed of every search. Default 1.
	FirstSeed uint64
	// Seeds bounds the seeds tried per mutant, and is the number of
	// seeds the reference must survive on the unmodified swarm. Default
	// 2000.
	Seeds int
	// ExposureSeeds is how many seeds the reference must also survive
	// under each selected mutant's exposure. Default 100.
	ExposureSeeds int
	// Budget bounds the wall-clock time of one mutant's seed search.
	// Default 2 minutes.
	Budget time.Duration
	// Cases bounds the state machine's cases per mutant (and for the
	// reference, which must survive them all). Default 300; negative
	// skips the state machine.
	Cases int
	// ShrinkRuns bounds the replays spent shrinking one counterexample.
	// Default 400.
	ShrinkRuns int
	// Disable switches checkers off by name: a run that only they fail
	// counts as passed. It exists to show that the matrix notices a
	// checker missing.
	Disable []string
	// Infra runs the infrastructure tier (see package mutant/infra); it
	// is required for TierInfra and TierAll.
	Infra InfraTier
	// Log receives progress lines; nil discards them.
	Log func(string)
	// Shard selects the share of the matrix's cells (see Cells) that
	// runs; the zero value runs them all.
	Shard campaign.Shard
}

// Cell is one row of the kill matrix that a shard may run: the reference
// or a mutant, in a tier.
type Cell struct {
	Tier Tier
	// Mutant names the mutant, or Reference.
	Mutant string
}

// String returns "tier/mutant".
func (c Cell) String() string { return string(c.Tier) + "/" + c.Mutant }

// Cells returns the cells of the matrix RunMatrix runs for ms in tier, in
// its order: in the simulation tier the reference, then each mutant; in
// the infrastructure tier each mutant that has an infrastructure form.
// The infrastructure tier's reference is no cell of its own: it runs,
// in every shard that holds an infrastructure cell, each scenario and
// seed that the shard's mutants ran, and must survive them all.
func Cells(tier Tier, ms []Mutant) []Cell {
	var cells []Cell
	if tier == TierSim || tier == TierAll {
		cells = append(cells, Cell{TierSim, Reference})
		for _, m := range ms {
			cells = append(cells, Cell{TierSim, m.Name})
		}
	}
	if tier == TierInfra || tier == TierAll {
		for _, m := range ms {
			if len(m.Infra) > 0 {
				cells = append(cells, Cell{TierInfra, m.Name})
			}
		}
	}
	return cells
}

// InfraTier runs the infrastructure tier for the given mutants and the
// reference.
type InfraTier func(ctx context.Context, ms []Mutant, opts Options) ([]Row, error)

func (o Options) withDefaults() Options {
	if o.FirstSeed == 0 {
		o.FirstSeed = 1
	}
	if o.Seeds == 0 {
		o.Seeds = 2000
	}
	if o.ExposureSeeds == 0 {
		o.ExposureSeeds = 100
	}
	if o.Budget == 0 {
		o.Budget = 2 * time.Minute
	}
	if o.Cases == 0 {
		o.Cases = 300
	}
	if o.ShrinkRuns == 0 {
		o.ShrinkRuns = 400
	}
	if o.Log == nil {
		o.Log = func(string) {}
	}
	return o
}

// Selected returns the mutants opts selects, in catalogue order, or an
// error naming an unknown one.
func (o Options) Selected() ([]Mutant, error) {
	if len(o.Mutants) == 0 {
		return All(), nil
	}
	var out []Mutant
	for _, m := range All() {
		if slices.Contains(o.Mutants, m.Name) {
			out = append(out, m)
		}
	}
	for _, name := range o.Mutants {
		if _, ok := Lookup(name); !ok {
			return nil, fmt.Errorf("unknown mutant %q (known: %s)", name, strings.Join(Names(), ", "))
		}
	}
	return out, nil
}

// Killer returns the first checker of rep (in checker.Check's order) that
// found a violation and is not disabled, or "" when none did.
func Killer(rep checker.Report, disabled []string) string {
	for _, r := range rep.Results {
		if !r.Valid && !slices.Contains(disabled, r.Checker) {
			return r.Checker
		}
	}
	return ""
}

// RunMatrix runs the harness against the reference and the selected
// mutants in the given tier and returns the kill matrix: the reference
// first, then the mutants in catalogue order (the simulation tier's rows
// before the infrastructure tier's with TierAll). The error reports a
// matrix that could not be run; a surviving mutant or a killed reference
// is not an error, it is in the rows.
func RunMatrix(ctx context.Context, tier Tier, opts Options) ([]Row, error) {
	opts = opts.withDefaults()
	ms, err := opts.Selected()
	if err != nil {
		return nil, err
	}
	if tier != TierSim && tier != TierInfra && tier != TierAll {
		return nil, fmt.Errorf("unknown tier %q", tier)
	}
	owned := map[Cell]bool{}
	for _, c := range campaign.Select(opts.Shard, Cells(tier, ms)) {
		owned[c] = true
	}
	var rows []Row
	if owned[Cell{TierSim, Reference}] {
		// The reference survives the exposures of every selected mutant,
		// whichever shard runs them.
		rows = append(rows, simReference(ctx, ms, opts))
	}
	for _, m := range ms {
		if !owned[Cell{TierSim, m.Name}] {
			continue
		}
		if ctx.Err() != nil {
			return rows, ctx.Err()
		}
		row := simMutant(ctx, m, opts)
		opts.Log(row.line())
		rows = append(rows, row)
	}
	var infraMs []Mutant
	for _, m := range ms {
		if owned[Cell{TierInfra, m.Name}] {
			infraMs = append(infraMs, m)
		}
	}
	if len(infraMs) > 0 {
		if opts.Infra == nil {
			return rows, errors.New("the infrastructure tier is not wired (Options.Infra)")
		}
		irows, err := opts.Infra(ctx, infraMs, opts)
		rows = append(rows, irows...)
		if err != nil {
			return rows, fmt.Errorf("infrastructure tier: %w", err)
		}
	}
	return rows, nil
}

// line renders a row as a progress line.
func (r Row) line() string {
	if r.Err != nil {
		return fmt.Sprintf("%s [%s]: could not run: %v", r.Mutant, r.Tier, r.Err)
	}
	if !r.Killed {
		return fmt.Sprintf("%s [%s]: survived %d %s (%.1fs)", r.Mutant, r.Tier, r.Tried, r.unit(), r.Seconds)
	}
	return fmt.Sprintf("%s [%s]: killed by %s, seed %d, %.2fs, %d %s", r.Mutant, r.Tier, r.Checker, r.Seed, r.Seconds, r.Steps, r.StepsOf)
}

func (r Row) unit() string {
	if r.Tier == TierInfra {
		return "run(s)"
	}
	return "seed(s)"
}

// seedHit is the outcome of a seed search.
type seedHit struct {
	seed    uint64
	res     sim.Result
	checker string
	tried   int
	err     error
}

// firstKill runs the seeds from first on, a batch of one per CPU at a
// time, until one is killed (the lowest killed seed wins, whatever the
// order the batch finished in), n seeds ran, the budget ran out or ctx
// ended.
func firstKill(ctx context.Context, first uint64, n int, budget time.Duration, sopts sim.Options, disabled []string) seedHit {
	workers := runtime.GOMAXPROCS(0)
	deadline := time.Now().Add(budget)
	hit := seedHit{seed: first}
	for done := 0; done < n; {
		if ctx.Err() != nil || time.Now().After(deadline) {
			return hit
		}
		k := min(workers, n-done)
		results := make([]sim.Result, k)
		var wg sync.WaitGroup
		for i := range k {
			wg.Go(func() { results[i] = sim.Run(first+uint64(done+i), sopts) })
		}
		wg.Wait()
		for i, res := range results {
			hit.tried = done + i + 1
			hit.seed = res.Seed
			if res.Err != nil {
				hit.err = fmt.Errorf("seed %d: %w", res.Seed, res.Err)
				return hit
			}
			if name := Killer(res.Report, disabled); name != "" {
				hit.res, hit.checker = res, name
				return hit
			}
		}
		done += k
	}
	return hit
}

// simMutant is the simulation tier's row of one mutant.
func simMutant(ctx context.Context, m Mutant, opts Options) Row {
	start := time.Now()
	sopts := sim.Options{Variant: m.Variant()}
	if !m.Exposure.zero() {
		sopts.Tune = m.Exposure.Tune
	}
	row := Row{Mutant: m.Name, Tier: TierSim, Scenario: m.Exposure.String()}
	hit := firstKill(ctx, opts.FirstSeed, opts.Seeds, opts.Budget, sopts, opts.Disable)
	row.Seed, row.Tried, row.Err = opts.FirstSeed, hit.tried, hit.err
	row.Seconds = time.Since(start).Seconds()
	if hit.err != nil || hit.checker == "" {
		return row
	}
	row.Killed, row.Checker, row.Seed = true, hit.checker, hit.seed
	if r, ok := hit.res.Report.Result(hit.checker); ok {
		row.Detail = r.Detail
	}
	row.Replay = fmt.Sprintf("go run ./cmd/outboxlab mutants --mutant %s --seed %d --seeds 1", m.Name, hit.seed)
	if opts.Cases < 0 {
		return row
	}
	if m.machineOK() {
		mc := &machine{v: sopts.Variant, tune: m.Exposure.Tune, killedBy: killedBy(opts.Disable)}
		ce := mc.search(hit.seed, opts.Cases, 30, opts.ShrinkRuns, time.Now().Add(opts.Budget))
		if ce.found {
			row.Steps, row.StepsOf, row.Counterexample = ce.steps(), "actions", ce.trace
			return row
		}
	}
	row.Steps, row.StepsOf = shortestSafety(hit.seed, hit.res.Steps, sopts, opts.Disable), "scheduler steps"
	return row
}

// machineOK reports whether the state machine can inject the fault that
// exposes m: sim.World has no action for a nack storm or an unbound queue.
func (m Mutant) machineOK() bool {
	for _, f := range m.Exposure.Faults {
		if f == sim.FaultUnbind || f == sim.FaultNack {
			return false
		}
	}
	return true
}

func killedBy(disabled []string) func(sim.Result) string {
	return func(res sim.Result) string {
		if res.Err != nil {
			return ""
		}
		return Killer(res.Report, disabled)
	}
}

// shortestSafety returns the shortest safety phase, in scheduler steps,
// at which seed still kills: the shrunk form of a seed run. A shorter
// safety phase replays the same prefix of the same schedule.
func shortestSafety(seed uint64, limit int, sopts sim.Options, disabled []string) int {
	kills := func(steps int) bool {
		o := sopts
		o.Steps = steps
		return Killer(sim.Run(seed, o).Report, disabled) != ""
	}
	full := sopts.Steps
	if full == 0 {
		full = 200
	}
	// kills(hi) holds and lo is below the least length that kills (a
	// zero Steps would mean the default length, so 1 is the least).
	lo, hi := 0, full
	if !kills(hi) {
		return limit
	}
	for lo+1 < hi {
		mid := (lo + hi) / 2
		if kills(mid) {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi
}

// simReference is the simulation tier's row of the reference: it must
// survive the unmodified swarm for opts.Seeds seeds, every selected
// mutant's exposure for opts.ExposureSeeds seeds, and the state
// machine's cases.
func simReference(ctx context.Context, ms []Mutant, opts Options) Row {
	start := time.Now()
	row := Row{Mutant: Reference, Tier: TierSim, Seed: opts.FirstSeed}
	type run struct {
		name   string
		n      int
		sopt   sim.Options
		replay string
	}
	runs := []run{{"sim swarm", opts.Seeds, sim.Options{}, "go run ./cmd/outboxlab sim --seed %d --seeds 1"}}
	seen := map[string]bool{}
	var workload Exposure
	for _, m := range ms {
		e := m.Exposure
		workload.Rollback = max(workload.Rollback, e.Rollback)
		workload.Poison = max(workload.Poison, e.Poison)
		workload.LongTx = max(workload.LongTx, e.LongTx)
		if e.zero() || seen[e.String()] {
			continue
		}
		seen[e.String()] = true
		// The mutants verb runs the reference under the exposures of the
		// mutants it selects.
		runs = append(runs, run{e.String(), opts.ExposureSeeds, sim.Options{Tune: e.Tune},
			"go run ./cmd/outboxlab mutants --mutant " + m.Name + " --seed %d --seeds 1"})
	}
	for _, r := range runs {
		hit := firstKill(ctx, opts.FirstSeed, r.n, opts.Budget, r.sopt, opts.Disable)
		row.Tried += hit.tried
		if hit.err != nil {
			row.Err = hit.err
			break
		}
		if hit.checker != "" {
			row.Killed, row.Checker, row.Scenario, row.Seed = true, hit.checker, r.name, hit.seed
			if res, ok := hit.res.Report.Result(hit.checker); ok {
				row.Detail = res.Detail
			}
			row.Replay = fmt.Sprintf(r.replay, hit.seed)
			break
		}
	}
	machineNote := ""
	if !row.Killed && row.Err == nil && opts.Cases > 0 {
		mc := &machine{tune: workload.Tune, killedBy: killedBy(opts.Disable)}
		ce := mc.search(opts.FirstSeed, opts.Cases, 30, opts.ShrinkRuns, time.Now().Add(opts.Budget))
		machineNote = fmt.Sprintf("; state machine (%d cases)", ce.cases)
		if ce.found {
			row.Killed, row.Checker, row.Scenario = true, ce.checker, "state machine"
			row.Steps, row.StepsOf, row.Counterexample = ce.steps(), "actions", ce.trace
		}
	}
	if row.Scenario == "" {
		row.Scenario = fmt.Sprintf("sim swarm (%d seeds); %d exposures (%d seeds each)%s",
			opts.Seeds, len(runs)-1, opts.ExposureSeeds, machineNote)
	}
	row.Seconds = time.Since(start).Seconds()
	opts.Log(row.line())
	return row
}
