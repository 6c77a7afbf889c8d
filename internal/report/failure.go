package report

import (
	"fmt"
	"io"
	"strings"

	"github.com/outboxlab/outboxlab/checker"
	"github.com/outboxlab/outboxlab/history"
)

// Failure is a failed run as a terminal shows it.
type Failure struct {
	// What names the run: "simulation seed 17", "scenario broker-down".
	What   string
	Seed   uint64
	Report checker.Report
	// Problems are failures beyond the checkers' (a fault that never
	// fired, a run that could not finish).
	Problems []string
	History  []history.Op
	Replay   string
}

// Limits of WriteFailure.
const (
	// FailureEvents is how many offending events per violated invariant
	// WriteFailure shows with their timelines.
	FailureEvents = 3
	// FailureRecords bounds each event's timeline.
	FailureRecords = 14
)

// WriteFailure prints what a person needs to understand and replay a failed
// run: each violated invariant, its first offending events with their
// timelines, the other problems, the seed and the replay command.
func WriteFailure(w io.Writer, f Failure) error {
	p := &errWriter{w: w}
	p.printf("FAIL %s\n", f.What)
	for _, res := range f.Report.Failed() {
		p.printf("violated invariant %s: %s\n", res.Checker, res.Detail)
		for i, id := range res.Offending {
			if i == FailureEvents {
				p.printf("  ... and %d more offending events\n", len(res.Offending)-FailureEvents)
				break
			}
			if why := res.Reasons[id]; why != "" {
				p.printf("  event %s: %s\n", id, why)
			} else {
				p.printf("  event %s\n", id)
			}
			p.printf("%s", EventStory(f.History, id, FailureRecords))
		}
	}
	for _, pr := range f.Problems {
		if restates(f.Report, pr) {
			continue
		}
		p.printf("problem: %s\n", pr)
	}
	p.printf("SEED=%d\n", f.Seed)
	if f.Replay != "" {
		p.printf("replay: %s\n", f.Replay)
	}
	return p.err
}

// restates reports whether a problem only repeats a failed checker's
// verdict ("lost: 3 offending; ..."), already printed above it.
func restates(rep checker.Report, problem string) bool {
	for _, res := range rep.Failed() {
		if strings.HasPrefix(problem, res.Checker+": ") {
			return true
		}
	}
	return false
}

type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) printf(format string, args ...any) {
	if e.err != nil {
		return
	}
	_, e.err = fmt.Fprintf(e.w, format, args...)
}
