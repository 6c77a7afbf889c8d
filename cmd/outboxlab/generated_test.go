package main

import (
	"encoding/json"
	"testing"

	"github.com/outboxlab/outboxlab/internal/mutant/generated"
)

// TestGeneratedSummaryJSON checks what mutants --generated --json prints:
// the counts by status and judgement, the score over the mutants neither
// invalid, equivalent nor excluded, and each survivor with its id, file,
// line, diff and judgement.
func TestGeneratedSummaryJSON(t *testing.T) {
	m := func(id string) generated.Mutant {
		return generated.Mutant{ID: id, File: "relay/relay.go", Line: 7, Diff: "- a\n+ b"}
	}
	outcomes := []generated.Outcome{
		{Mutant: m("k1"), Status: generated.StatusKilled, Kill: generated.Kill{Tier: generated.TierSim}},
		{Mutant: m("k2"), Status: generated.StatusKilled, Kill: generated.Kill{Tier: generated.TierStore}},
		{Mutant: m("k3"), Status: generated.StatusKilled, Kill: generated.Kill{Tier: generated.TierSim}},
		{Mutant: m("i1"), Status: generated.StatusInvalid},
		{Mutant: m("e1"), Status: generated.StatusSurvived, Judgement: "equivalent: same on every input"},
		{Mutant: m("x1"), Status: generated.StatusSurvived, Judgement: "excluded: a log line"},
		{Mutant: m("g1"), Status: generated.StatusSurvived, Judgement: "gap"},
	}
	b, err := json.Marshal(summarize(outcomes))
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Score     float64
		ByTier    map[string]int `json:"killed_by_tier"`
		Survivors []map[string]any
	}
	// Field names as printed.
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"generated", "killed_fast", "killed_all", "equivalent", "excluded", "invalid", "score", "survivors"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("no %q in %s", k, b)
		}
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]int{"generated": 7, "killed_fast": 3, "killed_all": 3, "equivalent": 1, "excluded": 1, "invalid": 1} {
		var n int
		if err := json.Unmarshal(raw[k], &n); err != nil || n != want {
			t.Errorf("%s = %s, want %d", k, raw[k], want)
		}
	}
	if want := 3.0 / 4; got.Score != want {
		t.Errorf("score %v, want %v (3 killed of 4 neither invalid, equivalent nor excluded)", got.Score, want)
	}
	if got.ByTier["sim"] != 2 || got.ByTier["store"] != 1 {
		t.Errorf("killed by tier %v, want sim 2, store 1", got.ByTier)
	}
	if len(got.Survivors) != 3 {
		t.Fatalf("%d survivors, want 3", len(got.Survivors))
	}
	for _, s := range got.Survivors {
		for _, k := range []string{"id", "file", "line", "diff", "judgement"} {
			if _, ok := s[k]; !ok {
				t.Errorf("survivor %v has no %q", s, k)
			}
		}
	}
}
