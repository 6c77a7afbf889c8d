package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/outboxlab/outboxlab/internal/report"
)

// TestMutantsJSONIsTheMatrix: --json prints the kill matrix as a JSON
// list of rows with exactly the documented keys, the reference first and
// surviving, the mutants killed; --out writes mutants.json.
func TestMutantsJSONIsTheMatrix(t *testing.T) {
	dir := t.TempDir()
	code, out, errOut := invoke(t, "mutants", "--mutant", "no-lease", "--mutant", "publish-before-commit",
		"--seeds", "50", "--seed", "1", "--json", "--out", dir)
	if code != exitOK {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	var rows []map[string]any
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("stdout is not a JSON list: %v\n%s", err, out)
	}
	if len(rows) != 3 {
		t.Fatalf("%d rows, want the reference and 2 mutants:\n%s", len(rows), out)
	}
	want := []string{"checker", "killed", "mutant", "scenario", "seconds", "seed", "steps"}
	for _, r := range rows {
		var keys []string
		for k := range r {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		if !slices.Equal(keys, want) {
			t.Errorf("row keys %v, want %v", keys, want)
		}
	}
	if rows[0]["mutant"] != "reference" || rows[0]["killed"] != false {
		t.Errorf("first row %v, want the reference, not killed", rows[0])
	}
	// Catalogue order: publish-before-commit comes before no-lease.
	if rows[1]["mutant"] != "publish-before-commit" || rows[1]["killed"] != true || rows[1]["checker"] != "phantom" {
		t.Errorf("row %v, want publish-before-commit killed by phantom", rows[1])
	}
	if rows[2]["mutant"] != "no-lease" || rows[2]["killed"] != true {
		t.Errorf("row %v, want no-lease killed", rows[2])
	}
	b, err := os.ReadFile(filepath.Join(dir, report.FileMutants))
	if err != nil {
		t.Fatal(err)
	}
	var mf report.MutantFile
	if err := json.Unmarshal(b, &mf); err != nil {
		t.Fatal(err)
	}
	if mf.Tier != "sim" || len(mf.Mutants) != 3 || !mf.Mutants[1].Killed || mf.Mutants[1].KilledBy["phantom"] != 1 {
		t.Errorf("mutants.json: %+v", mf)
	}
}

func TestMutantsTableAndUsage(t *testing.T) {
	code, out, errOut := invoke(t, "mutants", "--mutant", "consumer-no-dedupe", "--seeds", "30", "--seed", "2")
	if code != exitOK {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	for _, want := range []string{"SEED=2 tier=sim", "consumer-no-dedupe", "duplicate-effects", "shrunk counterexample",
		"replay: go run ./cmd/outboxlab mutants --mutant consumer-no-dedupe", "median time to kill", "PASS"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	code, _, errOut = invoke(t, "mutants", "--mutant", "no-such-bug")
	if code != exitUsage || !strings.Contains(errOut, "unknown mutant") {
		t.Errorf("unknown mutant: exit %d, %q", code, errOut)
	}
}
