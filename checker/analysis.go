package checker

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/outboxlab/outboxlab/history"
)

// commitStatus is what the commits that staged an event say about it.
type commitStatus int

const (
	// notStaged: no Commit invoke names the event.
	notStaged commitStatus = iota
	// committed: some commit of it completed ok.
	committed
	// rolledBack: every commit of it definitely failed.
	rolledBack
	// indeterminate: no commit completed ok, and some completed with info,
	// or never completed.
	indeterminate
)

func (s commitStatus) String() string {
	return [...]string{"never staged", "committed", "rolled back", "indeterminate"}[s]
}

// event gathers everything the history and the state say about one event.
type event struct {
	id    string
	first int64 // index of the first record naming it; MaxInt64 if none

	commits       []history.Pair
	status        commitStatus
	commitInvoke  int64 // first Commit invoke, -1 if none
	commitOK      int64 // first Commit ok, -1 if none
	causes        []string
	publishInvoke int64          // first Publish invoke, -1 if none
	publishOK     []history.Op   // Publish ok
	unconfirmed   []history.Pair // Publish pairs that ended fail, info or open
	deliverOK     []history.Op   // Deliver records that are not fail/invoke
	applyInvoke   int64          // first Apply invoke (or standalone ok), -1 if none
	applyOK       []history.Op   // Apply ok, duplicates included
	applyFailed   []history.Op   // Apply fail or info completions
	applies       []history.Pair // every Apply, in the order they opened
	claims        []history.Op   // Claim ok naming it
	marks         []history.Op   // Mark ok naming it
	markTries     []history.Pair // Mark operations that may have marked it
	retries       []history.Op   // Retry ok
	retryUnknown  []int64        // invokes of Retry operations whose outcome is unknown
	parks         []history.Op   // Park ok, and Retry ok flagged parked
	sweeps        []history.Op   // Sweep ok naming it

	row     *RowState
	effects int
	// effectsKnown: the state has the effects table (State.Effects not
	// nil), so effects is what it says of this event.
	effectsKnown bool
	queued       bool
	poison       bool
}

// applied reports an end-to-end delivery. An arrival is an effect: when
// the run reads the consumers' effects table, the event's effect must be
// in it; otherwise a consumer must have applied it with its effect (an
// Apply ok the inbox did not absorb as a duplicate). A delivery absorbed
// as a duplicate of something never applied (a consumer whose inbox key
// is wrong) is no arrival.
func (e *event) applied() bool {
	if e.effectsKnown {
		return e.effects > 0
	}
	for i, p := range e.applies {
		if p.Done == nil || p.Done.Type != history.OK {
			continue
		}
		if !p.Done.Duplicate {
			return true
		}
		// Absorbed as a duplicate: an arrival only if an earlier apply
		// of this event may have taken effect (its consumer crashed or
		// lost the reply after the commit).
		for _, q := range e.applies[:i] {
			if q.Outcome() != history.Fail {
				return true
			}
		}
	}
	return false
}

// delivered reports a delivery by the run's definition.
func (e *event) delivered(brokerOnly bool) bool {
	if e.applied() {
		return true
	}
	return brokerOnly && (len(e.publishOK) > 0 || len(e.deliverOK) > 0 || e.queued)
}

// observed reports any sign that the event exists downstream of its
// commit: a row, a claim, a mark, a publish, a delivery, an effect.
func (e *event) observed() bool {
	return e.row != nil || len(e.claims) > 0 || len(e.marks) > 0 || len(e.publishOK) > 0 ||
		len(e.deliverOK) > 0 || e.applied() || e.queued
}

// proven reports that the event's transaction committed: a commit ok, or an
// indeterminate commit whose event showed up.
func (e *event) proven() bool {
	return e.status == committed || (e.status == indeterminate && e.observed())
}

// parked reports that the event's row ended faulted, or a relay said it
// faulted it.
func (e *event) parked() bool {
	return (e.row != nil && e.row.FaultedAt != nil) || len(e.parks) > 0
}

// fate describes the event in a few words, for reasons.
func (e *event) fate() string {
	var parts []string
	parts = append(parts, e.status.String())
	switch {
	case e.row == nil:
		parts = append(parts, "row absent")
	case e.row.FaultedAt != nil:
		parts = append(parts, fmt.Sprintf("row faulted (attempts %d)", e.row.Attempts))
	case e.row.ProcessedAt != nil:
		parts = append(parts, "row processed")
	default:
		parts = append(parts, fmt.Sprintf("row pending (attempts %d)", e.row.Attempts))
	}
	parts = append(parts, fmt.Sprintf("published %d, delivered %d, applied %d, effects %d",
		len(e.publishOK), len(e.deliverOK), len(e.applyOK), e.effects))
	if e.queued {
		parts = append(parts, "still queued")
	}
	return strings.Join(parts, "; ")
}

// window is one fault's active span, by index; end is MaxInt64 while it
// never closed.
type window struct {
	name       string
	fault      history.Fault
	start, end int64
	// took is the index by which the fault had taken effect: its start's
	// ok (start when the start was recorded done alone, or never done).
	took int64
}

// analysis indexes a history and a state once for every checker.
type analysis struct {
	raw    []history.Op // as given
	ops    []history.Op // sorted by Index
	pairs  []history.Pair
	state  State
	cfg    Config
	events map[string]*event
	ids    []string // every id, by first appearance

	windows   []window
	crashes   []history.Op // Crash and Restart records
	livePhase *history.Op  // first Phase "liveness"
	hasMarks  bool         // some relay recorded a Mark
}

func analyze(h []history.Op, s State, cfg Config) *analysis {
	a := &analysis{
		raw:    h,
		ops:    slices.Clone(h),
		state:  s,
		cfg:    cfg.withDefaults(),
		events: make(map[string]*event),
	}
	slices.SortStableFunc(a.ops, func(x, y history.Op) int {
		switch {
		case x.Index < y.Index:
			return -1
		case x.Index > y.Index:
			return 1
		}
		return 0
	})
	a.pairs = history.Pairs(a.ops)

	for i := range a.ops {
		op := &a.ops[i]
		for _, id := range op.Events {
			a.ev(id, op.Index)
		}
		switch op.F {
		case history.Crash, history.Restart:
			a.crashes = append(a.crashes, *op)
		case history.Phase:
			if op.Phase == history.PhaseLiveness && a.livePhase == nil {
				a.livePhase = op
			}
		}
	}
	a.windows = faultWindows(a.pairs)

	for _, p := range a.pairs {
		a.indexPair(p)
	}
	for id, row := range s.Outbox {
		r := row
		a.ev(id, math.MaxInt64).row = &r
	}
	for id, n := range s.Effects {
		if n != 0 {
			a.ev(id, math.MaxInt64).effects = n
		}
	}
	if s.Effects != nil {
		for _, e := range a.events {
			e.effectsKnown = true
		}
	}
	for _, id := range s.Queued {
		a.ev(id, math.MaxInt64).queued = true
	}
	for id, p := range a.cfg.Poison {
		if p {
			a.ev(id, math.MaxInt64).poison = true
		}
	}
	for _, e := range a.events {
		e.status = statusOf(e.commits)
	}
	a.ids = make([]string, 0, len(a.events))
	for id := range a.events {
		a.ids = append(a.ids, id)
	}
	slices.SortFunc(a.ids, func(x, y string) int {
		fx, fy := a.events[x].first, a.events[y].first
		switch {
		case fx < fy:
			return -1
		case fx > fy:
			return 1
		}
		return strings.Compare(x, y)
	})
	return a
}

// ev returns the event of id, creating it; at is the index of a record that
// names it.
func (a *analysis) ev(id string, at int64) *event {
	e, ok := a.events[id]
	if !ok {
		e = &event{id: id, first: math.MaxInt64, commitInvoke: -1, commitOK: -1, publishInvoke: -1, applyInvoke: -1}
		a.events[id] = e
	}
	if at < e.first {
		e.first = at
	}
	return e
}

func (a *analysis) firstIndex(id string) int64 {
	if e, ok := a.events[id]; ok {
		return e.first
	}
	return math.MaxInt64
}

func setFirst(dst *int64, at int64) {
	if *dst < 0 || at < *dst {
		*dst = at
	}
}

// indexPair files one operation under the events it names.
func (a *analysis) indexPair(p history.Pair) {
	start := p.Start()
	done := p.Done
	ok := done != nil && done.Type == history.OK
	doneEvents := func() []string {
		if done == nil {
			return nil
		}
		if len(done.Events) > 0 || p.Invoke == nil {
			return done.Events
		}
		return p.Invoke.Events
	}
	switch start.F {
	case history.Commit:
		if p.Invoke == nil {
			return // a completion without its invoke says nothing reliable
		}
		for _, id := range p.Invoke.Events {
			e := a.ev(id, p.Invoke.Index)
			e.commits = append(e.commits, p)
			setFirst(&e.commitInvoke, p.Invoke.Index)
			if ok {
				setFirst(&e.commitOK, done.Index)
			}
			e.causes = append(e.causes, p.Invoke.CausedBy...)
		}
	case history.Publish:
		if p.Invoke != nil {
			for _, id := range p.Invoke.Events {
				setFirst(&a.ev(id, p.Invoke.Index).publishInvoke, p.Invoke.Index)
			}
		}
		if ok {
			for _, id := range doneEvents() {
				e := a.ev(id, done.Index)
				e.publishOK = append(e.publishOK, *done)
				if p.Invoke == nil {
					setFirst(&e.publishInvoke, done.Index)
				}
			}
		} else if p.Invoke != nil {
			for _, id := range p.Invoke.Events {
				e := a.ev(id, p.Invoke.Index)
				e.unconfirmed = append(e.unconfirmed, p)
			}
		}
	case history.Deliver:
		if done == nil || done.Type == history.Fail {
			return
		}
		for _, id := range doneEvents() {
			e := a.ev(id, done.Index)
			e.deliverOK = append(e.deliverOK, *done)
		}
	case history.Apply:
		for _, id := range p.Events() {
			e := a.ev(id, start.Index)
			setFirst(&e.applyInvoke, start.Index)
			e.applies = append(e.applies, p)
		}
		switch {
		case ok:
			for _, id := range doneEvents() {
				e := a.ev(id, done.Index)
				e.applyOK = append(e.applyOK, *done)
			}
		case done != nil:
			for _, id := range doneEvents() {
				e := a.ev(id, done.Index)
				e.applyFailed = append(e.applyFailed, *done)
			}
		}
	case history.Claim:
		if ok {
			for _, id := range done.Events {
				e := a.ev(id, done.Index)
				e.claims = append(e.claims, *done)
			}
		}
	case history.Mark:
		a.hasMarks = true
		if ok {
			for _, id := range done.Events {
				e := a.ev(id, done.Index)
				e.marks = append(e.marks, *done)
				e.markTries = append(e.markTries, p)
			}
		} else if p.Invoke != nil && p.Outcome() != history.Fail {
			for _, id := range p.Invoke.Events {
				e := a.ev(id, p.Invoke.Index)
				e.markTries = append(e.markTries, p)
			}
		}
	case history.Retry:
		if !ok && p.Invoke != nil && p.Outcome() != history.Fail {
			for _, id := range p.Invoke.Events {
				e := a.ev(id, p.Invoke.Index)
				e.retryUnknown = append(e.retryUnknown, p.Invoke.Index)
			}
		}
		if ok {
			for _, id := range doneEvents() {
				e := a.ev(id, done.Index)
				e.retries = append(e.retries, *done)
				if done.Parked {
					e.parks = append(e.parks, *done)
				}
			}
		}
	case history.Park:
		if ok {
			for _, id := range doneEvents() {
				e := a.ev(id, done.Index)
				e.parks = append(e.parks, *done)
			}
		}
	case history.Sweep:
		if ok {
			for _, id := range done.Events {
				e := a.ev(id, done.Index)
				e.sweeps = append(e.sweeps, *done)
			}
		}
	}
}

// statusOf settles an event's commit status: any ok commits it; otherwise
// any info or unfinished commit leaves it unknown; otherwise every commit
// failed. A fail after an info belongs to a later attempt and proves
// nothing about the earlier one.
func statusOf(commits []history.Pair) commitStatus {
	if len(commits) == 0 {
		return notStaged
	}
	unknown := false
	for _, p := range commits {
		switch p.Outcome() {
		case history.OK:
			return committed
		case history.Fail:
		default:
			unknown = true
		}
	}
	if unknown {
		return indeterminate
	}
	return rolledBack
}

// faultWindows finds every fault's active spans from the paired history. A
// window opens at a FaultStart: its invoke, or the record itself when it
// stands alone (unless that record is a fail). It closes at a FaultStop
// that healed the fault: the ok completing a FaultStop invoke (an info
// there means the heal failed and the fault may still be on), or a FaultStop
// record standing alone that is not a fail. A FaultStart invoke that
// completes with fail closes the window it opened; one that completes with
// info (a half-applied injection) leaves it open. Windows never closed last
// to the end of the history. Starts and stops are paired by the fault's
// name; a window takes the fault's identity from its start. A fault record
// without a Fault is malformed (see WellFormed) and opens nothing.
func faultWindows(pairs []history.Pair) []window {
	type edge struct {
		at    int64
		fault history.Fault
		open  bool
		took  int64
	}
	var edges []edge
	for _, p := range pairs {
		start := p.Start()
		if start.Fault == nil {
			continue
		}
		f := *start.Fault
		switch start.F {
		case history.FaultStart:
			if p.Invoke == nil && p.Done.Type == history.Fail {
				continue
			}
			took := start.Index
			if p.Done != nil {
				took = p.Done.Index
			}
			edges = append(edges, edge{start.Index, f, true, took})
			if p.Invoke != nil && p.Done != nil && p.Done.Type == history.Fail {
				edges = append(edges, edge{p.Done.Index, f, false, 0})
			}
		case history.FaultStop:
			switch {
			case p.Invoke != nil && p.Done != nil && p.Done.Type == history.OK:
				edges = append(edges, edge{p.Done.Index, f, false, 0})
			case p.Invoke == nil && p.Done.Type != history.Fail:
				edges = append(edges, edge{p.Done.Index, f, false, 0})
			}
		}
	}
	slices.SortStableFunc(edges, func(x, y edge) int {
		switch {
		case x.at < y.at:
			return -1
		case x.at > y.at:
			return 1
		}
		return 0
	})
	var out []window
	open := map[string]int{} // name -> position in out
	for _, e := range edges {
		pos, isOpen := open[e.fault.Name]
		switch {
		case e.open && !isOpen:
			open[e.fault.Name] = len(out)
			out = append(out, window{name: e.fault.Name, fault: e.fault, start: e.at, end: math.MaxInt64, took: e.took})
		case !e.open && isOpen:
			out[pos].end = e.at
			delete(open, e.fault.Name)
		}
	}
	return out
}

// class returns the class of the fault of w; a fault recorded without a
// valid class is ClassOther, which explains nothing a class would.
func (w window) class() history.FaultClass {
	if !w.fault.Class.Valid() {
		return history.ClassOther
	}
	return w.fault.Class
}

// hits reports whether window w affects a record by process: the fault
// names it among its targets, or has none.
func (a *analysis) hits(w window, process string) bool { return w.fault.Hits(process) }

// counts sums up what the analysis knows; the checkers' own counts are
// merged in by Check.
func (a *analysis) counts() Counts {
	c := Counts{Events: len(a.events)}
	for _, id := range a.ids {
		e := a.events[id]
		switch e.status {
		case committed:
			c.Committed++
		case rolledBack:
			c.RolledBack++
		case indeterminate:
			c.Indeterminate++
			if e.observed() {
				c.Recovered++
			}
		}
		if e.delivered(a.cfg.BrokerOnly) {
			c.Delivered++
		}
		c.Publishes += len(e.publishOK)
		c.DuplicatePublishes += max(len(e.publishOK)-1, 0)
		if e.poison {
			c.Poison++
		}
		if e.parked() {
			c.Parked++
		}
	}
	for _, g := range a.deliveriesByQueue() {
		c.Deliveries += len(g.ops)
		c.DuplicateDeliveries += len(g.ops) - 1
	}
	for _, p := range a.pairs {
		if p.Invoke == nil || p.Invoke.F != history.Mark || p.Done == nil || p.Done.Type != history.OK {
			continue
		}
		c.LostLeases += len(p.Invoke.Events) - len(p.Done.Events)
	}
	return c
}

// deliveryGroup is the deliveries of one event by one queue.
type deliveryGroup struct {
	id, queue string
	ops       []history.Op
}

// deliveriesByQueue groups Deliver records by event and queue, in the order
// of the events' first appearance.
func (a *analysis) deliveriesByQueue() []deliveryGroup {
	var out []deliveryGroup
	for _, id := range a.ids {
		pos := map[string]int{}
		for _, d := range a.events[id].deliverOK {
			q := d.Queue
			i, ok := pos[q]
			if !ok {
				i = len(out)
				pos[q] = i
				out = append(out, deliveryGroup{id: id, queue: q})
			}
			out[i].ops = append(out[i].ops, d)
		}
	}
	return out
}

// FaultWindow is the span of one fault in a history, by op Index: from the
// record that opened it to the one that healed it. Healed is false for a
// fault never healed, whose End is then math.MaxInt64.
type FaultWindow struct {
	Name       string
	Fault      history.Fault
	Start, End int64
	Healed     bool
}

// FaultWindows returns the fault windows of h as the checkers read them
// (see faultWindows), for reports that draw them.
func FaultWindows(h []history.Op) []FaultWindow {
	ws := faultWindows(history.Pairs(h))
	out := make([]FaultWindow, len(ws))
	for i, w := range ws {
		out[i] = FaultWindow{Name: w.name, Fault: w.fault, Start: w.start, End: w.end, Healed: w.end != math.MaxInt64}
	}
	return out
}
