package sim

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"runtime"
	"sync"
	"time"
)

// Summary sums up RunMany. Its JSON form is what the CLI prints with
// --json.
type Summary struct {
	// Seeds is how many seeds ran.
	Seeds int `json:"seeds"`
	// Failed is how many of them failed a checker (or could not run).
	Failed int `json:"failed"`
	// SeedsPerSec is Seeds over the wall-clock time of the whole batch.
	SeedsPerSec float64 `json:"seeds_per_sec"`
	// StepsPerSeed is the mean number of scheduler steps per seed.
	StepsPerSeed float64 `json:"steps_per_seed"`
	// Events is the total of committed events over all seeds.
	Events int `json:"events"`
	// FirstFailureSeed is the lowest failing seed; 0 when none failed.
	FirstFailureSeed uint64 `json:"first_failure_seed"`
	// HistorySHA256 is the SHA-256 of every history's JSONL, in seed
	// order: two runs of the same seeds must agree on it.
	HistorySHA256 string `json:"history_sha256"`
	// Failures are the first MaxFailuresKept failed results, in seed
	// order, with their histories (not in the JSON form).
	Failures []Result `json:"-"`
}

// MaxFailuresKept bounds Summary.Failures: a mutant fails every seed.
const MaxFailuresKept = 10

// RunMany runs the n seeds from first on, one worker per CPU (at most one
// per server of Options.SQL), and sums
// them up. Results are combined in seed order, so the summary (but the
// rate) is deterministic. It stops early when ctx ends; Seeds then counts
// the seeds finished in order. Failed results are kept in Failures, with
// their histories.
func RunMany(ctx context.Context, first uint64, n int, opts Options) Summary {
	return RunManyReporting(ctx, first, n, opts, nil)
}

// reportEvery is how often RunManyReporting reports a summary that no new
// kept failure changed.
const reportEvery = time.Second

// RunManyReporting is RunMany, and it hands the summary so far to report,
// on the goroutine that called it: each time a failure joins Failures, and
// otherwise at most once a second while seeds finish. Each summary is
// whole (rate, steps and the hash of the histories so far included), of
// the seeds finished in order, so that a caller can keep what was found
// if the process dies before RunManyReporting returns. A nil report is
// RunMany.
func RunManyReporting(ctx context.Context, first uint64, n int, opts Options, report func(Summary)) Summary {
	start := time.Now()
	workers := min(runtime.GOMAXPROCS(0), max(n, 1))
	if opts.SQL != nil {
		workers = min(workers, opts.SQL.Servers())
	}
	type done struct {
		i   int
		res Result
		h   []byte
	}
	jobs := make(chan int)
	out := make(chan done, workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				res := Run(first+uint64(i), opts)
				h := appendJSONL(nil, res.History)
				if res.Valid {
					res.History = nil // keep only what a failure needs
				}
				out <- done{i: i, res: res, h: h}
			}
		}()
	}
	go func() {
		defer close(jobs)
		for i := range n {
			select {
			case jobs <- i:
			case <-ctx.Done():
				return
			}
		}
	}()
	go func() {
		wg.Wait()
		close(out)
	}()

	var (
		s          Summary
		steps      int
		hash       = sha256.New()
		pending    = map[int]done{}
		nextIdx    = 0
		lastReport = start
	)
	// snapshot completes s with the figures computed at the end.
	snapshot := func() Summary {
		out := s
		if elapsed := time.Since(start).Seconds(); elapsed > 0 {
			out.SeedsPerSec = float64(out.Seeds) / elapsed
		}
		if out.Seeds > 0 {
			out.StepsPerSeed = float64(steps) / float64(out.Seeds)
		}
		out.HistorySHA256 = hex.EncodeToString(hash.Sum(nil))
		return out
	}
	for d := range out {
		pending[d.i] = d
		kept := len(s.Failures)
		for {
			d, ok := pending[nextIdx]
			if !ok {
				break
			}
			delete(pending, nextIdx)
			nextIdx++
			s.Seeds++
			steps += d.res.Steps
			s.Events += d.res.Events
			hash.Write(d.h)
			if !d.res.Valid {
				if s.Failed == 0 {
					s.FirstFailureSeed = d.res.Seed
				}
				s.Failed++
				if len(s.Failures) < MaxFailuresKept {
					s.Failures = append(s.Failures, d.res)
				}
			}
		}
		if report != nil && (len(s.Failures) > kept || time.Since(lastReport) >= reportEvery) {
			report(snapshot())
			lastReport = time.Now()
		}
	}
	return snapshot()
}
