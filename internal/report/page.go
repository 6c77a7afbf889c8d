package report

import (
	"fmt"
	"strings"

	"github.com/outboxlab/outboxlab/checker"
	"github.com/outboxlab/outboxlab/workload"
)

// bundlePageSimRuns bounds the failing simulation seeds a bundle's page
// draws.
const bundlePageSimRuns = 3

// BundlePage returns the HTML page of a bundle, one read or several
// merged: every demo and chaos scenario run, its timeline drawn from its
// history file, every chaos cell that did not run (N/A, with why), and
// the first failing seeds of the simulation. The checkers' offending
// events are the few each verdict keeps. The intro names the shards the
// page holds and lacks, and the cells that did not finish.
func BundlePage(b Bundle) (Page, error) {
	p := Page{Title: "outboxlab results"}
	p.Meta, _ = b.newestMeta()
	var intro []string
	for _, f := range []*ScenarioFile{b.Demo, b.Scenarios} {
		for _, r := range f.Rows() {
			if r.NotApplicable != "" {
				p.Runs = append(p.Runs, NotApplicableRun(r.Scenario, r.Relay, r.Seed, r.NotApplicable))
				continue
			}
			run, err := b.scenarioRun(r.ScenarioRun)
			if err != nil {
				return Page{}, err
			}
			p.Runs = append(p.Runs, run)
		}
	}
	if f := b.Scenarios; f != nil {
		ps := f.Parts
		if len(ps) == 0 && f.Part != nil {
			ps = []Part{*f.Part}
		}
		if len(ps) > 0 && (len(ps) > 1 || ps[0].Shard != "1/1") {
			var have []string
			for _, x := range ps {
				have = append(have, x.Shard)
			}
			s := fmt.Sprintf("Chaos scenarios: shards %s of `%s`.", strings.Join(have, ", "), ps[0].Campaign)
			if missing := MissingShards(ps); len(missing) > 0 {
				s += fmt.Sprintf(" Not in this report: shards %s.", strings.Join(missing, ", "))
			}
			intro = append(intro, s)
		}
		if len(f.Unfinished) > 0 {
			var cells []string
			for _, c := range f.Unfinished {
				cells = append(cells, c.String())
			}
			intro = append(intro, fmt.Sprintf("%d cells did not finish: %s.", len(f.Unfinished), strings.Join(cells, ", ")))
		}
	}
	if sm := b.Sim; sm != nil {
		intro = append(intro, fmt.Sprintf("Simulation: %d of %d seeds failed.", sm.Summary.Failed, sm.Summary.Seeds))
		for i, f := range sm.Failures {
			if i == bundlePageSimRuns || f.History == "" {
				break
			}
			h, err := ReadHistory(b.Dir, f.History)
			if err != nil {
				return Page{}, fmt.Errorf("simulation seed %d: %w", f.Seed, err)
			}
			p.Runs = append(p.Runs, Run{
				Title: fmt.Sprintf("simulation, seed %d", f.Seed), Scenario: "sim", Relay: "ours", Variant: orValue(sm.Mutant, "production"),
				Seed: f.Seed, Problems: f.Problems, Replay: f.Replay, History: h, ExpectFail: sm.Mutant != "",
			})
		}
	}
	p.Intro = strings.Join(intro, " ")
	p.Sections = benchSections(b)
	return p, nil
}

// benchSections are the benchmark's tables for the page: of several runs,
// the table of every run side by side and the first run of each layout
// in full (the tables REPORT.md leaves out with
// MarkdownOptions.BenchSummary); of one run, that run in full.
func benchSections(b Bundle) []Section {
	benches := b.Benches
	if len(benches) == 0 && b.Bench != nil {
		benches = []*BenchFile{b.Bench}
	}
	var out []Section
	if len(benches) > 1 {
		out = append(out, Section{
			Title:  fmt.Sprintf("Benchmark: every run (%d)", len(benches)),
			Text:   []string{"Every run, side by side: the ratios of each are measured within that run.", benchFactorsText},
			Tables: []Table{benchRunsTable(benches)},
		})
	}
	for _, f := range firstOfLayouts(benches) {
		title := "Benchmark"
		if len(benches) > 1 {
			title = "Benchmark: the first run of layout " + orValue(f.result().Config.Layout, "shared")
		}
		out = append(out, Section{
			Title:  title,
			Text:   []string{fmt.Sprintf("Run on %s at commit %s.", f.Meta.Date, orUnknown(f.Meta.Commit))},
			Tables: f.Tables,
			Notes:  f.Notes,
		})
	}
	return out
}

// NotApplicableRun is the HTML report's run of a scenario that did not
// run against relay on seed, and why: N/A, with nothing judged.
func NotApplicableRun(scenario, relay string, seed uint64, why string) Run {
	return Run{
		Title:    fmt.Sprintf("%s (relay %s), seed %d", scenario, relay, seed),
		Scenario: scenario, Relay: relay, Seed: seed, NotApplicable: why,
	}
}

// scenarioRun rebuilds a scenario run of the bundle for the page, its
// history read back.
func (b Bundle) scenarioRun(r ScenarioRun) (Run, error) {
	run := Run{
		Title:    fmt.Sprintf("%s (relay %s), seed %d", r.Scenario, r.Relay, r.Seed),
		Scenario: r.Scenario, Relay: r.Relay, Variant: r.Variant, Seed: r.Seed, Valid: r.Valid,
		Problems: r.Problems, Inconclusive: r.Inconclusive, Faults: r.Faults, Replay: r.Replay, Note: r.Note,
		Report:     checker.Report{Valid: r.Valid, Counts: r.Counts},
		ExpectFail: workload.Mode(r.Variant).Unsafe(),
		Footprint:  r.Footprint,
	}
	for _, v := range r.Checkers {
		run.Report.Results = append(run.Report.Results, checker.Result{Checker: v.Name, Valid: v.Valid, Skipped: v.Skipped, Detail: v.Detail, Offending: v.First})
	}
	if r.History != "" {
		h, err := ReadHistory(b.Dir, r.History)
		if err != nil {
			return Run{}, fmt.Errorf("scenario %s, seed %d: %w", r.Scenario, r.Seed, err)
		}
		run.History = h
	}
	return run, nil
}
