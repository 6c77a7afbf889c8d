package main

import (
	"cmp"
	"fmt"
	"path/filepath"
	"slices"

	"github.com/outboxlab/outboxlab/internal/campaign"
	"github.com/outboxlab/outboxlab/internal/report"
)

// cellWriter keeps the results bundle of a chaos run true while its cells
// run: scenarios.json is written before the first cell, with every cell
// unfinished, and again (atomically, after the cell's history) as each
// cell finishes, so that an interrupt, a crash or an error in a later cell
// leaves every finished cell in the bundle and names the others.
type cellWriter struct {
	dir string
	// relay names the relay under test, for a cell that did not run and
	// whose outcome does not name it.
	relay string
	cells []campaign.Cell
	file  report.ScenarioFile
	// finished marks the cells that finished, by index in cells.
	finished []bool
	// runs are the finished runs, and the cells that did not run, for
	// run.html.
	runs []report.Run
}

// newCellWriter writes the bundle of a run of cells against relay, none
// finished yet, into dir.
func newCellWriter(dir string, meta report.Meta, part report.Part, relay string, cells []campaign.Cell) (*cellWriter, error) {
	w := &cellWriter{dir: dir, relay: relay, cells: cells, finished: make([]bool, len(cells)),
		file: report.ScenarioFile{Meta: meta, Part: &part, Runs: []report.ScenarioRun{}}}
	return w, w.write()
}

// done records that cell i finished with outcome o: its history, then the
// file that lists it.
func (w *cellWriter) done(i int, o runOutcome) error {
	if i < 0 || i >= len(w.cells) || w.finished[i] {
		return fmt.Errorf("results bundle: cell %d finished twice or is no cell of the run", i+1)
	}
	w.finished[i] = true
	c := w.cells[i]
	if why := o.skipped(); why != "" {
		// Not run: its row in scenarios.json and run.html says why.
		relay := cmp.Or(o.Result.Relay, w.relay)
		w.file.NotApplicable = append(w.file.NotApplicable, report.SkippedCell{Cell: c, Relay: relay, Why: why})
		w.runs = append(w.runs, report.NotApplicableRun(c.Scenario, relay, c.Seed, why))
		return w.write()
	}
	r := o.Result
	run := toRun(r, fmt.Sprintf("%s (relay %s), seed %d", r.Scenario, r.Relay, r.Seed))
	run.ExpectFail = false
	sr, err := toBundle(w.dir, i, r, run.Note)
	if err != nil {
		return fmt.Errorf("results bundle: %w", err)
	}
	w.runs = append(w.runs, run)
	w.file.Runs = append(w.file.Runs, sr)
	return w.write()
}

// finish writes run.html of the finished runs and the file's last form;
// stopped says why the run ended before its last cell ("" when it did
// not). It returns the HTML report's path.
func (w *cellWriter) finish(stopped string) (string, error) {
	w.file.Stopped = stopped
	path, err := writeHTML(w.dir, "run.html", report.Page{Title: "outboxlab chaos scenarios", Meta: w.file.Meta, Runs: w.runs})
	if err != nil {
		return "", fmt.Errorf("results bundle: %w", err)
	}
	w.file.HTML = path
	return path, w.write()
}

// write replaces scenarios.json with what is known now.
func (w *cellWriter) write() error {
	w.file.Unfinished = nil
	for i, c := range w.cells {
		if !w.finished[i] {
			w.file.Unfinished = append(w.file.Unfinished, c)
		}
	}
	if err := report.WriteFile(w.dir, report.FileScenarios, w.file); err != nil {
		return fmt.Errorf("results bundle %s: %w", filepath.Join(w.dir, report.FileScenarios), err)
	}
	return nil
}

// unfinished returns the cells that did not finish.
func (w *cellWriter) unfinished() []campaign.Cell { return slices.Clone(w.file.Unfinished) }
