// Package report renders what a run of the harness found, for people: a
// self-contained HTML report (counts, checker verdicts, a Jepsen-style
// timeline per event with fault windows shaded, throughput and latency over
// time on the same axis) and REPORT.md, the results page generated from a
// results bundle: the JSON files the outboxlab command writes with --out.
package report

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/outboxlab/outboxlab/checker"
	"github.com/outboxlab/outboxlab/footprint"
	"github.com/outboxlab/outboxlab/history"
	"github.com/outboxlab/outboxlab/internal/sim"
)

// FaultHits is how often one fault of a run fired.
type FaultHits struct {
	Name  string `json:"name"`
	Class string `json:"class,omitempty"`
	Hits  int64  `json:"hits"`
}

// Run is one run as the HTML report shows it.
type Run struct {
	// Title heads the run's section, e.g. "outbox, broker down".
	Title    string
	Scenario string
	Relay    string
	Variant  string
	Seed     uint64
	// Valid is the run's verdict; Problems says why it failed, and
	// Inconclusive which faults could not bite when nothing failed.
	Valid        bool
	Problems     []string
	Inconclusive []string
	Report       checker.Report
	Faults       []FaultHits
	// Replay is the exact command that runs it again.
	Replay string
	// Note is one sentence on what happened and why.
	Note string
	// Detail is a line of parameters shown under the title, such as a
	// simulation's swarm.
	Detail  string
	History []history.Op
	// Expected marks a run that is meant to fail (an unsafe variant, a
	// mutant): its failure is the lesson, not a regression.
	ExpectFail bool
	// NotApplicable, when set, says why the scenario did not run (it
	// needs a promise the relay does not declare): the run judged
	// nothing, has no counts or history, and its verdict is N/A.
	NotApplicable string
	// Footprint is what the relay cost (scenarios.Result.Footprint);
	// nil for a run without a relay.
	Footprint *footprint.Footprint
}

// VerdictNotApplicable is the verdict of a cell that did not run, as
// scenarios.VerdictNotApplicable.
const VerdictNotApplicable = "N/A"

// Verdict is the run's verdict in a word: N/A, PASS, FAIL or
// INCONCLUSIVE.
func (r Run) Verdict() string {
	if r.NotApplicable != "" {
		return VerdictNotApplicable
	}
	return verdictOf(r.Valid, r.Problems, r.Inconclusive)
}

// VerdictClass is the run's verdict as an HTML class name: Verdict, with
// NA for N/A.
func (r Run) VerdictClass() string {
	if r.NotApplicable != "" {
		return "NA"
	}
	return r.Verdict()
}

// verdictOf is PASS, FAIL, or INCONCLUSIVE for a run that failed nothing
// but had a fault that could not bite.
func verdictOf(valid bool, problems, inconclusive []string) string {
	switch {
	case valid:
		return "PASS"
	case len(problems) == 0 && len(inconclusive) > 0:
		return "INCONCLUSIVE"
	}
	return "FAIL"
}

// FromSim turns a simulation result into a Run; replay is the command that
// runs the seed again.
func FromSim(res sim.Result, replay string) Run {
	variant := res.Variant
	if variant == "" {
		variant = "production"
	}
	run := Run{
		Title:    fmt.Sprintf("simulation, seed %d", res.Seed),
		Scenario: "sim",
		Relay:    "ours",
		Variant:  variant,
		Seed:     res.Seed,
		Valid:    res.Valid,
		Report:   res.Report,
		Replay:   replay,
		Detail:   res.Swarm,
		History:  res.History,
	}
	if res.Err != nil {
		run.Problems = append(run.Problems, res.Err.Error())
	}
	for _, f := range res.Report.Failed() {
		run.Problems = append(run.Problems, fmt.Sprintf("%s: %s", f.Checker, f.Detail))
	}
	for _, f := range slices.Sorted(maps.Keys(res.Hits)) {
		run.Faults = append(run.Faults, FaultHits{Name: string(f), Class: string(f.Class()), Hits: int64(res.Hits[f])})
	}
	return run
}

// EventStory renders the timeline of one event, one record a line, as a
// person reads it in a terminal: the records that name the event, and the
// crash of a process right after one of them (a producer that died after
// COMMIT). At most max lines (all when max <= 0).
func EventStory(h []history.Op, id string, max int) string {
	var b strings.Builder
	var tl []history.Op
	lastOf := map[string]int{} // process -> position in h of its latest record
	named := false
	for i, op := range h {
		if prev, ok := lastOf[op.Process]; ok && op.F == history.Crash && slices.Contains(h[prev].Events, id) {
			tl = append(tl, op)
		}
		lastOf[op.Process] = i
		if slices.Contains(op.Events, id) {
			tl = append(tl, op)
			named = true
		}
	}
	for i, op := range tl {
		if max > 0 && i == max {
			fmt.Fprintf(&b, "    ... %d more records\n", len(tl)-max)
			break
		}
		fmt.Fprintf(&b, "    %s\n", op.String())
	}
	if !named {
		b.WriteString("    (no record names this event)\n")
	}
	return b.String()
}
