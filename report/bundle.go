package report

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

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
	// FileBench holds a BenchFile from `outboxlab bench`.
	FileBench = "bench.json"
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
	Scenario string   `json:"scenario"`
	Relay    string   `json:"relay"`
	Variant  string   `json:"variant"`
	Seed     uint64   `json:"seed"`
	Valid    bool     `json:"valid"`
	Problems []string `json:"problems,omitempty"`
	// Inconclusive lists the faults that could not bite, for a run that
	// failed nothing: its verdict is INCONCLUSIVE.
	Inconclusive []string       `json:"inconclusive,omitempty"`
	Counts       checker.Counts `json:"counts"`
	// Checkers are the verdicts of every checker.
	Checkers []CheckerVerdict `json:"checkers"`
	Faults   []FaultHits      `json:"faults"`
	// DrainTime and Duration are in nanoseconds.
	DrainTime time.Duration `json:"drain_time_ns"`
	Duration  time.Duration `json:"duration_ns"`
	Replay    string        `json:"replay"`
	// Note is one sentence on what happened and why (the demo's).
	Note string `json:"note,omitempty"`
	// History is the run's history file, relative to the bundle.
	History string `json:"history,omitempty"`
	// RelayRecords sums up what the relays recorded of their own
	// operations, when they record.
	RelayRecords *history.RecordsSummary `json:"relay_records,omitempty"`
}

// ScenarioFile is the content of FileScenarios and FileDemo.
type ScenarioFile struct {
	Meta Meta          `json:"meta"`
	Runs []ScenarioRun `json:"runs"`
	// HTML is the HTML report written for these runs, if any.
	HTML string `json:"html,omitempty"`
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
}

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
	Dir       string
	Scenarios *ScenarioFile
	Demo      *ScenarioFile
	Sim       *SimFile
	Mutants   *MutantFile
	Bench     *BenchFile
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
	if b.Bench != nil {
		check(FileBench, b.Bench.Meta)
	}
	return errors.Join(errs...)
}

// Empty reports whether the bundle holds no results at all.
func (b Bundle) Empty() bool {
	return b.Scenarios == nil && b.Demo == nil && b.Sim == nil && b.Mutants == nil && b.Bench == nil
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
	if b.Demo, err = readFile[ScenarioFile](dir, FileDemo); err != nil {
		return b, err
	}
	if b.Sim, err = readFile[SimFile](dir, FileSim); err != nil {
		return b, err
	}
	if b.Mutants, err = readFile[MutantFile](dir, FileMutants); err != nil {
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

// WriteFile writes v as the bundle file name in dir, creating dir.
func WriteFile(dir, name string, v any) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating results directory: %w", err)
	}
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding %s: %w", name, err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", name, err)
	}
	return nil
}

// WriteHistory writes ops as JSONL under dir/DirHistories/name and returns
// the path relative to dir.
func WriteHistory(dir, name string, ops []history.Op) (string, error) {
	rel := filepath.Join(DirHistories, name)
	if err := os.MkdirAll(filepath.Join(dir, DirHistories), 0o755); err != nil {
		return "", fmt.Errorf("creating history directory: %w", err)
	}
	f, err := os.Create(filepath.Join(dir, rel))
	if err != nil {
		return "", fmt.Errorf("creating history file: %w", err)
	}
	if err := history.WriteJSONL(f, ops); err != nil {
		f.Close()
		return "", fmt.Errorf("writing history %s: %w", rel, err)
	}
	if err := f.Close(); err != nil {
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
