package main

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/outboxlab/outboxlab/internal/report"
)

// makeReportArgs returns the arguments `make report` passes to the report
// verb, read from the Makefile's report recipe, with $(BUILD) expanded.
func makeReportArgs(t *testing.T) []string {
	t.Helper()
	mk, err := os.ReadFile("Makefile")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^report:.*\n\t\$\(GO\) run \./cmd/outboxlab report (.+)$`).FindSubmatch(mk)
	if m == nil {
		t.Fatal("the Makefile has no report target running `$(GO) run ./cmd/outboxlab report ...`")
	}
	return strings.Fields(strings.ReplaceAll(string(m[1]), "$(BUILD)", ".build"))
}

// TestReportIsRebuilt runs what `make report` runs, its Markdown and HTML
// into a temporary directory, twice, and compares the Markdown with the
// committed REPORT.md byte for byte: REPORT.md is made from the bundles in
// the checkout alone, and the same bundles always give the same bytes.
func TestReportIsRebuilt(t *testing.T) {
	t.Chdir(filepath.Join("..", ".."))
	want, err := os.ReadFile("REPORT.md")
	if err != nil {
		t.Fatal(err)
	}
	args := makeReportArgs(t)
	var got [][]byte
	for i := range 2 {
		md := filepath.Join(t.TempDir(), "REPORT.md")
		run := []string{"report"}
		for j := 0; j < len(args); j++ {
			switch args[j] {
			case "--md", "--html":
				j++ // the outputs go to the temporary directory
			default:
				run = append(run, args[j])
			}
		}
		run = append(run, "--md", md, "--html", strings.TrimSuffix(md, ".md")+".html")
		if code, out, errOut := invoke(t, run...); code != exitOK {
			t.Fatalf("rebuild %d: %v: exit %d\n%s%s", i+1, run, code, out, errOut)
		}
		b, err := os.ReadFile(md)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, b)
	}
	if !bytes.Equal(got[0], got[1]) {
		t.Fatalf("two rebuilds from the same bundles differ: %s", firstDiff(got[0], got[1]))
	}
	if !bytes.Equal(got[0], want) {
		t.Fatalf("REPORT.md is stale: run make report (%s)", firstDiff(want, got[0]))
	}
	if bytes.Contains(want, []byte("/tmp/")) {
		t.Error("REPORT.md names a path under /tmp: its bundles must be in the checkout")
	}
	// results/ holds only bundles the report reads.
	listed, err := readInList(filepath.Join("results", "report.list"))
	if err != nil {
		t.Fatal(err)
	}
	err = filepath.WalkDir("results", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !slices.Contains([]string{report.FileScenarios, report.FileDemo, report.FileSim,
			report.FileMutants, report.FileGenerated, report.FileBench}, d.Name()) {
			return err
		}
		if dir := filepath.Dir(path); !slices.Contains(listed, dir) {
			t.Errorf("%s is not in results/report.list: list it, or remove it (git rm -r %s)", dir, dir)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// firstDiff describes the first line where a and b differ.
func firstDiff(a, b []byte) string {
	al, bl := strings.Split(string(a), "\n"), strings.Split(string(b), "\n")
	for i := range max(len(al), len(bl)) {
		var x, y string
		if i < len(al) {
			x = al[i]
		}
		if i < len(bl) {
			y = bl[i]
		}
		if x != y {
			return fmt.Sprintf("line %d is %.200q, the rebuild's %.200q", i+1, x, y)
		}
	}
	return "same lines"
}

// TestReportInList reads the bundles of --in-list relative to the list's
// directory, in order, skipping comments and blank lines, and refuses an
// absolute path and an empty list.
func TestReportInList(t *testing.T) {
	dir := t.TempDir()
	list := filepath.Join(dir, "report.list")
	if err := os.WriteFile(list, []byte("# bundles\nsim\n\n  false-verdict/shard-2  \nbench\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := readInList(list)
	want := []string{filepath.Join(dir, "sim"), filepath.Join(dir, "false-verdict", "shard-2"), filepath.Join(dir, "bench")}
	if err != nil || strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("readInList = %q, %v; want %q", got, err, want)
	}
	for _, bad := range []string{"/tmp/sim\n", "# nothing\n"} {
		if err := os.WriteFile(list, []byte(bad), 0o644); err != nil {
			t.Fatal(err)
		}
		if got, err := readInList(list); err == nil {
			t.Errorf("readInList of %q = %q, want an error", bad, got)
		}
	}
	o := reportOptions{inList: "results/report.list", in: stringList{"x"}, allowMixed: true, benchSummary: true}
	if got, want := o.command(), "go run ./cmd/outboxlab report --in-list results/report.list --in x --allow-mixed-commits --bench-summary"; got != want {
		t.Errorf("command() = %q, want %q", got, want)
	}
}
