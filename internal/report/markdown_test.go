package report

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/outboxlab/outboxlab/checker"
	"github.com/outboxlab/outboxlab/footprint"
	"github.com/outboxlab/outboxlab/internal/bench/result"
	"github.com/outboxlab/outboxlab/internal/sim"
)

func TestBundleRoundTripAndMarkdown(t *testing.T) {
	dir := t.TempDir()
	meta := Meta{Date: "2026-01-02T03:04:05Z", Commit: "abc123", Machine: Machine{Cores: 2, MemoryBytes: 24 << 30, OS: "Debian", Go: "go1.26"}}
	sum := sim.RunMany(context.Background(), 1, 20, sim.Options{})
	if err := WriteFile(dir, FileSim, SimFile{Meta: meta, First: 1, Summary: sum, Replay: "go run ./cmd/outboxlab sim --seeds 20 --seed 1"}); err != nil {
		t.Fatal(err)
	}
	later := meta
	later.Date = "2026-01-03T00:00:00Z"
	mf := MutantFile{Meta: later, Tier: "sim", Checkers: []string{checker.NameLost, checker.NamePhantom},
		Mutants: []MutantRow{
			{Name: "reference", Reference: true, Seeds: 10},
			{Name: "publish-before-commit", Seeds: 10, Killed: true, KilledBy: map[string]int{checker.NamePhantom: 7}, FirstKill: 3, Replay: "replay-mutant-1",
				Checker: checker.NamePhantom, Scenario: "sim swarm rollback>=0.2", Seconds: 0.25, Steps: 2},
			{Name: "a|b", Seeds: 10},
		}}
	if err := WriteFile(dir, FileMutants, mf); err != nil {
		t.Fatal(err)
	}
	b, err := ReadBundle(dir)
	if err != nil {
		t.Fatal(err)
	}
	if b.Sim == nil || b.Mutants == nil || b.Scenarios != nil || b.Demo != nil || b.Bench != nil {
		t.Fatalf("bundle read back as %+v", b)
	}
	if b.Sim.Summary.HistorySHA256 != sum.HistorySHA256 || b.Sim.Summary.Seeds != 20 {
		t.Errorf("sim summary read back as %+v", b.Sim.Summary)
	}
	var out bytes.Buffer
	if err := WriteMarkdown(&out, b); err != nil {
		t.Fatal(err)
	}
	md := out.String()
	for _, want := range []string{
		"| date | 2026-01-03T00:00:00Z |", // the newest run's meta heads the page
		"| memory | 24.0 GiB |",
		"_Run on 2026-01-02T03:04:05Z at commit abc123._", // the older section says when it ran
		"| 20 (1..20) | 0 |", sum.HistorySHA256,
		"Tier `sim`: 1 of 2 mutants killed.",
		"| reference | no (the reference, as it must) | · | · | · | 10 | 0.000 | · |",
		"| publish-before-commit | yes | phantom | sim swarm rollback>=0.2 | 3 | 10 | 0.250 | 2 |",
		`| a\|b | **no: survived** | · | · | · | 10 | 0.000 | · |`,
		"## Chaos scenarios\n\nNot run", "## Demo: the dual-write story\n\nNot run", "## Benchmark\n\nNot run",
		"replay-mutant-1\n", "go run ./cmd/outboxlab sim --seeds 20 --seed 1\n",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("REPORT.md lacks %q:\n%s", want, md)
		}
	}
}

func TestMarkdownOfAnEmptyBundleInventsNothing(t *testing.T) {
	b, err := ReadBundle(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if !b.Empty() {
		t.Fatal("an empty directory read as a non-empty bundle")
	}
	var out bytes.Buffer
	if err := WriteMarkdown(&out, b); err != nil {
		t.Fatal(err)
	}
	md := out.String()
	if got := strings.Count(md, "Not run"); got != 6 {
		t.Errorf("%d sections say not run, want 6:\n%s", got, md)
	}
	if strings.Contains(md, "| cores |") {
		t.Errorf("an empty bundle reports a machine:\n%s", md)
	}
}

func TestScenarioSectionListsFaultsAndProblems(t *testing.T) {
	f := ScenarioFile{Meta: Meta{Date: "d"}, Runs: []ScenarioRun{{
		Scenario: "broker-down", Relay: "ours", Variant: "outbox", Seed: 42,
		Counts: checker.Counts{Committed: 100, Delivered: 99, Lost: 1, DuplicateDeliveries: 3,
			DuplicatesBy: map[string]int{"unconfirmed-publish": 1, "crash relay-a": 1}, UnexplainedBy: map[string]int{"broker-down": 1}},
		Faults:    []FaultHits{{Name: "rabbitmq kill", Hits: 2}, {Name: "broker-down", Hits: 1}},
		DrainTime: 1500 * time.Millisecond, Replay: "go run ./cmd/outboxlab run --scenario broker-down --seed 42",
		Problems: []string{"lost: 1 committed event never delivered"},
	}}}
	var out bytes.Buffer
	if err := WriteMarkdown(&out, Bundle{Dir: "results", Scenarios: &f}); err != nil {
		t.Fatal(err)
	}
	md := out.String()
	for _, want := range []string{
		"| broker-down | ours | outbox | 42 | **FAIL** | broker-down ×1, rabbitmq kill ×2 | 100 | 99 | 3 | 1 | crash relay-a=1, unconfirmed-publish=1 | 1 | 0 | 0 | 1.5s |",
		"- lost: 1 committed event never delivered",
		"go run ./cmd/outboxlab run --scenario broker-down --seed 42\n",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("REPORT.md lacks %q:\n%s", want, md)
		}
	}
}

func TestCollectMetaDescribesThisMachine(t *testing.T) {
	m := CollectMeta(t.Context(), time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	if m.Date != "2026-01-02T03:04:05Z" || m.Machine.Cores < 1 || m.Machine.Go == "" || m.Machine.OS == "" {
		t.Errorf("meta = %+v", m)
	}
}

func TestBenchSectionPrintsItsTables(t *testing.T) {
	f := BenchFile{Meta: Meta{Date: "d"}, Tables: []Table{
		{Title: "Throughput: draining 1000 events", Columns: []string{"contender", "msgs/s"}, Rows: [][]string{{"raw", "9000"}, {"relay-1", "7500"}}},
	}, Notes: []string{"watermill did not finish"}}
	var out bytes.Buffer
	if err := WriteMarkdown(&out, Bundle{Dir: "r", Bench: &f}); err != nil {
		t.Fatal(err)
	}
	want := "## Benchmark\n\nThroughput: draining 1000 events\n\n| contender | msgs/s |\n|---|---|\n| raw | 9000 |\n| relay-1 | 7500 |\n\n- watermill did not finish\n"
	if !strings.Contains(out.String(), want) {
		t.Errorf("REPORT.md lacks\n%s\nin\n%s", want, out.String())
	}
}

func TestFalseVerdictFigureCountsEveryCellAndShowsWhatDidNotPass(t *testing.T) {
	meta := Meta{Date: "2026-01-02T03:04:05Z", Commit: "abc", Machine: Machine{Cores: 2, OS: "Debian", Go: "go1.26"}}
	var runs []ScenarioRun
	for _, sc := range []string{"baseline", "db-down"} {
		for seed := uint64(1); seed <= 3; seed++ {
			r := ScenarioRun{Scenario: sc, Relay: "ours", Seed: seed, Valid: true, Replay: fmt.Sprintf("replay %s %d", sc, seed)}
			if sc == "db-down" && seed == 3 {
				r.Valid, r.Problems = false, []string{"duplicate-deliveries: 2 unexplained"}
				r.Checkers = []CheckerVerdict{{Name: "duplicate-deliveries"}}
			}
			if sc == "baseline" && seed == 2 {
				r.Valid, r.Inconclusive = false, []string{"fault x could not bite"}
			}
			runs = append(runs, r)
		}
	}
	out := markdownOf(t, Bundle{Scenarios: &ScenarioFile{Meta: meta, Runs: runs}})
	wantAll(t, out,
		"### False-verdict figure",
		"| baseline | 1..3 | 2 | 0 | 1 |",
		"| db-down | 1..3 | 2 | 1 | 0 | duplicate-deliveries (3) | `replay db-down 3` |",
		"| **all 6 cells** | | **4** | **1** | **1** | | |",
		"| db-down | ours |  | 3 | **FAIL** |", // a failure of a later seed keeps its row
		"| baseline | ours |  | 2 | _INCONCLUSIVE_ |",
		"`db-down` (seed 3) failed:\n- duplicate-deliveries: 2 unexplained",
	)
	if strings.Contains(out, "| db-down | ours |  | 2 |") {
		t.Errorf("a passing cell of a later seed has a detail row:\n%s", out)
	}
	// Another relay's campaign is no false-verdict figure: its failures
	// may be its own.
	theirs := slices.Clone(runs)
	for i := range theirs {
		theirs[i].Relay = "watermill"
	}
	if other := markdownOf(t, Bundle{Scenarios: &ScenarioFile{Meta: meta, Runs: theirs}}); strings.Contains(other, "False-verdict") || !strings.Contains(other, "| **all 6 cells** |") {
		t.Errorf("another relay's campaign:\n%s", other)
	}
	// One seed per scenario is no campaign: no figure.
	if strings.Contains(markdownOf(t, Bundle{Scenarios: &ScenarioFile{Meta: meta, Runs: runs[:1]}}), "False-verdict") {
		t.Errorf("a single-seed run got a false-verdict figure")
	}
}

// TestBenchSummaryLeavesTheRunsToTheHTMLPage renders two benchmark runs
// with BenchSummary: the Markdown keeps the goals over the runs and names
// the command it was given, and the HTML page shows the table of every
// run and the first run of each layout in full.
func TestBenchSummaryLeavesTheRunsToTheHTMLPage(t *testing.T) {
	run := func(date, layout string) *BenchFile {
		return &BenchFile{Meta: Meta{Date: date, Commit: "c"},
			Tables: []Table{{Title: "Throughput of " + date, Columns: []string{"contender", "msgs/s"}, Rows: [][]string{{"raw", "9000"}}}},
			Result: &result.Result{Throughput: result.Throughput{RawMsgsPerSec: 9000, RelayMsgsPerSec: 8100}, Config: result.RunConfig{Layout: layout}}}
	}
	b := Bundle{Benches: []*BenchFile{run("d1", "shared"), run("d2", "shared"), run("d3", "isolated")}}
	b.Bench = b.Benches[0]
	var out bytes.Buffer
	if err := WriteMarkdownWith(&out, b, MarkdownOptions{Command: "make it", BenchSummary: true}); err != nil {
		t.Fatal(err)
	}
	md := out.String()
	for _, want := range []string{"generated by `make it`.", "3 runs. ", "The goals over every run, per layout", "| relay-1 / raw, msgs/s >= 0.85 | shared | 2 of 2 |"} {
		if !strings.Contains(md, want) {
			t.Errorf("REPORT.md lacks %q:\n%s", want, md)
		}
	}
	for _, not := range []string{"Every run, side by side", "### Layout", "Throughput of d1"} {
		if strings.Contains(md, not) {
			t.Errorf("REPORT.md holds %q:\n%s", not, md)
		}
	}
	p, err := BundlePage(b)
	if err != nil {
		t.Fatal(err)
	}
	var page bytes.Buffer
	if err := WriteHTML(&page, p); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Benchmark: every run (3)", "<td>d2</td>", "Benchmark: the first run of layout shared", "Throughput of d1",
		"Benchmark: the first run of layout isolated", "Throughput of d3"} {
		if !strings.Contains(page.String(), want) {
			t.Errorf("the HTML page lacks %q", want)
		}
	}
	if strings.Contains(page.String(), "Throughput of d2") {
		t.Error("the HTML page shows the second shared run in full")
	}
}

// TestFootprintSection: a run that measured the relay's footprint gets a
// row of figures under the table; a bundle of runs that did not gets no
// such section.
func TestFootprintSection(t *testing.T) {
	cpu, logs := 0.02, 4.5
	resume := 1100 * time.Millisecond
	at := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	fp := &footprint.Footprint{
		Producers: footprint.Producers{Control: footprint.Latency{Count: 17, P99: 12 * time.Millisecond},
			Run: footprint.Latency{Count: 57, P99: 21 * time.Millisecond}, Ratio: 1.75, LockWaitSamples: 2},
		Outages: []footprint.Outage{{Faults: []string{"relay-broker down"}, From: at, To: at.Add(1500 * time.Millisecond),
			Replicas: []footprint.ReplicaOutage{{Replica: "relay-a", CPU: &cpu, Logs: &logs, Resume: &resume}}}},
	}
	run := ScenarioRun{Scenario: "broker-down", Relay: "ours", Variant: "outbox", Seed: 7, Valid: true}
	for _, c := range []struct {
		fp   *footprint.Footprint
		want bool
	}{{fp, true}, {nil, false}} {
		r := run
		r.Footprint = c.fp
		var out bytes.Buffer
		if err := WriteMarkdown(&out, Bundle{Dir: "results", Scenarios: &ScenarioFile{Meta: Meta{Date: "d"}, Runs: []ScenarioRun{r}}}); err != nil {
			t.Fatal(err)
		}
		md := out.String()
		row := "| broker-down | 7 | 21ms | 12ms | 1.8× | 2 | relay-broker down (1.5s): relay-a 0.02 / 4.5 / - / - / 1.1s |"
		if got := strings.Contains(md, "#### Footprint") && strings.Contains(md, row); got != c.want {
			t.Errorf("footprint %v: the section with %q is there %v, want %v:\n%s", c.fp != nil, row, got, c.want, md)
		}
	}
}

// TestWriteFailover: a failover run's row counts what the failover undid
// of the commits and, apart, of the consumers' applies (the events
// duplicate-effects noted), with the first of each and its evidence; a
// run without a failover writes nothing.
func TestWriteFailover(t *testing.T) {
	run := ScenarioRun{Scenario: "failover-async", Seed: 3, Valid: true, Counts: checker.Counts{Committed: 90, FailoverPhantom: 2}, Checkers: []CheckerVerdict{
		{Name: checker.NameFailover, Valid: true, Noted: 2, First: []string{"a"}, Why: map[string]string{"a": "its business row is gone"}},
		{Name: checker.NameDuplicateEffects, Valid: true, Noted: 1, First: []string{"b"}, Why: map[string]string{"b": "the failover undid it"}},
	}}
	var s strings.Builder
	writeFailover(&s, []ScenarioRun{run, {Scenario: "baseline", Seed: 3, Valid: true, Checkers: []CheckerVerdict{{Name: checker.NameFailover, Skipped: true}}}})
	want := "| failover-async | 3 | PASS | 90 | 0 | 2 | 1 | `a`: its business row is gone<br>`b`: the failover undid it |\n"
	if !strings.HasSuffix(s.String(), want) || strings.Count(s.String(), "\n| ") != 2 {
		t.Errorf("writeFailover:\n%s\nwant the header and one row ending\n%s", s.String(), want)
	}
}
