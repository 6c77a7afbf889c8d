package chaos

import (
	"context"
	"errors"
	"fmt"

	"github.com/outboxlab/outboxlab/chaos/inproc"
	"github.com/outboxlab/outboxlab/history"
)

// The failpoints themselves live in package inproc, which the relay binary
// links without the harness; FailpointFault programs them as a fault.

// FailpointFault programs a failpoint of an in-process relay or producer
// for the length of a fault window: Inject sets the terms, Heal clears
// them (releasing any pause).
type FailpointFault struct {
	marks
	fp    *inproc.Failpoints
	point string
	terms string
	class history.FaultClass
	base  int64
}

// NewFailpointFault returns a fault that programs failpoint name of fp with
// terms while it is injected. class is the class of the process that
// passes the failpoint (history.ClassProcess when empty); targets names
// those processes. Its hits are the failpoint's hits since the fault was
// built.
func NewFailpointFault(fp *inproc.Failpoints, name, terms string, class history.FaultClass, targets ...string) (*FailpointFault, error) {
	if fp == nil {
		return nil, errors.New("failpoint fault: nil failpoints")
	}
	if err := fp.Check(name, terms); err != nil {
		return nil, fmt.Errorf("failpoint fault: %w", err)
	}
	if class == "" {
		class = history.ClassProcess
	}
	f := &FailpointFault{fp: fp, point: name, terms: terms, class: class, base: fp.Hits(name)}
	f.targets = targets
	return f, nil
}

// Name returns "failpoint NAME=TERMS".
func (f *FailpointFault) Name() string { return "failpoint " + f.point + "=" + f.terms }

// Class returns the class of the process that passes the failpoint.
func (f *FailpointFault) Class() history.FaultClass { return f.class }

// Kind returns KindFailpoint.
func (f *FailpointFault) Kind() string { return KindFailpoint }

// Inject programs the failpoint.
func (f *FailpointFault) Inject(context.Context) error {
	f.active.Store(true)
	return f.fp.Set(f.point, f.terms)
}

// Heal clears the failpoint.
func (f *FailpointFault) Heal(context.Context) error {
	if f.active.Swap(false) {
		f.fp.Clear(f.point)
	}
	return nil
}

// Hits counts the failpoint's actions since the fault was built.
func (f *FailpointFault) Hits() int64 { return f.fp.Hits(f.point) - f.base }
