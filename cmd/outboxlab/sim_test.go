package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outboxlab/outboxlab/internal/bench"
	"github.com/outboxlab/outboxlab/internal/bench/result"
	"github.com/outboxlab/outboxlab/internal/report"
	"github.com/outboxlab/outboxlab/scenarios"
)

// TestInterruptedSimPrintsTheFailuresFoundSoFar interrupts a simulation
// of a mutant whose seeds fail: it prints the failures it found with
// their replay, says it was interrupted, exits 1, and its bundle keeps
// them, saying why the batch stopped.
func TestInterruptedSimPrintsTheFailuresFoundSoFar(t *testing.T) {
	dir := t.TempDir()
	ctx, _ := signalled(t, 500*time.Millisecond)
	d := unsafeCatalogue(testDeps())
	code, out, errOut := invokeCtx(t, ctx, d, "sim", "--seeds", "100000000", "--seed", "1", "--mutant", "publish-then-commit", "--out", dir)
	if code != exitFail {
		t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", code, exitFail, out, errOut)
	}
	for _, want := range []string{"seeds failed: ", "violated invariant", "replay: go run ./cmd/outboxlab sim --seeds 1 --seed ", "--mutant publish-then-commit"} {
		if !strings.Contains(out, want) {
			t.Errorf("stdout lacks %q:\n%s", want, out)
		}
	}
	if !strings.Contains(errOut, "outboxlab sim: interrupted by SIGINT: ") || !strings.Contains(errOut, "the failures found so far follow") ||
		strings.Count(errOut, "interrupted by SIGINT") != 1 {
		t.Errorf("stderr does not say, once, that it was interrupted:\n%s", errOut)
	}
	if strings.Contains(out, "PASS") {
		t.Errorf("an interrupted run with failures printed PASS:\n%s", out)
	}
	b, err := report.ReadBundle(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Validate(); err != nil {
		t.Errorf("the bundle of an interrupted run does not validate: %v", err)
	}
	sm := b.Sim
	if sm == nil || sm.Summary.Failed == 0 || len(sm.Failures) == 0 || sm.Failures[0].History == "" || !strings.Contains(sm.Stopped, "interrupted by SIGINT") {
		t.Fatalf("sim.json of the interrupted run: %+v", sm)
	}
	if _, err := report.ReadHistory(dir, sm.Failures[0].History); err != nil {
		t.Errorf("the first failure's history: %v", err)
	}
	md := filepath.Join(t.TempDir(), "REPORT.md")
	if code, out, errOut := invoke(t, "report", "--in", dir, "--md", md); code != exitOK {
		t.Fatalf("report: exit %d\n%s%s", code, out, errOut)
	}
	if got, _ := os.ReadFile(md); !strings.Contains(string(got), "did not finish") {
		t.Errorf("REPORT.md does not say the batch did not finish:\n%s", got)
	}
}

// TestSimWritesItsBundleWhileItRuns reads sim.json while the batch runs:
// it is there, with the failures found so far, and says the batch had
// not finished, so that a run killed with SIGKILL keeps what it found.
func TestSimWritesItsBundleWhileItRuns(t *testing.T) {
	dir := t.TempDir()
	ctx, stop := signalled(t, 0)
	d := unsafeCatalogue(testDeps())
	done := make(chan int, 1)
	go func() {
		code, _, _ := invokeCtx(t, ctx, d, "sim", "--seeds", "100000000", "--seed", "1", "--mutant", "publish-then-commit", "--out", dir)
		done <- code
	}()
	defer func() {
		stop()
		<-done
	}()
	deadline := time.Now().Add(time.Minute)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		var f report.SimFile
		data, err := os.ReadFile(filepath.Join(dir, report.FileSim))
		if err == nil && json.Unmarshal(data, &f) == nil && len(f.Failures) > 0 {
			if f.Stopped != report.SimRunning {
				t.Errorf("sim.json written during the run says stopped %q, want %q", f.Stopped, report.SimRunning)
			}
			if _, err := report.ReadHistory(dir, f.Failures[0].History); err != nil {
				t.Errorf("the history of a failure in sim.json written during the run: %v", err)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no sim.json with a failure within a minute of the start (last read: %v)", err)
		}
		select {
		case code := <-done:
			done <- code
			t.Fatalf("the run ended (exit %d) before sim.json held a failure", code)
		case <-tick.C:
		}
	}
}

// TestSimChecksOutBeforeAnySeed gives --out a directory that cannot be
// made: the run exits 2 before it runs a seed.
func TestSimChecksOutBeforeAnySeed(t *testing.T) {
	file := filepath.Join(t.TempDir(), "a-file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	d := unsafeCatalogue(testDeps())
	for _, out := range []string{"/proc/nope", filepath.Join(file, "dir")} {
		code, stdout, errOut := invokeCtx(t, context.Background(), d, "sim", "--seeds", "5", "--seed", "1", "--mutant", "publish-then-commit", "--out", out)
		if code != exitUsage || !strings.Contains(errOut, "--out "+out) {
			t.Errorf("--out %s: exit %d, want %d naming --out\n%s%s", out, code, exitUsage, stdout, errOut)
		}
		if strings.Contains(stdout, "SEED=") {
			t.Errorf("--out %s: seeds ran before the directory was checked:\n%s", out, stdout)
		}
	}
}

// TestSimFailureOutlivesABundleItCannotFinish makes the last file of the
// bundle, sim.html, impossible to write (a directory is in its place):
// the failure is printed in full and the run exits 1, not 2, saying what
// it could not write.
func TestSimFailureOutlivesABundleItCannotFinish(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "sim.html", "in-the-way"), 0o755); err != nil {
		t.Fatal(err)
	}
	d := unsafeCatalogue(testDeps())
	code, out, errOut := invokeWith(t, d, "sim", "--seeds", "5", "--seed", "1", "--mutant", "publish-then-commit", "--out", dir)
	if code != exitFail {
		t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", code, exitFail, out, errOut)
	}
	for _, want := range []string{"violated invariant", "replay: go run ./cmd/outboxlab sim --seeds 1 --seed "} {
		if !strings.Contains(out, want) {
			t.Errorf("stdout lacks %q:\n%s", want, out)
		}
	}
	if !strings.Contains(errOut, "sim.html") {
		t.Errorf("stderr does not say what could not be written:\n%s", errOut)
	}
}

// TestVerbsCheckOutBeforeTheyRun gives every verb that writes a results
// bundle an --out it cannot write: each exits 2 naming it, before it
// runs anything.
func TestVerbsCheckOutBeforeTheyRun(t *testing.T) {
	d := withDocker(testDeps())
	d.bench = func(context.Context, bench.Options, func(string)) (result.Result, error) {
		t.Error("bench ran with an --out it cannot write")
		return result.Result{}, nil
	}
	d.runScenarios = func(context.Context, []runSpec, func(int, scenarios.Progress), func(string), func(int, runOutcome) error) ([]runOutcome, error) {
		t.Error("scenarios ran with an --out they cannot write")
		return nil, nil
	}
	for _, args := range [][]string{
		{"mutants", "--seeds", "2", "--seed", "1"},
		{"bench"},
		{"demo"},
		{"run", "--scenario", "broker-down", "--seed", "1"},
	} {
		args = append(args, "--out", "/proc/nope")
		code, out, errOut := invokeWith(t, d, args...)
		if code != exitUsage || !strings.Contains(errOut, "/proc/nope") {
			t.Errorf("%v: exit %d, want %d naming the directory\n%s%s", args, code, exitUsage, out, errOut)
		}
		if strings.Contains(out, "SEED=") && args[0] == "mutants" {
			t.Errorf("%v ran before checking --out:\n%s", args, out)
		}
	}
}
