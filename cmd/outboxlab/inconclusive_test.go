package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/outboxlab/outboxlab/scenarios"
)

// TestInconclusiveRunHasItsOwnVerdictAndExitCode runs two scenarios with a
// runner that passes one and returns the other inconclusive (its pause
// could not catch the relay holding claims): the table, the JSON, the
// bundle's REPORT.md and the HTML report each show INCONCLUSIVE for it,
// and the command exits 3, not 0 and not 1. A failure beside it still
// exits 1.
func TestInconclusiveRunHasItsOwnVerdictAndExitCode(t *testing.T) {
	inconclusive := scenarios.Result{Scenario: scenarios.LeaseExpiry, Seed: 7, Relay: "ours",
		Inconclusive: []string{"relay-a pause holding claims could not bite: relay-a held no claimed row when it could be paused, within 8s"}}
	runner := func(fail bool) deps {
		d := withDocker(testDeps())
		d.scenarioNames = func() []string { return []string{scenarios.Baseline, scenarios.LeaseExpiry} }
		d.runScenarios = func(ctx context.Context, ss []runSpec, _ func(int, scenarios.Progress), _ func(string), _ func(int, runOutcome) error) ([]runOutcome, error) {
			var out []runOutcome
			for _, s := range ss {
				r := scenarios.Result{Scenario: s.Scenario, Seed: s.Seed, Relay: "ours", Valid: true}
				if s.Scenario == scenarios.LeaseExpiry {
					r = inconclusive
				}
				if fail && s.Scenario == scenarios.Baseline {
					r = scenarios.Result{Scenario: s.Scenario, Seed: s.Seed, Relay: "ours", Problems: []string{"lost: 1 offending"}}
				}
				out = append(out, runOutcome{Result: r})
			}
			return out, nil
		}
		return d
	}

	dir := t.TempDir()
	code, out, errOut := invokeWith(t, runner(false), "run", "--seed", "7", "--out", dir)
	if code != exitInconclusive {
		t.Fatalf("exit %d, want %d (inconclusive)\n%s%s", code, exitInconclusive, out, errOut)
	}
	if !strings.Contains(out, "INCONCLUSIVE") || !strings.Contains(out, "could not bite") || !strings.Contains(out, "1 of 2 scenarios inconclusive") {
		t.Errorf("the table and summary do not show the inconclusive run:\n%s", out)
	}
	md := filepath.Join(dir, "REPORT.md")
	if code, _, errOut := invokeWith(t, testDeps(), "report", "--in", dir, "--md", md); code != exitOK {
		t.Fatalf("report exit %d: %s", code, errOut)
	}
	b, err := os.ReadFile(md)
	if err != nil || !strings.Contains(string(b), "_INCONCLUSIVE_") || !strings.Contains(string(b), "was inconclusive") {
		t.Errorf("REPORT.md lacks the inconclusive row (%v):\n%s", err, b)
	}
	html, err := os.ReadFile(filepath.Join(dir, "run.html"))
	if err != nil || !strings.Contains(string(html), `badge INCONCLUSIVE`) {
		t.Errorf("run.html lacks the inconclusive badge (%v)", err)
	}

	code, out, errOut = invokeWith(t, runner(false), "run", "--seed", "7", "--json")
	var results []scenarios.Result
	if err := json.Unmarshal([]byte(out), &results); err != nil || code != exitInconclusive || len(results) != 2 || len(results[1].Inconclusive) != 1 {
		t.Errorf("--json: exit %d, %v, %+v\n%s", code, err, results, errOut)
	}

	if code, out, errOut := invokeWith(t, runner(true), "run", "--seed", "7"); code != exitFail {
		t.Errorf("a failure beside an inconclusive run: exit %d, want %d\n%s%s", code, exitFail, out, errOut)
	}
}
