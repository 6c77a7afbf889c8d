package chaos

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/outboxlab/outboxlab/history"
)

// NemesisProcess is the history process that records fault windows.
const NemesisProcess = "nemesis"

// Nemesis injects and heals a run's faults and records every window in the
// history: an invoke, then ok when the fault is in effect, or info (with
// the error) when its injection failed and the fault may be half-applied.
// Heals are recorded the same way with history.FaultStop. A Nemesis is safe
// for concurrent use.
type Nemesis struct {
	rec *history.Recorder

	mu     sync.Mutex
	faults []Fault
	byName map[string]Fault
	open   map[string]bool
}

// NewNemesis returns a nemesis over faults that records into rec (nil
// records nothing). Fault names must be unique.
func NewNemesis(rec *history.Recorder, faults ...Fault) (*Nemesis, error) {
	n := &Nemesis{rec: rec, byName: map[string]Fault{}, open: map[string]bool{}}
	for _, f := range faults {
		if err := n.Add(f); err != nil {
			return nil, err
		}
	}
	return n, nil
}

// Add registers f.
func (n *Nemesis) Add(f Fault) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	name := f.Name()
	if name == "" {
		return fmt.Errorf("adding fault of kind %q: %w", f.Kind(), ErrEmptyName)
	}
	if _, dup := n.byName[name]; dup {
		return fmt.Errorf("adding fault %q: a fault with that name is already registered", name)
	}
	n.byName[name] = f
	n.faults = append(n.faults, f)
	return nil
}

// Faults returns the registered faults in registration order.
func (n *Nemesis) Faults() []Fault {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.faults)
}

// Fault returns the fault registered under name.
func (n *Nemesis) Fault(name string) (Fault, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	f, ok := n.byName[name]
	return f, ok
}

// Ref returns the identity of the fault registered under name, as the
// history records it.
func (n *Nemesis) Ref(name string) (history.Fault, bool) {
	if f, ok := n.Fault(name); ok {
		return Ref(f), true
	}
	return history.Fault{}, false
}

// Hits returns the hit count of every registered fault by name.
func (n *Nemesis) Hits() map[string]int64 {
	out := map[string]int64{}
	for _, f := range n.Faults() {
		out[f.Name()] = f.Hits()
	}
	return out
}

// Summary renders one line per registered fault: name, class, kind and
// hits, for a run's report.
func (n *Nemesis) Summary() string {
	var b strings.Builder
	for _, f := range n.Faults() {
		fmt.Fprintf(&b, "%-40s %-9s %-11s hits=%d\n", f.Name(), f.Class(), f.Kind(), f.Hits())
	}
	return b.String()
}

// ErrNotFired is returned by RequireFired for faults that never fired.
var ErrNotFired = errors.New("fault never fired")

// RequireFired returns an error naming every fault among names (all
// registered faults when names is empty) whose hit count is zero: a run
// whose fault never fired did not test it.
func (n *Nemesis) RequireFired(names ...string) error {
	if len(names) == 0 {
		for _, f := range n.Faults() {
			names = append(names, f.Name())
		}
	}
	var errs []error
	for _, name := range names {
		f, ok := n.Fault(name)
		if !ok {
			errs = append(errs, fmt.Errorf("fault %q is not registered", name))
			continue
		}
		if f.Hits() == 0 {
			errs = append(errs, fmt.Errorf("%q: %w", name, ErrNotFired))
		}
	}
	return errors.Join(errs...)
}

func (n *Nemesis) record(t history.Type, f history.Func, name string, err error) {
	if n.rec == nil {
		return
	}
	op := history.Op{Process: NemesisProcess, Type: t, F: f}
	if ref, ok := n.Ref(name); ok {
		op.Fault = &ref
	} else {
		op.Fault = &history.Fault{Name: name, Class: history.ClassOther}
	}
	if err != nil {
		op.Error = err.Error()
	}
	n.rec.Record(op)
}

func (n *Nemesis) lookup(name string) (Fault, error) {
	f, ok := n.Fault(name)
	if !ok {
		return nil, fmt.Errorf("fault %q is not registered", name)
	}
	return f, nil
}

// Start injects the fault registered under name and records the window's
// start. A failed injection is recorded as info and the fault counts as
// possibly active, so HealAll still heals it.
func (n *Nemesis) Start(ctx context.Context, name string) error {
	f, err := n.lookup(name)
	if err != nil {
		return err
	}
	n.record(history.Invoke, history.FaultStart, name, nil)
	n.mu.Lock()
	n.open[name] = true
	n.mu.Unlock()
	if err := f.Inject(ctx); err != nil {
		n.record(history.Info, history.FaultStart, name, err)
		return fmt.Errorf("starting fault %q: %w", name, err)
	}
	n.record(history.OK, history.FaultStart, name, nil)
	return nil
}

// Stop heals the fault registered under name and records the window's end.
// Stopping a fault that is not open heals it silently (a no-op for a fault
// that is not active) and records nothing.
func (n *Nemesis) Stop(ctx context.Context, name string) error {
	f, err := n.lookup(name)
	if err != nil {
		return err
	}
	n.mu.Lock()
	open := n.open[name]
	n.mu.Unlock()
	if !open {
		if err := f.Heal(ctx); err != nil {
			return fmt.Errorf("healing fault %q: %w", name, err)
		}
		return nil
	}
	n.record(history.Invoke, history.FaultStop, name, nil)
	if err := f.Heal(ctx); err != nil {
		n.record(history.Info, history.FaultStop, name, err)
		return fmt.Errorf("stopping fault %q: %w", name, err)
	}
	n.mu.Lock()
	delete(n.open, name)
	n.mu.Unlock()
	n.record(history.OK, history.FaultStop, name, nil)
	return nil
}

// Open returns the names of the faults whose window is open, sorted.
func (n *Nemesis) Open() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []string
	for name := range n.open {
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}

// HealAll heals every registered fault, last registered first: open
// windows are stopped and recorded, other faults are healed silently (a
// no-op unless they were injected behind the nemesis's back). It tries
// every fault and returns the joined errors; calling it again retries what
// failed and is otherwise a no-op.
func (n *Nemesis) HealAll(ctx context.Context) error {
	faults := n.Faults()
	var errs []error
	for i := len(faults) - 1; i >= 0; i-- {
		if err := n.Stop(ctx, faults[i].Name()); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// HealTimeout bounds the heals Run performs after its context ended.
const HealTimeout = time.Minute

// Run executes steps in real time from now: each step's fault starts At
// after the call and stops Duration later. Steps run one action at a time,
// in time order (a stop before a start at the same instant). A failed
// injection or heal is recorded and the schedule goes on. When ctx ends,
// or the schedule is over, Run heals every fault it started that is still
// open (with a fresh deadline of HealTimeout) and returns the joined
// errors, ctx's error among them if it ended first.
func (n *Nemesis) Run(ctx context.Context, steps []Step) error {
	for _, s := range steps {
		if _, err := n.lookup(s.Fault); err != nil {
			return fmt.Errorf("running fault schedule: %w", err)
		}
	}
	type action struct {
		at    time.Duration
		start bool
		name  string
	}
	var acts []action
	for _, s := range steps {
		acts = append(acts, action{s.At, true, s.Fault}, action{s.At + s.Duration, false, s.Fault})
	}
	sort.SliceStable(acts, func(i, j int) bool {
		if acts[i].at != acts[j].at {
			return acts[i].at < acts[j].at
		}
		return !acts[i].start && acts[j].start
	})
	began := time.Now()
	started := map[string]bool{}
	var errs []error
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
loop:
	for _, a := range acts {
		if wait := time.Until(began.Add(a.at)); wait > 0 {
			timer.Reset(wait)
			select {
			case <-ctx.Done():
				errs = append(errs, ctx.Err())
				break loop
			case <-timer.C:
			}
		} else if ctx.Err() != nil {
			errs = append(errs, ctx.Err())
			break
		}
		if a.start {
			started[a.name] = true
			if err := n.Start(ctx, a.name); err != nil {
				errs = append(errs, err)
			}
		} else if err := n.Stop(ctx, a.name); err != nil {
			errs = append(errs, err)
		}
	}
	hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), HealTimeout)
	defer cancel()
	for _, name := range n.Open() {
		if !started[name] {
			continue
		}
		if err := n.Stop(hctx, name); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
