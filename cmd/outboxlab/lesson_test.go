package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/outboxlab/outboxlab/checker"
	"github.com/outboxlab/outboxlab/internal/lesson"
	"github.com/outboxlab/outboxlab/scenarios"
	"github.com/outboxlab/outboxlab/workload"
)

// caseKey names a lesson's case by what its spec runs.
func caseKey(scenario, relay, consumer string, mode workload.Mode) string {
	return strings.Join([]string{scenario, relay, consumer, string(mode)}, "|")
}

// lessonRuns returns d with a stand-in for the container runner that
// answers each lesson's case as the lesson says it must (a contrast fails
// by the checker it teaches, the others pass), except the cases whose
// labels are in wrong, which answer the other way.
func lessonRuns(d deps, wrong ...string) deps {
	type want struct {
		c     lesson.Case
		wrong bool
	}
	cases := map[string]want{}
	for _, l := range lesson.All() {
		for _, c := range l.Cases {
			consumer, mode := "", c.Mode
			if c.Consumer != nil {
				consumer = c.Consumer.Name
			}
			if mode == "" {
				mode = workload.Outbox
			}
			isWrong := false
			for _, w := range wrong {
				isWrong = isWrong || w == l.Name+"/"+c.Label
			}
			cases[caseKey(l.Scenario, lessonRelay(c).Name, consumer, mode)] = want{c, isWrong}
		}
	}
	d.runScenarios = func(ctx context.Context, specs []runSpec, _ func(int, scenarios.Progress), _ func(string), _ func(int, runOutcome) error) ([]runOutcome, error) {
		var out []runOutcome
		for _, s := range specs {
			consumer := ""
			if s.Consumer != nil {
				consumer = s.Consumer.Name
			}
			w, ok := cases[caseKey(s.Scenario, s.Relay.Name, consumer, s.Variant)]
			if !ok {
				return out, os.ErrNotExist
			}
			r := scenarios.Result{Scenario: s.Scenario, Relay: s.Relay.Name, Variant: string(s.Variant), Seed: s.Seed, Replay: "replay " + s.Scenario,
				Counts: checker.Counts{Committed: 40, Delivered: 40}}
			if w.c.Contrast != w.wrong {
				r.Problems = []string{w.c.Teaches + ": broken"}
				r.Report = checker.Report{Results: []checker.Result{{Checker: w.c.Teaches, Offending: []string{"e1"}}}}
			} else {
				r.Valid = true
				r.Report = checker.Report{Valid: true}
			}
			out = append(out, runOutcome{Result: r})
		}
		return out, nil
	}
	return d
}

func TestDemoLessons(t *testing.T) {
	dir := t.TempDir()
	code, out, errOut := invokeWith(t, lessonRuns(withDocker(testDeps())), "demo", "--lesson", "all", "--out", dir)
	if code != exitOK {
		t.Fatalf("demo --lesson all: exit %d\n%s%s", code, out, errOut)
	}
	for _, l := range lesson.All() {
		if !strings.Contains(out, "Lesson "+l.Name+": "+l.Question) {
			t.Errorf("the output lacks lesson %s's heading:\n%s", l.Name, out)
		}
		for _, c := range l.Cases {
			if !strings.Contains(out, c.Label+": ") || !strings.Contains(out, c.How) {
				t.Errorf("lesson %s: the output lacks case %q and what it does", l.Name, c.Label)
			}
		}
		if _, err := os.Stat(filepath.Join(dir, "lesson-"+l.Name+".html")); err != nil {
			t.Errorf("lesson %s wrote no page: %v", l.Name, err)
		}
	}
	if strings.Contains(out, "NOT as the lesson says") || !strings.Contains(out, "took ") {
		t.Errorf("every case behaved as its lesson says, and the run says how long it took:\n%s", out)
	}

	// A contrast that passes, and a right case that fails, fail the run.
	for _, wrong := range []string{"poison/drop poison", "at-least-once/inbox"} {
		code, out, _ = invokeWith(t, lessonRuns(withDocker(testDeps()), wrong), "demo", "--lesson", strings.Split(wrong, "/")[0], "--out", t.TempDir())
		label := strings.Split(wrong, "/")[1]
		if code != exitFail || !strings.Contains(out, label+": ") || !strings.Contains(out, "NOT as the lesson says") || !strings.Contains(out, "replay: ") {
			t.Errorf("%s answering wrongly: exit %d, want %d with the case and its replay:\n%s", wrong, code, exitFail, out)
		}
	}

	if code, _, errOut := invokeWith(t, lessonRuns(withDocker(testDeps())), "demo", "--lesson", "nope", "--out", t.TempDir()); code != exitUsage || !strings.Contains(errOut, "at-least-once") {
		t.Errorf("an unknown lesson: exit %d %q, want %d naming the lessons", code, errOut, exitUsage)
	}
	if code, _, _ := invokeWith(t, lessonRuns(withDocker(testDeps())), "demo", "--lesson", "poison", "--json"); code != exitUsage {
		t.Errorf("--lesson with --json: exit %d, want %d", code, exitUsage)
	}
}
