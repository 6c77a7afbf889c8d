package sim_test

import (
	"context"
	"testing"

	"github.com/outboxlab/outboxlab/internal/sim"
	"github.com/outboxlab/outboxlab/workload"
)

// TestRunManyReportingReportsEveryKeptFailure runs seeds of a variant
// that fails them: each failure that joins Failures is reported at once,
// with the seeds finished before it, and the summary returned is RunMany's.
func TestRunManyReportingReportsEveryKeptFailure(t *testing.T) {
	opts := sim.Options{Variant: sim.Variant{Name: "publish-then-commit", Producer: workload.PublishThenCommit}}
	const n = 30
	var reports []sim.Summary
	got := sim.RunManyReporting(context.Background(), 1, n, opts, func(s sim.Summary) { reports = append(reports, s) })
	want := sim.RunMany(context.Background(), 1, n, opts)
	if got.Seeds != n || got.Failed != want.Failed || got.HistorySHA256 != want.HistorySHA256 || len(got.Failures) != len(want.Failures) {
		t.Fatalf("RunManyReporting = %d seeds, %d failed, %s; RunMany %d, %d, %s", got.Seeds, got.Failed, got.HistorySHA256, want.Seeds, want.Failed, want.HistorySHA256)
	}
	if want.Failed == 0 {
		t.Fatal("no seed failed: the test cannot see a failure reported")
	}
	kept := 0
	for _, r := range reports {
		if len(r.Failures) < kept || r.Seeds > n || r.Failed < len(r.Failures) {
			t.Fatalf("report %+v after %d kept failures", r, kept)
		}
		if len(r.Failures) > kept {
			if last := r.Failures[len(r.Failures)-1]; last.Seed > 1+uint64(r.Seeds) || last.History == nil {
				t.Errorf("a report of %d seeds holds seed %d, or no history of it", r.Seeds, last.Seed)
			}
			kept = len(r.Failures)
		}
	}
	if kept != len(got.Failures) {
		t.Errorf("reports showed %d kept failures, the batch kept %d", kept, len(got.Failures))
	}
}
