package report

import (
	"fmt"
	"html/template"
	"os"
	"path/filepath"
	"strings"

	"github.com/outboxlab/outboxlab/internal/bench/result"
)

// SoakSummary renders a soak run in a few lines for people: how long it
// took, and the claim's mean time and the table's size early, while
// vacuum was held back, and late.
func SoakSummary(s result.Soak) []string {
	out := []string{fmt.Sprintf("soak of %s: %d of %d events published in %s (%.0f/s)%s",
		soakName(s.Contender), s.Published, s.Events, fmtLatency(s.Duration()), float64(s.Published)/max(s.Seconds, 1e-9),
		map[bool]string{true: ", stopped at its timeout", false: ""}[s.TimedOut])}
	for _, p := range soakPeriods(s) {
		out = append(out, fmt.Sprintf("  %-24s claim %6.2f ms mean, up to %d dead tuples, up to %s of table and indexes",
			p.name+":", s.ClaimMean(p.from, p.to), p.dead, result.Bytes(p.size)))
	}
	out = append(out, "  "+s.Config)
	for _, n := range s.Notes {
		out = append(out, "  note: "+n)
	}
	return out
}

// soakPeriod is a stretch of a soak run, for its summary.
type soakPeriod struct {
	name     string
	from, to float64
	dead     int64
	size     int64
}

// soakPeriods splits a run into before the vacuum was held back, while it
// was, and after.
func soakPeriods(s result.Soak) []soakPeriod {
	ps := []soakPeriod{{name: "before vacuum held back", from: 0, to: s.HoldFrom}, {name: "while vacuum held back", from: s.HoldFrom, to: s.HoldTo},
		{name: "after", from: s.HoldTo, to: s.Seconds + 1}}
	if s.HoldFrom == 0 {
		ps = []soakPeriod{{name: "whole run", from: 0, to: s.Seconds + 1}}
	}
	for i := range ps {
		for _, x := range s.Samples {
			if x.At > ps[i].from && x.At <= ps[i].to {
				ps[i].dead = max(ps[i].dead, x.DeadTuples)
				ps[i].size = max(ps[i].size, x.TableBytes+x.IndexBytes)
			}
		}
	}
	return ps
}

// soakName is how the report names a soak's contender: ours for this
// repository's relay.
func soakName(contender string) string {
	if contender == "relay" {
		return "ours"
	}
	return contender
}

// soakSeries is one line of a soak plot.
type soakSeries struct {
	name   string
	colour string
	value  func(result.SoakSample) float64
}

// soakPlot is one plot of a soak run: its file name, title and lines.
type soakPlot struct {
	file, title, unit string
	series            []soakSeries
}

var soakPlots = []soakPlot{
	{"soak-claim.svg", "claim statement, mean execution time", "ms", []soakSeries{
		{"claim", "#1f77b4", func(x result.SoakSample) float64 { return x.ClaimMs }}}},
	{"soak-size.svg", "outbox table and its indexes", "MiB", []soakSeries{
		{"table", "#2ca02c", func(x result.SoakSample) float64 { return float64(x.TableBytes) / (1 << 20) }},
		{"indexes", "#ff7f0e", func(x result.SoakSample) float64 { return float64(x.IndexBytes) / (1 << 20) }}}},
	{"soak-tuples.svg", "dead tuples", "tuples", []soakSeries{
		{"dead", "#d62728", func(x result.SoakSample) float64 { return float64(x.DeadTuples) }}}},
	{"soak-rate.svg", "events published a second", "/s", []soakSeries{
		{"published", "#9467bd", func(x result.SoakSample) float64 { return x.Rate }}}},
}

// soakPlotSVG draws one plot of s over time, the time vacuum was held
// back shaded.
func soakPlotSVG(s result.Soak, p soakPlot) string {
	const w, h, left, top, bottom = 720.0, 220.0, 64.0, 28.0, 190.0
	right := w - 16
	maxX := max(s.Seconds, 1)
	maxY := 0.0
	for _, x := range s.Samples {
		for _, sr := range p.series {
			maxY = max(maxY, sr.value(x))
		}
	}
	step := niceNumber(maxY, 4)
	maxY = step * float64(int(maxY/step)+1)
	px := func(t float64) float64 { return left + (right-left)*t/maxX }
	py := func(v float64) float64 { return bottom - (bottom-top)*v/maxY }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 %d %d" width="%d" height="%d" font-family="sans-serif" font-size="11">`, int(w), int(h), int(w), int(h))
	fmt.Fprintf(&b, `<text x="8" y="16" font-size="13">%s: %s (%s)</text>`, esc(soakName(s.Contender)), esc(p.title), esc(p.unit))
	if s.HoldTo > s.HoldFrom {
		fmt.Fprintf(&b, `<rect x="%s" y="%s" width="%s" height="%s" fill="#eeeeee"/>`, f1(px(s.HoldFrom)), f1(top), f1(px(s.HoldTo)-px(s.HoldFrom)), f1(bottom-top))
		fmt.Fprintf(&b, `<text x="%s" y="%s" fill="#777777">vacuum held back</text>`, f1(px(s.HoldFrom)+4), f1(top+12))
	}
	for v := 0.0; v <= maxY+step/2; v += step {
		fmt.Fprintf(&b, `<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="#dddddd"/>`, f1(left), f1(py(v)), f1(right), f1(py(v)))
		fmt.Fprintf(&b, `<text x="%s" y="%s" text-anchor="end">%s</text>`, f1(left-6), f1(py(v)+4), fmtNum(v))
	}
	xstep := niceNumber(maxX, 6)
	for t := 0.0; t <= maxX; t += xstep {
		fmt.Fprintf(&b, `<text x="%s" y="%s" text-anchor="middle">%ss</text>`, f1(px(t)), f1(bottom+16), fmtNum(t))
	}
	fmt.Fprintf(&b, `<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="#888888"/>`, f1(left), f1(bottom), f1(right), f1(bottom))
	for i, sr := range p.series {
		var pts []string
		for _, x := range s.Samples {
			pts = append(pts, f1(px(x.At))+","+f1(py(sr.value(x))))
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.5" points="%s"/>`, sr.colour, strings.Join(pts, " "))
		if len(p.series) > 1 {
			fmt.Fprintf(&b, `<text x="%s" y="16" fill="%s">%s</text>`, f1(right-140+float64(i)*70), sr.colour, esc(sr.name))
		}
	}
	b.WriteString(`</svg>`)
	return b.String()
}

// WriteSoakPlots writes the plots of f's run beside dir's soak.json and
// names them in f.Plots.
func WriteSoakPlots(dir string, f *SoakFile) error {
	f.Plots = nil
	for _, p := range soakPlots {
		if err := WriteAtomic(filepath.Join(dir, p.file), []byte(soakPlotSVG(f.Soak, p)+"\n")); err != nil {
			return fmt.Errorf("writing the soak's plot %s: %w", p.file, err)
		}
		f.Plots = append(f.Plots, p.file)
	}
	return nil
}

// soakPage is the HTML page of one soak run.
var soakPage = template.Must(template.New("soak").Parse(`<!doctype html>
<html><head><meta charset="utf-8"><title>outboxlab soak: {{.Contender}}</title>
<style>body{font-family:sans-serif;margin:2em;max-width:60em}pre{background:#f6f6f6;padding:1em;white-space:pre-wrap}</style></head>
<body><h1>Soak: {{.Contender}}</h1>
<pre>{{.Summary}}</pre>
{{range .Plots}}<div>{{.}}</div>{{end}}
</body></html>
`))

// WriteSoakHTML writes the HTML page of f's run, its summary and plots,
// to path.
func WriteSoakHTML(path string, f SoakFile) error {
	v := struct {
		Contender string
		Summary   string
		Plots     []template.HTML
	}{Contender: soakName(f.Soak.Contender), Summary: strings.Join(SoakSummary(f.Soak), "\n")}
	for _, p := range soakPlots {
		v.Plots = append(v.Plots, template.HTML(soakPlotSVG(f.Soak, p))) //nolint:gosec // drawn here, its text escaped
	}
	var b strings.Builder
	if err := soakPage.Execute(&b, v); err != nil {
		return fmt.Errorf("rendering %s: %w", path, err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return WriteAtomic(path, []byte(b.String()))
}

// writeSoaks renders REPORT.md's section of the soak runs: a row per run,
// then each run's plots, linked from the files beside its soak.json.
func writeSoaks(s *strings.Builder, soaks []*SoakFile, page Meta) {
	if len(soaks) == 0 {
		return
	}
	s.WriteString("## Soak: the outbox as it ages\n\n")
	s.WriteString("Each run pushed its events through one relay's outbox (`outboxlab soak`), staging them in chunks as the relay drained them, and sampled the figures every 5 s; from a third of the events published to two thirds, a REPEATABLE READ transaction held back vacuum. The claim is the mean execution time of the relay's claim statement on the database (pg_stat_statements); sizes and dead tuples are the outbox table's at the end of each interval.\n\n")
	s.WriteString("| relay | events | took | published/s | claim before, ms | claim while vacuum held back, ms | claim after, ms | most dead tuples | largest table + indexes |\n")
	s.WriteString("|---|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, f := range soaks {
		x := f.Soak
		var dead, size int64
		for _, p := range x.Samples {
			dead, size = max(dead, p.DeadTuples), max(size, p.TableBytes+p.IndexBytes)
		}
		fmt.Fprintf(s, "| %s | %d of %d | %s | %.0f | %.2f | %.2f | %.2f | %d | %s |\n", cell(soakName(x.Contender)), x.Published, x.Events, fmtLatency(x.Duration()),
			float64(x.Published)/max(x.Seconds, 1e-9), x.ClaimMean(0, x.HoldFrom), x.ClaimMean(x.HoldFrom, x.HoldTo), x.ClaimMean(x.HoldTo, x.Seconds+1),
			dead, result.Bytes(size))
	}
	s.WriteString("\n")
	for _, f := range soaks {
		fmt.Fprintf(s, "### %s\n\n", mdCode(soakName(f.Soak.Contender)))
		sectionMeta(s, f.Meta, page)
		fmt.Fprintf(s, "%s. The claim statement: %s.\n\n", f.Soak.Config, mdCode(f.Soak.ClaimStatement))
		for _, n := range f.Soak.Notes {
			fmt.Fprintf(s, "- %s\n", n)
		}
		if len(f.Soak.Notes) > 0 {
			s.WriteString("\n")
		}
		for _, p := range f.Plots {
			fmt.Fprintf(s, "![%s](%s)\n", strings.TrimSuffix(p, ".svg"), filepath.ToSlash(filepath.Join(f.dir, p)))
		}
		s.WriteString("\n")
		if f.findings != "" {
			fmt.Fprintf(s, "#### Findings\n\n_What reading the run's figures showed (%s of the bundle)._\n\n%s\n\n", mdCode(FileFindings), f.findings)
		}
	}
}
