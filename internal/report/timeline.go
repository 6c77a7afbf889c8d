package report

import (
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/outboxlab/outboxlab/checker"
	"github.com/outboxlab/outboxlab/history"
)

// Mark is one step of an event's journey, as the timeline draws it.
type Mark string

// Marks, in the order an event normally goes through them.
const (
	MarkStaged      Mark = "staged"
	MarkCommitted   Mark = "committed"
	MarkRolledBack  Mark = "rolled back"
	MarkUnknown     Mark = "commit unknown"
	MarkClaimed     Mark = "claimed"
	MarkPublished   Mark = "published"
	MarkConfirmed   Mark = "confirmed"
	MarkUnconfirmed Mark = "publish failed"
	MarkMarked      Mark = "marked"
	MarkRetried     Mark = "retried"
	MarkParked      Mark = "parked"
	MarkDelivered   Mark = "delivered"
	MarkApplied     Mark = "applied"
	MarkDeduped     Mark = "deduped"
)

// Marks lists every mark in legend order.
var Marks = []Mark{MarkStaged, MarkCommitted, MarkRolledBack, MarkUnknown, MarkClaimed, MarkPublished,
	MarkConfirmed, MarkUnconfirmed, MarkMarked, MarkRetried, MarkParked, MarkDelivered, MarkApplied, MarkDeduped}

// Point is one mark on an event's row.
type Point struct {
	Mark Mark
	// At is the record's time on the timeline's axis (see Timeline).
	At time.Time
	Op history.Op
}

// EventLine is one row of the timeline: everything that happened to one
// event.
type EventLine struct {
	ID string
	// Ordinal is the event's position among all events of the history, by
	// first appearance, from 1.
	Ordinal int
	Points  []Point
	// Outcome is how its commit ended: committed, rolled back, unknown.
	Outcome Mark
	// Violations names the failed checkers that list the event, with
	// their reasons.
	Violations []Violation
}

// Violation is one failed checker's complaint about an event.
type Violation struct {
	Checker string
	Reason  string
}

// Offending reports whether a failed checker lists the event.
func (e EventLine) Offending() bool { return len(e.Violations) > 0 }

// Window is one fault's active span.
type Window struct {
	Name string
	// Class is the fault's class, as the checkers read it.
	Class       history.FaultClass
	Start, Stop time.Time
	// Healed is false when the history ends with the fault still on.
	Healed bool
}

// PhaseMark is the start of a run phase.
type PhaseMark struct {
	Name string
	At   time.Time
}

// Timeline is what the report draws of one run: a row per event (a readable
// subset when there are many), fault windows and phases on one time axis.
//
// The axis is the history's record times, anchored on the processes that
// share the harness's clock (runner, nemesis, consumers): a record of a
// process whose clock may be skewed keeps its own time only when it falls
// between the anchor records around it, and is otherwise placed between
// them by its index. A skewed relay therefore cannot drag its marks minutes
// away from the rest of the run.
type Timeline struct {
	Start, End time.Time
	Events     []EventLine
	Windows    []Window
	Phases     []PhaseMark
	// TotalEvents is the number of distinct events in the history;
	// Events holds the first Limit of them plus every offending one.
	TotalEvents int
	// Deliveries are the times of each event's first apply (or, when the
	// run has no consumer records, first delivery), for the throughput
	// chart.
	Deliveries []time.Time
	// Latencies are, per applied event, its commit-to-apply latency at its
	// apply time.
	Latencies []Latency
	// Gaps are the idle stretches (no record at all, longer than a twelfth
	// of the run) that the axis compresses to a narrow band, so that a
	// simulation whose clock jumps hours past a lease stays readable.
	Gaps []Gap
	// gapWidth is the axis width of a compressed gap.
	gapWidth time.Duration
}

// Gap is an idle stretch of the axis.
type Gap struct {
	From, To time.Time
}

// Latency is one event's time from commit to its first apply.
type Latency struct {
	At time.Time
	D  time.Duration
}

// Limits of BuildTimeline.
const (
	// DefaultEventLimit is how many events a timeline shows, offending
	// ones aside.
	DefaultEventLimit = 200
	// MaxOffendingShown bounds the offending events added beyond the
	// limit.
	MaxOffendingShown = 300
)

// anchored reports whether a process records on the harness's clock.
func anchored(process string) bool {
	return process == "runner" || process == "nemesis" || strings.HasPrefix(process, "consumer")
}

// AxisTimes returns, for each op of h, its time on the timeline's axis (see
// Timeline). h must be in Index order.
func AxisTimes(h []history.Op) []time.Time {
	out := make([]time.Time, len(h))
	var anchors []int // positions of anchor records, times made monotonic
	var last time.Time
	for i, op := range h {
		if anchored(op.Process) && !op.Time.IsZero() {
			t := op.Time
			if t.Before(last) {
				t = last
			}
			last = t
			out[i] = t
			anchors = append(anchors, i)
		}
	}
	if len(anchors) == 0 {
		for i, op := range h {
			out[i] = op.Time
		}
		return out
	}
	next := 0 // anchors[next] is the first anchor at or after i
	for i, op := range h {
		for next < len(anchors) && anchors[next] < i {
			next++
		}
		if next < len(anchors) && anchors[next] == i {
			continue
		}
		switch {
		case next == 0: // before the first anchor
			a := out[anchors[0]]
			if op.Time.IsZero() || op.Time.After(a) {
				out[i] = a
			} else {
				out[i] = op.Time
			}
		case next == len(anchors): // after the last anchor
			a := out[anchors[len(anchors)-1]]
			if op.Time.IsZero() || op.Time.Before(a) {
				out[i] = a
			} else {
				out[i] = op.Time
			}
		default:
			lo, hi := anchors[next-1], anchors[next]
			tl, th := out[lo], out[hi]
			if !op.Time.IsZero() && !op.Time.Before(tl) && !op.Time.After(th) {
				out[i] = op.Time
				continue
			}
			frac := float64(i-lo) / float64(hi-lo)
			out[i] = tl.Add(time.Duration(frac * float64(th.Sub(tl))))
		}
	}
	return out
}

// BuildTimeline lays out a history: limit events by first appearance
// (DefaultEventLimit when limit <= 0), plus every event a failed checker of
// rep lists (up to MaxOffendingShown), with their marks, the fault windows
// and the phases.
func BuildTimeline(h []history.Op, rep checker.Report, limit int) Timeline {
	if limit <= 0 {
		limit = DefaultEventLimit
	}
	h = slices.Clone(h)
	sort.SliceStable(h, func(i, j int) bool { return h[i].Index < h[j].Index })
	at := AxisTimes(h)
	var tl Timeline
	for i := range h {
		if at[i].IsZero() {
			continue
		}
		if tl.Start.IsZero() || at[i].Before(tl.Start) {
			tl.Start = at[i]
		}
		if at[i].After(tl.End) {
			tl.End = at[i]
		}
	}
	timeOf := make(map[int64]time.Time, len(h))
	for i, op := range h {
		timeOf[op.Index] = at[i]
	}

	violations := map[string][]Violation{}
	for _, res := range rep.Failed() {
		for _, id := range res.Offending {
			violations[id] = append(violations[id], Violation{Checker: res.Checker, Reason: res.Reasons[id]})
		}
	}

	// Events by first appearance.
	var order []string
	points := map[string][]Point{}
	outcome := map[string]Mark{}
	commitAt := map[string]time.Time{}
	applyAt := map[string]time.Time{}
	deliverAt := map[string]time.Time{}
	consumers := false
	add := func(id string, m Mark, op history.Op) {
		if _, ok := points[id]; !ok {
			order = append(order, id)
			points[id] = nil
		}
		points[id] = append(points[id], Point{Mark: m, At: timeOf[op.Index], Op: op})
	}
	for _, p := range history.Pairs(h) {
		start := p.Start()
		if p.Invoke != nil {
			if m, ok := invokeMark(start.F); ok {
				for _, id := range start.Events {
					add(id, m, start)
				}
			}
		}
		if p.Done == nil {
			if start.F == history.Commit {
				for _, id := range start.Events {
					outcome[id] = mergeOutcome(outcome[id], MarkUnknown)
				}
			}
			continue
		}
		done := *p.Done
		if done.F == history.Apply {
			consumers = true
		}
		m, ok := doneMark(done)
		if !ok {
			continue
		}
		ids := done.Events
		if len(ids) == 0 && p.Invoke != nil && done.Type != history.OK {
			ids = start.Events // a fail or info completion that names nothing
		}
		for _, id := range ids {
			add(id, m, done)
			switch m {
			case MarkCommitted, MarkRolledBack, MarkUnknown:
				outcome[id] = mergeOutcome(outcome[id], m)
				if m == MarkCommitted {
					if _, ok := commitAt[id]; !ok {
						commitAt[id] = timeOf[done.Index]
					}
				}
			case MarkApplied, MarkDeduped:
				if _, ok := applyAt[id]; !ok {
					applyAt[id] = timeOf[done.Index]
				}
			case MarkDelivered:
				if _, ok := deliverAt[id]; !ok {
					deliverAt[id] = timeOf[done.Index]
				}
			}
		}
	}
	tl.TotalEvents = len(order)

	var shown []string
	extra := 0
	for i, id := range order {
		switch {
		case i < limit:
			shown = append(shown, id)
		case len(violations[id]) > 0 && extra < MaxOffendingShown:
			shown = append(shown, id)
			extra++
		}
	}
	ordinal := make(map[string]int, len(order))
	for i, id := range order {
		ordinal[id] = i + 1
	}
	for _, id := range shown {
		out := outcome[id]
		if out == "" {
			out = MarkUnknown
		}
		tl.Events = append(tl.Events, EventLine{
			ID: id, Ordinal: ordinal[id], Points: points[id], Outcome: out, Violations: violations[id],
		})
	}

	for _, id := range order {
		first, ok := applyAt[id]
		if !ok && !consumers {
			first, ok = deliverAt[id]
		}
		if !ok {
			continue
		}
		tl.Deliveries = append(tl.Deliveries, first)
		if c, ok := commitAt[id]; ok && !first.Before(c) {
			tl.Latencies = append(tl.Latencies, Latency{At: first, D: first.Sub(c)})
		}
	}
	slices.SortFunc(tl.Deliveries, func(a, b time.Time) int { return a.Compare(b) })
	slices.SortStableFunc(tl.Latencies, func(a, b Latency) int { return a.At.Compare(b.At) })

	tl.Windows = faultWindows(h, timeOf, tl.End)
	tl.findGaps(at)
	for _, op := range h {
		if op.F == history.Phase {
			tl.Phases = append(tl.Phases, PhaseMark{Name: op.Phase, At: timeOf[op.Index]})
		}
	}
	return tl
}

// mergeOutcome combines the outcomes of several commits of one event: any
// ok makes it committed; otherwise unknown beats rolled back.
func mergeOutcome(prev, m Mark) Mark {
	switch {
	case prev == MarkCommitted || m == MarkCommitted:
		return MarkCommitted
	case prev == MarkUnknown || m == MarkUnknown:
		return MarkUnknown
	}
	return m
}

// invokeMark is the mark an invoke of f draws, if any.
func invokeMark(f history.Func) (Mark, bool) {
	switch f {
	case history.Commit:
		return MarkStaged, true
	case history.Publish:
		return MarkPublished, true
	}
	return "", false
}

// doneMark is the mark a completion (or a record on its own) draws, if any.
func doneMark(op history.Op) (Mark, bool) {
	switch op.F {
	case history.Commit:
		switch op.Type {
		case history.OK:
			return MarkCommitted, true
		case history.Fail:
			return MarkRolledBack, true
		case history.Info:
			return MarkUnknown, true
		}
	case history.Claim:
		if op.Type == history.OK {
			return MarkClaimed, true
		}
	case history.Publish:
		if op.Type == history.OK {
			return MarkConfirmed, true
		}
		return MarkUnconfirmed, true
	case history.Mark:
		if op.Type == history.OK {
			return MarkMarked, true
		}
	case history.Retry:
		if op.Type == history.OK {
			if op.Parked {
				return MarkParked, true
			}
			return MarkRetried, true
		}
	case history.Park:
		if op.Type == history.OK {
			return MarkParked, true
		}
	case history.Deliver:
		if op.Type != history.Fail && op.Type != history.Invoke {
			return MarkDelivered, true
		}
	case history.Apply:
		if op.Type == history.OK {
			if op.Duplicate {
				return MarkDeduped, true
			}
			return MarkApplied, true
		}
	}
	return "", false
}

// faultWindows returns the fault windows of h as the checkers read them,
// in the time of the records that opened and healed them; a window never
// healed lasts to end.
func faultWindows(h []history.Op, timeOf map[int64]time.Time, end time.Time) []Window {
	var out []Window
	for _, w := range checker.FaultWindows(h) {
		win := Window{Name: w.Name, Class: w.Fault.Class, Start: timeOf[w.Start], Stop: end, Healed: w.Healed}
		if w.Healed {
			win.Stop = timeOf[w.End]
		}
		out = append(out, win)
	}
	return out
}

// shortIDs returns a label per id: the shortest tail (at least 6
// characters) that tells the ids apart, prefixed with an ellipsis when
// shortened.
func shortIDs(ids []string) map[string]string {
	out := make(map[string]string, len(ids))
	maxLen := 0
	for _, id := range ids {
		maxLen = max(maxLen, len(id))
	}
	for k := 6; k <= maxLen; k++ {
		seen := make(map[string]bool, len(ids))
		unique := true
		for _, id := range ids {
			s := tail(id, k)
			if seen[s] {
				unique = false
				break
			}
			seen[s] = true
		}
		if unique || k == maxLen {
			for _, id := range ids {
				if len(id) > k {
					out[id] = "…" + tail(id, k)
				} else {
					out[id] = id
				}
			}
			return out
		}
	}
	return out
}

func tail(s string, k int) string {
	if len(s) <= k {
		return s
	}
	return s[len(s)-k:]
}

// findGaps finds the idle stretches between record times.
func (tl *Timeline) findGaps(at []time.Time) {
	span := tl.End.Sub(tl.Start)
	if span <= 0 {
		return
	}
	times := make([]time.Time, 0, len(at))
	for _, t := range at {
		if !t.IsZero() {
			times = append(times, t)
		}
	}
	slices.SortFunc(times, func(a, b time.Time) int { return a.Compare(b) })
	threshold := span / 12
	busy := span
	for i := 1; i < len(times); i++ {
		if d := times[i].Sub(times[i-1]); d > threshold {
			tl.Gaps = append(tl.Gaps, Gap{From: times[i-1], To: times[i]})
			busy -= d
		}
	}
	tl.gapWidth = max(busy/40, time.Nanosecond)
}

// span returns the axis duration with gaps compressed, never zero.
func (tl Timeline) span() time.Duration {
	d := tl.virt(tl.End)
	if d <= 0 {
		return time.Second
	}
	return d
}

// virt maps t onto the axis: its offset from Start with every gap before
// it compressed to gapWidth.
func (tl Timeline) virt(t time.Time) time.Duration {
	v := t.Sub(tl.Start)
	for _, g := range tl.Gaps {
		if !t.After(g.From) {
			break
		}
		glen := g.To.Sub(g.From)
		if !t.Before(g.To) {
			v -= glen - tl.gapWidth
			continue
		}
		in := t.Sub(g.From)
		v -= in - time.Duration(float64(in)/float64(glen)*float64(tl.gapWidth))
	}
	return v
}

// real maps an axis offset back to a time, the inverse of virt.
func (tl Timeline) real(v time.Duration) time.Time {
	t := tl.Start.Add(v)
	shift := time.Duration(0) // real time added by the gaps passed so far
	for _, g := range tl.Gaps {
		gv := tl.virt(g.From)
		if v <= gv {
			break
		}
		glen := g.To.Sub(g.From)
		if v >= gv+tl.gapWidth {
			shift += glen - tl.gapWidth
			continue
		}
		return g.From.Add(time.Duration(float64(v-gv) / float64(tl.gapWidth) * float64(glen)))
	}
	return t.Add(shift)
}

// pos maps t onto [0, width].
func (tl Timeline) pos(t time.Time, width float64) float64 {
	f := float64(tl.virt(t)) / float64(tl.span())
	return math.Max(0, math.Min(1, f)) * width
}
