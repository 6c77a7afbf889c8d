package inproc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outboxlab/outboxlab/contract"
	"github.com/outboxlab/outboxlab/relay"
)

// Errors of failpoint actions.
var (
	// ErrInjected is wrapped by the error an "error" action returns.
	ErrInjected = errors.New("injected failpoint error")
	// ErrInjectedPanic is wrapped by the value a "panic" action panics
	// with.
	ErrInjectedPanic = errors.New("injected failpoint panic")
	// ErrKilled is returned by a "kill" action when the kill function
	// returned instead of ending the process (a test's kill function).
	ErrKilled = errors.New("process killed at failpoint")
)

// action is what one failpoint term does when it fires.
type action int

const (
	actOff action = iota
	actKill
	actPanic
	actError
	actSleep
	actPause
)

// term is "N*action": the action for the next N passes (N == 0: forever).
type term struct {
	count int
	act   action
	sleep time.Duration
}

func (t term) String() string {
	var s string
	switch t.act {
	case actOff:
		s = "off"
	case actKill:
		s = "kill"
	case actPanic:
		s = "panic"
	case actError:
		s = "error"
	case actSleep:
		s = "sleep(" + t.sleep.String() + ")"
	case actPause:
		s = "pause"
	}
	if t.count > 0 {
		s = strconv.Itoa(t.count) + "*" + s
	}
	return s
}

// program is the parsed terms of one failpoint and where it is in them.
type program struct {
	terms []term
	idx   int // current term
	used  int // passes spent on the current term
}

// next advances the program by one pass and returns the action that
// applies; once every counted term is spent the failpoint is off.
func (p *program) next() term {
	for p.idx < len(p.terms) {
		t := p.terms[p.idx]
		if t.count == 0 {
			return t
		}
		if p.used < t.count {
			p.used++
			return t
		}
		p.idx++
		p.used = 0
	}
	return term{act: actOff}
}

func (p *program) String() string {
	parts := make([]string, len(p.terms))
	for i, t := range p.terms {
		parts[i] = t.String()
	}
	return strings.Join(parts, "->")
}

// point is one named failpoint.
type point struct {
	mu     sync.Mutex
	prog   atomic.Pointer[program]
	gate   chan struct{} // closed to release the callers a pause holds
	passes atomic.Int64
	hits   atomic.Int64
}

// Failpoints is a set of named failpoints, each programmed with a sequence
// of count-based terms (see ParseFailpoints). It implements
// relay.Failpoints. A nil *Failpoints, or one with nothing programmed,
// costs one comparison per Inject; a failpoint that is not programmed
// costs a map lookup and an atomic load, never a lock. Failpoints are safe
// for concurrent use.
type Failpoints struct {
	armed  atomic.Int32
	points map[string]*point
	names  []string
	kill   atomic.Pointer[func()]
}

var _ relay.Failpoints = (*Failpoints)(nil)

// NewFailpoints returns failpoints named names (relay.FailpointNames when
// none are given), none of them programmed.
func NewFailpoints(names ...string) *Failpoints {
	if len(names) == 0 {
		names = relay.FailpointNames
	}
	f := &Failpoints{points: make(map[string]*point, len(names))}
	for _, n := range names {
		if _, dup := f.points[n]; dup {
			continue
		}
		f.points[n] = &point{gate: make(chan struct{})}
		f.names = append(f.names, n)
	}
	return f
}

// ParseFailpoints parses a spec for the relay's failpoints
// (relay.FailpointNames). The grammar:
//
//	spec   = [entry] {";" entry}
//	entry  = name "=" terms
//	terms  = term {"->" term}
//	term   = [count "*"] action
//	action = "off" | "kill" | "panic" | "error" | "pause" | "sleep(" duration ")"
//
// A term with a count applies to that many passes through its failpoint,
// then the next term takes over; a term without a count applies to every
// pass from then on, so only the last term may lack one. Once every term
// is spent the failpoint is off. For example
// "after-confirm-before-mark=3*off->kill;after-claim=error" lets three
// passes through after-confirm-before-mark, kills the process on the
// fourth, and fails every tick right after its claim.
//
// Actions: off does nothing; kill ends the process at once with SIGKILL
// (no deferred function runs); panic panics with an error wrapping
// ErrInjectedPanic; error returns an error wrapping ErrInjected; sleep(d)
// sleeps d (a Go duration) or until the context ends; pause blocks until
// Release or Clear is called for the failpoint, or the context ends.
// Blank entries and spaces around names and terms are ignored; an empty
// spec programs nothing.
func ParseFailpoints(spec string) (*Failpoints, error) {
	f := NewFailpoints()
	if err := f.SetSpec(spec); err != nil {
		return nil, err
	}
	return f, nil
}

// FailpointsFromEnv parses the spec in contract.EnvFailpoints; it returns nil (no
// failpoints, zero cost) when the variable is unset or empty.
func FailpointsFromEnv() (*Failpoints, error) {
	spec := strings.TrimSpace(os.Getenv(contract.EnvFailpoints))
	if spec == "" {
		return nil, nil
	}
	f, err := ParseFailpoints(spec)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", contract.EnvFailpoints, err)
	}
	return f, nil
}

// SetSpec programs every failpoint named in spec (grammar of
// ParseFailpoints), leaving the others as they are. Nothing is programmed
// when spec has an error.
func (f *Failpoints) SetSpec(spec string) error {
	progs := map[string]*program{}
	var order []string
	for _, entry := range strings.Split(spec, ";") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		name, terms, ok := strings.Cut(entry, "=")
		if !ok {
			return fmt.Errorf("failpoint entry %q: want name=terms", entry)
		}
		name = strings.TrimSpace(name)
		if _, known := f.points[name]; !known {
			return fmt.Errorf("failpoint entry %q: unknown failpoint %q (known: %s)", entry, name, strings.Join(f.names, ", "))
		}
		if _, dup := progs[name]; dup {
			return fmt.Errorf("failpoint entry %q: failpoint %q is programmed twice", entry, name)
		}
		p, err := parseTerms(terms)
		if err != nil {
			return fmt.Errorf("failpoint %s: %w", name, err)
		}
		progs[name] = p
		order = append(order, name)
	}
	for _, name := range order {
		f.install(name, progs[name])
	}
	return nil
}

// parseTerms parses "term->term->...".
func parseTerms(s string) (*program, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, errors.New("no terms")
	}
	parts := strings.Split(s, "->")
	p := &program{terms: make([]term, 0, len(parts))}
	for i, raw := range parts {
		t, err := parseTerm(strings.TrimSpace(raw))
		if err != nil {
			return nil, fmt.Errorf("term %q: %w", strings.TrimSpace(raw), err)
		}
		if t.count == 0 && i < len(parts)-1 {
			return nil, fmt.Errorf("term %q has no count, so the terms after it could never run: write N*%s", strings.TrimSpace(raw), t)
		}
		p.terms = append(p.terms, t)
	}
	return p, nil
}

func parseTerm(s string) (term, error) {
	var t term
	if s == "" {
		return t, errors.New("empty term")
	}
	if i := strings.IndexByte(s, '*'); i >= 0 && !strings.Contains(s[:i], "(") {
		n, err := strconv.Atoi(strings.TrimSpace(s[:i]))
		if err != nil || n < 1 {
			return t, fmt.Errorf("count %q is not a positive integer", s[:i])
		}
		t.count = n
		s = strings.TrimSpace(s[i+1:])
	}
	switch {
	case s == "off":
		t.act = actOff
	case s == "kill":
		t.act = actKill
	case s == "panic":
		t.act = actPanic
	case s == "error":
		t.act = actError
	case s == "pause":
		t.act = actPause
	case strings.HasPrefix(s, "sleep(") && strings.HasSuffix(s, ")"):
		arg := strings.TrimSpace(s[len("sleep(") : len(s)-1])
		d, err := time.ParseDuration(arg)
		if err != nil {
			return t, fmt.Errorf("sleep duration %q: %w", arg, err)
		}
		if d <= 0 {
			return t, fmt.Errorf("sleep duration %q must be positive", arg)
		}
		t.act, t.sleep = actSleep, d
	default:
		return t, fmt.Errorf("unknown action %q (want off, kill, panic, error, pause or sleep(duration))", s)
	}
	return t, nil
}

// Set programs one failpoint with terms ("3*off->kill"), replacing what it
// had and starting its sequence over.
func (f *Failpoints) Set(name, terms string) error {
	p, err := f.parse(name, terms)
	if err != nil {
		return err
	}
	f.install(name, p)
	return nil
}

// Check reports the error Set(name, terms) would return, programming
// nothing: a fault that programs the failpoint later checks its terms when
// it is built.
func (f *Failpoints) Check(name, terms string) error {
	_, err := f.parse(name, terms)
	return err
}

// parse parses terms for the failpoint name.
func (f *Failpoints) parse(name, terms string) (*program, error) {
	if _, ok := f.points[name]; !ok {
		return nil, fmt.Errorf("failpoint %q is unknown (known: %s)", name, strings.Join(f.names, ", "))
	}
	p, err := parseTerms(terms)
	if err != nil {
		return nil, fmt.Errorf("failpoint %s: %w", name, err)
	}
	return p, nil
}

func (f *Failpoints) install(name string, p *program) {
	pt := f.points[name]
	pt.mu.Lock()
	defer pt.mu.Unlock()
	if pt.prog.Swap(p) == nil {
		f.armed.Add(1)
	}
}

// Clear turns a failpoint off and releases the callers its pause holds.
func (f *Failpoints) Clear(name string) {
	pt := f.points[name]
	if pt == nil {
		return
	}
	pt.mu.Lock()
	defer pt.mu.Unlock()
	if pt.prog.Swap(nil) != nil {
		f.armed.Add(-1)
	}
	close(pt.gate)
	pt.gate = make(chan struct{})
}

// Release lets go every caller a pause action of the failpoint holds now.
func (f *Failpoints) Release(name string) {
	pt := f.points[name]
	if pt == nil {
		return
	}
	pt.mu.Lock()
	defer pt.mu.Unlock()
	close(pt.gate)
	pt.gate = make(chan struct{})
}

// SetKill replaces the function the kill action calls (by default a
// SIGKILL to the own process). A test sets one that records the kill; when
// it returns, Inject returns an error wrapping ErrKilled. nil restores the
// default.
func (f *Failpoints) SetKill(kill func()) {
	if kill == nil {
		f.kill.Store(nil)
		return
	}
	f.kill.Store(&kill)
}

// Inject passes the failpoint name: it does what the failpoint's current
// term says and advances its sequence. It implements relay.Failpoints.
func (f *Failpoints) Inject(ctx context.Context, name string) error {
	if f == nil || f.armed.Load() == 0 {
		return nil
	}
	pt := f.points[name]
	if pt == nil || pt.prog.Load() == nil {
		return nil
	}
	pt.mu.Lock()
	p := pt.prog.Load()
	if p == nil {
		pt.mu.Unlock()
		return nil
	}
	t := p.next()
	gate := pt.gate
	pt.passes.Add(1)
	if t.act != actOff {
		pt.hits.Add(1)
	}
	pt.mu.Unlock()

	switch t.act {
	case actKill:
		if k := f.kill.Load(); k != nil {
			(*k)()
		} else {
			killProcess()
		}
		return fmt.Errorf("failpoint %s: %w", name, ErrKilled)
	case actPanic:
		panic(fmt.Errorf("failpoint %s: %w", name, ErrInjectedPanic))
	case actError:
		return fmt.Errorf("failpoint %s: %w", name, ErrInjected)
	case actSleep:
		tm := time.NewTimer(t.sleep)
		defer tm.Stop()
		select {
		case <-tm.C:
			return nil
		case <-ctx.Done():
			return fmt.Errorf("failpoint %s: sleep cut short: %w", name, ctx.Err())
		}
	case actPause:
		select {
		case <-gate:
			return nil
		case <-ctx.Done():
			return fmt.Errorf("failpoint %s: pause cut short: %w", name, ctx.Err())
		}
	}
	return nil
}

// Hits counts how many times the failpoint name fired an action other
// than off.
func (f *Failpoints) Hits(name string) int64 {
	if f == nil || f.points[name] == nil {
		return 0
	}
	return f.points[name].hits.Load()
}

// Passes counts how many times Inject passed the failpoint name while it
// was programmed (off terms included).
func (f *Failpoints) Passes(name string) int64 {
	if f == nil || f.points[name] == nil {
		return 0
	}
	return f.points[name].passes.Load()
}

// TotalHits sums Hits over every failpoint.
func (f *Failpoints) TotalHits() int64 {
	if f == nil {
		return 0
	}
	var n int64
	for _, pt := range f.points {
		n += pt.hits.Load()
	}
	return n
}

// TotalPasses sums Passes over every failpoint.
func (f *Failpoints) TotalPasses() int64 {
	if f == nil {
		return 0
	}
	var n int64
	for _, pt := range f.points {
		n += pt.passes.Load()
	}
	return n
}

// Names returns the failpoint names, in the order they were declared.
func (f *Failpoints) Names() []string {
	if f == nil {
		return nil
	}
	return slices.Clone(f.names)
}

// String renders the programmed failpoints as a spec ParseFailpoints
// accepts, in declaration order; the sequences start over when parsed.
func (f *Failpoints) String() string {
	if f == nil {
		return ""
	}
	var entries []string
	for _, name := range f.names {
		if p := f.points[name].prog.Load(); p != nil {
			entries = append(entries, name+"="+p.String())
		}
	}
	return strings.Join(entries, ";")
}
