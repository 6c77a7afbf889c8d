package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"

	"github.com/outboxlab/outboxlab/report"
)

func reportVerb() verb {
	return verb{
		name:    "report",
		summary: "write REPORT.md from a results bundle",
		args:    "--in DIR [--md FILE]",
		about: `Reads a results bundle, the directory that demo, run, sim, mutants and
bench write their results to (demo.json, scenarios.json, sim.json,
mutants.json, bench.json, histories/), and writes REPORT.md: the machine, date and commit of the run, per scenario
its seed, faults fired and counts, the simulation summary, the mutant kill
matrix, the benchmark table and every replay command. A kind of run the
bundle lacks is reported as not run; no figure is ever invented, and a
results file without the metadata of its run (its date and the machine's
cores, OS and Go version) is refused with exit 2.`,
		define: func(fs *flag.FlagSet) func(context.Context, *stdio, deps) int {
			o := &reportOptions{}
			fs.StringVar(&o.in, "in", "", "the results bundle `DIR` to read (required)")
			fs.StringVar(&o.md, "md", "REPORT.md", "the Markdown `FILE` to write")
			return o.run
		},
	}
}

type reportOptions struct {
	in, md string
}

func (o *reportOptions) run(ctx context.Context, std *stdio, _ deps) int {
	if o.in == "" {
		return usageErr(std, "report", "--in DIR is required: the directory a verb wrote with --out")
	}
	b, err := report.ReadBundle(o.in)
	if err != nil {
		return unavailable(std, "report", "%v", err)
	}
	if b.Empty() {
		return unavailable(std, "report", "%s holds no results (no %s, %s, %s, %s or %s): run a verb with `--out %s` first",
			o.in, report.FileDemo, report.FileScenarios, report.FileSim, report.FileMutants, report.FileBench, o.in)
	}
	if err := b.Validate(); err != nil {
		return unavailable(std, "report", "refusing %s: %v\nEvery results file records the machine, date and commit of its run; "+
			"write the bundle again with the verb's --out %s (files written by hand or by an older outboxlab lack them)", o.in, err, o.in)
	}
	var buf bytes.Buffer
	if err := report.WriteMarkdown(&buf, b); err != nil {
		return unavailable(std, "report", "%v", err)
	}
	if err := os.WriteFile(o.md, buf.Bytes(), 0o644); err != nil {
		return unavailable(std, "report", "writing %s: %v", o.md, err)
	}
	fmt.Fprintf(std.out, "wrote %s from %s\n", o.md, o.in)
	return exitOK
}
