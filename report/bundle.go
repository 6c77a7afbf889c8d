package report

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/outboxlab/outboxlab/campaign"
	"github.com/outboxlab/outboxlab/checker"
	"github.com/outboxlab/outboxlab/history"
	"github.com/outboxlab/outboxlab/sim"
)

// A results bundle is a directory of JSON files, one per kind of run, that
// the outboxlab command writes with --out DIR and `outboxlab report --in
// DIR` turns into REPORT.md. Each file carries the Meta of its run. A kind
// that did not run has no file, and its section of REPORT.md says so.
const (
	// FileScenarios holds a ScenarioFile from `outboxlab run`.
	FileScenarios = "scenarios.json"
	// FileDemo holds a ScenarioFile from `outboxlab demo`.
	FileDemo = "demo.json"
	// FileSim holds a SimFile from `outboxlab sim`.
	FileSim = "sim.json"
	// FileMutants holds a MutantFile from `outboxlab mutants`.
	FileMutants = "mutants.json"
	// FileGenerated holds a GeneratedFile from `outboxlab mutants
	// --generated`.
	FileGenerated = "generated.json"
	// FileBench holds a BenchFile from `outboxlab bench`.
	FileBench = "bench.json"
	// FileFindings, beside a scenarios.json, is what its runs showed when
	// their histories were read: each failure's cause, with its evidence
	// and replay (Markdown, written by whoever read them). REPORT.md
	// prints it under the runs' table, as written.
	FileFindings = "findings.md"
	// DirHistories holds the JSONL history of every run a file lists,
	// named by ScenarioRun.History.
	DirHistories = "histories"
)

// CheckerVerdict is one checker's verdict in a bundle.
type CheckerVerdict struct {
	Name    string `json:"name"`
	Valid   bool   `json:"valid"`
	Skipped bool   `json:"skipped,omitempty"`
	Detail  string `json:"detail"`
	// Offending counts the offending events; First lists a few.
	Offending int      `json:"offending,omitempty"`
	First     []string `json:"first,omitempty"`
}

// Verdicts summarises a report's checker results for a bundle.
func Verdicts(rep checker.Report) []CheckerVerdict {
	out := make([]CheckerVerdict, 0, len(rep.Results))
	for _, r := range rep.Results {
		v := CheckerVerdict{Name: r.Checker, Valid: r.Valid, Skipped: r.Skipped, Detail: r.Detail, Offending: len(r.Offending)}
		v.First = append(v.First, r.Offending[:min(len(r.Offending), 5)]...)
		out = append(out, v)
	}
	return out
}

// ScenarioRun is one scenario run in a bundle.
type ScenarioRun struct {
	Scenario string `json:"scenario"`
	Relay    string `json:"relay"`
	Variant  string `json:"variant"`
	Seed     uint64 `json:"seed"`
	// Queue is the consumer queues' type of a run on a broker cluster
	// (quorum, or classic for the contrast); empty on one node.
	Queue    string   `json:"queue,omitempty"`
	Valid    bool     `json:"valid"`
	Problems []string `json:"problems,omitempty"`
	// Inconclusive lists the faults that could not bite, for a run that
	// failed nothing: its verdict is INCONCLUSIVE.
	Inconclusive []string `json:"inconclusive,omitempty"`
	// Unchecked names what the checkers judged a relay that records
	// nothing by, and what that leaves out (scenarios.Result.Unchecked).
	Unchecked []string       `json:"unchecked,omitempty"`
	Counts    checker.Counts `json:"counts"`
	// Checkers are the verdicts of every checker.
	Checkers []CheckerVerdict `json:"checkers"`
	Faults   []FaultHits      `json:"faults"`
	// DrainTime and Duration are in nanoseconds.
	DrainTime time.Duration `json:"drain_time_ns"`
	Duration  time.Duration `json:"duration_ns"`
	// ConfirmStall is, on a broker cluster, the longest time after a node
	// fault began in which the broker confirmed no publish (from the
	// relays' records; 0 when they record nothing).
	ConfirmStall time.Duration `json:"confirm_stall_ns,omitempty"`
	Replay       string        `json:"replay"`
	// Note is one sentence on what happened and why (the demo's).
	Note string `json:"note,omitempty"`
	// History is the run's history file, relative to the bundle.
	History string `json:"history,omitempty"`
	// RelayRecords sums up what the relays recorded of their own
	// operations, when they record.
	RelayRecords *history.RecordsSummary `json:"relay_records,omitempty"`
}

// ScenarioFile is the content of FileScenarios and FileDemo.
//
// `outboxlab run --out` rewrites it (atomically) as each cell finishes: a
// run cut short by an interrupt, a crash or an error leaves every finished
// cell in Runs and lists the others in Unfinished.
type ScenarioFile struct {
	Meta Meta `json:"meta"`
	// Part says which share of which campaign the file holds; nil for a
	// file that is no share of a campaign (the demo's).
	Part *Part         `json:"part,omitempty"`
	Runs []ScenarioRun `json:"runs"`
	// Unfinished lists the cells of the file's share that have not
	// finished: still running, or the run was stopped (see Stopped) or
	// crashed before them.
	Unfinished []campaign.Cell `json:"unfinished,omitempty"`
	// NotApplicable lists the cells that finished without running: the
	// scenario cannot run with the relay or producer under test.
	NotApplicable []SkippedCell `json:"not_applicable,omitempty"`
	// Stopped says why the run ended before its last cell (an interrupt,
	// an environment error); empty when it was not stopped.
	Stopped string `json:"stopped,omitempty"`
	// HTML is the HTML report written for these runs, if any.
	HTML string `json:"html,omitempty"`
	// Findings is the bundle's FileFindings, if any: what reading the
	// runs' histories showed.
	Findings string `json:"-"`
	// Parts are the parts merged into this file by Merge, in shard order;
	// empty for a file as read.
	Parts []Part `json:"-"`
}

// SkippedCell is a cell that did not run, and why.
type SkippedCell struct {
	campaign.Cell
	Why string `json:"why"`
}

// Part says which share of a campaign a results file holds, so that
// Merge joins the shards of one campaign and a report names the shards
// it lacks.
type Part struct {
	// Shard is the share, K/N; "1/1" for a campaign run whole.
	Shard string `json:"shard"`
	// Campaign is the command that runs the whole campaign, every shard
	// of it: the files of one campaign's shards have the same.
	Campaign string `json:"campaign"`
	// Cells counts the cells of the shard: scenario runs, seeds or
	// rows of the kill matrix.
	Cells int `json:"cells"`
}

// SimFile is the content of FileSim: one `outboxlab sim` batch.
type SimFile struct {
	Meta Meta `json:"meta"`
	// First is the first seed; Mutant the mutant simulated, if any.
	First   uint64      `json:"first_seed"`
	Mutant  string      `json:"mutant,omitempty"`
	Summary sim.Summary `json:"summary"`
	// Replay runs the same batch again.
	Replay string `json:"replay"`
	// Failures are the first failing seeds, with what failed and how to
	// replay each alone.
	Failures []SimFailure `json:"failures,omitempty"`
	// Part says which share of which campaign the batch is.
	Part *Part `json:"part,omitempty"`
	// Tier is SimTierSQL for the SQL-faithful tier; empty for the fakes.
	Tier string `json:"tier,omitempty"`
	// Pieces are the files merged into this one by Merge, in shard
	// order, each as read; empty for a file as read.
	Pieces []SimFile `json:"-"`
}

// SimTierSQL is SimFile.Tier of the SQL-faithful simulation.
const SimTierSQL = "sql"

// SimFailure is one failing seed of a simulation batch.
type SimFailure struct {
	Seed     uint64   `json:"seed"`
	Problems []string `json:"problems"`
	Replay   string   `json:"replay"`
	History  string   `json:"history,omitempty"`
}

// MutantFile is the content of FileMutants: which checkers killed which
// mutant.
type MutantFile struct {
	Meta Meta `json:"meta"`
	// Tier is where the mutants ran: "sim" or "infra".
	Tier string `json:"tier"`
	// Checkers are the matrix's columns, in order.
	Checkers []string    `json:"checkers"`
	Mutants  []MutantRow `json:"mutants"`
	// Part says which share of which campaign the rows are.
	Part *Part `json:"part,omitempty"`
	// Parts are the parts merged into this file by Merge, in shard order;
	// empty for a file as read.
	Parts []Part `json:"-"`
}

// MutantRow is one mutant's line of the kill matrix.
type MutantRow struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	// Reference marks the unmutated system, which must survive.
	Reference bool `json:"reference,omitempty"`
	// Seeds ran; Killed is true when at least one seed failed a checker.
	Seeds  int  `json:"seeds"`
	Killed bool `json:"killed"`
	// KilledBy counts, per checker, the seeds on which it failed.
	KilledBy map[string]int `json:"killed_by,omitempty"`
	// FirstKill is the first seed that killed it; Replay replays it.
	FirstKill uint64 `json:"first_kill_seed,omitempty"`
	Replay    string `json:"replay,omitempty"`
	// Checker is the checker that killed it, Scenario the scenario or
	// simulation swarm it was killed in, Seconds the time to the kill and
	// Steps the size of the shrunk counterexample (0 when not shrunk).
	Checker  string  `json:"checker,omitempty"`
	Scenario string  `json:"scenario,omitempty"`
	Seconds  float64 `json:"seconds,omitempty"`
	Steps    int     `json:"steps,omitempty"`
}

// GeneratedFile is the content of FileGenerated: the generated mutants'
// counts and score, and every survivor with its judgement.
type GeneratedFile struct {
	Meta Meta `json:"meta"`
	// Command is the command line that produced the file.
	Command string `json:"command"`
	GeneratedCounts
}

// GeneratedCounts are a generated sweep's counts, score and survivors, as
// its file keeps them and `outboxlab mutants --generated --json` prints
// them.
type GeneratedCounts struct {
	// Generated counts the mutants run; Invalid those that did not
	// compile or prepare; KilledFast those the fast tier killed;
	// KilledAll those any tier killed (the fast tier alone when no
	// container tier ran); Equivalent the survivors judged equivalent;
	// Excluded the survivors in code that no tier checks by design (a log
	// line), listed with the reason.
	Generated  int `json:"generated"`
	Invalid    int `json:"invalid"`
	KilledFast int `json:"killed_fast"`
	KilledAll  int `json:"killed_all"`
	Equivalent int `json:"equivalent"`
	Excluded   int `json:"excluded"`
	// Score is KilledAll over the mutants neither invalid, equivalent nor
	// excluded.
	Score float64 `json:"score"`
	// Seconds is the sweep's wall time.
	Seconds float64 `json:"seconds"`
	// Containers says whether the container tier ran the fast tier's
	// gaps, or why not; empty in files written before it existed.
	Containers string              `json:"containers,omitempty"`
	ByTier     map[string]int      `json:"killed_by_tier"`
	Survivors  []GeneratedSurvivor `json:"survivors"`
}

// GeneratedSurvivor is one surviving generated mutant.
type GeneratedSurvivor struct {
	ID        string `json:"id"`
	File      string `json:"file"`
	Line      int    `json:"line"`
	Diff      string `json:"diff"`
	Judgement string `json:"judgement"`
}

// BenchFile is the content of FileBench: the benchmark's tables, and its
// whole result as it produced it.
type BenchFile struct {
	Meta   Meta     `json:"meta"`
	Tables []Table  `json:"tables"`
	Notes  []string `json:"notes,omitempty"`
	// Result is the benchmark's own JSON result, every detail included.
	Result json.RawMessage `json:"result,omitempty"`
}

// Table is a titled table of text cells.
type Table struct {
	Title   string     `json:"title"`
	Columns []string   `json:"columns"`
	Rows    [][]string `json:"rows"`
}

// Bundle is a results directory as read; a nil field is a kind of run that
// has no file.
type Bundle struct {
	// Dir is the directory read; empty for bundles merged by Merge.
	Dir string
	// Dirs are the directories merged by Merge; empty for one bundle.
	Dirs      []string
	Scenarios *ScenarioFile
	// Relays are the scenario runs of other relays than Scenarios's, one
	// file per relay, merged from bundles by Merge; empty for one bundle.
	Relays []*ScenarioFile
	// Cluster are the broker cluster campaigns, one file per relay and
	// queue type, merged from bundles by Merge; empty for one bundle.
	Cluster []*ScenarioFile
	Demo    *ScenarioFile
	Sim     *SimFile
	// SimSQL is the SQL-faithful tier's batch, merged from bundles by
	// Merge apart from Sim; a bundle as read holds one sim.json, in Sim.
	SimSQL    *SimFile
	Mutants   *MutantFile
	Generated *GeneratedFile
	Bench     *BenchFile
	// Benches are every benchmark run of bundles merged by Merge, in the
	// order given (Bench is the first); empty for one bundle. Runs of
	// one code side by side show the spread of a noisy machine, runs in
	// each layout what sharing the cores costs.
	Benches []*BenchFile
}

// ErrNoMeta is returned by Bundle.Validate for a results file that does
// not say where and when its run ran.
var ErrNoMeta = errors.New("no machine metadata")

// Validate reports every file of the bundle whose Meta lacks the date of
// its run or the machine it ran on (cores, OS, Go version): a report
// states where its figures come from, so a file without that is refused
// rather than rendered as figures of an unknown machine. The errors wrap
// ErrNoMeta and name the file.
func (b Bundle) Validate() error {
	var errs []error
	check := func(name string, m Meta) {
		if err := m.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", filepath.Join(b.Dir, name), err))
		}
	}
	if b.Scenarios != nil {
		check(FileScenarios, b.Scenarios.Meta)
	}
	if b.Demo != nil {
		check(FileDemo, b.Demo.Meta)
	}
	if b.Sim != nil {
		check(FileSim, b.Sim.Meta)
	}
	if b.Mutants != nil {
		check(FileMutants, b.Mutants.Meta)
	}
	if b.Generated != nil {
		check(FileGenerated, b.Generated.Meta)
	}
	if b.Bench != nil {
		check(FileBench, b.Bench.Meta)
	}
	return errors.Join(errs...)
}

// Empty reports whether the bundle holds no results at all.
func (b Bundle) Empty() bool {
	return b.Scenarios == nil && b.Demo == nil && b.Sim == nil && b.Mutants == nil && b.Generated == nil && b.Bench == nil
}

// ReadBundle reads every results file in dir. A missing file is no error;
// a file that does not parse is.
func ReadBundle(dir string) (Bundle, error) {
	b := Bundle{Dir: dir}
	if _, err := os.Stat(dir); err != nil {
		return b, fmt.Errorf("reading results bundle: %w", err)
	}
	var err error
	if b.Scenarios, err = readFile[ScenarioFile](dir, FileScenarios); err != nil {
		return b, err
	}
	if b.Scenarios != nil {
		data, err := os.ReadFile(filepath.Join(dir, FileFindings))
		switch {
		case err == nil:
			b.Scenarios.Findings = strings.TrimSpace(string(data))
		case !errors.Is(err, fs.ErrNotExist):
			return b, fmt.Errorf("reading %s: %w", FileFindings, err)
		}
	}
	if b.Demo, err = readFile[ScenarioFile](dir, FileDemo); err != nil {
		return b, err
	}
	if b.Sim, err = readFile[SimFile](dir, FileSim); err != nil {
		return b, err
	}
	if b.Mutants, err = readFile[MutantFile](dir, FileMutants); err != nil {
		return b, err
	}
	if b.Generated, err = readFile[GeneratedFile](dir, FileGenerated); err != nil {
		return b, err
	}
	if b.Bench, err = readFile[BenchFile](dir, FileBench); err != nil {
		return b, err
	}
	return b, nil
}

func readFile[T any](dir, name string) (*T, error) {
	data, err := os.ReadFile(filepath.Join(dir, name))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", name, err)
	}
	v := new(T)
	if err := json.Unmarshal(data, v); err != nil {
		return nil, fmt.Errorf("parsing %s: %w", filepath.Join(dir, name), err)
	}
	return v, nil
}

// WriteFile writes v as the bundle file name in dir, creating dir. The
// write is atomic (see WriteAtomic): a crash or an interrupt leaves the
// file as it was before or as it is now, never half written.
func WriteFile(dir, name string, v any) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating results directory: %w", err)
	}
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding %s: %w", name, err)
	}
	if err := WriteAtomic(filepath.Join(dir, name), append(data, '\n')); err != nil {
		return fmt.Errorf("writing %s: %w", name, err)
	}
	return nil
}

// WriteAtomic replaces the file path with data so that a reader, or the
// machine after a crash, sees the old content or the new, never a part: it
// writes a temporary file in the same directory, syncs it to disk, renames
// it over path and syncs the directory, so that the rename itself is
// durable.
func WriteAtomic(path string, data []byte) (err error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return fmt.Errorf("creating a temporary file: %w", err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			os.Remove(tmp)
		}
	}()
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", tmp, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("syncing %s: %w", tmp, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("closing %s: %w", tmp, err)
	}
	if err := os.Chmod(tmp, 0o644); err != nil {
		return fmt.Errorf("making %s readable: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("renaming %s to %s: %w", tmp, path, err)
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("opening %s to sync it: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("syncing directory %s: %w", dir, err)
	}
	return nil
}

// WriteHistory writes ops as JSONL under dir/DirHistories/name, atomically
// (see WriteAtomic), and returns the path relative to dir.
func WriteHistory(dir, name string, ops []history.Op) (string, error) {
	rel := filepath.Join(DirHistories, name)
	if err := os.MkdirAll(filepath.Join(dir, DirHistories), 0o755); err != nil {
		return "", fmt.Errorf("creating history directory: %w", err)
	}
	var buf bytes.Buffer
	if err := history.WriteJSONL(&buf, ops); err != nil {
		return "", fmt.Errorf("encoding history %s: %w", rel, err)
	}
	if err := WriteAtomic(filepath.Join(dir, rel), buf.Bytes()); err != nil {
		return "", fmt.Errorf("writing history %s: %w", rel, err)
	}
	return rel, nil
}

// ReadHistory reads a history file named relative to dir.
func ReadHistory(dir, rel string) ([]history.Op, error) {
	f, err := os.Open(filepath.Join(dir, rel))
	if err != nil {
		return nil, fmt.Errorf("opening history: %w", err)
	}
	defer f.Close()
	return history.ReadJSONL(f)
}

// Archive writes b's results files to dir, small enough to keep beside
// the code: the histories of the runs that passed and the HTML pages are
// left out (REPORT.md is made from the files alone), the histories of the
// runs that failed or were inconclusive and of the simulation's failures
// are copied, as their evidence. A later `outboxlab report --in dir`
// merges the archive with new runs without running it again; its page
// shows the passing runs without timelines.
func (b Bundle) Archive(dir string) error {
	keep := func(rel string) (string, error) {
		if rel == "" {
			return "", nil
		}
		h, err := ReadHistory(b.Dir, rel)
		if err != nil {
			return "", err
		}
		return WriteHistory(dir, filepath.Base(rel), h)
	}
	scenarioFile := func(name string, f *ScenarioFile) error {
		if f == nil {
			return nil
		}
		out := *f
		out.HTML = ""
		out.Runs = slices.Clone(f.Runs)
		for i, r := range out.Runs {
			if r.Valid {
				out.Runs[i].History = ""
				continue
			}
			var err error
			if out.Runs[i].History, err = keep(r.History); err != nil {
				return fmt.Errorf("archiving %s, %s seed %d: %w", name, r.Scenario, r.Seed, err)
			}
		}
		return WriteFile(dir, name, out)
	}
	if err := scenarioFile(FileScenarios, b.Scenarios); err != nil {
		return err
	}
	if b.Scenarios != nil && b.Scenarios.Findings != "" {
		if err := WriteAtomic(filepath.Join(dir, FileFindings), []byte(b.Scenarios.Findings+"\n")); err != nil {
			return fmt.Errorf("archiving %s: %w", FileFindings, err)
		}
	}
	if err := scenarioFile(FileDemo, b.Demo); err != nil {
		return err
	}
	if b.Sim != nil {
		out := *b.Sim
		out.Failures = slices.Clone(b.Sim.Failures)
		for i, f := range out.Failures {
			var err error
			if out.Failures[i].History, err = keep(f.History); err != nil {
				return fmt.Errorf("archiving %s, seed %d: %w", FileSim, f.Seed, err)
			}
		}
		if err := WriteFile(dir, FileSim, out); err != nil {
			return err
		}
	}
	for _, f := range []struct {
		name string
		v    any
		set  bool
	}{{FileMutants, b.Mutants, b.Mutants != nil}, {FileGenerated, b.Generated, b.Generated != nil}, {FileBench, b.Bench, b.Bench != nil}} {
		if !f.set {
			continue
		}
		if err := WriteFile(dir, f.name, f.v); err != nil {
			return err
		}
	}
	return nil
}
