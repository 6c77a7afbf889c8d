package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/outboxlab/outboxlab/internal/campaign"
	"github.com/outboxlab/outboxlab/internal/report"
	"github.com/outboxlab/outboxlab/scenarios"
)

// cellRunner is a container runner that runs no container: each spec
// passes at once, unless cell says otherwise. It records the cells it was
// asked for.
type cellRunner struct {
	mu    sync.Mutex
	cells []campaign.Cell
	// cell, when set, runs before spec i is handed over; an error stops
	// the runner as an environment error would.
	cell func(ctx context.Context, i int) error
}

func (c *cellRunner) deps(d deps, names ...string) deps {
	d = withDocker(d)
	d.scenarioNames = func() []string { return names }
	d.runScenarios = func(ctx context.Context, specs []runSpec, _ func(int, scenarios.Progress), _ func(string),
		done func(int, runOutcome) error) ([]runOutcome, error) {
		var out []runOutcome
		for i, s := range specs {
			if c.cell != nil {
				if err := c.cell(ctx, i); err != nil {
					return out, err
				}
			}
			c.mu.Lock()
			c.cells = append(c.cells, campaign.Cell{Scenario: s.Scenario, Seed: s.Seed})
			c.mu.Unlock()
			o := runOutcome{Result: scenarios.Result{Scenario: s.Scenario, Relay: "ours", Variant: string(s.Variant), Seed: s.Seed, Valid: true,
				Replay: scenarios.ReplayCommand(s.Scenario, s.Seed, s.Relay, 0, 0)}}
			out = append(out, o)
			if err := done(i, o); err != nil {
				return out, err
			}
		}
		return out, nil
	}
	return d
}

func readScenarios(t *testing.T, dir string) report.ScenarioFile {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, report.FileScenarios))
	if err != nil {
		t.Fatal(err)
	}
	var f report.ScenarioFile
	if err := json.Unmarshal(data, &f); err != nil {
		t.Fatalf("%s: %v", report.FileScenarios, err)
	}
	return f
}

func TestRunShardsRunEveryCellOnce(t *testing.T) {
	names := []string{"a", "b", "c"}
	whole, _ := campaign.Cells(names, 5, 3)
	for n := 1; n <= len(whole)+1; n++ {
		var union []campaign.Cell
		for k := 1; k <= n; k++ {
			r := &cellRunner{}
			args := []string{"run", "--seeds", "3", "--seed", "5", "--shard", fmt.Sprintf("%d/%d", k, n)}
			if code, out, errOut := invokeWith(t, r.deps(testDeps(), names...), args...); code != exitOK {
				t.Fatalf("%v: exit %d\n%s%s", args, code, out, errOut)
			}
			union = append(union, r.cells...)
		}
		if !slices.Equal(union, whole) {
			t.Errorf("%d shards ran %v, want every cell once, in order: %v", n, union, whole)
		}
	}
}

func TestRunShardFromTheEnvironment(t *testing.T) {
	for env, want := range map[string][]campaign.Cell{
		"OUTBOXLAB_SHARD=2/2":                       {{Scenario: "b", Seed: 1}, {Scenario: "b", Seed: 2}},
		"JOB_COMPLETION_INDEX=0,OUTBOXLAB_SHARDS=2": {{Scenario: "a", Seed: 1}, {Scenario: "a", Seed: 2}},
	} {
		m := map[string]string{}
		for _, kv := range strings.Split(env, ",") {
			k, v, _ := strings.Cut(kv, "=")
			m[k] = v
		}
		r := &cellRunner{}
		if code, out, errOut := invokeWith(t, r.deps(withEnv(testDeps(), m), "a", "b"), "run", "--seeds", "2", "--seed", "1"); code != exitOK {
			t.Fatalf("%s: exit %d\n%s%s", env, code, out, errOut)
		}
		if !slices.Equal(r.cells, want) {
			t.Errorf("%s ran %v, want %v", env, r.cells, want)
		}
	}
}

func TestRunBadCampaignsAreUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--shard", "4/3"}, "--shard: invalid shard: 4/3"},
		{[]string{"--shard", "0/3"}, "invalid shard"},
		{[]string{"--shard", "x"}, "invalid shard"},
		{[]string{"--seeds", "0"}, "--seeds must be at least 1, not 0"},
		{[]string{"--seeds", "-1"}, "--seeds must be at least 1"},
		{[]string{"--scenario", "a", "--scenario", "a"}, `scenario "a" is named twice`},
		{[]string{"--seeds", "2", "--seed", "18446744073709551615"}, "would pass the largest seed"},
	} {
		r := &cellRunner{}
		code, _, errOut := invokeWith(t, r.deps(testDeps(), "a", "b"), append([]string{"run"}, tc.args...)...)
		if code != exitUsage || !strings.Contains(errOut, tc.want) || len(r.cells) > 0 {
			t.Errorf("run %v: exit %d, %q, ran %v; want 2 saying %q and nothing run", tc.args, code, errOut, r.cells, tc.want)
		}
	}
	code, _, errOut := invokeWith(t, withEnv(testDeps(), map[string]string{"OUTBOXLAB_SHARDS": "3"}), "run", "--scenario", "a")
	if code != exitUsage || !strings.Contains(errOut, "JOB_COMPLETION_INDEX") {
		t.Errorf("OUTBOXLAB_SHARDS without an index: exit %d, %q", code, errOut)
	}
}

// TestInterruptedRunKeepsFinishedCells is the acceptance test of issue
// 18: an interrupted `run --seeds 3 --out DIR` keeps the cells that
// finished in DIR, says which did not, and `report --in DIR` renders them.
// Every finished cell is on disk before the next one starts, which is
// what a crash leaves too.
func TestInterruptedRunKeepsFinishedCells(t *testing.T) {
	dir := t.TempDir()
	ctx, stop := signalled(t, 0)
	r := &cellRunner{}
	r.cell = func(ctx context.Context, i int) error {
		if i > 0 {
			// What a crash here would leave: the cells before i, and no other.
			f := readScenarios(t, dir)
			if len(f.Runs) != i || len(f.Unfinished) != 3-i || f.Runs[i-1].Seed != uint64(10+i-1) {
				t.Errorf("before cell %d, the bundle holds %d runs and %d unfinished cells", i+1, len(f.Runs), len(f.Unfinished))
			}
			if _, err := report.ReadHistory(dir, f.Runs[i-1].History); err != nil && f.Runs[i-1].History != "" {
				t.Errorf("history of cell %d: %v", i, err)
			}
		}
		if i == 2 {
			stop() // SIGINT during the third cell
			return fmt.Errorf("scenario broker-down: %w", ctx.Err())
		}
		return nil
	}
	code, out, errOut := invokeCtx(t, ctx, r.deps(testDeps(), "broker-down"), "run", "--scenario", "broker-down", "--seeds", "3", "--seed", "10", "--out", dir)
	wantInterrupted(t, "run", code, out, errOut)
	if !strings.Contains(errOut, "2 of 3 cells finished") {
		t.Errorf("run does not say what it kept:\n%s", errOut)
	}
	f := readScenarios(t, dir)
	if len(f.Runs) != 2 || f.Runs[0].Seed != 10 || f.Runs[1].Seed != 11 {
		t.Fatalf("the bundle keeps %+v, want seeds 10 and 11", f.Runs)
	}
	if !slices.Equal(f.Unfinished, []campaign.Cell{{Scenario: "broker-down", Seed: 12}}) || !strings.Contains(f.Stopped, "interrupted by SIGINT") {
		t.Errorf("unfinished %v, stopped %q; want broker-down/12, interrupted", f.Unfinished, f.Stopped)
	}
	if f.Part == nil || f.Part.Shard != "1/1" || !strings.Contains(f.Part.Campaign, "--seeds 3 --seed 10") {
		t.Errorf("part %+v", f.Part)
	}
	md := filepath.Join(t.TempDir(), "REPORT.md")
	if code, out, errOut := invoke(t, "report", "--in", dir, "--md", md); code != exitOK {
		t.Fatalf("report: exit %d\n%s%s", code, out, errOut)
	}
	got, _ := os.ReadFile(md)
	// Both finished cells count in the campaign's figure; the detail
	// table shows the first seed's.
	for _, want := range []string{"| broker-down | ours | outbox | 10 | PASS |", "| broker-down | 10..11 | 2 | 0 | 0 |",
		"**1 cell did not finish** and has no verdict: `broker-down/12`. The run stopped: interrupted by SIGINT."} {
		if !strings.Contains(string(got), want) {
			t.Errorf("REPORT.md lacks %q:\n%s", want, got)
		}
	}
	if html, err := os.ReadFile(strings.TrimSuffix(md, ".md") + ".html"); err != nil || !strings.Contains(string(html), "broker-down/12") {
		t.Errorf("the HTML page (%v) does not name the unfinished cell", err)
	}
}

func TestAnErrorInALaterCellKeepsTheEarlierOnes(t *testing.T) {
	dir := t.TempDir()
	r := &cellRunner{}
	r.cell = func(_ context.Context, i int) error {
		if i == 1 {
			return errors.New("starting relay-a: container exited")
		}
		return nil
	}
	code, _, errOut := invokeWith(t, r.deps(testDeps(), "a", "b"), "run", "--seeds", "1", "--seed", "3", "--out", dir)
	if code != exitUsage || !strings.Contains(errOut, "container exited") {
		t.Fatalf("exit %d, %q; want 2 with the error", code, errOut)
	}
	f := readScenarios(t, dir)
	if len(f.Runs) != 1 || f.Runs[0].Scenario != "a" || !slices.Equal(f.Unfinished, []campaign.Cell{{Scenario: "b", Seed: 3}}) || !strings.Contains(f.Stopped, "container exited") {
		t.Errorf("bundle: runs %+v, unfinished %v, stopped %q", f.Runs, f.Unfinished, f.Stopped)
	}
}

func TestReportMergesShardBundles(t *testing.T) {
	var dirs []string
	for k := 1; k <= 3; k++ {
		dir := t.TempDir()
		r := &cellRunner{}
		args := []string{"run", "--seeds", "2", "--seed", "1", "--shard", fmt.Sprintf("%d/3", k), "--out", dir}
		if code, out, errOut := invokeWith(t, r.deps(testDeps(), "a", "b"), args...); code != exitOK {
			t.Fatalf("%v: exit %d\n%s%s", args, code, out, errOut)
		}
		dirs = append(dirs, dir)
	}
	md := filepath.Join(t.TempDir(), "REPORT.md")
	args := []string{"report", "--md", md}
	for _, d := range dirs {
		args = append(args, "--in", d)
	}
	if code, out, errOut := invoke(t, args...); code != exitOK {
		t.Fatalf("report: exit %d\n%s%s", code, out, errOut)
	}
	got, _ := os.ReadFile(md)
	for _, c := range []string{"| a | ours | outbox | 1 |", "| a | 1..2 |", "| b | ours | outbox | 1 |", "| b | 1..2 |",
		"Shards 1/3, 2/3, 3/3 of the campaign `go run ./cmd/outboxlab run --scenario a --scenario b --seeds 2 --seed 1`."} {
		if strings.Count(string(got), c) != 1 {
			t.Errorf("REPORT.md holds %q %d times, want once:\n%s", c, strings.Count(string(got), c), got)
		}
	}
	if strings.Contains(string(got), "Not in this report") {
		t.Errorf("REPORT.md says a shard is missing:\n%s", got)
	}
	// Two shards only: the report names the missing one.
	if code, _, _ := invoke(t, "report", "--md", md, "--in", dirs[0], "--in", dirs[2]); code != exitOK {
		t.Fatal("report of two shards failed")
	}
	if got, _ := os.ReadFile(md); !strings.Contains(string(got), "**Not in this report: shard 2/3**") {
		t.Errorf("REPORT.md of shards 1/3 and 3/3 does not name 2/3:\n%s", got)
	}

	// A shard of another commit is refused, naming both commits, unless
	// allowed.
	f := readScenarios(t, dirs[1])
	commit := f.Meta.Commit
	f.Meta.Commit = "0123456789ab"
	if err := report.WriteFile(dirs[1], report.FileScenarios, f); err != nil {
		t.Fatal(err)
	}
	code, _, errOut := invoke(t, append(args[:0:0], args...)...)
	if code != exitUsage || !strings.Contains(errOut, "0123456789ab") || !strings.Contains(errOut, "of commit "+orUnknownCommit(commit)) ||
		!strings.Contains(errOut, "--allow-mixed-commits") {
		t.Errorf("mixed commits: exit %d, %q; want 2 naming both commits and the flag", code, errOut)
	}
	if code, out, errOut := invoke(t, append(args, "--allow-mixed-commits")...); code != exitOK {
		t.Errorf("--allow-mixed-commits: exit %d\n%s%s", code, out, errOut)
	}
	// The same shard twice would count its cells twice.
	if code, _, errOut := invoke(t, "report", "--md", md, "--in", dirs[0], "--in", dirs[0]); code != exitUsage || !strings.Contains(errOut, "both hold shard 1/3") {
		t.Errorf("a shard twice: exit %d, %q", code, errOut)
	}
}

func orUnknownCommit(c string) string {
	if c == "" {
		return "unknown"
	}
	return c
}

func TestMutantsShardsRunEveryCellOnce(t *testing.T) {
	d := testDeps()
	whole := map[string]int{}
	for k := 1; k <= 3; k++ {
		dir := t.TempDir()
		code, out, errOut := invokeWith(t, d, "mutants", "--mutant", "publish-before-commit", "--mutant", "mark-before-publish",
			"--seeds", "50", "--seed", "1", "--shard", fmt.Sprintf("%d/3", k), "--out", dir)
		if code != exitOK {
			t.Fatalf("shard %d/3: exit %d\n%s%s", k, code, out, errOut)
		}
		b, err := report.ReadBundle(dir)
		if err != nil || b.Mutants == nil || b.Mutants.Part == nil || b.Mutants.Part.Shard != fmt.Sprintf("%d/3", k) {
			t.Fatalf("shard %d/3: %v, %+v", k, err, b.Mutants)
		}
		for _, m := range b.Mutants.Mutants {
			whole[m.Name]++
		}
	}
	want := map[string]int{"reference": 1, "publish-before-commit": 1, "mark-before-publish": 1}
	if fmt.Sprint(whole) != fmt.Sprint(want) {
		t.Errorf("the shards ran %v, want %v", whole, want)
	}
}
