package report

import (
	"bytes"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/outboxlab/outboxlab/workload"

	"github.com/outboxlab/outboxlab/internal/sim"
)

// phantomRun is a simulation of the publish-then-commit producer that
// leaves at least one phantom event, and its seed.
func phantomRun(t *testing.T) sim.Result {
	t.Helper()
	v := sim.Variant{Name: "publish-then-commit", Producer: workload.PublishThenCommit}
	for seed := uint64(1); seed <= 50; seed++ {
		res := sim.Run(seed, sim.Options{Variant: v})
		if !res.Valid && res.Report.Counts.Phantom > 0 {
			return res
		}
	}
	t.Fatal("no seed in 1..50 of the publish-then-commit simulation produced a phantom")
	return sim.Result{}
}

func testPage(t *testing.T) Page {
	bad := phantomRun(t)
	good := sim.Run(7, sim.Options{})
	if !good.Valid {
		t.Fatalf("simulation seed 7 failed:\n%s", good.Report.Summary())
	}
	return Page{
		Title: "outboxlab test report",
		Runs: []Run{
			FromSim(bad, "go run ./cmd/outboxlab sim --seeds 1 --seed 3"),
			FromSim(good, "go run ./cmd/outboxlab sim --seeds 1 --seed 7"),
		},
	}
}

func TestWriteHTMLIsSelfContainedAndDeterministic(t *testing.T) {
	p := testPage(t)
	var a, b bytes.Buffer
	if err := WriteHTML(&a, p); err != nil {
		t.Fatal(err)
	}
	if err := WriteHTML(&b, p); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Error("two renderings of the same page differ")
	}
	out := a.String()
	// Nothing may be fetched: no script, stylesheet, image or font from
	// anywhere; the only URL is the SVG namespace.
	for _, re := range []string{`<script`, `<link`, `<img`, `@import`, `url\(`, `src=`} {
		if regexp.MustCompile(re).MatchString(out) {
			t.Errorf("the report contains %s", re)
		}
	}
	urls := regexp.MustCompile(`https?://[^"'\s<>)]+`).FindAllString(out, -1)
	for _, u := range urls {
		if u != "http://www.w3.org/2000/svg" {
			t.Errorf("the report refers to %s", u)
		}
	}
	phantom, _ := p.Runs[0].Report.Result("phantom")
	for _, want := range []string{
		`class="timeline"`, `class="chart throughput"`, `class="chart latency"`,
		phantom.Offending[0], "offending-row", p.Runs[0].Replay, "FAIL", "PASS",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the report lacks %q", want)
		}
	}
	for _, w := range BuildTimeline(p.Runs[1].History, p.Runs[1].Report, 0).Windows {
		if !strings.Contains(out, w.Name) {
			t.Errorf("the report does not name fault window %q", w.Name)
		}
	}
}

func TestTimelineSVGDrawsOneRowPerEvent(t *testing.T) {
	res := sim.Run(7, sim.Options{})
	tl := BuildTimeline(res.History, res.Report, 5)
	svg := TimelineSVG(tl)
	if got := strings.Count(svg, `class="row-label`); got != len(tl.Events) || got != 5 {
		t.Errorf("%d row labels for %d events (limit 5)", got, len(tl.Events))
	}
	if got := strings.Count(svg, `class="fault"`); got != len(tl.Windows) || got == 0 {
		t.Errorf("%d fault bands for %d windows", got, len(tl.Windows))
	}
}

func TestWriteFailureShowsInvariantEventsSeedAndReplay(t *testing.T) {
	res := phantomRun(t)
	var b bytes.Buffer
	replay := "go run ./cmd/outboxlab sim --seeds 1 --seed 9"
	if err := WriteFailure(&b, Failure{What: "simulation", Seed: res.Seed, Report: res.Report, History: res.History,
		Problems: []string{"fault broker-down never fired", "phantom: " + "restated"}, Replay: replay}); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	phantom, _ := res.Report.Result("phantom")
	for _, want := range []string{
		"FAIL simulation\n", "violated invariant phantom: " + phantom.Detail, "  event " + phantom.Offending[0],
		"problem: fault broker-down never fired\n", fmt.Sprintf("SEED=%d\n", res.Seed), "replay: " + replay + "\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("failure output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "restated") {
		t.Errorf("a problem that restates a failed checker is printed twice:\n%s", out)
	}
	// The offending event's timeline follows it: its commit that failed.
	if !regexp.MustCompile(`(?m)^\s+\d+ producer-\d+\s+fail\s+commit`).MatchString(out) {
		t.Errorf("no failed commit in the timeline:\n%s", out)
	}
}
