package sim

import (
	"context"
	"testing"
)

// BenchmarkRun measures one seeded schedule: swarm-drawn faults on, at
// least two relay replicas, the default 200-step safety phase, liveness
// and the checkers.
func BenchmarkRun(b *testing.B) {
	b.ReportAllocs()
	steps := 0
	seed := uint64(1)
	for b.Loop() {
		res := Run(seed, Options{})
		steps += res.Steps
		seed++
	}
	b.ReportMetric(float64(steps)/float64(b.N), "steps/seed")
}

// BenchmarkRunMany measures seeds per second over every CPU, as the CLI
// runs them (histories hashed).
func BenchmarkRunMany(b *testing.B) {
	const n = 500
	var s Summary
	for b.Loop() {
		s = RunMany(context.Background(), 1, n, Options{})
	}
	b.ReportMetric(s.SeedsPerSec, "seeds/s")
	b.ReportMetric(s.StepsPerSeed, "steps/seed")
}

// TestThroughput reports how many seeds per second this machine runs.
// It asserts only that the runs complete; the figure is for people.
func TestThroughput(t *testing.T) {
	if testing.Short() {
		t.Skip("throughput is measured without -short")
	}
	s := RunMany(context.Background(), 1, 2000, Options{})
	t.Logf("seeds=%d failed=%d seeds/s=%.0f steps/seed=%.0f events=%d", s.Seeds, s.Failed, s.SeedsPerSec, s.StepsPerSeed, s.Events)
	if s.Seeds != 2000 {
		t.Fatalf("ran %d seeds, want 2000", s.Seeds)
	}
}
