package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/outboxlab/outboxlab/internal/lesson"
	"github.com/outboxlab/outboxlab/internal/report"
	"github.com/outboxlab/outboxlab/scenarios"
	"github.com/outboxlab/outboxlab/workload"
)

// lessonAll runs every lesson, the tour.
const lessonAll = "all"

// runLessons runs the lessons o.lesson names, each on real containers:
// its cases side by side, one sentence each from the run's counts, and
// an HTML page per lesson. It exits 0 when every contrast failed by the
// checker its lesson teaches and every other case passed, 1 otherwise.
func (o *demoOptions) runLessons(ctx context.Context, std *stdio, d deps) int {
	var lessons []lesson.Lesson
	if o.lesson == lessonAll {
		lessons = lesson.All()
	} else {
		l, ok := lesson.Lookup(o.lesson)
		if !ok {
			return usageErr(std, "demo", "unknown lesson %q: want %s or %s", o.lesson, strings.Join(lesson.Names(), ", "), lessonAll)
		}
		lessons = []lesson.Lesson{l}
	}
	if o.out == "" {
		return usageErr(std, "demo", "--out must name a directory: a lesson always writes its page")
	}
	if err := checkOutDir(o.out); err != nil {
		return unavailable(std, "demo", "--out %s: %v", o.out, err)
	}
	if code := d.needDocker(ctx, std, "demo"); code != exitOK {
		return code
	}
	for _, l := range lessons {
		for _, c := range l.Cases {
			if code := d.needRelay(ctx, std, "demo", lessonRelay(c)); code != exitOK {
				return code
			}
		}
	}
	start := std.now()
	w := std.out
	fmt.Fprintf(w, "SEED=%d\n", o.seed.v)
	code := exitOK
	for _, l := range lessons {
		if c := o.runLesson(ctx, std, d, l); c != exitOK {
			code = c
		}
		if code == exitUsage || ctx.Err() != nil {
			break
		}
	}
	fmt.Fprintf(w, "\ntook %s\n", std.now().Sub(start).Round(time.Second))
	return code
}

// lessonRelay is the relay a case runs: its own, or ours.
func lessonRelay(c lesson.Case) scenarios.RelayUnderTest {
	if c.Relay.Name == "" && c.Relay.Image == "" && len(c.Relay.Command) == 0 {
		return scenarios.RelayUnderTest{Name: "ours"}
	}
	return c.Relay
}

// runLesson runs one lesson's cases and prints them.
func (o *demoOptions) runLesson(ctx context.Context, std *stdio, d deps, l lesson.Lesson) int {
	w := std.out
	fmt.Fprintf(w, "\nLesson %s: %s %s\n", l.Name, l.Question, l.Answer)
	fmt.Fprintf(w, "Every case runs scenario %s with seed %d:\n", l.Scenario, o.seed.v)
	for _, c := range l.Cases {
		role := "right"
		if c.Contrast {
			role = "contrast"
		}
		fmt.Fprintf(w, "  %-12s (%s) %s\n", c.Label, role, c.How)
	}
	specs := make([]runSpec, len(l.Cases))
	for i, c := range l.Cases {
		mode := c.Mode
		if mode == "" {
			mode = workload.Outbox
		}
		specs[i] = runSpec{Scenario: l.Scenario, Seed: o.seed.v, Relay: lessonRelay(c), Variant: mode,
			Duration: o.duration, Consumer: c.Consumer}
		if o.eventsSet {
			specs[i].Events = o.events
		}
	}
	_, results, code, _ := runScenarios(ctx, std, d, "demo", specs, false, nil)
	if code != exitOK {
		return code
	}
	if len(results) != len(l.Cases) {
		return unavailable(std, "demo", "lesson %s: only %d of its %d cases could run", l.Name, len(results), len(l.Cases))
	}
	fmt.Fprintln(w)
	countsTable(w, results, func(i int, _ scenarios.Result) string { return l.Cases[i].Label }, "case")
	fmt.Fprintln(w)
	code = exitOK
	runs := make([]report.Run, len(results))
	for i, r := range results {
		c := l.Cases[i]
		ok, why := c.Judge(r)
		mark := "as the lesson says"
		if !ok {
			mark, code = "NOT as the lesson says", exitFail
		}
		fmt.Fprintf(w, "%s: %s, %s: %s\n", c.Label, r.Verdict(), mark, why)
		runs[i] = toRun(r, c.Label)
		runs[i].ExpectFail = c.Contrast
		runs[i].Note = why
		if !ok {
			fmt.Fprintf(w, "  replay: %s\n", r.Replay)
		}
	}
	page := report.Page{
		Title: fmt.Sprintf("outboxlab lesson %s: %s %s", l.Name, l.Question, l.Answer),
		Intro: lessonIntro(l, o.seed.v),
		Meta:  report.CollectMeta(ctx, std.now()),
		Runs:  runs,
	}
	path, err := writeHTML(o.out, "lesson-"+l.Name+".html", page)
	if err != nil {
		return unavailable(std, "demo", "%v", err)
	}
	fmt.Fprintf(w, "HTML page: %s\n", path)
	return code
}

// lessonIntro says what a lesson's page shows.
func lessonIntro(l lesson.Lesson, seed uint64) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s. Every case runs scenario %s with seed %d on real PostgreSQL and RabbitMQ: ", l.Question, l.Answer, l.Scenario, seed)
	for i, c := range l.Cases {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "%s, %s", c.Label, c.How)
	}
	b.WriteString(".")
	return b.String()
}
