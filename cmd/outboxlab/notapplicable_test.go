package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/outboxlab/outboxlab/checker"
	"github.com/outboxlab/outboxlab/internal/report"
	"github.com/outboxlab/outboxlab/scenarios"
)

// applicability returns deps whose runner judges each spec's
// applicability as the containers' runner does, by scenarios.Run, which
// says a scenario is not applicable before it reaches the environment;
// a spec the relay can run passes, or is inconclusive when its scenario
// is among inconclusive. No container starts.
func applicability(inconclusive ...string) deps {
	d := withDocker(testDeps())
	d.runScenarios = func(ctx context.Context, specs []runSpec, _ func(int, scenarios.Progress), _ func(string), done func(int, runOutcome) error) ([]runOutcome, error) {
		var out []runOutcome
		for i, s := range specs {
			sc, err := lookupScenario(s.Scenario)
			if err != nil {
				return out, err
			}
			relay := s.Relay
			if relay.Name == "ours" && relay.Image == "" && len(relay.Command) == 0 {
				relay = scenarios.Ours()
			}
			var o runOutcome
			if sc.Unmet(relay) != nil {
				// Run stops at applicability, before it touches env.
				res, err := scenarios.Run(ctx, nil, sc, scenarios.Options{Seed: s.Seed, Relay: relay, Mode: s.Variant, Events: s.Events, Duration: s.Duration})
				if !errors.Is(err, scenarios.ErrNotApplicable) {
					return out, fmt.Errorf("scenario %s against %s: %v, want it not applicable", s.Scenario, relay.Name, err)
				}
				o = runOutcome{Result: res, NotApplicable: err.Error()}
			} else {
				r := scenarios.Result{Scenario: s.Scenario, Relay: relay.Name, Variant: string(s.Variant), Seed: s.Seed, Valid: true,
					Counts: checker.Counts{Events: 40, Committed: 40, Delivered: 40}, Replay: "replay " + s.Scenario}
				for _, n := range inconclusive {
					if n == s.Scenario {
						r.Valid, r.Inconclusive = false, []string{"relay-a pause holding claims could not bite: relay-a held no claimed row"}
					}
				}
				o = runOutcome{Result: r}
			}
			out = append(out, o)
			if err := done(i, o); err != nil {
				return out, err
			}
		}
		return out, nil
	}
	return d
}

// crashNA is why crash-between-publish-and-mark cannot run against the
// image norelay, which declares nothing: as scenarios says it.
const crashNA = "crash-between-publish-and-mark needs a relay that honours OUTBOX_FAILPOINTS (failpoints), and norelay does not declare it; " +
	"or a relay that takes no lock of a row (locking=none), and norelay declares no locking style; " +
	"or a relay that takes leases of rows (lease=DURATION or locking=lease), and norelay declares no locking style; " +
	"or a relay that holds row locks while publishing (locking=rowlock), and norelay declares no locking style"

// tableRow returns the line of the printed table that starts with name.
func tableRow(out, name string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, name+" ") {
			return l
		}
	}
	return ""
}

// lastLine returns the last line of out that is not empty.
func lastLine(out string) string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	return lines[len(lines)-1]
}

// TestNotApplicableScenarioHasItsRowInEveryOutput runs baseline and
// crash-between-publish-and-mark against a relay that declares no
// failpoints: crash-between-publish-and-mark is N/A with its reason in
// the printed table (no count), in --json (verdict N/A), in the bundle's
// scenarios.json, in run.html and in the REPORT.md made from the bundle;
// baseline passed, so the run exits 0 and its summary names the N/A one.
func TestNotApplicableScenarioHasItsRowInEveryOutput(t *testing.T) {
	crash := scenarios.CrashBeforeMark
	args := []string{"run", "--relay", "image:norelay", "--capabilities", "none", "--scenario", scenarios.Baseline, "--scenario", crash, "--seed", "5"}
	dir := t.TempDir()
	code, out, errOut := invokeWith(t, applicability(), append(args, "--out", dir)...)
	if code != exitOK {
		t.Fatalf("exit %d, want %d: nothing failed\n%s%s", code, exitOK, out, errOut)
	}
	row := tableRow(out, crash)
	if !strings.Contains(row, " N/A ") || !strings.HasSuffix(row, "not applicable: "+crashNA) || strings.Contains(row, " 0 ") {
		t.Errorf("the table's %s row %q: want N/A, no counts and the reason %q\n%s", crash, row, crashNA, out)
	}
	if row := tableRow(out, scenarios.Baseline); !strings.Contains(row, " PASS ") || !strings.Contains(row, " 40 ") {
		t.Errorf("the table's baseline row %q: want PASS with its counts", row)
	}
	if want := "1 of 2 scenarios passed, 1 not applicable to relay norelay: " + crash; lastLine(out) != want {
		t.Errorf("summary %q, want %q", lastLine(out), want)
	}

	// scenarios.json: the cell with its relay and reason, the run beside it.
	raw, err := os.ReadFile(filepath.Join(dir, report.FileScenarios))
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Runs []struct {
			Scenario string `json:"scenario"`
		} `json:"runs"`
		NotApplicable []struct {
			Scenario string `json:"scenario"`
			Seed     uint64 `json:"seed"`
			Relay    string `json:"relay"`
			Why      string `json:"why"`
		} `json:"not_applicable"`
		Unfinished []any `json:"unfinished"`
	}
	if err := json.Unmarshal(raw, &file); err != nil {
		t.Fatal(err)
	}
	if len(file.Runs) != 1 || file.Runs[0].Scenario != scenarios.Baseline || len(file.Unfinished) != 0 || len(file.NotApplicable) != 1 {
		t.Fatalf("scenarios.json holds %+v, want baseline's run and one cell not applicable\n%s", file, raw)
	}
	if na := file.NotApplicable[0]; na.Scenario != crash || na.Seed != 5 || na.Relay != "norelay" || na.Why != crashNA {
		t.Errorf("scenarios.json's not_applicable cell %+v, want %s seed 5 against norelay, why %q", na, crash, crashNA)
	}
	b, err := report.ReadBundle(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Validate(); err != nil {
		t.Errorf("the bundle does not validate: %v", err)
	}

	// run.html and REPORT.md made from the bundle.
	html, err := os.ReadFile(filepath.Join(dir, "run.html"))
	if err != nil || !strings.Contains(string(html), `<span class="badge NA">N/A</span>`) || !strings.Contains(string(html), crashNA) {
		t.Errorf("run.html lacks the N/A run and its reason (%v)", err)
	}
	md := filepath.Join(dir, "REPORT.md")
	if code, _, errOut := invokeWith(t, testDeps(), "report", "--in", dir, "--md", md); code != exitOK {
		t.Fatalf("report exit %d: %s", code, errOut)
	}
	got, err := os.ReadFile(md)
	if want := "| " + crash + " | norelay | outbox | 5 | N/A | not applicable: " + crashNA + " |"; err != nil || !strings.Contains(string(got), want) {
		t.Errorf("REPORT.md lacks %q (%v):\n%s", want, err, got)
	}
	page, err := os.ReadFile(filepath.Join(dir, "REPORT.html"))
	if err != nil || !strings.Contains(string(page), `<span class="badge NA">N/A</span>`) || !strings.Contains(string(page), crashNA) {
		t.Errorf("REPORT.html lacks the N/A run and its reason (%v)", err)
	}

	// --json: a row for each, with its verdict.
	code, out, errOut = invokeWith(t, applicability(), append(args, "--json")...)
	var rows []struct {
		scenarios.Result
		Verdict string `json:"verdict"`
	}
	if err := json.Unmarshal([]byte(out), &rows); err != nil || code != exitOK || len(rows) != 2 {
		t.Fatalf("--json: exit %d, %v\n%s%s", code, err, out, errOut)
	}
	if rows[0].Verdict != scenarios.VerdictPass || rows[1].Scenario != crash || rows[1].Verdict != scenarios.VerdictNotApplicable || rows[1].NotApplicable != crashNA {
		t.Errorf("--json rows %+v, want baseline PASS, then %s N/A because %q", rows, crash, crashNA)
	}
}

// TestRequireAllFailsANotApplicableScenario: the same run with
// --require-all exits 1, and its last line names the scenario that was
// not applicable and why; an inconclusive one beside it is named too,
// with what could not bite. Without the flag the inconclusive run keeps
// its exit code, 3.
func TestRequireAllFailsANotApplicableScenario(t *testing.T) {
	crash := scenarios.CrashBeforeMark
	args := []string{"run", "--relay", "image:norelay", "--scenario", scenarios.Baseline, "--scenario", crash, "--seed", "5", "--require-all"}
	code, out, errOut := invokeWith(t, applicability(), args...)
	want := "1 of 2 scenarios not judged (1 not applicable, 0 inconclusive), and --require-all wants every one judged: " +
		crash + " (seed 5) not applicable: " + crashNA
	if code != exitFail || lastLine(out) != want {
		t.Errorf("--require-all: exit %d, last line %q; want %d and %q\n%s%s", code, lastLine(out), exitFail, want, out, errOut)
	}
	if row := tableRow(out, crash); !strings.Contains(row, " N/A ") {
		t.Errorf("--require-all: the table lacks the N/A row\n%s", out)
	}

	code, out, _ = invokeWith(t, applicability(), append(args, "--seeds", "2")...)
	if want := crash + " (seeds 5, 6) not applicable: " + crashNA; code != exitFail || !strings.HasSuffix(lastLine(out), want) {
		t.Errorf("--require-all over two seeds: exit %d, last line %q, want it to end %q", code, lastLine(out), want)
	}

	// poison can run against a relay that takes no lock, and (in this
	// fake) could not bite; clock-skew cannot.
	three := []string{"run", "--relay", "image:norelay", "--capabilities", "locking=none", "--seed", "5",
		"--scenario", scenarios.Baseline, "--scenario", scenarios.ClockSkew, "--scenario", scenarios.Poison}
	code, out, _ = invokeWith(t, applicability(scenarios.Poison), append(three, "--require-all")...)
	for _, want := range []string{"2 of 3 scenarios not judged (1 not applicable, 1 inconclusive)",
		scenarios.ClockSkew + " (seed 5) not applicable: clock-skew needs a relay that takes leases of rows",
		scenarios.Poison + " (seed 5) inconclusive: relay-a pause holding claims could not bite"} {
		if code != exitFail || !strings.Contains(lastLine(out), want) {
			t.Errorf("--require-all with an inconclusive run: exit %d, last line %q lacks %q", code, lastLine(out), want)
		}
	}
	code, out, _ = invokeWith(t, applicability(scenarios.LeaseExpiry), "run", "--relay", "image:norelay", "--capabilities", "lease=10s", "--seed", "5",
		"--scenario", scenarios.Baseline, "--scenario", scenarios.LeaseExpiry, "--require-all")
	if want := "1 of 2 scenarios not judged (0 not applicable, 1 inconclusive)"; code != exitFail || !strings.HasPrefix(lastLine(out), want) {
		t.Errorf("--require-all with an inconclusive run alone: exit %d, last line %q; want %d and %q", code, lastLine(out), exitFail, want)
	}
	code, out, _ = invokeWith(t, applicability(scenarios.Poison), three...)
	if want := "1 of 3 scenarios inconclusive, none failed, 1 not applicable to relay norelay"; code != exitInconclusive || lastLine(out) != want {
		t.Errorf("without --require-all: exit %d, last line %q; want %d and %q", code, lastLine(out), exitInconclusive, want)
	}
}

// TestEveryScenarioNotApplicableStillHasItsRow: a run whose every
// scenario is not applicable prints each row before it says that nothing
// could run (exit 2, as before); with --require-all that is a failed
// verdict (exit 1), and with --out the bundle holds the cell.
func TestEveryScenarioNotApplicableStillHasItsRow(t *testing.T) {
	crash := scenarios.CrashBeforeMark
	dir := t.TempDir()
	args := []string{"run", "--relay", "image:norelay", "--scenario", crash, "--seed", "5"}
	code, out, errOut := invokeWith(t, applicability(), append(args, "--out", dir)...)
	if code != exitUsage || !strings.Contains(tableRow(out, crash), crashNA) || !strings.Contains(errOut, "no scenario could run with relay norelay: "+crash+" (seed 5) not applicable") {
		t.Errorf("exit %d, want %d after the N/A row\n%s%s", code, exitUsage, out, errOut)
	}
	b, err := report.ReadBundle(dir)
	if err != nil || b.Scenarios == nil || len(b.Scenarios.NotApplicable) != 1 || b.Validate() != nil {
		t.Errorf("the bundle: %v, %+v", err, b.Scenarios)
	}
	code, out, _ = invokeWith(t, applicability(), append(args, "--json")...)
	var rows []scenarios.Result
	if err := json.Unmarshal([]byte(out), &rows); err != nil || code != exitUsage || len(rows) != 1 || rows[0].NotApplicable != crashNA {
		t.Errorf("--json: exit %d, %v, %+v", code, err, rows)
	}
	code, out, _ = invokeWith(t, applicability(), append(args, "--require-all")...)
	if code != exitFail || !strings.Contains(lastLine(out), crash+" (seed 5) not applicable: "+crashNA) {
		t.Errorf("--require-all: exit %d, want %d naming it\n%s", code, exitFail, out)
	}
}

// TestOutcomeNotApplicableByItsResultAlone: a runner that says a spec did
// not run by its result alone (Result.NotApplicable, the outcome's own
// field empty) gets the same N/A row in the table, the JSON and the
// bundle as one that says it by the outcome, and is not run.html's FAIL.
func TestOutcomeNotApplicableByItsResultAlone(t *testing.T) {
	d := withDocker(testDeps())
	d.runScenarios = func(ctx context.Context, specs []runSpec, _ func(int, scenarios.Progress), _ func(string), done func(int, runOutcome) error) ([]runOutcome, error) {
		var out []runOutcome
		for i, s := range specs {
			r := scenarios.Result{Scenario: s.Scenario, Seed: s.Seed, Relay: "norelay", Valid: true}
			if s.Scenario == scenarios.LeaseExpiry {
				r = scenarios.Result{Scenario: s.Scenario, Seed: s.Seed, Relay: "norelay", NotApplicable: "skipped: the relay keeps no leases"}
			}
			out = append(out, runOutcome{Result: r})
			if err := done(i, out[i]); err != nil {
				return out, err
			}
		}
		return out, nil
	}
	dir := t.TempDir()
	code, out, errOut := invokeWith(t, d, "run", "--relay", "image:norelay", "--scenario", scenarios.Baseline, "--scenario", scenarios.LeaseExpiry, "--seed", "3", "--out", dir)
	if code != exitOK || !strings.HasSuffix(tableRow(out, scenarios.LeaseExpiry), "not applicable: skipped: the relay keeps no leases") {
		t.Errorf("exit %d\n%s%s", code, out, errOut)
	}
	b, err := report.ReadBundle(dir)
	if err != nil || len(b.Scenarios.Runs) != 1 || len(b.Scenarios.NotApplicable) != 1 || b.Scenarios.NotApplicable[0].Why != "skipped: the relay keeps no leases" {
		t.Errorf("the bundle: %v, %+v", err, b.Scenarios)
	}
	html, err := os.ReadFile(filepath.Join(dir, "run.html"))
	if err != nil || strings.Contains(string(html), "badge FAIL") || !strings.Contains(string(html), "badge NA") {
		t.Errorf("run.html shows the cell that did not run as FAIL, or not at all (%v)", err)
	}
}
