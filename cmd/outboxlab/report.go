package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/outboxlab/outboxlab/internal/report"
)

func reportVerb() verb {
	return verb{
		name:    "report",
		summary: "write REPORT.md and its HTML page from results bundles",
		args:    "--in DIR [--in DIR]... | --in-list FILE [--allow-mixed-commits] [--bench-summary] [--md FILE] [--html FILE] [--archive DIR]",
		about: `Reads a results bundle, the directory that demo, run, sim, mutants and
bench write their results to (demo.json, scenarios.json, sim.json,
mutants.json, bench.json, histories/), and writes REPORT.md: the machine, date and commit of the run, per scenario
its seed, faults fired and counts, the simulation summary, the mutant kill
matrix, the benchmark table and every replay command; and, beside it, an
HTML page of every scenario run with its timeline. --in may be repeated to
merge the bundles of a campaign's shards (run, sim and mutants split K/N
over several machines) into one report: the bundles must come from
one commit (else exit 2, naming both commits; --allow-mixed-commits merges
them anyway) and each kind of run must be distinct shards of one campaign
split the same way; the report names the shards it lacks and the cells
that did not finish. A kind of run the bundles lack is reported as not
run; no figure is ever invented, and a results file without the metadata
of its run (its date and the machine's cores, OS and Go version) is
refused with exit 2; so is a results file of a format_version this
outboxlab does not read (one without the key is version 1), one with a
key it does not know or without one it needs, and one whose part holds
cells it neither ran nor lists as unfinished (naming them). --md and
--html never overwrite a file the report reads, nor each other, and are
written together once both are made: a report that fails leaves both as
they were. --archive DIR also copies each bundle's results files
to DIR/NAME (NAME the bundle directory's own name) without the histories of
the runs that passed and without the HTML pages: small enough to keep in
the repository (results/), so that a later report merges them with new
runs without running them again. --in-list FILE reads the bundle
directories from FILE, one a line, relative to FILE's directory (blank
lines and lines starting with # skipped), before the --in ones;
--bench-summary keeps, of several benchmark runs, the goals over the runs
in the Markdown and leaves the table of every run and each layout's first
run in full to the HTML page. The Markdown names the command that
rebuilds it: go run ./cmd/outboxlab report with the flags that make its
content, as given.`,
		define: func(fs *flag.FlagSet) func(context.Context, *stdio, deps) int {
			o := &reportOptions{}
			fs.Var(&o.in, "in", "a results bundle `DIR` to read (required without --in-list); repeat to merge the bundles of a campaign's shards")
			fs.StringVar(&o.inList, "in-list", "", "read the bundle directories from `FILE`, one a line, relative to FILE's directory, before the --in ones")
			fs.BoolVar(&o.benchSummary, "bench-summary", false, "of several benchmark runs, keep the goals over the runs in the Markdown and leave the table of every run and each layout's first run in full to the HTML page")
			fs.BoolVar(&o.allowMixed, "allow-mixed-commits", false, "merge bundles whose runs come from different commits")
			fs.StringVar(&o.md, "md", "REPORT.md", "the Markdown `FILE` to write")
			fs.StringVar(&o.html, "html", "", "the HTML `FILE` to write (default: the Markdown file's name with .html)")
			fs.StringVar(&o.archive, "archive", "", "also copy each bundle's results files, without the passing runs' histories and the HTML, to `DIR`/NAME")
			return o.run
		},
	}
}

type reportOptions struct {
	in           stringList
	inList       string
	allowMixed   bool
	benchSummary bool
	md, html     string
	archive      string
}

// command is the command that makes the report's content: the flags
// that choose it, as given.
func (o *reportOptions) command() string {
	args := []string{"go run ./cmd/outboxlab report"}
	if o.inList != "" {
		args = append(args, "--in-list", o.inList)
	}
	for _, dir := range o.in {
		args = append(args, "--in", dir)
	}
	if o.allowMixed {
		args = append(args, "--allow-mixed-commits")
	}
	if o.benchSummary {
		args = append(args, "--bench-summary")
	}
	return strings.Join(args, " ")
}

// readInList returns the bundle directories file lists, one a line,
// joined to its directory; blank lines and lines starting with # are
// skipped.
func readInList(file string) ([]string, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var dirs []string
	for line := range strings.Lines(string(data)) {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if filepath.IsAbs(line) {
			return nil, fmt.Errorf("%s: %s is absolute; list bundles relative to the file's directory", file, line)
		}
		dirs = append(dirs, filepath.Join(filepath.Dir(file), line))
	}
	if len(dirs) == 0 {
		return nil, fmt.Errorf("%s lists no bundle", file)
	}
	return dirs, nil
}

func (o *reportOptions) run(ctx context.Context, std *stdio, _ deps) int {
	if len(o.in) == 0 && o.inList == "" {
		return usageErr(std, "report", "--in DIR is required: the directory a verb wrote with --out")
	}
	dirs := slices.Clone([]string(o.in))
	if o.inList != "" {
		listed, err := readInList(o.inList)
		if err != nil {
			return usageErr(std, "report", "--in-list: %v", err)
		}
		dirs = append(listed, dirs...)
	}
	var bundles []report.Bundle
	for _, dir := range dirs {
		b, err := report.ReadBundle(dir)
		if err != nil {
			return unavailable(std, "report", "%v", err)
		}
		if b.Empty() {
			return unavailable(std, "report", "%s holds no results (no %s, %s, %s, %s, %s or %s): run a verb with `--out %s` first",
				dir, report.FileDemo, report.FileScenarios, report.FileSim, report.FileMutants, report.FileBench, report.FileSoak, dir)
		}
		if err := b.Validate(); err != nil {
			hint := ""
			if errors.Is(err, report.ErrNoMeta) {
				hint = fmt.Sprintf("\nEvery results file records the machine, date and commit of its run; "+
					"write the bundle again with the verb's --out %s (files written by hand or by an older outboxlab lack them)", dir)
			}
			return unavailable(std, "report", "refusing %s: %v%s", dir, err, hint)
		}
		bundles = append(bundles, b)
	}
	html := o.html
	if html == "" {
		html = strings.TrimSuffix(o.md, filepath.Ext(o.md)) + ".html"
	}
	// Every output is checked before anything is written: none may be
	// one of the files read, nor two of them one file.
	var inputs []string
	for _, b := range bundles {
		inputs = append(inputs, b.Inputs()...)
	}
	outputs := []output{{"--md", o.md}, {"--html", html}}
	archives := map[string]report.Bundle{}
	if o.archive != "" {
		seen := map[string]string{}
		for _, b := range bundles {
			name := filepath.Base(filepath.Clean(b.Dir))
			if prev, ok := seen[name]; ok {
				return usageErr(std, "report", "--archive: %s and %s have the same name %s; rename one", prev, b.Dir, name)
			}
			seen[name] = b.Dir
			to := filepath.Join(o.archive, name)
			if sameFile(to, b.Dir) {
				continue // already the archive
			}
			archives[to] = b
			for _, in := range b.Inputs() {
				rel, err := filepath.Rel(b.Dir, in)
				if err != nil {
					return unavailable(std, "report", "--archive: %v", err)
				}
				outputs = append(outputs, output{"--archive", filepath.Join(to, rel)})
			}
		}
	}
	if err := checkOutputs(outputs, inputs); err != nil {
		return usageErr(std, "report", "%v", err)
	}
	b, err := report.Merge(bundles, report.MergeOptions{AllowMixedCommits: o.allowMixed})
	switch {
	case errors.Is(err, report.ErrMixedCommits):
		return unavailable(std, "report", "refusing to merge: %v\nMerge the shards of one commit, or pass --allow-mixed-commits to merge them anyway", err)
	case err != nil:
		return unavailable(std, "report", "refusing to merge: %v", err)
	}
	// Both pages are made before either is written, and written together
	// (see report.WriteAtomicAll): a report that fails leaves the files
	// it would have replaced as they were.
	var md bytes.Buffer
	if err := report.WriteMarkdownWith(&md, b, report.MarkdownOptions{Command: o.command(), BenchSummary: o.benchSummary}); err != nil {
		return unavailable(std, "report", "%v", err)
	}
	page, err := report.BundlePage(b)
	if err != nil {
		return unavailable(std, "report", "drawing %s: %v", html, err)
	}
	var htmlPage bytes.Buffer
	if err := report.WriteHTML(&htmlPage, page); err != nil {
		return unavailable(std, "report", "%v", err)
	}
	for _, to := range slices.Sorted(maps.Keys(archives)) {
		if err := archives[to].Archive(to); err != nil {
			return unavailable(std, "report", "--archive: %v", err)
		}
	}
	if err := os.MkdirAll(filepath.Dir(html), 0o755); err != nil {
		return unavailable(std, "report", "creating the directory of %s: %v", html, err)
	}
	if err := report.WriteAtomicAll(report.OutputFile{Path: o.md, Data: md.Bytes()}, report.OutputFile{Path: html, Data: htmlPage.Bytes()}); err != nil {
		return unavailable(std, "report", "writing %s and %s: %v", o.md, html, err)
	}
	fmt.Fprintf(std.out, "wrote %s and %s from %s\n", o.md, html, strings.Join(dirs, ", "))
	return exitOK
}
