package chaos

import (
	"github.com/outboxlab/outboxlab/contract"
	"github.com/outboxlab/outboxlab/history"

	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outboxlab/outboxlab/chaos/inproc"
)

// Clock is a process clock skewed by an offset that can change at any
// moment: Now returns time.Now() plus the offset. The zero value and a nil
// *Clock have no offset. A Clock is safe for concurrent use. The database
// clock stays the authority for leases; a skewed Clock is what a relay or
// producer uses for logs, metrics, sleeps and event timestamps.
type Clock struct {
	offset atomic.Int64
}

// NewClock returns a clock skewed by offset.
func NewClock(offset time.Duration) *Clock {
	c := &Clock{}
	c.offset.Store(int64(offset))
	return c
}

// ClockFromEnv returns a clock skewed by the offset in contract.EnvClockOffset (no
// offset when the variable is unset or empty).
func ClockFromEnv() (*Clock, error) {
	d, err := ParseClockOffset(os.Getenv(contract.EnvClockOffset))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", contract.EnvClockOffset, err)
	}
	return NewClock(d), nil
}

// Now returns the skewed time.
func (c *Clock) Now() time.Time {
	if c == nil {
		return time.Now()
	}
	return time.Now().Add(time.Duration(c.offset.Load()))
}

// Offset returns the current offset.
func (c *Clock) Offset() time.Duration {
	if c == nil {
		return 0
	}
	return time.Duration(c.offset.Load())
}

// SetOffset sets the offset and returns the previous one.
func (c *Clock) SetOffset(d time.Duration) time.Duration {
	return time.Duration(c.offset.Swap(int64(d)))
}

// FormatClockOffset renders d as contract.EnvClockOffset expects it: see
// inproc.FormatClockOffset.
func FormatClockOffset(d time.Duration) string { return inproc.FormatClockOffset(d) }

// ClockOffsetEnvVar returns "OUTBOX_CLOCK_OFFSET=<d>", ready for a
// container's or command's environment.
func ClockOffsetEnvVar(d time.Duration) string {
	return contract.EnvClockOffset + "=" + FormatClockOffset(d)
}

// ParseClockOffset reads an offset written by FormatClockOffset or by hand
// ("-5m", "+30s"); the empty string is no offset. See
// inproc.ParseClockOffset.
func ParseClockOffset(s string) (time.Duration, error) { return inproc.ParseClockOffset(s) }

// ClockSkew is a fault that moves an in-process clock by an offset while
// it is injected and puts the previous offset back when healed.
type ClockSkew struct {
	marks
	name   string
	clock  *Clock
	offset time.Duration

	mu   sync.Mutex
	prev time.Duration
}

// NewClockSkew returns a fault that sets clock's offset to offset. process
// names whose clock it is ("producer-1", "relay-a"); the fault is named
// "<process> clock <offset>", e.g. "relay-a clock -5m0s".
func NewClockSkew(process string, clock *Clock, offset time.Duration) *ClockSkew {
	f := &ClockSkew{name: process + " clock " + FormatClockOffset(offset), clock: clock, offset: offset}
	f.targets = []string{process}
	return f
}

// Name returns the fault's name.
func (f *ClockSkew) Name() string { return f.name }

// Class returns history.ClassClock.
func (f *ClockSkew) Class() history.FaultClass { return history.ClassClock }

// Kind returns KindClockSkew.
func (f *ClockSkew) Kind() string { return KindClockSkew }

// Offset returns the offset the fault applies.
func (f *ClockSkew) Offset() time.Duration { return f.offset }

// Inject sets the clock's offset, remembering the previous one the first
// time.
func (f *ClockSkew) Inject(context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.clock == nil {
		return fmt.Errorf("injecting %s: nil clock", f.name)
	}
	prev := f.clock.SetOffset(f.offset)
	if !f.active.Swap(true) {
		f.prev = prev
	}
	f.hits.Add(1)
	return nil
}

// Heal restores the offset the clock had before the fault.
func (f *ClockSkew) Heal(context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.active.Swap(false) {
		f.clock.SetOffset(f.prev)
	}
	return nil
}
