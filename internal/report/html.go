package report

import (
	"bytes"
	"fmt"
	"html/template"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/outboxlab/outboxlab/checker"
)

// Page is one HTML report: one or more runs on a page that needs no
// network (inline CSS and SVG, no script).
type Page struct {
	// Title heads the page.
	Title string
	// Intro is a paragraph under the title.
	Intro string
	// Meta says where and from what the runs came; zero fields are left
	// out.
	Meta Meta
	Runs []Run
	// Sections follow the runs: tables apart from any run, such as the
	// benchmark's.
	Sections []Section
	// EventLimit bounds the events drawn per timeline, offending ones
	// aside; DefaultEventLimit when zero.
	EventLimit int
}

// Section is a part of a page apart from its runs: a title, paragraphs,
// tables and notes.
type Section struct {
	Title  string
	Text   []string
	Tables []Table
	Notes  []string
}

// WriteHTML renders p to w. The output depends on p alone.
func WriteHTML(w io.Writer, p Page) error {
	view := pageView{Page: p, Legend: template.HTML(LegendSVG())}
	for i, r := range p.Runs {
		view.Runs = append(view.Runs, newRunView(i, r, p.EventLimit))
	}
	if err := pageTemplate.Execute(w, view); err != nil {
		return fmt.Errorf("rendering the HTML report: %w", err)
	}
	return nil
}

// WriteHTMLFile renders p to the file path, creating its directory; the
// file is replaced atomically (see WriteAtomic).
func WriteHTMLFile(path string, p Page) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("creating the report directory: %w", err)
	}
	var buf bytes.Buffer
	if err := WriteHTML(&buf, p); err != nil {
		return err
	}
	if err := WriteAtomic(path, buf.Bytes()); err != nil {
		return fmt.Errorf("writing the HTML report: %w", err)
	}
	return nil
}

type pageView struct {
	Page
	Legend template.HTML
	Runs   []runView
}

type runView struct {
	Run
	Anchor     string
	Counts     checker.Counts
	Checkers   []checkerView
	Timeline   template.HTML
	Throughput template.HTML
	Latency    template.HTML
	Shown      int
	Total      int
	Offending  int
	Windows    []windowView
	DupBy      string
	Span       string
}

type checkerView struct {
	Name, Status, Detail string
	Offending            []string
	More                 int
}

type windowView struct {
	Name, Class, Colour, From, To string
}

func newRunView(i int, r Run, limit int) runView {
	if r.NotApplicable != "" {
		// Nothing ran: no counts, checkers or timeline to draw.
		return runView{Run: r, Anchor: fmt.Sprintf("run-%d", i+1)}
	}
	tl := BuildTimeline(r.History, r.Report, limit)
	v := runView{
		Run:        r,
		Anchor:     fmt.Sprintf("run-%d", i+1),
		Counts:     r.Report.Counts,
		Timeline:   template.HTML(TimelineSVG(tl)),
		Throughput: template.HTML(ThroughputSVG(tl)),
		Latency:    template.HTML(LatencySVG(tl)),
		Shown:      len(tl.Events),
		Total:      tl.TotalEvents,
		Span:       fmtLatency(tl.End.Sub(tl.Start)),
	}
	for _, e := range tl.Events {
		if e.Offending() {
			v.Offending++
		}
	}
	for _, res := range r.Report.Results {
		cv := checkerView{Name: res.Checker, Detail: res.Detail}
		switch {
		case !res.Valid:
			cv.Status = "FAIL"
			const shown = 5
			for j, id := range res.Offending {
				if j == shown {
					cv.More = len(res.Offending) - shown
					break
				}
				if why := res.Reasons[id]; why != "" {
					cv.Offending = append(cv.Offending, id+": "+why)
				} else {
					cv.Offending = append(cv.Offending, id)
				}
			}
		case res.Skipped:
			cv.Status = "skip"
		default:
			cv.Status = "ok"
		}
		v.Checkers = append(v.Checkers, cv)
	}
	for _, w := range tl.Windows {
		to := fmtOffset(w.Stop.Sub(tl.Start))
		if !w.Healed {
			to += " (never healed)"
		}
		v.Windows = append(v.Windows, windowView{
			Name: w.Name, Class: string(w.Class), Colour: ClassColour(w.Class),
			From: fmtOffset(w.Start.Sub(tl.Start)), To: to,
		})
	}
	var by []string
	for _, k := range slices.Sorted(maps.Keys(r.Report.Counts.DuplicatesBy)) {
		by = append(by, fmt.Sprintf("%s: %d", k, r.Report.Counts.DuplicatesBy[k]))
	}
	v.DupBy = strings.Join(by, ", ")
	return v
}

var pageTemplate = template.Must(template.New("page").Funcs(template.FuncMap{
	"dur":   func(d time.Duration) string { return fmtLatency(d) },
	"lower": strings.ToLower,
}).Parse(pageHTML))

const pageHTML = `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{.Title}}</title>
<style>
:root { --ink: #1d2433; --muted: #5f6b7d; --line: #dfe3ea; --bg: #f6f7f9; --pass: #188038; --fail: #c5221f; }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.45 -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; color: var(--ink); background: var(--bg); }
main { max-width: 1360px; margin: 0 auto; padding: 24px 20px 60px; }
h1 { font-size: 26px; margin: 0 0 4px; }
h2 { font-size: 20px; margin: 0; display: inline; }
h3 { font-size: 14px; text-transform: uppercase; letter-spacing: .04em; color: var(--muted); margin: 18px 0 6px; }
p.intro { max-width: 900px; color: var(--ink); }
.meta { color: var(--muted); font-size: 13px; }
code, .mono { font-family: "SFMono-Regular", Menlo, Consolas, "Liberation Mono", monospace; font-size: 12.5px; }
code.replay { display: block; background: #1d2433; color: #e8ecf3; padding: 8px 12px; border-radius: 6px; overflow-x: auto; white-space: pre; }
section.run { background: #fff; border: 1px solid var(--line); border-radius: 10px; padding: 18px 20px; margin: 22px 0; }
.badge { display: inline-block; font-weight: 700; font-size: 12px; padding: 2px 9px; border-radius: 10px; color: #fff; vertical-align: 3px; margin-left: 10px; }
.badge.PASS { background: var(--pass); } .badge.FAIL { background: var(--fail); } .badge.INCONCLUSIVE { background: #6b6f80; } .badge.NA { background: #9aa3b2; }
.badge.expected { background: #8a5a00; }
table { border-collapse: collapse; }
th, td { text-align: left; padding: 4px 10px 4px 0; vertical-align: top; }
th { font-weight: 600; color: var(--muted); font-size: 12.5px; border-bottom: 1px solid var(--line); }
td.num, th.num { text-align: right; padding-right: 14px; font-variant-numeric: tabular-nums; }
table.summary td, table.summary th { padding: 6px 14px 6px 0; }
table.summary tr + tr td { border-top: 1px solid var(--line); }
table.summary td:first-child { white-space: nowrap; }
.bad { color: var(--fail); font-weight: 700; }
.good { color: var(--pass); }
.grid2 { display: grid; grid-template-columns: minmax(300px, 380px) 1fr; gap: 28px; }
.status-ok { color: var(--pass); font-weight: 600; } .status-FAIL { color: var(--fail); font-weight: 700; } .status-skip { color: var(--muted); }
ul.offending { margin: 2px 0 4px 16px; padding: 0; color: var(--fail); font-size: 12px; }
ul.problems { color: var(--fail); }
.swatch { display: inline-block; width: 12px; height: 12px; border-radius: 2px; vertical-align: -1px; margin-right: 5px; opacity: .55; }
.legend-box { background: #fff; border: 1px solid var(--line); border-radius: 10px; padding: 6px 10px; margin: 16px 0; }
.wide { overflow-x: auto; }
.note { background: #fff8e6; border-left: 4px solid #e8a33d; padding: 8px 12px; margin: 10px 0; }
svg { display: block; width: 100%; height: auto; }
svg text { font-family: -apple-system, "Segoe UI", Roboto, Arial, sans-serif; }
svg .tick { font-size: 10.5px; fill: #5f6b7d; }
svg .axis-title, svg .chart-title { font-size: 12px; font-weight: 600; fill: #1d2433; }
svg .grid { stroke: #eef0f4; stroke-width: 1; }
svg .hgrid { stroke: #eef0f4; stroke-width: 1; }
svg .axis-line { stroke: #9aa3b2; stroke-width: 1; }
svg .fault { fill-opacity: .16; }
svg .fault-bar { fill-opacity: .35; }
svg .fault-label { font-size: 10.5px; font-weight: 600; }
svg .phase { stroke: #3b4252; stroke-width: 1; stroke-dasharray: 4 3; }
svg .phase-label { font-size: 10.5px; fill: #3b4252; font-style: italic; }
svg .row-label { font-family: "SFMono-Regular", Menlo, Consolas, monospace; font-size: 10.5px; fill: #3b4252; }
svg .row-label.offending { fill: #c5221f; font-weight: 700; }
svg .offending-row { fill: #fde7e9; }
svg .journey { stroke: #aab2c0; stroke-width: 1.2; }
svg .journey.rolled-back { stroke-dasharray: 3 3; }
svg .journey.unknown { stroke: #d98b00; stroke-dasharray: 1 3; }
svg .unknown-mark { font-size: 12px; font-weight: 800; }
svg .legend-text { font-size: 12px; fill: #1d2433; }
svg .bar { fill: #4a78c2; }
svg .gap rect { fill: #eceef2; }
svg .gap path { fill: none; stroke: #9aa3b2; stroke-width: 1.2; }
svg .gap-label { font-size: 10px; fill: #5f6b7d; }
svg .latency-dot { fill: #4a78c2; fill-opacity: .7; }
</style>
</head>
<body>
<main>
<h1>{{.Title}}</h1>
<div class="meta">{{with .Meta}}{{if .Date}}generated {{.Date}}{{end}}{{if .Commit}} · commit <span class="mono">{{.Commit}}</span>{{end}}{{if .Machine.OS}} · {{.Machine.OS}}, {{.Machine.Cores}} cores{{end}}{{end}}</div>
{{if .Intro}}<p class="intro">{{.Intro}}</p>{{end}}
{{if gt (len .Runs) 1}}
<h3>Runs side by side</h3>
<table class="summary">
<tr><th>run</th><th>verdict</th><th class="num">committed</th><th class="num">delivered</th><th class="num">lost</th><th class="num">phantom</th><th class="num">duplicate deliveries</th><th class="num">duplicate effects</th><th>what happened</th></tr>
{{range .Runs}}{{if .NotApplicable}}<tr><td><a href="#{{.Anchor}}">{{.Title}}</a></td><td><span class="badge {{.VerdictClass}}">{{.Verdict}}</span></td><td class="num">-</td><td class="num">-</td><td class="num">-</td><td class="num">-</td><td class="num">-</td><td class="num">-</td><td>not applicable, not run: {{.NotApplicable}}</td></tr>
{{else}}<tr><td><a href="#{{.Anchor}}">{{.Title}}</a></td><td><span class="badge {{.VerdictClass}}">{{.Verdict}}</span></td><td class="num">{{.Counts.Committed}}</td><td class="num">{{.Counts.Delivered}}</td><td class="num{{if .Counts.Lost}} bad{{end}}">{{.Counts.Lost}}</td><td class="num{{if .Counts.Phantom}} bad{{end}}">{{.Counts.Phantom}}</td><td class="num">{{.Counts.DuplicateDeliveries}}</td><td class="num{{if .Counts.DuplicateEffects}} bad{{end}}">{{.Counts.DuplicateEffects}}</td><td>{{.Note}}</td></tr>
{{end}}{{end}}</table>
{{end}}
<div class="legend-box">{{.Legend}}</div>
{{range .Runs}}
<section class="run" id="{{.Anchor}}">
<h2>{{.Title}}</h2><span class="badge {{.VerdictClass}}">{{.Verdict}}</span>{{if .NotApplicable}}
<div class="meta">{{if .Scenario}}scenario <b>{{.Scenario}}</b> · {{end}}{{if .Relay}}relay <b>{{.Relay}}</b> · {{end}}seed <b class="mono">{{.Seed}}</b></div>
<p class="note">Not applicable: {{.NotApplicable}}. The scenario did not run against this relay, so nothing was judged.</p>
{{else}}{{if and .ExpectFail (not .Valid)}}<span class="badge expected">expected: unsafe by design</span>{{end}}
<div class="meta">{{if .Scenario}}scenario <b>{{.Scenario}}</b> · {{end}}{{if .Relay}}relay <b>{{.Relay}}</b> · {{end}}{{if .Variant}}producer <b>{{.Variant}}</b> · {{end}}seed <b class="mono">{{.Seed}}</b> · history {{len .History}} records over {{.Span}}</div>
{{if .Detail}}<div class="meta mono">{{.Detail}}</div>{{end}}
{{if .Note}}<div class="note">{{.Note}}</div>{{end}}
{{if .Problems}}<ul class="problems">{{range .Problems}}<li>{{.}}</li>{{end}}</ul>{{end}}
{{if and (not .Problems) .Inconclusive}}<p class="note">Inconclusive: no checker failed, but a fault could not test what it claims to.</p><ul class="problems">{{range .Inconclusive}}<li>{{.}}</li>{{end}}</ul>{{end}}
{{if .Replay}}<h3>Replay</h3><code class="replay">{{.Replay}}</code>{{end}}
<div class="grid2">
<div>
<h3>Counts</h3>
<table>
<tr><td>events staged or seen</td><td class="num">{{.Counts.Events}}</td></tr>
<tr><td>committed</td><td class="num">{{.Counts.Committed}}</td></tr>
<tr><td>rolled back</td><td class="num">{{.Counts.RolledBack}}</td></tr>
<tr><td>commit outcome unknown (recovered)</td><td class="num">{{.Counts.Indeterminate}} ({{.Counts.Recovered}})</td></tr>
<tr><td>delivered</td><td class="num">{{.Counts.Delivered}}</td></tr>
<tr><td>lost</td><td class="num{{if .Counts.Lost}} bad{{end}}">{{.Counts.Lost}}</td></tr>
<tr><td>phantom</td><td class="num{{if .Counts.Phantom}} bad{{end}}">{{.Counts.Phantom}}</td></tr>
<tr><td>unexpected</td><td class="num{{if .Counts.Unexpected}} bad{{end}}">{{.Counts.Unexpected}}</td></tr>
<tr><td>publishes (extra)</td><td class="num">{{.Counts.Publishes}} ({{.Counts.DuplicatePublishes}})</td></tr>
<tr><td>deliveries (extra)</td><td class="num">{{.Counts.Deliveries}} ({{.Counts.DuplicateDeliveries}})</td></tr>
<tr><td>unexplained duplicates</td><td class="num{{if .Counts.UnexplainedDuplicates}} bad{{end}}">{{.Counts.UnexplainedDuplicates}}</td></tr>
<tr><td>duplicate effects</td><td class="num{{if .Counts.DuplicateEffects}} bad{{end}}">{{.Counts.DuplicateEffects}}</td></tr>
<tr><td>poison / parked</td><td class="num">{{.Counts.Poison}} / {{.Counts.Parked}}</td></tr>
<tr><td>lost leases</td><td class="num">{{.Counts.LostLeases}}</td></tr>
<tr><td>drain time</td><td class="num">{{dur .Counts.DrainTime}}</td></tr>
</table>
{{if .DupBy}}<div class="meta">duplicates explained by: {{.DupBy}}</div>{{end}}
{{if .Faults}}<h3>Faults fired</h3>
<table><tr><th>fault</th><th>class</th><th class="num">hits</th></tr>
{{range .Faults}}<tr><td>{{.Name}}</td><td>{{.Class}}</td><td class="num{{if not .Hits}} bad{{end}}">{{.Hits}}</td></tr>{{end}}
</table>{{end}}
</div>
<div>
<h3>Checkers</h3>
<table>
<tr><th>checker</th><th>verdict</th><th>detail</th></tr>
{{range .Checkers}}<tr><td class="mono">{{.Name}}</td><td class="status-{{.Status}}">{{.Status}}</td><td>{{.Detail}}{{if .Offending}}<ul class="offending">{{range .Offending}}<li class="mono">{{.}}</li>{{end}}{{if .More}}<li>… and {{.More}} more</li>{{end}}</ul>{{end}}</td></tr>
{{end}}</table>
{{if .Windows}}<h3>Fault windows</h3>
<table><tr><th>fault</th><th>class</th><th>from</th><th>to</th></tr>
{{range .Windows}}<tr><td><span class="swatch" style="background: {{.Colour}}"></span>{{.Name}}</td><td>{{.Class}}</td><td class="mono">{{.From}}</td><td class="mono">{{.To}}</td></tr>{{end}}
</table>{{end}}
</div>
</div>
<h3>Throughput and latency</h3>
{{.Throughput}}{{.Latency}}
<h3>Timeline: {{.Shown}} of {{.Total}} events{{if .Offending}}, {{.Offending}} offending (red){{end}}</h3>
<div class="meta">One row per event, in order of first appearance; hover a mark for its record. Shaded bands are fault windows; dashed lines start the phases.</div>
{{.Timeline}}{{end}}
</section>
{{end}}
{{range .Sections}}
<section class="run">
<h2>{{.Title}}</h2>
{{range .Text}}<p class="intro">{{.}}</p>{{end}}
{{range .Tables}}{{if .Title}}<p class="meta">{{.Title}}</p>{{end}}
<div class="wide"><table class="summary"><tr>{{range .Columns}}<th>{{.}}</th>{{end}}</tr>
{{range .Rows}}<tr>{{range .}}<td>{{.}}</td>{{end}}</tr>
{{end}}</table></div>
{{end}}{{if .Notes}}<ul>{{range .Notes}}<li>{{.}}</li>{{end}}</ul>{{end}}
</section>
{{end}}
</main>
</body>
</html>
`
