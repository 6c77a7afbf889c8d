package main

import (
	"fmt"
	"io"
	"sync"
	"time"
)

// logger writes plain text lines to stderr:
//
//	2026-12-01T12:00:00.123Z seqrelay relay-a: claimed 3 rows
//
// The time is the process's own clock, offset by OUTBOX_CLOCK_OFFSET.
type logger struct {
	mu     sync.Mutex
	w      io.Writer
	id     string
	offset time.Duration
}

func newLogger(w io.Writer, id string, offset time.Duration) *logger {
	return &logger{w: w, id: id, offset: offset}
}

// now is the process's own clock.
func (l *logger) now() time.Time { return time.Now().Add(l.offset) }

func (l *logger) printf(format string, args ...any) {
	line := fmt.Sprintf(format, args...)
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintf(l.w, "%s seqrelay %s: %s\n", l.now().UTC().Format("2006-01-02T15:04:05.000Z"), l.id, line)
}
