package chaos

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/outboxlab/outboxlab/history"
)

// RunnerProcess is the history process that records phase ops.
const RunnerProcess = "runner"

// RecordPhase records the start of phase in rec (nil records nothing) and
// returns the op.
func RecordPhase(rec *history.Recorder, phase string) history.Op {
	op := history.Op{Process: RunnerProcess, Type: history.OK, F: history.Phase, Meta: history.Meta{Phase: phase}}
	if rec == nil {
		return op
	}
	return rec.Record(op)
}

// ErrStalled is returned, wrapping ErrNotDrained, when the liveness phase
// ends early because the backlog stalled (Phases.Stalled).
var ErrStalled = fmt.Errorf("%w: it stalled, with nothing left that could drain it", ErrNotDrained)

// ErrNotDrained is returned when the liveness phase ends before the
// backlog drained.
var ErrNotDrained = errors.New("backlog not drained before the liveness deadline")

// Defaults of Phases.
const (
	DefaultDrainWithin = 2 * time.Minute
	DefaultPollEvery   = 200 * time.Millisecond
)

// Phases runs the phases of a chaos run: safety (workload under the fault
// schedule), liveness (heal everything, then wait for the drain within a
// deadline), then check, each marked in the history.
type Phases struct {
	// Recorder receives the phase ops.
	Recorder *history.Recorder
	// Nemesis runs Steps during the safety phase and heals everything at
	// the start of the liveness phase.
	Nemesis *Nemesis
	// Safety is how long the workload runs.
	Safety time.Duration
	// Steps is the fault schedule of the safety phase, timed from the
	// moment the schedule's clock starts (see Ready).
	Steps []Step
	// Schedule tunes how the nemesis runs Steps (lanes, action timeout).
	Schedule RunOptions
	// Ready, when set, holds the schedule's clock until it reports true
	// (polled every 20 ms) or ReadyWithin passed: a fault on a link should
	// find traffic on it, so a run starts its faults once the first event
	// went all the way through.
	Ready       func() bool
	ReadyWithin time.Duration
	// DrainWithin bounds the liveness phase. Default DefaultDrainWithin.
	DrainWithin time.Duration
	// PollEvery is how often the liveness phase asks whether the backlog
	// drained. Default DefaultPollEvery.
	PollEvery time.Duration
	// Stalled, when set, is asked after each poll that found the backlog
	// not drained: it reports whether nothing is left that could still
	// drain it (nothing pending, nothing queued, nothing arriving). When
	// it reports true for StallFor without a break, the liveness phase
	// ends at once with ErrStalled instead of waiting out DrainWithin,
	// which would change nothing: the events missing then are lost.
	Stalled  func(ctx context.Context) (bool, error)
	StallFor time.Duration
}

// RunSafety records the safety phase and runs workload for p.Safety beside
// the fault schedule. Every step of the schedule plays out in full, even
// past p.Safety when a slow engine made it start late: a fault cut short
// would not have been tested. The workload's context ends after p.Safety;
// errors the workload returns because of that end are not errors of the
// phase. Faults the schedule started are healed before RunSafety returns.
func (p *Phases) RunSafety(ctx context.Context, workload func(ctx context.Context) error) error {
	RecordPhase(p.Recorder, history.PhaseSafety)
	sctx, cancel := context.WithTimeout(ctx, p.Safety)
	defer cancel()
	var (
		wg         sync.WaitGroup
		werr, nerr error
	)
	if workload != nil {
		wg.Go(func() { werr = workload(sctx) })
	}
	if p.Nemesis != nil && len(p.Steps) > 0 {
		if p.Ready != nil {
			within := p.ReadyWithin
			if within <= 0 {
				within = p.Safety
			}
			rctx, cancelReady := context.WithTimeout(ctx, within)
			_ = WaitFor(rctx, 20*time.Millisecond, func(context.Context) (bool, error) { return p.Ready(), nil })
			cancelReady()
		}
		nerr = p.Nemesis.Run(ctx, p.Steps, p.Schedule)
	}
	wg.Wait()
	ctxDone := ctx.Err()
	var errs []error
	if werr != nil && !(ctxDone == nil && sctx.Err() != nil && (errors.Is(werr, context.DeadlineExceeded) || errors.Is(werr, context.Canceled))) {
		errs = append(errs, fmt.Errorf("safety phase workload: %w", werr))
	}
	if nerr != nil {
		errs = append(errs, fmt.Errorf("safety phase faults: %w", nerr))
	}
	if ctxDone != nil && nerr == nil {
		errs = append(errs, ctxDone)
	}
	return errors.Join(errs...)
}

// RunLiveness records the liveness phase, heals every fault (retrying until
// all heals succeed or the deadline passes), then polls drained until it
// reports true. It returns how long the phase took; the error wraps
// ErrNotDrained when the deadline passed first, and ErrStalled when the
// backlog stalled first (Stalled).
func (p *Phases) RunLiveness(ctx context.Context, drained func(ctx context.Context) (bool, error)) (time.Duration, error) {
	RecordPhase(p.Recorder, history.PhaseLiveness)
	within, every := p.DrainWithin, p.PollEvery
	if within <= 0 {
		within = DefaultDrainWithin
	}
	if every <= 0 {
		every = DefaultPollEvery
	}
	began := time.Now()
	lctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	if p.Nemesis != nil {
		var lastErr error
		err := WaitFor(lctx, every, func(ctx context.Context) (bool, error) {
			lastErr = p.Nemesis.HealAll(ctx)
			return lastErr == nil, nil
		})
		if err != nil {
			return time.Since(began), fmt.Errorf("liveness phase: healing faults: %w", errors.Join(err, lastErr))
		}
	}
	if drained == nil {
		return time.Since(began), nil
	}
	var (
		lastErr    error
		quietSince time.Time
	)
	err := WaitFor(lctx, every, func(ctx context.Context) (bool, error) {
		ok, err := drained(ctx)
		lastErr = err
		if ok && err == nil {
			return true, nil
		}
		if p.Stalled == nil || err != nil {
			return false, nil
		}
		stalled, serr := p.Stalled(ctx)
		switch {
		case serr != nil || !stalled:
			quietSince = time.Time{}
		case quietSince.IsZero():
			quietSince = time.Now()
		case time.Since(quietSince) >= p.StallFor:
			return false, ErrStalled
		}
		return false, nil
	})
	if errors.Is(err, ErrStalled) {
		return time.Since(began), fmt.Errorf("liveness phase after %s: %w", time.Since(began).Round(time.Millisecond), err)
	}
	if err != nil {
		return time.Since(began), fmt.Errorf("liveness phase after %s: %w", time.Since(began).Round(time.Millisecond),
			errors.Join(ErrNotDrained, lastErr))
	}
	return time.Since(began), nil
}

// StartCheck records the check phase.
func (p *Phases) StartCheck() { RecordPhase(p.Recorder, history.PhaseCheck) }

// WaitFor calls cond every interval until it reports true (nil), returns
// an error (that error), or ctx ends (ctx's error). The first call is
// immediate.
func WaitFor(ctx context.Context, every time.Duration, cond func(ctx context.Context) (bool, error)) error {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		ok, err := cond(ctx)
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}
