package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/outboxlab/outboxlab/workload"

	"github.com/outboxlab/outboxlab/internal/report"
	"github.com/outboxlab/outboxlab/internal/sim"
	"github.com/outboxlab/outboxlab/scenarios"
)

// simScenarios returns d with a stand-in for the container runner: each
// spec runs as a simulation of the same producer variant, so the
// command's table, explanations, report and exit code are exercised on
// real histories without Docker. relabel, when set, reports the results of
// one variant as another's.
func simScenarios(d deps, relabel map[workload.Mode]workload.Mode) deps {
	modes := map[workload.Mode]workload.Mode{
		workload.Outbox: workload.Outbox, workload.PublishThenCommit: workload.PublishThenCommit,
		workload.CommitThenPublish: workload.CommitThenPublish, workload.Optimistic: workload.Optimistic,
	}
	d.scenarioNames = func() []string { return []string{demoScenario, "broker-down"} }
	d.runScenarios = func(ctx context.Context, specs []runSpec, progress func(int, scenarios.Progress), status func(string), _ func(int, runOutcome) error) ([]runOutcome, error) {
		var out []runOutcome
		for i, s := range specs {
			v := s.Variant
			if r, ok := relabel[v]; ok {
				v = r
			}
			res := sim.Run(s.Seed, sim.Options{Variant: sim.Variant{Name: string(v), Producer: modes[v]}})
			progress(i, scenarios.Progress{Scenario: s.Scenario, Phase: "check", Committed: res.Report.Counts.Committed})
			r := scenarios.Result{
				Scenario: s.Scenario, Relay: s.Relay.Name, Variant: string(s.Variant), Seed: s.Seed, Valid: res.Valid,
				Counts: res.Report.Counts, Report: res.Report, History: res.History,
				Replay: fmt.Sprintf("go run ./cmd/outboxlab run --scenario %s --seed %d", s.Scenario, s.Seed),
			}
			for f, n := range res.Hits {
				r.Faults = append(r.Faults, scenarios.FaultHits{Name: string(f), Hits: int64(n)})
			}
			out = append(out, runOutcome{Result: r})
		}
		return out, nil
	}
	return d
}

func TestDemoPrintsTheTableSentencesAndReport(t *testing.T) {
	d := simScenarios(withDocker(testDeps()), nil)
	dir := t.TempDir()
	code, out, errOut := invokeWith(t, d, "demo", "--out", dir, "--seed", "3")
	if code != exitOK {
		t.Fatalf("demo exit %d\n%s%s", code, out, errOut)
	}
	if !strings.HasPrefix(out, "SEED=3\n") {
		t.Errorf("demo does not print its seed first:\n%s", out)
	}
	head := strings.Index(out, "producer")
	if head < 0 {
		t.Fatalf("no table:\n%s", out)
	}
	for _, col := range []string{"verdict", "committed", "delivered", "lost", "phantom", "dup deliveries", "dup effects"} {
		if !strings.Contains(out[head:], col) {
			t.Errorf("the table lacks column %q", col)
		}
	}
	b, err := report.ReadBundle(dir)
	if err != nil || b.Demo == nil || len(b.Demo.Runs) != 3 {
		t.Fatalf("demo.json: %v %+v", err, b.Demo)
	}
	for i, v := range demoVariants {
		r := b.Demo.Runs[i]
		if r.Variant != string(v) || r.Note == "" {
			t.Errorf("row %d = %s with note %q, want %s with a sentence", i, r.Variant, r.Note, v)
		}
		// Each row's sentence is printed under the table.
		if !strings.Contains(out, string(v)+": "+r.Note+"\n") {
			t.Errorf("no sentence for %s in:\n%s", v, out)
		}
		if v == workload.Outbox && (r.Counts.Lost != 0 || r.Counts.Phantom != 0) {
			t.Errorf("outbox row lost %d, phantom %d", r.Counts.Lost, r.Counts.Phantom)
		}
	}
	if !strings.Contains(out, "HTML report: "+b.Demo.HTML+"\n") || filepath.Dir(b.Demo.HTML) != dir {
		t.Errorf("the demo does not end by naming its report %s:\n%s", b.Demo.HTML, out)
	}
	if st, err := os.Stat(b.Demo.HTML); err != nil || st.Size() == 0 {
		t.Errorf("report: %v", err)
	}
}

func TestDemoFailsWhenTheOutboxRowLoses(t *testing.T) {
	// Find a seed on which commit-then-publish really loses events, and
	// report its results as the outbox's.
	var seed uint64
	for s := uint64(1); s < 100; s++ {
		if res := sim.Run(s, sim.Options{Variant: sim.Variant{Producer: workload.CommitThenPublish}}); res.Report.Counts.Lost > 0 {
			seed = s
			break
		}
	}
	if seed == 0 {
		t.Fatal("no seed below 100 where commit-then-publish loses an event")
	}
	d := simScenarios(withDocker(testDeps()), map[workload.Mode]workload.Mode{workload.Outbox: workload.CommitThenPublish})
	code, out, _ := invokeWith(t, d, "demo", "--out", t.TempDir(), "--seed", fmt.Sprint(seed))
	if code != exitFail {
		t.Fatalf("demo exit %d, want 1\n%s", code, out)
	}
	for _, want := range []string{"FAIL the outbox producer in the demo", "violated invariant lost", "replay: "} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestDemoJSON(t *testing.T) {
	d := simScenarios(withDocker(testDeps()), nil)
	code, out, errOut := invokeWith(t, d, "demo", "--out", t.TempDir(), "--json")
	if code != exitOK {
		t.Fatalf("exit %d\n%s", code, errOut)
	}
	var rows []demoRow
	if err := json.Unmarshal([]byte(out), &rows); err != nil || len(rows) != 3 {
		t.Fatalf("stdout is not the rows as JSON: %v\n%s", err, out)
	}
	if rows[2].Variant != string(workload.Outbox) || rows[2].Counts.Committed == 0 {
		t.Errorf("rows = %+v", rows)
	}
}

func TestRunWithARunner(t *testing.T) {
	d := simScenarios(withDocker(testDeps()), nil)
	dir := t.TempDir()
	code, out, errOut := invokeWith(t, d, "run", "--scenario", "broker-down", "--seed", "5", "--out", dir)
	if code != exitOK {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
	if !strings.HasPrefix(out, "SEED=5\n") || !strings.Contains(out, "broker-down") {
		t.Errorf("output:\n%s", out)
	}
	b, err := report.ReadBundle(dir)
	if err != nil || b.Scenarios == nil || len(b.Scenarios.Runs) != 1 || b.Scenarios.Runs[0].History == "" {
		t.Fatalf("scenarios.json: %v %+v", err, b.Scenarios)
	}
	if code, _, errOut := invokeWith(t, d, "run", "--scenario", "nope"); code != exitUsage || !strings.Contains(errOut, "unknown scenario") {
		t.Errorf("unknown scenario: exit %d %s", code, errOut)
	}
	want := demoScenario + "\nbroker-down\n"
	for _, n := range scenarios.ClusterNames() {
		want += n + "  " + clusterListNote + "\n"
	}
	for _, n := range scenarios.ConsumerNames() {
		want += n + "  " + consumerListNote + "\n"
	}
	for _, sc := range scenarios.DatabaseCatalogue() {
		want += sc.Name + "  " + databaseListNote(sc) + "\n"
	}
	if !strings.Contains(want, "rolling-upgrade  (runs only when named with --scenario)\n") || !strings.Contains(want, "failover-sync  (runs only when named with --scenario, on a PostgreSQL with a streaming standby)") {
		t.Errorf("--list notes of the database's scenarios: %q", want)
	}
	if code, out, _ := invokeWith(t, d, "run", "--list"); code != exitOK || out != want {
		t.Errorf("--list: exit %d %q, want %q", code, out, want)
	}
}
