package main

import (
	"fmt"
	"io"
	"sync"
	"time"
)

// logger writes plain text lines for people to stderr:
//
//	2026-12-01T12:00:00.123Z rowlock relay-a: batch of 3: 3 published, 0 failed, 0 poison, 0 left pending
//
// stamped by the process's own clock, moved by OUTBOX_CLOCK_OFFSET: the
// only thing that clock does.
type logger struct {
	mu     sync.Mutex
	w      io.Writer
	id     string
	offset time.Duration
}

func newLogger(w io.Writer, id string, offset time.Duration) *logger {
	return &logger{w: w, id: id, offset: offset}
}

func (l *logger) printf(format string, args ...any) {
	line := fmt.Sprintf(format, args...)
	l.mu.Lock()
	defer l.mu.Unlock()
	stamp := time.Now().Add(l.offset).UTC().Format("2006-01-02T15:04:05.000Z")
	fmt.Fprintf(l.w, "%s rowlock %s: %s\n", stamp, l.id, line)
}
