// Package chaos holds the faults of the harness and nothing else: toxiproxy
// toxics on named links, container kills, stops, pauses and restarts, clock
// offsets, and failpoints at named points of the relay. Every fault has an
// injector and a heal and counts its hits, because a run whose fault never
// fired did not test it. Every fault declares its class and the processes
// it targets, which the history records with it. A Nemesis injects and
// heals faults on behalf of a run, plays a schedule of Steps in lanes, and
// records each window in the history; Phases runs the safety, liveness
// and check phases of a run and records them.
package chaos

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/outboxlab/outboxlab/history"
)

// Fault is one injectable failure with its heal.
type Fault interface {
	// Name is stable and unique within a run, e.g. "relay->broker down": it
	// pairs the fault-start and fault-stop ops of a window in the history,
	// and people read it. Nothing parses it.
	Name() string
	// Class says what part of the system the fault hits, for checkers that
	// attribute anomalies.
	Class() history.FaultClass
	// Targets names the history processes the fault affects; none means
	// every process.
	Targets() []string
	// Kind says what the fault does, independent of its target: "down",
	// "latency", "kill", "pause", "clock-skew", "failpoint", ... Schedules
	// filter on it.
	Kind() string
	// Inject starts the fault. Injecting a fault that is already active
	// is allowed and counts as another hit only if it fired again.
	Inject(ctx context.Context) error
	// Heal ends the fault. Healing a fault that is not active does
	// nothing and returns nil, so heals are safe to repeat.
	Heal(ctx context.Context) error
	// Hits counts how many times the fault actually fired.
	Hits() int64
}

// Ref returns the identity of f as the history records it.
func Ref(f Fault) history.Fault {
	return history.Fault{Name: f.Name(), Kind: f.Kind(), Class: f.Class(), Targets: slices.Clone(f.Targets())}
}

// Kind values of the faults in this package.
const (
	KindDown      = "down"
	KindTimeout   = "timeout"
	KindLatency   = "latency"
	KindResetPeer = "reset_peer"
	KindBandwidth = "bandwidth"
	KindSlicer    = "slicer"
	KindKill      = "kill"
	KindStop      = "stop"
	KindPause     = "pause"
	KindRestart   = "restart"
	KindClockSkew = "clock-skew"
	KindFailpoint = "failpoint"
)

// ErrEmptyName is returned for a fault built without a name.
var ErrEmptyName = errors.New("fault has no name")

// marks is the hit counter and activity flag shared by the faults of this
// package. A fault is active from the moment its injection is attempted
// (an injection that failed may still have half-applied) until a heal
// succeeds.
type marks struct {
	hits    atomic.Int64
	active  atomic.Bool
	targets []string
}

// Targets returns the processes the fault affects; none means every
// process.
func (m *marks) Targets() []string { return m.targets }

// Hits counts how many times the fault fired.
func (m *marks) Hits() int64 { return m.hits.Load() }

// Active reports whether the fault may be in effect: injected, or attempted,
// and not healed since.
func (m *marks) Active() bool { return m.active.Load() }

// FuncFault is a Fault made of two functions, for faults that have no type
// of their own (an in-process producer crash, a custom script).
type FuncFault struct {
	marks
	name, kind   string
	class        history.FaultClass
	mu           sync.Mutex
	inject, heal func(ctx context.Context) error
}

// NewFuncFault returns a fault that calls inject and heal. A nil heal means
// the fault needs no heal (a one-shot action). Each successful inject is a
// hit.
func NewFuncFault(name string, class history.FaultClass, kind string, inject, heal func(ctx context.Context) error) *FuncFault {
	return &FuncFault{name: name, class: class, kind: kind, inject: inject, heal: heal}
}

// WithTargets sets the processes the fault affects and returns f.
func (f *FuncFault) WithTargets(processes ...string) *FuncFault { f.targets = processes; return f }

// Name returns the fault's name.
func (f *FuncFault) Name() string { return f.name }

// Class returns the fault's class.
func (f *FuncFault) Class() history.FaultClass { return f.class }

// Kind returns the fault's kind.
func (f *FuncFault) Kind() string { return f.kind }

// Inject calls the inject function and counts a hit when it succeeds.
func (f *FuncFault) Inject(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.inject == nil {
		return fmt.Errorf("injecting %s: no inject function", f.name)
	}
	f.active.Store(f.heal != nil)
	if err := f.inject(ctx); err != nil {
		return fmt.Errorf("injecting %s: %w", f.name, err)
	}
	f.hits.Add(1)
	return nil
}

// Heal calls the heal function if the fault is active.
func (f *FuncFault) Heal(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.active.Load() || f.heal == nil {
		return nil
	}
	if err := f.heal(ctx); err != nil {
		return fmt.Errorf("healing %s: %w", f.name, err)
	}
	f.active.Store(false)
	return nil
}

// ErrCouldNotBite is wrapped by the error of an injection whose fault
// could not act on what it claims to test: a pause that found no relay
// holding claims, a skew too small to matter. A run whose fault could not
// bite is inconclusive: its own verdict, never a pass and never a failure
// of the system under test.
var ErrCouldNotBite = errors.New("fault could not bite")

// NoBite is the error of an injection that could not bite: Fault names the
// fault and Why says what it needed and did not find.
type NoBite struct {
	Fault string
	Why   string
}

func (e *NoBite) Error() string { return e.Fault + " could not bite: " + e.Why }

// Is makes a NoBite match ErrCouldNotBite.
func (e *NoBite) Is(target error) bool { return target == ErrCouldNotBite }

// SplitNoBite separates, in an error tree (errors.Join and %w), the
// injections that could not bite from every other error.
func SplitNoBite(err error) (noBite []*NoBite, others []error) {
	var walk func(error)
	walk = func(e error) {
		if e == nil {
			return
		}
		var nb *NoBite
		if errors.As(e, &nb) {
			if multi, ok := e.(interface{ Unwrap() []error }); ok {
				for _, c := range multi.Unwrap() {
					walk(c)
				}
				return
			}
			noBite = append(noBite, nb)
			return
		}
		others = append(others, e)
	}
	walk(err)
	return noBite, others
}
