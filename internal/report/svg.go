package report

import (
	"github.com/outboxlab/outboxlab/history"

	"fmt"
	"html"
	"math"
	"slices"
	"strings"
	"time"
)

// Layout of every chart: the same left margin and plot width, so that the
// timeline and the charts share one x axis on the page.
const (
	svgWidth   = 1320
	plotLeft   = 190
	plotRight  = 20
	plotWidth  = svgWidth - plotLeft - plotRight
	rowHeight  = 14
	laneHeight = 15
	chartH     = 150
)

// Colours of the marks. TimelineColours lists the ones drawn as solid
// fills, which a test looks for in a screenshot.
var markColour = map[Mark]string{
	MarkStaged:      "#8a94a6",
	MarkCommitted:   "#1f5fbf",
	MarkRolledBack:  "#6b7280",
	MarkUnknown:     "#d98b00",
	MarkClaimed:     "#7b4fc9",
	MarkPublished:   "#0f9d9a",
	MarkConfirmed:   "#0f9d9a",
	MarkUnconfirmed: "#d93025",
	MarkMarked:      "#9c6b12",
	MarkRetried:     "#e8a33d",
	MarkParked:      "#222222",
	MarkDelivered:   "#e8710a",
	MarkApplied:     "#1e8e3e",
	MarkDeduped:     "#1e8e3e",
}

// TimelineColours are the solid fill colours of the committed, confirmed,
// delivered and applied marks, as RGB.
var TimelineColours = map[Mark][3]uint8{
	MarkCommitted: {0x1f, 0x5f, 0xbf},
	MarkConfirmed: {0x0f, 0x9d, 0x9a},
	MarkDelivered: {0xe8, 0x71, 0x0a},
	MarkApplied:   {0x1e, 0x8e, 0x3e},
}

var classColour = map[history.FaultClass]string{
	history.ClassBroker:  "#f08c2e",
	history.ClassDB:      "#8e5bd9",
	history.ClassProcess: "#e04050",
	history.ClassClock:   "#2a9d8f",
	history.ClassOther:   "#7a869a",
}

// ClassColour returns the shading colour of a fault window of class c.
func ClassColour(c history.FaultClass) string {
	if col, ok := classColour[c]; ok {
		return col
	}
	return classColour[history.ClassOther]
}

func esc(s string) string { return html.EscapeString(s) }

func f1(x float64) string { return fmt.Sprintf("%.1f", x) }

// niceDuration returns a tick step for a span: the smallest round duration
// giving at most about max ticks.
func niceDuration(span time.Duration, max int) time.Duration {
	steps := []time.Duration{}
	for _, base := range []time.Duration{time.Millisecond, time.Second} {
		for _, m := range []time.Duration{1, 2, 5, 10, 20, 50, 100, 200, 500} {
			if base == time.Second && m > 20 {
				break
			}
			steps = append(steps, m*base)
		}
	}
	steps = append(steps, 30*time.Second, time.Minute, 2*time.Minute, 5*time.Minute, 10*time.Minute,
		15*time.Minute, 30*time.Minute, time.Hour, 2*time.Hour, 3*time.Hour, 6*time.Hour, 12*time.Hour, 24*time.Hour)
	for _, s := range steps {
		if span/s <= time.Duration(max) {
			return s
		}
	}
	return time.Duration(math.Ceil(float64(span)/float64(max)/float64(24*time.Hour))) * 24 * time.Hour
}

// fmtOffset renders an axis offset compactly: "0s", "+1m30s", "+2h",
// "+250ms".
func fmtOffset(d time.Duration) string {
	if d == 0 {
		return "0s"
	}
	sign := "+"
	if d < 0 {
		sign, d = "-", -d
	}
	if d < time.Second {
		return sign + d.Round(time.Millisecond).String()
	}
	if d < 10*time.Second && d%time.Second != 0 {
		return sign + d.Round(100*time.Millisecond).String()
	}
	d = d.Round(time.Second)
	h, m, s := d/time.Hour, (d%time.Hour)/time.Minute, (d%time.Minute)/time.Second
	out := sign
	if h > 0 {
		out += fmt.Sprintf("%dh", h)
	}
	if m > 0 {
		out += fmt.Sprintf("%dm", m)
	}
	if s > 0 {
		out += fmt.Sprintf("%ds", s)
	}
	return out
}

// fmtLatency renders a latency for a person.
func fmtLatency(d time.Duration) string {
	switch {
	case d < time.Millisecond:
		return d.Round(time.Microsecond).String()
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(10 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

// tick is one labelled position on the time axis.
type tick struct {
	x     float64
	label string
}

// ticks places round offsets along the axis, segment by segment between
// the gaps, at least 48 pixels apart.
func ticks(tl Timeline) []tick {
	step := niceDuration(tl.span(), 10)
	var out []tick
	last := math.Inf(-1)
	add := func(t time.Time) {
		x := plotLeft + tl.pos(t, plotWidth)
		if x-last < 48 {
			return
		}
		out = append(out, tick{x, fmtOffset(t.Sub(tl.Start))})
		last = x
	}
	from := tl.Start
	segments := append(slices.Clone(tl.Gaps), Gap{From: tl.End})
	for _, g := range segments {
		n := len(out)
		first := (from.Sub(tl.Start) + step - 1) / step * step
		for d := first; !tl.Start.Add(d).After(g.From); d += step {
			add(tl.Start.Add(d))
		}
		if len(out) == n && g.From.After(from) {
			add(from)
		}
		from = g.To
	}
	return out
}

// axis draws the time axis (ticks, labels, grid lines down to bottom) at y.
func axis(b *strings.Builder, tl Timeline, y, bottom float64, labels bool) {
	for _, t := range ticks(tl) {
		fmt.Fprintf(b, `<line x1="%s" y1="%s" x2="%s" y2="%s" class="grid"/>`, f1(t.x), f1(y), f1(t.x), f1(bottom))
		if labels {
			fmt.Fprintf(b, `<text x="%s" y="%s" class="tick" text-anchor="middle">%s</text>`, f1(t.x), f1(y-4), esc(t.label))
		}
	}
}

// gaps draws the compressed idle stretches between top and bottom.
func gaps(b *strings.Builder, tl Timeline, top, bottom float64) {
	for _, g := range tl.Gaps {
		x0 := plotLeft + tl.pos(g.From, plotWidth)
		x1 := plotLeft + tl.pos(g.To, plotWidth)
		title := fmt.Sprintf("%s with no record (%s .. %s), drawn compressed", fmtLatency(g.To.Sub(g.From)),
			fmtOffset(g.From.Sub(tl.Start)), fmtOffset(g.To.Sub(tl.Start)))
		fmt.Fprintf(b, `<g class="gap"><rect x="%s" y="%s" width="%s" height="%s"/>`, f1(x0), f1(top), f1(math.Max(x1-x0, 2)), f1(bottom-top))
		fmt.Fprintf(b, `<path d="M%s %sl4 -6l4 6M%s %sl4 -6l4 6"/>`, f1(x0+(x1-x0)/2-4), f1(top+8), f1(x0+(x1-x0)/2-4), f1(bottom-2))
		fmt.Fprintf(b, `<text transform="translate(%s %s) rotate(-90)" class="gap-label">%s idle</text><title>%s</title></g>`,
			f1(x0+(x1-x0)/2+4), f1(top+(bottom-top)/2+30), esc(fmtLatency(g.To.Sub(g.From))), esc(title))
	}
}

// windows shades the fault windows between top and bottom.
func windows(b *strings.Builder, tl Timeline, top, bottom float64) {
	for _, w := range tl.Windows {
		x0 := plotLeft + tl.pos(w.Start, plotWidth)
		x1 := plotLeft + tl.pos(w.Stop, plotWidth)
		fmt.Fprintf(b, `<rect x="%s" y="%s" width="%s" height="%s" fill="%s" class="fault"><title>%s</title></rect>`,
			f1(x0), f1(top), f1(math.Max(x1-x0, 1.5)), f1(bottom-top), ClassColour(w.Class), esc(windowTitle(tl, w)))
	}
}

func windowTitle(tl Timeline, w Window) string {
	s := fmt.Sprintf("%s: %s .. %s", w.Name, fmtOffset(w.Start.Sub(tl.Start)), fmtOffset(w.Stop.Sub(tl.Start)))
	if !w.Healed {
		s += " (never healed)"
	}
	return s
}

// phases draws the phase lines between top and bottom, labelled at top.
func phases(b *strings.Builder, tl Timeline, top, bottom float64, labels bool) {
	for _, p := range tl.Phases {
		x := plotLeft + tl.pos(p.At, plotWidth)
		fmt.Fprintf(b, `<line x1="%s" y1="%s" x2="%s" y2="%s" class="phase"/>`, f1(x), f1(top), f1(x), f1(bottom))
		if labels {
			phaseLabel(b, x, top+10, p.Name)
		}
	}
}

// phaseLabel names a phase right of its line, or left of it near the
// right edge.
func phaseLabel(b *strings.Builder, x, y float64, name string) {
	if x > svgWidth-plotRight-60 {
		fmt.Fprintf(b, `<text x="%s" y="%s" class="phase-label" text-anchor="end">%s</text>`, f1(x-3), f1(y), esc(name))
		return
	}
	fmt.Fprintf(b, `<text x="%s" y="%s" class="phase-label">%s</text>`, f1(x+3), f1(y), esc(name))
}

// laneOf assigns each window a label lane so that labels do not overlap.
func laneOf(tl Timeline) ([]int, int) {
	var ends []float64
	lanes := make([]int, len(tl.Windows))
	for i, w := range tl.Windows {
		x := plotLeft + tl.pos(w.Start, plotWidth)
		width := float64(len(w.Name))*6.2 + 8
		lane := -1
		for l, e := range ends {
			if e <= x {
				lane = l
				break
			}
		}
		if lane < 0 {
			lane = len(ends)
			ends = append(ends, 0)
		}
		ends[lane] = math.Max(x+width, plotLeft+tl.pos(w.Stop, plotWidth)+2)
		lanes[i] = lane
	}
	return lanes, len(ends)
}

// TimelineSVG draws the timeline: a row per event with its marks, the
// fault windows shaded across every row and named in lanes on top, the
// phases as dashed lines.
func TimelineSVG(tl Timeline) string {
	var b strings.Builder
	lanes, nLanes := laneOf(tl)
	const axisH = 34.0
	top := axisH + float64(nLanes)*laneHeight + 6
	bottom := top + float64(len(tl.Events))*rowHeight + 6
	height := bottom + 24
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" class="timeline" viewBox="0 0 %d %s" data-rows="%d">`,
		svgWidth, f1(height), len(tl.Events))
	fmt.Fprintf(&b, `<text x="8" y="14" class="axis-title">event</text>`)
	fmt.Fprintf(&b, `<text x="%d" y="14" class="axis-title">time since the run began</text>`, plotLeft)
	axis(&b, tl, axisH, bottom, true)
	// Fault labels in lanes, then the shading.
	for i, w := range tl.Windows {
		x := plotLeft + tl.pos(w.Start, plotWidth)
		y := axisH + float64(lanes[i])*laneHeight + 4
		x1 := plotLeft + tl.pos(w.Stop, plotWidth)
		c := ClassColour(w.Class)
		fmt.Fprintf(&b, `<rect x="%s" y="%s" width="%s" height="%d" fill="%s" class="fault-bar"/>`,
			f1(x), f1(y), f1(math.Max(x1-x, 1.5)), laneHeight-3, c)
		fmt.Fprintf(&b, `<text x="%s" y="%s" class="fault-label" fill="%s">%s<title>%s</title></text>`,
			f1(x+2), f1(y+9), c, esc(w.Name), esc(windowTitle(tl, w)))
	}
	windows(&b, tl, top, bottom)
	gaps(&b, tl, top, bottom)
	phases(&b, tl, axisH, bottom, false)

	ids := make([]string, len(tl.Events))
	for i, e := range tl.Events {
		ids[i] = e.ID
	}
	short := shortIDs(ids)
	for i, e := range tl.Events {
		y := top + float64(i)*rowHeight + rowHeight/2
		if e.Offending() {
			fmt.Fprintf(&b, `<rect x="0" y="%s" width="%d" height="%d" class="offending-row"/>`, f1(y-rowHeight/2), svgWidth, rowHeight)
		}
		cls := "row-label"
		if e.Offending() {
			cls = "row-label offending"
		}
		title := fmt.Sprintf("event #%d %s (%s)", e.Ordinal, e.ID, e.Outcome)
		for _, v := range e.Violations {
			title += fmt.Sprintf("\n%s: %s", v.Checker, v.Reason)
		}
		fmt.Fprintf(&b, `<text x="8" y="%s" class="%s">#%d %s<title>%s</title></text>`, f1(y+4), cls, e.Ordinal, esc(short[e.ID]), esc(title))
		if len(e.Points) == 0 {
			continue
		}
		x0, x1 := math.Inf(1), math.Inf(-1)
		for _, p := range e.Points {
			x := plotLeft + tl.pos(p.At, plotWidth)
			x0, x1 = math.Min(x0, x), math.Max(x1, x)
		}
		line := "journey"
		switch e.Outcome {
		case MarkRolledBack:
			line = "journey rolled-back"
		case MarkUnknown:
			line = "journey unknown"
		}
		fmt.Fprintf(&b, `<line x1="%s" y1="%s" x2="%s" y2="%s" class="%s"/>`, f1(x0), f1(y), f1(x1), f1(y), line)
		for _, p := range e.Points {
			x := plotLeft + tl.pos(p.At, plotWidth)
			mark(&b, p, x, y, tl)
		}
	}
	fmt.Fprintf(&b, `<line x1="%d" y1="%s" x2="%d" y2="%s" class="axis-line"/>`, plotLeft, f1(bottom), svgWidth-plotRight, f1(bottom))
	for _, p := range tl.Phases {
		x := plotLeft + tl.pos(p.At, plotWidth)
		phaseLabel(&b, x, bottom+14, p.Name)
	}
	b.WriteString(`</svg>`)
	return b.String()
}

// mark draws one point of an event's row.
func mark(b *strings.Builder, p Point, x, y float64, tl Timeline) {
	c := markColour[p.Mark]
	title := fmt.Sprintf("%s at %s: %s", p.Mark, fmtOffset(p.At.Sub(tl.Start)), p.Op.String())
	t := "<title>" + esc(title) + "</title>"
	X, Y := f1(x), f1(y)
	switch p.Mark {
	case MarkStaged:
		fmt.Fprintf(b, `<circle cx="%s" cy="%s" r="3.5" fill="#fff" stroke="%s" stroke-width="1.5">%s</circle>`, X, Y, c, t)
	case MarkCommitted, MarkApplied:
		fmt.Fprintf(b, `<circle cx="%s" cy="%s" r="4.5" fill="%s">%s</circle>`, X, Y, c, t)
	case MarkDeduped:
		fmt.Fprintf(b, `<circle cx="%s" cy="%s" r="4" fill="#fff" stroke="%s" stroke-width="2">%s</circle>`, X, Y, c, t)
	case MarkRolledBack, MarkUnconfirmed:
		fmt.Fprintf(b, `<path d="M%s %sl7 7m0 -7l-7 7" stroke="%s" stroke-width="2.2">%s</path>`, f1(x-3.5), f1(y-3.5), c, t)
	case MarkUnknown:
		fmt.Fprintf(b, `<text x="%s" y="%s" class="unknown-mark" fill="%s" text-anchor="middle">?%s</text>`, X, f1(y+4.5), c, t)
	case MarkClaimed:
		fmt.Fprintf(b, `<rect x="%s" y="%s" width="2.5" height="11" fill="%s">%s</rect>`, f1(x-1.25), f1(y-5.5), c, t)
	case MarkPublished:
		fmt.Fprintf(b, `<path d="M%s %sl4.5 4.5l-4.5 4.5l-4.5 -4.5z" fill="#fff" stroke="%s" stroke-width="1.5">%s</path>`, X, f1(y-4.5), c, t)
	case MarkConfirmed:
		fmt.Fprintf(b, `<path d="M%s %sl5 5l-5 5l-5 -5z" fill="%s">%s</path>`, X, f1(y-5), c, t)
	case MarkMarked:
		fmt.Fprintf(b, `<rect x="%s" y="%s" width="8" height="8" fill="%s">%s</rect>`, f1(x-4), f1(y-4), c, t)
	case MarkRetried:
		fmt.Fprintf(b, `<path d="M%s %sl9 0l-4.5 8z" fill="#fff" stroke="%s" stroke-width="1.5">%s</path>`, f1(x-4.5), f1(y-4), c, t)
	case MarkParked:
		fmt.Fprintf(b, `<rect x="%s" y="%s" width="9" height="9" fill="%s" stroke="#fff" stroke-width="1">%s</rect>`, f1(x-4.5), f1(y-4.5), c, t)
	case MarkDelivered:
		fmt.Fprintf(b, `<path d="M%s %sl5 9l-10 0z" fill="%s">%s</path>`, X, f1(y-5), c, t)
	}
}

// LegendSVG draws every mark with its name, and the fault classes.
func LegendSVG() string {
	var b strings.Builder
	const w = 1320
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" class="legend" viewBox="0 0 %d 50">`, w)
	x := 10.0
	for _, m := range Marks {
		mark(&b, Point{Mark: m}, x+5, 14, Timeline{})
		fmt.Fprintf(&b, `<text x="%s" y="18" class="legend-text">%s</text>`, f1(x+14), esc(string(m)))
		x += 16 + float64(len(m))*6.6 + 14
	}
	x = 10
	for _, c := range history.Classes {
		fmt.Fprintf(&b, `<rect x="%s" y="32" width="18" height="12" fill="%s" class="fault"/>`, f1(x), classColour[c])
		fmt.Fprintf(&b, `<text x="%s" y="42" class="legend-text">%s fault</text>`, f1(x+24), esc(string(c)))
		x += 24 + float64(len(c)+6)*6.6 + 18
	}
	b.WriteString(`</svg>`)
	return b.String()
}

// niceNumber returns a round tick step for values up to max.
func niceNumber(max float64, ticks int) float64 {
	if max <= 0 {
		return 1
	}
	raw := max / float64(ticks)
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*mag >= raw {
			return m * mag
		}
	}
	return 10 * mag
}

// rateUnit picks the unit in which a rate per second reads best.
func rateUnit(perSec float64) (float64, string) {
	switch {
	case perSec >= 1 || perSec == 0:
		return 1, "/s"
	case perSec*60 >= 1:
		return 60, "/min"
	}
	return 3600, "/h"
}

func fmtNum(x float64) string {
	switch {
	case x == math.Trunc(x):
		return fmt.Sprintf("%.0f", x)
	case x >= 10:
		return fmt.Sprintf("%.1f", x)
	}
	return fmt.Sprintf("%.3g", x)
}

// chartFrame opens a chart: title, fault windows, phases, axis.
func chartFrame(b *strings.Builder, tl Timeline, class, title string) (top, bottom float64) {
	top, bottom = 26, 26+chartH
	height := bottom + 26
	fmt.Fprintf(b, `<svg xmlns="http://www.w3.org/2000/svg" class="chart %s" viewBox="0 0 %d %s">`,
		class, svgWidth, f1(height))
	fmt.Fprintf(b, `<text x="8" y="16" class="chart-title">%s</text>`, esc(title))
	windows(b, tl, top, bottom)
	for _, t := range ticks(tl) {
		fmt.Fprintf(b, `<line x1="%s" y1="%s" x2="%s" y2="%s" class="grid"/>`, f1(t.x), f1(top), f1(t.x), f1(bottom))
		fmt.Fprintf(b, `<text x="%s" y="%s" class="tick" text-anchor="middle">%s</text>`, f1(t.x), f1(bottom+14), esc(t.label))
	}
	gaps(b, tl, top, bottom)
	phases(b, tl, top, bottom, true)
	fmt.Fprintf(b, `<line x1="%d" y1="%s" x2="%d" y2="%s" class="axis-line"/>`, plotLeft, f1(bottom), svgWidth-plotRight, f1(bottom))
	return top, bottom
}

// yAxis draws horizontal grid lines and labels for values 0..max.
func yAxis(b *strings.Builder, top, bottom, max, step float64, label func(float64) string) {
	for v := 0.0; v <= max+step/1000; v += step {
		y := bottom - (v/max)*(bottom-top)
		fmt.Fprintf(b, `<line x1="%d" y1="%s" x2="%d" y2="%s" class="hgrid"/>`, plotLeft, f1(y), svgWidth-plotRight, f1(y))
		fmt.Fprintf(b, `<text x="%d" y="%s" class="tick" text-anchor="end">%s</text>`, plotLeft-6, f1(y+4), esc(label(v)))
	}
}

// ThroughputSVG charts first deliveries per unit of time, in buckets over
// the timeline's axis, with the fault windows shaded.
func ThroughputSVG(tl Timeline) string {
	var b strings.Builder
	const buckets = 60
	bucket := tl.span() / buckets
	if bucket <= 0 {
		bucket = time.Nanosecond
	}
	counts := make([]int, buckets)
	for _, t := range tl.Deliveries {
		i := int(tl.virt(t) / bucket)
		counts[min(max(i, 0), buckets-1)]++
	}
	// seconds is the real time bucket i covers, gaps included.
	seconds := func(i int) float64 {
		s := tl.real(time.Duration(i+1) * bucket).Sub(tl.real(time.Duration(i) * bucket)).Seconds()
		return math.Max(s, 1e-9)
	}
	perSec := 0.0
	for i, c := range counts {
		perSec = math.Max(perSec, float64(c)/seconds(i))
	}
	scale, unit := rateUnit(perSec)
	top, bottom := chartFrame(&b, tl, "throughput",
		fmt.Sprintf("throughput: events delivered (first apply) %s, %d in all", unit, len(tl.Deliveries)))
	maxV := math.Max(perSec*scale, 1e-9)
	step := niceNumber(maxV, 4)
	maxV = math.Ceil(maxV/step) * step
	yAxis(&b, top, bottom, maxV, step, fmtNum)
	bw := float64(plotWidth) / float64(buckets)
	for i, c := range counts {
		if c == 0 {
			continue
		}
		v := float64(c) / seconds(i) * scale
		h := v / maxV * (bottom - top)
		fmt.Fprintf(&b, `<rect x="%s" y="%s" width="%s" height="%s" class="bar"><title>%s: %d delivered (%s%s)</title></rect>`,
			f1(plotLeft+float64(i)*bw+0.5), f1(bottom-h), f1(math.Max(bw-1, 1)), f1(h),
			esc(fmtOffset(tl.real(time.Duration(i)*bucket).Sub(tl.Start))), c, fmtNum(v), unit)
	}
	b.WriteString(`</svg>`)
	return b.String()
}

// LatencySVG charts each event's commit-to-apply latency at its apply time,
// with the fault windows shaded.
func LatencySVG(tl Timeline) string {
	var b strings.Builder
	ds := make([]time.Duration, len(tl.Latencies))
	for i, l := range tl.Latencies {
		ds[i] = l.D
	}
	slices.Sort(ds)
	title := "latency: commit to first apply, per event (no applied event)"
	if len(ds) > 0 {
		title = fmt.Sprintf("latency: commit to first apply, per event (p50 %s, p99 %s, max %s)",
			fmtLatency(quantile(ds, 0.5)), fmtLatency(quantile(ds, 0.99)), fmtLatency(ds[len(ds)-1]))
	}
	top, bottom := chartFrame(&b, tl, "latency", title)
	var maxD time.Duration
	if len(ds) > 0 {
		maxD = ds[len(ds)-1]
	}
	unit, name := latencyUnit(maxD)
	maxV := math.Max(float64(maxD)/float64(unit), 1e-9)
	step := niceNumber(maxV, 4)
	maxV = math.Ceil(maxV/step) * step
	yAxis(&b, top, bottom, maxV, step, func(v float64) string { return fmtNum(v) + name })
	for _, l := range tl.Latencies {
		x := plotLeft + tl.pos(l.At, plotWidth)
		y := bottom - (float64(l.D)/float64(unit))/maxV*(bottom-top)
		fmt.Fprintf(&b, `<circle cx="%s" cy="%s" r="2.6" class="latency-dot"><title>%s at %s</title></circle>`,
			f1(x), f1(y), esc(fmtLatency(l.D)), esc(fmtOffset(l.At.Sub(tl.Start))))
	}
	b.WriteString(`</svg>`)
	return b.String()
}

func latencyUnit(max time.Duration) (time.Duration, string) {
	switch {
	case max >= 2*time.Hour:
		return time.Hour, "h"
	case max >= 2*time.Minute:
		return time.Minute, "m"
	case max >= 2*time.Second:
		return time.Second, "s"
	}
	return time.Millisecond, "ms"
}

// quantile returns the q-quantile of sorted ds (nearest rank).
func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(ds)))) - 1
	return ds[min(max(i, 0), len(ds)-1)]
}
