package scenarios

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/outboxlab/outboxlab/history"
	"github.com/outboxlab/outboxlab/seed"
	"github.com/outboxlab/outboxlab/workload"

	"github.com/outboxlab/outboxlab/chaos"
)

// planFaults registers the scenario's faults and draws their schedule.
func (r *run) planFaults() ([]chaos.Step, error) {
	if r.sc.Faults == nil {
		return nil, nil
	}
	steps, err := r.sc.Faults(runStage{r}, seed.Rand(r.opts.Seed, seed.Faults), r.safety)
	if err != nil {
		return nil, err
	}
	for _, s := range steps {
		if s.End() > r.safety {
			return nil, fmt.Errorf("fault %s ends at %s, after the safety phase (%s)", s.Fault, s.End(), r.safety)
		}
	}
	return steps, nil
}

// warmUp bounds the wait for the first event delivered end to end before
// the fault schedule starts.
const warmUp = 10 * time.Second

// faultActionTimeout bounds one injection or heal.
const faultActionTimeout = 90 * time.Second

// runSafety runs the safety phase through chaos.Phases: the workload for
// the safety phase's length beside the fault schedule, whose clock starts
// with the first event delivered (or after warmUp). Every step of the
// schedule plays out in full, even when a slow Docker engine makes it
// start late; steps of one lane (by default, of one fault) run one after
// another, each lasting its Duration from the moment its injection
// returned; lanes run side by side.
func (r *run) runSafety(ctx context.Context, steps []chaos.Step) error {
	p := &chaos.Phases{
		Recorder: r.rec, Nemesis: r.nemesis, Safety: r.safety, Steps: steps,
		Schedule:    chaos.RunOptions{Lanes: r.lanes, ActionTimeout: faultActionTimeout},
		Ready:       func() bool { return r.applied.Load() > 0 },
		ReadyWithin: warmUp,
	}
	return p.RunSafety(ctx, func(ctx context.Context) error {
		_ = r.runWorkload(ctx)
		return nil
	})
}

// controlShare is the share of each producer's transactions that the
// control phase runs, one in controlShare, before any replica starts,
// for at most controlFor at the workload's pace.
const (
	controlShare = 4
	controlFor   = time.Second
)

// controlCount is how many of n transactions of a producer the control
// phase runs: none in an unsafe mode, which runs no relay to compare
// with.
func (r *run) controlCount(n int) int {
	if r.mode != workload.Outbox || n == 0 {
		return 0
	}
	return min(n/controlShare, int(controlFor/r.pace(n)))
}

// pace is the beat of a producer's n transactions: the workload's, or
// the one that spreads them over most of the safety phase.
func (r *run) pace(n int) time.Duration {
	if r.workload.Pace > 0 {
		return r.workload.Pace
	}
	return max(5*time.Millisecond, r.safety*7/10/time.Duration(n))
}

// runControl runs the control phase: the first transactions of every
// producer's plan (controlCount: a quarter, for a second at most), paced
// as the workload is, before any
// replica of the relay starts, so that the producers' transaction times
// without a relay can be held against theirs with it
// (footprint.Producers). Their events are the run's like any others:
// the replicas publish them once they start.
func (r *run) runControl(ctx context.Context) {
	if r.mode != workload.Outbox {
		return
	}
	chaos.RecordPhase(r.rec, history.PhaseControl)
	r.phase.Store(history.PhaseControl)
	r.runTxns(ctx, func(txns []workload.Txn) []workload.Txn { return txns[:r.controlCount(len(txns))] })
}

// runWorkload runs every producer's transactions but those of the control
// phase, paced over most of the safety phase. A held transaction of the
// outbox variant runs beside the producer's next ones, as a slow request
// does beside others.
func (r *run) runWorkload(ctx context.Context) error {
	r.runTxns(ctx, func(txns []workload.Txn) []workload.Txn { return txns[r.controlCount(len(txns)):] })
	return nil
}

// runTxns runs, for every producer, the share of its plan that part
// picks, on a fixed beat: the pace that spreads its whole plan over most
// of the safety phase.
func (r *run) runTxns(ctx context.Context, part func([]workload.Txn) []workload.Txn) {
	var wg sync.WaitGroup
	for i, all := range r.plan.Txns {
		if i >= len(r.producers) || len(all) == 0 {
			continue
		}
		txns := part(all)
		p := r.producers[i]
		pace := r.pace(len(all))
		offset := pace * time.Duration(i) / time.Duration(len(r.producers))
		wg.Go(func() {
			// Transactions start on a fixed beat, however long each
			// takes, so that the workload spans the phase as planned.
			began := time.Now()
			for k, t := range txns {
				if !chaos.Sleep(ctx, time.Until(began.Add(offset+time.Duration(k)*pace))) {
					return
				}
				do := func() {
					tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), t.Hold+10*time.Second)
					defer cancel()
					_ = p.Do(tctx, t)
				}
				if t.Hold > 0 && r.mode == workload.Outbox {
					wg.Go(do)
				} else {
					do()
				}
			}
		})
	}
	wg.Wait()
}
