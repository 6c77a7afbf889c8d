package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/outboxlab/outboxlab/checker"
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

// TestNotApplicableHasARowAndRequireAllFailsIt runs two scenarios with a
// runner that passes one and finds the other not applicable to the relay
// (lease-expiry on a relay that holds row locks): the table and the JSON
// have a row for each, the N/A one with its reason and no counts, and the
// run exits 0; with --require-all the same run exits 1, naming what was
// not judged.
func TestNotApplicableHasARowAndRequireAllFailsIt(t *testing.T) {
	why := "lease-expiry needs a relay that takes leases of rows (lease=DURATION or locking=lease), and row-lock declares row locks held while publishing (locking=rowlock)"
	d := withDocker(testDeps())
	d.scenarioNames = func() []string { return []string{scenarios.Baseline, scenarios.LeaseExpiry} }
	d.runScenarios = func(ctx context.Context, ss []runSpec, _ func(int, scenarios.Progress), _ func(string), _ func(int, runOutcome) error) ([]runOutcome, error) {
		var out []runOutcome
		for _, s := range ss {
			r := scenarios.Result{Scenario: s.Scenario, Seed: s.Seed, Relay: "row-lock", Valid: true}
			o := runOutcome{Result: r}
			if s.Scenario == scenarios.LeaseExpiry {
				o = runOutcome{Result: scenarios.Result{Scenario: s.Scenario, Seed: s.Seed, Relay: "row-lock", NotApplicable: why}, NotApplicable: "scenario not applicable: " + why}
			}
			out = append(out, o)
		}
		return out, nil
	}

	code, out, errOut := invokeWith(t, d, "run", "--seed", "7")
	if code != exitOK {
		t.Fatalf("exit %d, want %d\n%s%s", code, exitOK, out, errOut)
	}
	var naRow string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, scenarios.LeaseExpiry+" ") {
			naRow = l
		}
	}
	if !strings.Contains(naRow, "N/A") || !strings.Contains(naRow, why) || strings.Contains(naRow, " 0 ") {
		t.Errorf("the table's lease-expiry row %q: want N/A, its reason and no counts\n%s", naRow, out)
	}
	if !strings.Contains(out, "1 of 2 scenarios passed, 1 not applicable") {
		t.Errorf("the summary does not count the N/A scenario:\n%s", out)
	}

	code, out, errOut = invokeWith(t, d, "run", "--seed", "7", "--json")
	var results []scenarios.Result
	if err := json.Unmarshal([]byte(out), &results); err != nil || code != exitOK || len(results) != 2 || results[1].NotApplicable != why || results[1].Verdict() != scenarios.VerdictNotApplicable {
		t.Errorf("--json: exit %d, %v, %+v\n%s", code, err, results, errOut)
	}

	code, out, errOut = invokeWith(t, d, "run", "--seed", "7", "--require-all")
	if code != exitFail || !strings.Contains(out, "1 of 2 scenarios not judged (1 not applicable, 0 inconclusive)") {
		t.Errorf("--require-all: exit %d, want %d naming what was not judged\n%s%s", code, exitFail, out, errOut)
	}
}

// TestChangeLines prints, under a run's table, what the scenario's own
// check noted of a change of the database or the deployment, and
// nothing of the other notes or of runs that changed neither.
func TestChangeLines(t *testing.T) {
	rows := []scenarios.Result{
		{Scenario: "rolling-upgrade", Database: "schema migration and rolling upgrade", Seed: 7, Unchecked: []string{
			"relays: judged from their own records",
			"rolling-upgrade: ours replaced outboxlab/relay:prev (relay-a at 0.6s)",
		}},
		{Scenario: "failover-async", Database: "failover to an asynchronous standby", Seed: 1, Unchecked: []string{"failover: 12 producer commits began while the standby was cut off"}},
		{Scenario: "baseline", Seed: 1, Unchecked: []string{"baseline: not a change"}},
	}
	var b strings.Builder
	changeLines(&b, rows, false)
	want := "\nwhat changed under the relay:\n" +
		"  rolling-upgrade: ours replaced outboxlab/relay:prev (relay-a at 0.6s)\n" +
		"  failover-async: failover: 12 producer commits began while the standby was cut off\n"
	if b.String() != want {
		t.Errorf("changeLines:\n%q\nwant\n%q", b.String(), want)
	}
}

// TestFailoverLines: the failover's lines list the commits it undid and,
// after them whatever the report's order, the events applied again after
// it undid their first apply; a duplicate-effects result with nothing
// noted adds nothing.
func TestFailoverLines(t *testing.T) {
	rep := checker.Report{Results: []checker.Result{
		{Checker: checker.NameDuplicateEffects, Valid: true, Detail: "2 applied events must have one effect each; 1 applied again after the failover undid their first apply", Noted: []string{"b"}, Reasons: map[string]string{"b": "the failover undid it"}},
		{Checker: checker.NameFailover, Valid: true, Detail: "1 reached the broker and then was lost by it", Noted: []string{"a"}, Reasons: map[string]string{"a": "its business row is gone"}},
	}}
	plain := checker.Report{Results: []checker.Result{{Checker: checker.NameDuplicateEffects, Valid: true, Detail: "3 applied events must have one effect each"}}}
	rows := []scenarios.Result{{Scenario: "failover-async", Seed: 1, Report: rep}, {Scenario: "baseline", Seed: 1, Report: plain}}
	var b strings.Builder
	failoverLines(&b, rows, false)
	want := "\nfailover (the acknowledged commits and the consumers' applies that the failover of the database undid):\n" +
		"  failover-async: 1 reached the broker and then was lost by it\n" +
		"    a: its business row is gone\n" +
		"  failover-async: 2 applied events must have one effect each; 1 applied again after the failover undid their first apply\n" +
		"    b: the failover undid it\n"
	if b.String() != want {
		t.Errorf("failoverLines:\n%q\nwant\n%q", b.String(), want)
	}
}
