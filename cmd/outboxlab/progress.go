package main

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/outboxlab/outboxlab/scenarios"
)

// progressEvery is how often a progress line is printed when the output is
// not a terminal.
const progressEvery = 5 * time.Second

// progress is the live progress line: on a terminal it is rewritten in
// place; elsewhere (a CI log) a line is printed every few seconds.
type progress struct {
	mu    sync.Mutex
	w     io.Writer
	tty   bool
	now   func() time.Time
	every time.Duration
	last  time.Time
	shown bool // a line is on screen (tty) and needs clearing
	off   bool
}

// newProgress returns the progress line of a verb; quiet turns it off. A
// line that is not a terminal gets its first line after progressEvery, so
// that short runs print none.
func newProgress(std *stdio, quiet bool) *progress {
	return &progress{w: std.err, tty: std.tty, now: std.now, every: progressEvery, last: std.now(), off: quiet}
}

// Update shows line.
func (p *progress) Update(line string) {
	if p == nil || p.off {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tty {
		fmt.Fprintf(p.w, "\r\033[K%s", line)
		p.shown = true
		return
	}
	now := p.now()
	if now.Sub(p.last) < p.every {
		return
	}
	p.last = now
	fmt.Fprintln(p.w, line)
}

// Clear removes the line from a terminal before other output.
func (p *progress) Clear() {
	if p == nil || p.off {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tty && p.shown {
		fmt.Fprint(p.w, "\r\033[K")
		p.shown = false
	}
}

// scenarioLine renders a scenario's progress on one line.
func scenarioLine(label string, pr scenarios.Progress) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s  %-8s committed %d  delivered %d", label, pr.Phase, pr.Committed, pr.Delivered)
	if len(pr.Faults) > 0 {
		fmt.Fprintf(&b, "  faults: %s", strings.Join(pr.Faults, ", "))
	} else {
		b.WriteString("  faults: none")
	}
	if pr.Left > 0 {
		fmt.Fprintf(&b, "  left %s", pr.Left.Round(time.Second))
	}
	return b.String()
}
