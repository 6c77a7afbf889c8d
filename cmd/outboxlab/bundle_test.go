package main

import (
	"slices"
	"testing"
	"time"

	"github.com/outboxlab/outboxlab/scenarios"
)

// TestToBundleKeepsWhatTheReportShows: the fields the report renders
// beyond the counts reach the bundle.
func TestToBundleKeepsWhatTheReportShows(t *testing.T) {
	res := scenarios.Result{Scenario: "cluster-leader-kill", Relay: "ours", Seed: 3, Queue: "classic",
		ConfirmStall: 1500 * time.Millisecond, Unchecked: []string{"fencing: judged on the 3 rows relay-a held"}}
	r, err := toBundle(t.TempDir(), 0, res, "")
	if err != nil {
		t.Fatal(err)
	}
	if r.Queue != "classic" || r.ConfirmStall != 1500*time.Millisecond || !slices.Equal(r.Unchecked, res.Unchecked) {
		t.Errorf("bundle run %+v lost the queue, the confirm stall or the unchecked notes of %+v", r, res)
	}
}
