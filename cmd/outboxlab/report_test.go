package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/outboxlab/outboxlab/internal/report"
)

// failingSimBundle writes the bundle of a simulation batch whose seeds
// fail, with their histories, and returns its directory.
func failingSimBundle(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "bundle")
	d := unsafeCatalogue(testDeps())
	if code, out, errOut := invokeWith(t, d, "sim", "--seeds", "3", "--seed", "1", "--mutant", "publish-then-commit", "--out", dir); code != exitFail {
		t.Fatalf("sim: exit %d, want 1\n%s%s", code, out, errOut)
	}
	return dir
}

// TestReportNeverWritesOverItsInputs asks report to write its Markdown
// or its HTML over a file it reads, and both to one file: each is refused
// before anything is written, and the bundle still reads.
func TestReportNeverWritesOverItsInputs(t *testing.T) {
	dir := failingSimBundle(t)
	b, err := report.ReadBundle(dir)
	if err != nil || b.Sim == nil || len(b.Sim.Failures) == 0 || b.Sim.Failures[0].History == "" {
		t.Fatalf("the bundle: %v %+v", err, b.Sim)
	}
	history := filepath.Join(dir, b.Sim.Failures[0].History)
	simJSON := filepath.Join(dir, report.FileSim)
	before, err := os.ReadFile(simJSON)
	if err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(t.TempDir(), "out.md")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--md", simJSON}, "--md " + simJSON + " would overwrite " + simJSON},
		// The same file by another spelling of its path.
		{[]string{"--md", filepath.Join(dir, "histories", "..", report.FileSim)}, "would overwrite"},
		{[]string{"--md", other, "--html", history}, "--html " + history + " would overwrite"},
		{[]string{"--md", other, "--html", other}, "are the same file"},
		// The Markdown into the archive's copy of the bundle.
		{[]string{"--md", filepath.Join(filepath.Dir(other), "arch", "bundle", report.FileSim), "--archive", filepath.Join(filepath.Dir(other), "arch")}, "are the same file"},
	} {
		args := append([]string{"report", "--in", dir}, tc.args...)
		code, out, errOut := invoke(t, args...)
		if code != exitUsage || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d, want %d saying %q\n%s%s", tc.args, code, exitUsage, tc.want, out, errOut)
		}
		if strings.Contains(out, "wrote") {
			t.Errorf("%v: says it wrote: %s", tc.args, out)
		}
	}
	after, err := os.ReadFile(simJSON)
	if err != nil || string(after) != string(before) {
		t.Errorf("%s changed: %v", simJSON, err)
	}
	if _, err := os.Stat(other); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused report wrote %s (%v)", other, err)
	}
	if _, err := report.ReadBundle(dir); err != nil {
		t.Errorf("the bundle no longer reads: %v", err)
	}
}

// TestAFailedReportLeavesItsOutputsAsTheyWere truncates a history the
// HTML page draws: the report fails, and the REPORT.md of an earlier
// report is still there, unchanged, with no HTML written beside it.
func TestAFailedReportLeavesItsOutputsAsTheyWere(t *testing.T) {
	dir := failingSimBundle(t)
	b, err := report.ReadBundle(dir)
	if err != nil || b.Sim == nil || len(b.Sim.Failures) == 0 {
		t.Fatalf("the bundle: %v", err)
	}
	history := filepath.Join(dir, b.Sim.Failures[0].History)
	data, err := os.ReadFile(history)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(history, data[:len(data)/2], 0o644); err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	md, html := filepath.Join(out, "REPORT.md"), filepath.Join(out, "REPORT.html")
	const earlier = "the report of an earlier run\n"
	if err := os.WriteFile(md, []byte(earlier), 0o644); err != nil {
		t.Fatal(err)
	}
	code, stdout, errOut := invoke(t, "report", "--in", dir, "--md", md)
	if code != exitUsage || !strings.Contains(errOut, b.Sim.Failures[0].History) {
		t.Fatalf("exit %d, want %d naming the history\n%s%s", code, exitUsage, stdout, errOut)
	}
	if got, err := os.ReadFile(md); err != nil || string(got) != earlier {
		t.Errorf("REPORT.md was replaced by a report that failed: %q, %v", got, err)
	}
	if _, err := os.Stat(html); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a report that failed wrote %s (%v)", html, err)
	}
	entries, err := os.ReadDir(out)
	if err != nil || len(entries) != 1 {
		t.Errorf("the output directory holds %v (%v), want REPORT.md alone: no temporary file left", entries, err)
	}
}
