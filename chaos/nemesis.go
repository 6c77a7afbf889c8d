package chaos

import (
	"cmp"
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

// HealTimeout is the default bound of one injection or heal that Run
// performs.
const HealTimeout = time.Minute

// RunOptions tunes Nemesis.Run.
type RunOptions struct {
	// Lanes maps a fault's name to its lane: the steps of one lane run one
	// after another, lanes side by side. By default each fault is its own
	// lane.
	Lanes map[string]string
	// ActionTimeout bounds each injection and each heal. They run on a
	// context detached from the end of Run's, so that a fault that was
	// started is always healed. Default HealTimeout.
	ActionTimeout time.Duration
}

// Run plays steps in real time from now. In each lane, steps run in the
// order of their At: a step starts At after the call (or when the step
// before it in its lane ended, if that is later) and lasts its Duration
// from the moment its injection returned, so that a slow injection (a
// container that takes seconds to die) never cuts a fault short. When ctx
// ends, the faults that are on are healed at once and no further step
// starts. Run returns the joined injection and heal errors, and ctx's
// error if it ended before the schedule did.
func (n *Nemesis) Run(ctx context.Context, steps []Step, opts RunOptions) error {
	for _, s := range steps {
		if _, err := n.lookup(s.Fault); err != nil {
			return fmt.Errorf("running fault schedule: %w", err)
		}
	}
	timeout := opts.ActionTimeout
	if timeout <= 0 {
		timeout = HealTimeout
	}
	lanes := map[string][]Step{}
	var order []string
	for _, s := range steps {
		lane := s.Fault
		if l, ok := opts.Lanes[s.Fault]; ok {
			lane = l
		}
		if _, ok := lanes[lane]; !ok {
			order = append(order, lane)
		}
		lanes[lane] = append(lanes[lane], s)
	}
	began := time.Now()
	act := func(do func(context.Context, string) error, name string) error {
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
		defer cancel()
		return do(actx, name)
	}
	errs := make([]error, len(order))
	var wg sync.WaitGroup
	for i, lane := range order {
		ss := lanes[lane]
		slices.SortStableFunc(ss, func(a, b Step) int { return cmp.Compare(a.At, b.At) })
		wg.Go(func() {
			var laneErrs []error
			for _, s := range ss {
				if !Sleep(ctx, time.Until(began.Add(s.At))) {
					break
				}
				if err := act(n.Start, s.Fault); err != nil {
					laneErrs = append(laneErrs, err)
				}
				Sleep(ctx, s.Duration)
				if err := act(n.Stop, s.Fault); err != nil {
					laneErrs = append(laneErrs, err)
				}
			}
			errs[i] = errors.Join(laneErrs...)
		})
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Sleep waits d, or until ctx ends; it reports whether ctx is still live.
func Sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
