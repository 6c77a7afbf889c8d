package report

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/outboxlab/outboxlab/internal/campaign"
	"github.com/outboxlab/outboxlab/internal/sim"
)

// testMeta is the metadata of the files these tests write.
var testMeta = Meta{Date: "2026-01-02T03:04:05Z", Commit: "abc", Machine: Machine{Cores: 2, OS: "Debian", Go: "go1.26"}}

// writeRaw writes name in a fresh bundle directory with the text given,
// as a hand or another program would, and returns the directory.
func writeRaw(t *testing.T, name, text string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

const rawMeta = `"meta": {"date": "2026-01-02T03:04:05Z", "commit": "abc", "machine": {"cores": 2, "memory_bytes": 0, "os": "Debian", "go": "go1.26"}}`

// TestWrittenFilesCarryTheFormatVersionFirst writes every kind of results
// file and reads the version back as the first key.
func TestWrittenFilesCarryTheFormatVersionFirst(t *testing.T) {
	dir := t.TempDir()
	for name, v := range map[string]any{
		FileScenarios: ScenarioFile{Meta: testMeta, Runs: []ScenarioRun{}},
		FileDemo:      &ScenarioFile{Meta: testMeta, Runs: []ScenarioRun{}},
		FileSim:       SimFile{Meta: testMeta},
		FileMutants:   MutantFile{Meta: testMeta, Tier: "sim"},
		FileGenerated: GeneratedFile{Meta: testMeta, Command: "x"},
		FileBench:     BenchFile{Meta: testMeta},
	} {
		if err := WriteFile(dir, name, v); err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(string(data), "{\n  \"format_version\": 1,\n") {
			t.Errorf("%s does not start with its format version:\n%.200s", name, data)
		}
	}
	b, err := ReadBundle(dir)
	if err != nil {
		t.Fatalf("the files as written do not read back: %v", err)
	}
	if b.Sim.FormatVersion != FormatVersion || b.Scenarios.FormatVersion != FormatVersion || b.Bench.FormatVersion != FormatVersion {
		t.Errorf("versions read back: sim %d, scenarios %d, bench %d", b.Sim.FormatVersion, b.Scenarios.FormatVersion, b.Bench.FormatVersion)
	}
}

// TestReadBundleRefusesWhatItWouldMisread gives ReadBundle files it would
// once have rendered as empty tables: an unknown format version, a key
// renamed, a key it does not know.
func TestReadBundleRefusesWhatItWouldMisread(t *testing.T) {
	for _, tc := range []struct {
		name, file, text string
		want             []string
	}{
		{"a newer version", FileScenarios, `{"format_version": 99, ` + rawMeta + `, "runs": []}`,
			[]string{"format_version 99", "reads format_version 1"}},
		{"a version that is no number", FileSim, `{"format_version": "one", ` + rawMeta + `, "first_seed": 1, "summary": {}, "replay": "x"}`,
			[]string{"format_version \"one\" is not a version number"}},
		{"runs renamed", FileScenarios, `{` + rawMeta + `, "rns": []}`,
			[]string{`unknown field "rns"`, `no "runs" key`}},
		{"an unknown key", FileSim, `{` + rawMeta + `, "first_seed": 1, "summary": {"seeds": 3}, "replay": "x", "sumary": {}}`,
			[]string{`unknown field "sumary"`}},
		{"a sim.json of other keys", FileSim, `{` + rawMeta + `, "seeds": 5, "failed": 5}`,
			[]string{`unknown field "seeds"`, `no "first_seed", "summary", "replay" key`}},
		{"an unknown key deeper down", FileBench, `{` + rawMeta + `, "tables": [{"title": "t", "columns": [], "rows": [], "colour": "red"}]}`,
			[]string{`unknown field "colour"`}},
		{"an unknown key in the benchmark's result", FileBench, `{` + rawMeta + `, "tables": [], "result": {"events": 10, "relay_msg_per_sec": 9000}}`,
			[]string{`unknown field "relay_msg_per_sec"`}},
		{"a benchmark result of another shape", FileBench, `{` + rawMeta + `, "tables": [], "result": {"events": "ten"}}`,
			[]string{`events`}},
	} {
		dir := writeRaw(t, tc.file, tc.text)
		_, err := ReadBundle(dir)
		if !errors.Is(err, ErrFormat) {
			t.Errorf("%s: ReadBundle = %v, want ErrFormat", tc.name, err)
			continue
		}
		for _, w := range append(tc.want, filepath.Join(dir, tc.file)) {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not say %q", tc.name, err, w)
			}
		}
	}
}

// TestReadBundleReadsFilesWithoutAVersion reads a file written before
// files carried a version, and one of version 1: both are version 1.
func TestReadBundleReadsFilesWithoutAVersion(t *testing.T) {
	for _, text := range []string{
		`{` + rawMeta + `, "first_seed": 1, "summary": {"seeds": 3, "failed": 0}, "replay": "x"}`,
		`{"format_version": 1, ` + rawMeta + `, "first_seed": 1, "summary": {"seeds": 3, "failed": 0}, "replay": "x"}`,
	} {
		b, err := ReadBundle(writeRaw(t, FileSim, text))
		if err != nil || b.Sim == nil || b.Sim.Summary.Seeds != 3 {
			t.Errorf("%s: %v, %+v", text, err, b.Sim)
		}
	}
}

// TestReadBundleReadsTheArchivedResults reads every bundle kept in the
// repository's results directory, which REPORT.md is made from: files
// written before they carried a version must still read, and validate.
func TestReadBundleReadsTheArchivedResults(t *testing.T) {
	var dirs []string
	err := filepath.WalkDir(filepath.Join("..", "..", "results"), func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && filepath.Ext(path) == ".json" && filepath.Base(filepath.Dir(path)) != DirHistories {
			if dir := filepath.Dir(path); !slices.Contains(dirs, dir) {
				dirs = append(dirs, dir)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(dirs) == 0 {
		t.Skip("no results directory beside the package")
	}
	for _, dir := range dirs {
		b, err := ReadBundle(dir)
		if err != nil {
			t.Errorf("%v", err)
			continue
		}
		if err := b.Validate(); err != nil {
			t.Errorf("%s: %v", dir, err)
		}
	}
}

// TestValidateNamesTheCellsAFileDoesNotAccountFor reads a file whose part
// holds a cell that it neither ran nor lists as unfinished.
func TestValidateNamesTheCellsAFileDoesNotAccountFor(t *testing.T) {
	dir := t.TempDir()
	part := &Part{Shard: "2/2", Campaign: "go run ./cmd/outboxlab run --scenario a --scenario b --seeds 2 --seed 7 --relay ours", Cells: 2}
	f := ScenarioFile{Meta: testMeta, Part: part, Runs: []ScenarioRun{{Scenario: "b", Seed: 7, Valid: true}}}
	if err := WriteFile(dir, FileScenarios, f); err != nil {
		t.Fatal(err)
	}
	b, err := ReadBundle(dir)
	if err != nil {
		t.Fatal(err)
	}
	err = b.Validate()
	if !errors.Is(err, ErrIncomplete) || !strings.Contains(err.Error(), "missing b/8") || !strings.Contains(err.Error(), "holds 2 cells, and the file lists 1") {
		t.Errorf("Validate = %v, want ErrIncomplete naming b/8", err)
	}
	// Listed as unfinished, the cell is accounted for.
	f.Unfinished = []campaign.Cell{{Scenario: "b", Seed: 8}}
	if err := WriteFile(dir, FileScenarios, f); err != nil {
		t.Fatal(err)
	}
	if b, err = ReadBundle(dir); err != nil {
		t.Fatal(err)
	}
	if err := b.Validate(); err != nil {
		t.Errorf("a file listing its unfinished cell: %v", err)
	}
	// A part of one cell and a file of none, whose command says nothing
	// readable of its cells: the counts alone.
	f = ScenarioFile{Meta: testMeta, Part: &Part{Shard: "1/1", Campaign: "something else", Cells: 1}, Runs: []ScenarioRun{}}
	if err := WriteFile(dir, FileScenarios, f); err != nil {
		t.Fatal(err)
	}
	if b, err = ReadBundle(dir); err != nil {
		t.Fatal(err)
	}
	if err := b.Validate(); !errors.Is(err, ErrIncomplete) || !strings.Contains(err.Error(), "holds 1 cell, and the file lists 0") {
		t.Errorf("Validate = %v, want ErrIncomplete", err)
	}
}

// TestValidateWantsAShortBatchToSayWhy reads a simulation batch whose
// summary counts fewer seeds than its part holds: refused unless it says
// why it stopped.
func TestValidateWantsAShortBatchToSayWhy(t *testing.T) {
	dir := t.TempDir()
	f := SimFile{Meta: testMeta, First: 1, Summary: sim.Summary{Seeds: 3}, Replay: "x",
		Part: &Part{Shard: "1/1", Campaign: "go run ./cmd/outboxlab sim --seeds 10 --seed 1", Cells: 10}}
	for _, tc := range []struct {
		stopped string
		ok      bool
	}{{"", false}, {"interrupted by SIGINT", true}, {SimRunning, true}} {
		f.Stopped = tc.stopped
		if err := WriteFile(dir, FileSim, f); err != nil {
			t.Fatal(err)
		}
		b, err := ReadBundle(dir)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Validate(); (err == nil) != tc.ok || !tc.ok && !errors.Is(err, ErrIncomplete) {
			t.Errorf("stopped %q: Validate = %v", tc.stopped, err)
		}
	}
}

func TestPartCells(t *testing.T) {
	p := Part{Shard: "2/3", Campaign: "go run ./cmd/outboxlab run --scenario a --scenario b --seeds 3 --seed 10 --relay 'cmd:./r --seed 1'", Cells: 2}
	cells, ok := PartCells(p)
	want := []campaign.Cell{{Scenario: "a", Seed: 12}, {Scenario: "b", Seed: 10}}
	if !ok || !slices.Equal(cells, want) {
		t.Errorf("PartCells = %v, %v; want %v", cells, ok, want)
	}
	for _, c := range []string{"go run ./cmd/outboxlab sim --seeds 3 --seed 1", "run --scenario a --seed 1", "run --scenario a --seeds x --seed 1"} {
		if cells, ok := PartCells(Part{Shard: "1/1", Campaign: c}); ok {
			t.Errorf("PartCells(%q) = %v, want no answer", c, cells)
		}
	}
}
