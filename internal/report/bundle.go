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
	"strconv"
	"strings"
	"time"

	"github.com/outboxlab/outboxlab/checker"
	"github.com/outboxlab/outboxlab/footprint"
	"github.com/outboxlab/outboxlab/history"
	"github.com/outboxlab/outboxlab/internal/bench/result"
	"github.com/outboxlab/outboxlab/internal/campaign"
	"github.com/outboxlab/outboxlab/internal/sim"
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
	// FileSoak holds a SoakFile from `outboxlab soak`, beside the plots
	// it names.
	FileSoak = "soak.json"
	// FileFindings, beside a scenarios.json, is what its runs showed when
	// their histories were read: each failure's cause, with its evidence
	// and replay (Markdown, written by whoever read them). REPORT.md
	// prints it under the runs' table, as written.
	FileFindings = "findings.md"
	// DirHistories holds the JSONL history of every run a file lists,
	// named by ScenarioRun.History.
	DirHistories = "histories"
)

// FormatVersion is the version of the results files' format that this
// outboxlab writes (as "format_version", the first key of every file) and
// the newest it reads. A file without the key was written before files
// carried one, in the format of version 1. A change that an older reader
// would misread (a key renamed, a meaning changed) takes a new version.
const FormatVersion = 1

// ErrFormat is returned by ReadBundle for a results file that is not what
// its name says in a format this outboxlab reads: a format_version it does
// not know, a key it does not know, or a key it requires missing. Reading
// on would render figures from a file misread.
var ErrFormat = errors.New("unreadable results file")

// CheckerVerdict is one checker's verdict in a bundle.
type CheckerVerdict struct {
	Name    string `json:"name"`
	Valid   bool   `json:"valid"`
	Skipped bool   `json:"skipped,omitempty"`
	Detail  string `json:"detail"`
	// Offending counts the offending events; First lists a few (of the
	// noted ones when none offends), and Why says why of each.
	Offending int               `json:"offending,omitempty"`
	First     []string          `json:"first,omitempty"`
	Why       map[string]string `json:"why,omitempty"`
	// Noted counts the events the checker reported without failing the
	// run (checker.Result.Noted).
	Noted int `json:"noted,omitempty"`
}

// Verdicts summarises a report's checker results for a bundle.
func Verdicts(rep checker.Report) []CheckerVerdict {
	out := make([]CheckerVerdict, 0, len(rep.Results))
	for _, r := range rep.Results {
		v := CheckerVerdict{Name: r.Checker, Valid: r.Valid, Skipped: r.Skipped, Detail: r.Detail, Offending: len(r.Offending), Noted: len(r.Noted)}
		listed := r.Offending
		if len(listed) == 0 {
			listed = r.Noted
		}
		v.First = append(v.First, listed[:min(len(listed), 5)]...)
		for _, id := range v.First {
			if why := r.Reasons[id]; why != "" {
				if v.Why == nil {
					v.Why = map[string]string{}
				}
				v.Why[id] = why
			}
		}
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
	Queue string `json:"queue,omitempty"`
	// Database is what the run did to the database
	// (scenarios.Result.Database): a failover to a standby, a restore;
	// empty for the others.
	Database string `json:"database,omitempty"`
	// Subject is what the scenario put under test: empty for the relay,
	// "consumers" for the consumers' scenarios (scenarios.Result.Subject).
	Subject  string   `json:"subject,omitempty"`
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
	// Observed sums up what the run observed of the relays from the
	// database, when it observed them.
	Observed *history.ObservedSummary `json:"observed,omitempty"`
	// Footprint is what the relay cost the producers and did over the
	// outages (scenarios.Result.Footprint); nil for a run without a
	// relay, or one made before runs measured it.
	Footprint *footprint.Footprint `json:"footprint,omitempty"`
}

// ScenarioFile is the content of FileScenarios and FileDemo.
//
// `outboxlab run --out` rewrites it (atomically) as each cell finishes: a
// run cut short by an interrupt, a crash or an error leaves every finished
// cell in Runs and lists the others in Unfinished.
type ScenarioFile struct {
	// FormatVersion is the file's format version (FormatVersion when
	// written; 0 in a file written before files carried one).
	FormatVersion int  `json:"format_version,omitempty"`
	Meta          Meta `json:"meta"`
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
	// Relay is the relay the cell was not run against; empty in a file
	// written before cells named it (every cell of a file has one relay).
	Relay string `json:"relay,omitempty"`
	Why   string `json:"why"`
}

// notApplicablePrefix opens the text of scenarios.ErrNotApplicable, which
// the reason of a cell written by an older outboxlab repeats.
const notApplicablePrefix = "scenario not applicable: "

// Reason is why the cell did not run, without the "scenario not
// applicable: " that older files repeat before it.
func (c SkippedCell) Reason() string { return strings.TrimPrefix(c.Why, notApplicablePrefix) }

// CellRow is one cell of a chaos campaign as the report's tables show it:
// a run, or a cell that did not run, which NotApplicable says why. Every
// cell of a file has its row.
type CellRow struct {
	ScenarioRun
	// NotApplicable is why the cell did not run; empty for a run.
	NotApplicable string
}

// Verdict is the row's verdict in a word: N/A for a cell that did not
// run, else its run's PASS, FAIL or INCONCLUSIVE.
func (r CellRow) Verdict() string {
	if r.NotApplicable != "" {
		return VerdictNotApplicable
	}
	return verdictOf(r.Valid, r.Problems, r.Inconclusive)
}

// Rows returns a row for every cell of f that finished: its runs, and
// the cells that did not run (NotApplicable), those named by the relay,
// producer variant and queue of f's runs where the file does not say.
// With cells that did not run, the rows follow the order of the cells of
// f's campaign when its parts name them all; otherwise, and always for a
// file with none, the runs keep their order and the others follow.
func (f *ScenarioFile) Rows() []CellRow {
	if f == nil {
		return nil
	}
	rows := make([]CellRow, 0, len(f.Runs)+len(f.NotApplicable))
	for _, r := range f.Runs {
		rows = append(rows, CellRow{ScenarioRun: r})
	}
	if len(f.NotApplicable) == 0 {
		return rows
	}
	for _, c := range f.NotApplicable {
		r := ScenarioRun{Scenario: c.Scenario, Seed: c.Seed, Relay: c.Relay}
		if r.Relay == "" {
			r.Relay = relayOf(f)
		}
		for _, run := range f.Runs {
			if run.Relay == r.Relay {
				r.Variant = run.Variant
				break
			}
		}
		for _, run := range f.Runs {
			if run.Scenario == r.Scenario {
				r.Queue, r.Subject = run.Queue, run.Subject
				break
			}
		}
		rows = append(rows, CellRow{ScenarioRun: r, NotApplicable: orValue(c.Reason(), "not run")})
	}
	parts := f.Parts
	if len(parts) == 0 && f.Part != nil {
		parts = []Part{*f.Part}
	}
	order := map[campaign.Cell]int{}
	for _, p := range parts {
		cells, ok := PartCells(p)
		if !ok {
			return rows
		}
		for _, c := range cells {
			if _, ok := order[c]; !ok {
				order[c] = len(order)
			}
		}
	}
	for _, r := range rows {
		if _, ok := order[campaign.Cell{Scenario: r.Scenario, Seed: r.Seed}]; !ok {
			return rows
		}
	}
	slices.SortStableFunc(rows, func(a, b CellRow) int {
		return order[campaign.Cell{Scenario: a.Scenario, Seed: a.Seed}] - order[campaign.Cell{Scenario: b.Scenario, Seed: b.Seed}]
	})
	return rows
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
	// FormatVersion is the file's format version, as ScenarioFile's.
	FormatVersion int  `json:"format_version,omitempty"`
	Meta          Meta `json:"meta"`
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
	// Stopped says why the batch ended before its last seed (an
	// interrupt), or, in a file written while the batch still ran, that
	// it had not finished then (SimRunning: a process killed without a
	// chance to say so leaves it so); Summary then counts the seeds that
	// finished. Empty when every seed of the part ran.
	Stopped string `json:"stopped,omitempty"`
	// Pieces are the files merged into this one by Merge, in shard
	// order, each as read; empty for a file as read.
	Pieces []SimFile `json:"-"`
}

// SimTierSQL is SimFile.Tier of the SQL-faithful simulation.
const SimTierSQL = "sql"

// SimRunning is SimFile.Stopped of a file written while its batch ran.
const SimRunning = "still running when this file was written: the batch did not finish (the process was killed, or still runs)"

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
	// FormatVersion is the file's format version, as ScenarioFile's.
	FormatVersion int  `json:"format_version,omitempty"`
	Meta          Meta `json:"meta"`
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
	// FormatVersion is the file's format version, as ScenarioFile's.
	FormatVersion int  `json:"format_version,omitempty"`
	Meta          Meta `json:"meta"`
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
	// FormatVersion is the file's format version, as ScenarioFile's.
	FormatVersion int      `json:"format_version,omitempty"`
	Meta          Meta     `json:"meta"`
	Tables        []Table  `json:"tables"`
	Notes         []string `json:"notes,omitempty"`
	// Result is the benchmark's own result, every detail included; a
	// file whose result result.Result does not read is refused.
	Result *result.Result `json:"result,omitempty"`
}

// SoakFile is the content of FileSoak: one soak run, and the SVG plots
// of its figures over time, files beside it.
type SoakFile struct {
	// FormatVersion is the file's format version, as ScenarioFile's.
	FormatVersion int         `json:"format_version,omitempty"`
	Meta          Meta        `json:"meta"`
	Soak          result.Soak `json:"soak"`
	// Plots are the names of the plot files beside the file.
	Plots []string `json:"plots,omitempty"`
	// dir is the directory the file was read from, and findings the
	// findings.md beside it.
	dir, findings string
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
	// Consumers are the campaigns of the scenarios that put the
	// consumers under test, one file per relay.
	Consumers []*ScenarioFile
	// Cluster are the broker cluster campaigns, one file per relay and
	// queue type, merged from bundles by Merge; empty for one bundle.
	Cluster []*ScenarioFile
	// Database are the campaigns that failed the database over, one file
	// per relay and standby replication, merged by Merge.
	Database []*ScenarioFile
	Demo     *ScenarioFile
	Sim      *SimFile
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
	// Soak is the bundle's soak run; Soaks every soak run of the bundles
	// merged by Merge, in the order given.
	Soak  *SoakFile
	Soaks []*SoakFile
}

// soaks returns every soak run of b.
func (b Bundle) soaks() []*SoakFile {
	if len(b.Soaks) > 0 {
		return b.Soaks
	}
	if b.Soak != nil {
		return []*SoakFile{b.Soak}
	}
	return nil
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
	if b.Soak != nil {
		check(FileSoak, b.Soak.Meta)
	}
	if b.Scenarios != nil {
		if err := b.Scenarios.checkCells(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", filepath.Join(b.Dir, FileScenarios), err))
		}
	}
	if b.Sim != nil {
		if err := b.Sim.checkSeeds(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", filepath.Join(b.Dir, FileSim), err))
		}
	}
	return errors.Join(errs...)
}

// ErrIncomplete is returned by Bundle.Validate for a results file whose
// part holds more or fewer cells than the file accounts for: a cell that
// neither finished (a run, or a cell that could not run) nor is listed as
// unfinished would otherwise vanish from the report unnoticed.
var ErrIncomplete = errors.New("results file does not account for every cell of its part")

// checkCells checks that f accounts for every cell of its part: as many
// cells run, not applicable or unfinished as the part holds. When it does
// not, the error names the missing cells if the part's campaign command
// says which cells the part holds.
func (f *ScenarioFile) checkCells() error {
	if f.Part == nil {
		return nil
	}
	n := len(f.Runs) + len(f.NotApplicable) + len(f.Unfinished)
	if n == f.Part.Cells {
		return nil
	}
	err := fmt.Errorf("%w: its part, shard %s of `%s`, holds %d cell%s, and the file lists %d (%d run, %d not applicable, %d unfinished)",
		ErrIncomplete, f.Part.Shard, f.Part.Campaign, f.Part.Cells, plural(f.Part.Cells), n, len(f.Runs), len(f.NotApplicable), len(f.Unfinished))
	cells, ok := PartCells(*f.Part)
	if !ok {
		return err
	}
	held := map[campaign.Cell]bool{}
	for _, r := range f.Runs {
		held[campaign.Cell{Scenario: r.Scenario, Seed: r.Seed}] = true
	}
	for _, c := range f.NotApplicable {
		held[c.Cell] = true
	}
	for _, c := range f.Unfinished {
		held[c] = true
	}
	var missing []string
	for _, c := range cells {
		if !held[c] {
			missing = append(missing, c.String())
		}
	}
	if len(missing) == 0 {
		return err
	}
	return fmt.Errorf("%w: missing %s", err, strings.Join(missing, ", "))
}

// checkSeeds checks that a batch whose seeds did not all run says why.
func (f *SimFile) checkSeeds() error {
	if f.Part == nil {
		return nil
	}
	switch s := f.Summary.Seeds; {
	case s > f.Part.Cells:
		return fmt.Errorf("%w: its part, shard %s of `%s`, holds %d seeds, and its summary counts %d", ErrIncomplete, f.Part.Shard, f.Part.Campaign, f.Part.Cells, s)
	case s < f.Part.Cells && f.Stopped == "":
		return fmt.Errorf("%w: its part, shard %s of `%s`, holds %d seeds, its summary counts %d, and it does not say why the others did not run",
			ErrIncomplete, f.Part.Shard, f.Part.Campaign, f.Part.Cells, s)
	}
	return nil
}

// PartCells returns the cells of a chaos campaign's shard p, read from its
// campaign command as `outboxlab run` writes it: the verb run, its
// scenarios (--scenario NAME, repeated), then --seeds N and --seed S,
// ahead of any other flag. It returns false for a command that does not
// read so.
func PartCells(p Part) ([]campaign.Cell, bool) {
	words := strings.Fields(p.Campaign)
	i := slices.IndexFunc(words, func(w string) bool { return w == "--scenario" }) - 1
	if i < 0 || words[i] != "run" {
		return nil, false
	}
	var (
		names       []string
		seeds       = 1
		first       uint64
		haveSeed    bool
		seedsGiven  bool
		parseFailed bool
	)
	for i++; i+1 < len(words); i += 2 {
		flag, v := words[i], words[i+1]
		switch flag {
		case "--scenario":
			names = append(names, v)
		case "--seeds":
			n, err := strconv.Atoi(v)
			seeds, seedsGiven, parseFailed = n, true, parseFailed || err != nil
		case "--seed":
			n, err := strconv.ParseUint(v, 10, 64)
			first, haveSeed, parseFailed = n, true, parseFailed || err != nil
		}
		if flag != "--scenario" && flag != "--seeds" && flag != "--seed" {
			break
		}
	}
	if parseFailed || !haveSeed || !seedsGiven || len(names) == 0 {
		return nil, false
	}
	shard, err := campaign.Parse(p.Shard)
	if err != nil {
		return nil, false
	}
	cells, err := campaign.Cells(names, first, seeds)
	if err != nil {
		return nil, false
	}
	return campaign.Select(shard, cells), true
}

// Empty reports whether the bundle holds no results at all.
func (b Bundle) Empty() bool {
	return b.Scenarios == nil && b.Demo == nil && b.Sim == nil && b.Mutants == nil && b.Generated == nil && b.Bench == nil && b.Soak == nil
}

// ReadBundle reads every results file in dir. A missing file is no error;
// a file that does not parse is.
func ReadBundle(dir string) (Bundle, error) {
	b := Bundle{Dir: dir}
	if _, err := os.Stat(dir); err != nil {
		return b, fmt.Errorf("reading results bundle: %w", err)
	}
	var err error
	if b.Scenarios, err = readFile[ScenarioFile](dir, FileScenarios, "meta", "runs"); err != nil {
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
	if b.Demo, err = readFile[ScenarioFile](dir, FileDemo, "meta", "runs"); err != nil {
		return b, err
	}
	if b.Sim, err = readFile[SimFile](dir, FileSim, "meta", "first_seed", "summary", "replay"); err != nil {
		return b, err
	}
	if b.Mutants, err = readFile[MutantFile](dir, FileMutants, "meta", "tier", "checkers", "mutants"); err != nil {
		return b, err
	}
	if b.Generated, err = readFile[GeneratedFile](dir, FileGenerated, "meta", "command", "generated", "killed_all", "score", "survivors"); err != nil {
		return b, err
	}
	if b.Bench, err = readFile[BenchFile](dir, FileBench, "meta", "tables"); err != nil {
		return b, err
	}
	if b.Soak, err = readFile[SoakFile](dir, FileSoak, "meta", "soak"); err != nil {
		return b, err
	}
	if b.Soak != nil {
		b.Soak.dir = dir
		data, err := os.ReadFile(filepath.Join(dir, FileFindings))
		switch {
		case err == nil:
			b.Soak.findings = strings.TrimSpace(string(data))
		case !errors.Is(err, fs.ErrNotExist):
			return b, fmt.Errorf("reading %s: %w", FileFindings, err)
		}
	}
	return b, nil
}

// readFile reads the results file name of dir as a T: nil when there is
// none. It refuses, wrapping ErrFormat, a file of a format_version this
// outboxlab does not read, one with a key T does not have, and one that
// lacks a key of required.
func readFile[T any](dir, name string, required ...string) (*T, error) {
	path := filepath.Join(dir, name)
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", name, err)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil {
		return nil, fmt.Errorf("parsing %s: %w", path, err)
	}
	if err := checkFormatVersion(top); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var errs []error
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	v := new(T)
	if err := dec.Decode(v); err != nil {
		errs = append(errs, err)
	}
	var missing []string
	for _, k := range required {
		if _, ok := top[k]; !ok {
			missing = append(missing, strconv.Quote(k))
		}
	}
	if len(missing) > 0 {
		errs = append(errs, fmt.Errorf("no %s key", strings.Join(missing, ", ")))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("%s: %w: %w (not a %s as this outboxlab writes it, format_version %d)", path, ErrFormat, err, name, FormatVersion)
	}
	return v, nil
}

// checkFormatVersion checks the format_version of a results file's top
// level: absent (version 1, written before files carried one) or a
// version this outboxlab reads.
func checkFormatVersion(top map[string]json.RawMessage) error {
	raw, ok := top["format_version"]
	if !ok {
		return nil
	}
	var v int
	if err := json.Unmarshal(raw, &v); err != nil || v < 1 {
		return fmt.Errorf("%w: format_version %s is not a version number", ErrFormat, raw)
	}
	if v > FormatVersion {
		return fmt.Errorf("%w: format_version %d, and this outboxlab reads format_version %d and older: read it with the outboxlab that wrote it, or a newer one", ErrFormat, v, FormatVersion)
	}
	return nil
}

// WriteFile writes v as the bundle file name in dir, creating dir. The
// write is atomic (see WriteAtomic): a crash or an interrupt leaves the
// file as it was before or as it is now, never half written.
func WriteFile(dir, name string, v any) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating results directory: %w", err)
	}
	data, err := json.MarshalIndent(versioned(v), "", "  ")
	if err != nil {
		return fmt.Errorf("encoding %s: %w", name, err)
	}
	if err := WriteAtomic(filepath.Join(dir, name), append(data, '\n')); err != nil {
		return fmt.Errorf("writing %s: %w", name, err)
	}
	return nil
}

// versioned returns v, a results file, with FormatVersion set: whatever
// version a file was read with, it is written in this one's format.
func versioned(v any) any {
	switch f := v.(type) {
	case ScenarioFile:
		f.FormatVersion = FormatVersion
		return f
	case *ScenarioFile:
		return versioned(*f)
	case SimFile:
		f.FormatVersion = FormatVersion
		return f
	case *SimFile:
		return versioned(*f)
	case MutantFile:
		f.FormatVersion = FormatVersion
		return f
	case *MutantFile:
		return versioned(*f)
	case GeneratedFile:
		f.FormatVersion = FormatVersion
		return f
	case *GeneratedFile:
		return versioned(*f)
	case BenchFile:
		f.FormatVersion = FormatVersion
		return f
	case *BenchFile:
		return versioned(*f)
	case SoakFile:
		f.FormatVersion = FormatVersion
		return f
	case *SoakFile:
		return versioned(*f)
	}
	return v
}

// WriteAtomic replaces the file path with data so that a reader, or the
// machine after a crash, sees the old content or the new, never a part: it
// writes a temporary file in the same directory, syncs it to disk, renames
// it over path and syncs the directory, so that the rename itself is
// durable.
func WriteAtomic(path string, data []byte) error {
	return WriteAtomicAll(OutputFile{Path: path, Data: data})
}

// OutputFile is a file WriteAtomicAll writes.
type OutputFile struct {
	Path string
	Data []byte
}

// WriteAtomicAll writes every file as WriteAtomic does, and replaces none
// unless every one could be written: the temporary files are all written
// and synced first, and only then renamed into place, so that a full disk
// or a refused directory leaves every file as it was.
func WriteAtomicAll(files ...OutputFile) (err error) {
	tmps := make([]string, 0, len(files))
	defer func() {
		if err != nil {
			for _, tmp := range tmps {
				os.Remove(tmp)
			}
		}
	}()
	for _, f := range files {
		tmp, err := writeTemp(f.Path, f.Data)
		if err != nil {
			return err
		}
		tmps = append(tmps, tmp)
	}
	for i, f := range files {
		if err := os.Rename(tmps[i], f.Path); err != nil {
			return fmt.Errorf("renaming %s to %s: %w", tmps[i], f.Path, err)
		}
		tmps[i] = "" // renamed: nothing to remove
		if err := syncDir(filepath.Dir(f.Path)); err != nil {
			return err
		}
	}
	return nil
}

// writeTemp writes data to a new temporary file beside path, synced and
// readable, and returns its name.
func writeTemp(path string, data []byte) (_ string, err error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return "", fmt.Errorf("creating a temporary file: %w", err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			os.Remove(tmp)
		}
	}()
	if _, err := f.Write(data); err != nil {
		f.Close()
		return "", fmt.Errorf("writing %s: %w", tmp, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return "", fmt.Errorf("syncing %s: %w", tmp, err)
	}
	if err := f.Close(); err != nil {
		return "", fmt.Errorf("closing %s: %w", tmp, err)
	}
	if err := os.Chmod(tmp, 0o644); err != nil {
		return "", fmt.Errorf("making %s readable: %w", tmp, err)
	}
	return tmp, nil
}

// syncDir syncs directory dir, so that a rename in it is durable.
func syncDir(dir string) error {
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

// Inputs returns the files reading b took its results from: the results
// files of its directory, its findings and the histories they name (of
// every bundle merged into b). A command that reads b must write none of
// them.
func (b Bundle) Inputs() []string {
	var out []string
	dirs := b.Dirs
	if b.Dir != "" {
		dirs = append(dirs, b.Dir)
	}
	for _, dir := range dirs {
		for _, name := range []string{FileScenarios, FileDemo, FileSim, FileMutants, FileGenerated, FileBench, FileSoak, FileFindings} {
			if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
				out = append(out, filepath.Join(dir, name))
			}
		}
	}
	// History paths are relative to b.Dir; those of a merged bundle name
	// the bundle they are in already.
	history := func(rel string) {
		if rel != "" {
			out = append(out, filepath.Join(b.Dir, rel))
		}
	}
	for _, f := range append([]*ScenarioFile{b.Scenarios, b.Demo}, append(append(b.Relays, b.Cluster...), b.Consumers...)...) {
		if f == nil {
			continue
		}
		for _, r := range f.Runs {
			history(r.History)
		}
	}
	for _, sm := range []*SimFile{b.Sim, b.SimSQL} {
		if sm == nil {
			continue
		}
		for _, f := range sm.Failures {
			history(f.History)
		}
	}
	for _, f := range b.soaks() {
		for _, p := range f.Plots {
			out = append(out, filepath.Join(f.dir, p))
		}
	}
	return out
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
	path := filepath.Join(dir, rel)
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("opening history: %w", err)
	}
	defer f.Close()
	ops, err := history.ReadJSONL(f)
	if err != nil {
		return nil, fmt.Errorf("reading history %s: %w", path, err)
	}
	return ops, nil
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
	if b.Soak != nil {
		if err := WriteFile(dir, FileSoak, b.Soak); err != nil {
			return err
		}
		if b.Soak.findings != "" {
			if err := WriteAtomic(filepath.Join(dir, FileFindings), []byte(b.Soak.findings+"\n")); err != nil {
				return fmt.Errorf("archiving %s: %w", FileFindings, err)
			}
		}
		for _, p := range b.Soak.Plots {
			data, err := os.ReadFile(filepath.Join(b.Soak.dir, p))
			if err != nil {
				return fmt.Errorf("archiving the soak's plot %s: %w", p, err)
			}
			if err := WriteAtomic(filepath.Join(dir, p), data); err != nil {
				return fmt.Errorf("archiving the soak's plot %s: %w", p, err)
			}
		}
	}
	return nil
}
