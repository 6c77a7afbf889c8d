package main

import (
	"context"
	"errors"
	"fmt"
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

func TestExitCodesAreDistinct(t *testing.T) {
	codes := map[int]string{exitOK: "ok", exitFail: "fail", exitUsage: "usage", exitInconclusive: "inconclusive"}
	if len(codes) != 4 || exitOK != 0 || exitFail != 1 || exitUsage != 2 || exitInconclusive != 3 {
		t.Errorf("exit codes %v, want 0 pass, 1 failed, 2 usage or environment, 3 inconclusive", codes)
	}
}

func TestHelpHelp(t *testing.T) {
	for _, args := range [][]string{{"help", "help"}, {"help", "--help"}, {"help", "-h"}} {
		code, out, errOut := invoke(t, args...)
		if code != exitOK || !strings.HasPrefix(out, "Usage: outboxlab help [VERB]\n") || errOut != "" {
			t.Errorf("%q: exit %d\nstdout: %s\nstderr: %s", args, code, out, errOut)
		}
	}
	// The list of verbs names help with the same summary.
	_, list, _ := invoke(t, "help")
	if !strings.Contains(list, "\n  help      "+helpVerb().summary+"\n") {
		t.Errorf("help does not list itself:\n%s", list)
	}
}

// signalled returns a context that ends as main's does on SIGINT, after
// delay, and the function that ends it at once.
func signalled(t *testing.T, delay time.Duration) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(context.Background())
	stop := func() { cancel(fmt.Errorf("%w by SIGINT", errInterrupted)) }
	if delay > 0 {
		timer := time.AfterFunc(delay, stop)
		t.Cleanup(func() { timer.Stop() })
	}
	t.Cleanup(func() { cancel(nil) })
	return ctx, stop
}

// wantInterrupted checks that a verb cut short by a signal exited 2,
// said that it was interrupted, and gave no verdict.
func wantInterrupted(t *testing.T, name string, code int, out, errOut string) {
	t.Helper()
	if code != exitUsage {
		t.Errorf("%s interrupted: exit %d, want 2\nstdout: %s\nstderr: %s", name, code, out, errOut)
	}
	if !strings.Contains(errOut, "outboxlab "+name+": interrupted by SIGINT") {
		t.Errorf("%s interrupted: stderr does not say so:\n%s", name, errOut)
	}
	if strings.Count(errOut, "interrupted by SIGINT") != 1 {
		t.Errorf("%s interrupted: said so more than once:\n%s", name, errOut)
	}
	for _, verdict := range []string{"PASS", "FAIL"} {
		if strings.Contains(out, verdict) || strings.Contains(errOut, verdict) {
			t.Errorf("%s interrupted printed a verdict (%s):\nstdout: %s\nstderr: %s", name, verdict, out, errOut)
		}
	}
}

func TestInterruptedBenchExits2(t *testing.T) {
	ctx, stop := signalled(t, 0)
	d := withDocker(testDeps())
	d.bench = func(ctx context.Context, opts bench.Options, status func(string)) (result.Result, error) {
		stop() // Ctrl-C during the drain
		return result.Result{}, fmt.Errorf("relay-1 delivered 10 of 1000 messages: %w", ctx.Err())
	}
	code, out, errOut := invokeCtx(t, ctx, d, "bench")
	wantInterrupted(t, "bench", code, out, errOut)
}

// interruptedScenarios returns d with a container runner that is
// interrupted during its first scenario; results, when set, are what it
// returns anyway (a runner that hands back what it has).
func interruptedScenarios(d deps, stop func(), results bool) deps {
	d = withDocker(d)
	d.scenarioNames = func() []string { return []string{demoScenario, "broker-down"} }
	d.runScenarios = func(ctx context.Context, specs []runSpec, _ func(int, scenarios.Progress), _ func(string), _ func(int, runOutcome) error) ([]runOutcome, error) {
		stop()
		if !results {
			return nil, fmt.Errorf("scenario %s: %w", specs[0].Scenario, ctx.Err())
		}
		out := make([]runOutcome, len(specs))
		for i, s := range specs {
			out[i] = runOutcome{Result: scenarios.Result{Scenario: s.Scenario, Variant: string(s.Variant), Seed: s.Seed, Valid: false}}
		}
		return out, nil
	}
	return d
}

func TestInterruptedRunAndDemoExit2(t *testing.T) {
	for _, results := range []bool{false, true} {
		for _, args := range [][]string{{"run", "--scenario", "broker-down", "--seed", "1"}, {"demo", "--out", t.TempDir()}} {
			ctx, stop := signalled(t, 0)
			code, out, errOut := invokeCtx(t, ctx, interruptedScenarios(testDeps(), stop, results), args...)
			wantInterrupted(t, args[0], code, out, errOut)
		}
	}
}

func TestInterruptedSimExits2(t *testing.T) {
	ctx, _ := signalled(t, 300*time.Millisecond)
	code, out, errOut := invokeCtx(t, ctx, testDeps(), "sim", "--seeds", "100000000", "--seed", "1")
	wantInterrupted(t, "sim", code, out, errOut)
	if !strings.Contains(errOut, "of 100000000 seeds from 1 finished") {
		t.Errorf("sim does not say how far it got:\n%s", errOut)
	}
}

func TestInterruptedMutantsExit2(t *testing.T) {
	ctx, _ := signalled(t, 300*time.Millisecond)
	code, out, errOut := invokeCtx(t, ctx, testDeps(), "mutants", "--seeds", "100000000", "--seed", "1")
	wantInterrupted(t, "mutants", code, out, errOut)
}

func TestInterruptedReportExits2(t *testing.T) {
	dir := t.TempDir()
	if code, out, errOut := invoke(t, "sim", "--seeds", "2", "--seed", "3", "--out", dir); code != exitOK {
		t.Fatalf("sim exit %d\n%s%s", code, out, errOut)
	}
	ctx, stop := signalled(t, 0)
	stop()
	md := filepath.Join(t.TempDir(), "REPORT.md")
	code, out, errOut := invokeCtx(t, ctx, testDeps(), "report", "--in", dir, "--md", md)
	wantInterrupted(t, "report", code, out, errOut)
	if _, err := os.Stat(md); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("an interrupted report wrote %s (%v)", md, err)
	}
}

func TestReportRefusesABundleWithoutMachineMetadata(t *testing.T) {
	dir := t.TempDir()
	if code, out, errOut := invoke(t, "sim", "--seeds", "2", "--seed", "3", "--out", dir); code != exitOK {
		t.Fatalf("sim exit %d\n%s%s", code, out, errOut)
	}
	md := filepath.Join(t.TempDir(), "REPORT.md")
	if code, _, errOut := invoke(t, "report", "--in", dir, "--md", md); code != exitOK {
		t.Fatalf("the bundle as written is refused: %s", errOut)
	}
	// The same results without their meta, as a hand-written file has.
	b, err := report.ReadBundle(dir)
	if err != nil {
		t.Fatal(err)
	}
	file := *b.Sim
	file.Meta = report.Meta{}
	if err := report.WriteFile(dir, report.FileSim, file); err != nil {
		t.Fatal(err)
	}
	md = filepath.Join(t.TempDir(), "REPORT.md")
	code, _, errOut := invoke(t, "report", "--in", dir, "--md", md)
	if code != exitUsage {
		t.Errorf("no meta: exit %d, want 2", code)
	}
	for _, want := range []string{report.FileSim, "no machine metadata", "meta.machine.cores", "--out"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("message lacks %q:\n%s", want, errOut)
		}
	}
	if _, err := os.Stat(md); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused bundle wrote %s", md)
	}
}
