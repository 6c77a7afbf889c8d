// Package history records what happened during a run as a sequence of
// operations, in the model of Jepsen: a process invokes an operation, and
// later the same process completes it as ok, fail or info (outcome unknown).
// Producers, relays, consumers and the fault injector all record into one
// History, which checkers read after the run. Histories are written and read
// as JSON Lines.
package history

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"sync"
	"time"
)

// Type is the kind of an operation record.
type Type string

// Operation types.
const (
	// Invoke opens an operation.
	Invoke Type = "invoke"
	// OK completes an operation that definitely happened.
	OK Type = "ok"
	// Fail completes an operation that definitely did not happen.
	Fail Type = "fail"
	// Info completes an operation whose outcome is unknown, such as a COMMIT
	// whose reply was cut.
	Info Type = "info"
)

// Func names what an operation does.
type Func string

// Operation functions shared by every tier.
const (
	// Commit is a producer's business transaction staging Events. ok: it
	// committed; fail: it definitely rolled back or never ran; info: unknown.
	Commit Func = "commit"
	// Publish is an unsafe producer publishing directly to the broker, or a
	// relay publishing Events (ok once confirmed).
	Publish Func = "publish"
	// Claim is a relay leasing rows; ok carries the claimed Events.
	Claim Func = "claim"
	// Mark is a relay marking rows processed; ok carries the Events actually
	// marked (rows whose lease was lost are missing from it).
	Mark Func = "mark"
	// Retry is a relay recording a row-level failure; Value holds the
	// attempts after it, and "parked" when the row was faulted.
	Retry Func = "retry"
	// Park is a relay faulting a row at once.
	Park Func = "park"
	// Sweep is a relay deleting processed rows; ok carries the Events
	// deleted.
	Sweep Func = "sweep"
	// Deliver is the broker handing Events to a consumer; Value "redelivered"
	// marks a redelivery.
	Deliver Func = "deliver"
	// Apply is a consumer applying an event's effect; ok: applied, Value
	// "duplicate" when the inbox absorbed it without a second effect.
	Apply Func = "apply"
	// FaultStart and FaultStop bracket a fault window; Value names the fault.
	FaultStart Func = "fault-start"
	FaultStop  Func = "fault-stop"
	// Crash records that Process died (memory lost); Restart that it came
	// back.
	Crash   Func = "crash"
	Restart Func = "restart"
	// Phase marks the start of a run phase: Value is "safety", "liveness"
	// or "check".
	Phase Func = "phase"
)

// Op is one operation record.
type Op struct {
	// Index is the record's position in the history, assigned by the
	// recorder: a monotonic sequence shared by all processes.
	Index int64 `json:"index"`
	// Time is the recording process's own clock, which may be skewed.
	Time time.Time `json:"time"`
	// Process is who recorded it: "producer-1", "relay-a", "consumer",
	// "nemesis".
	Process string `json:"process"`
	Type    Type   `json:"type"`
	F       Func   `json:"f"`
	// Events are the outbox event ids the operation is about.
	Events []string `json:"events,omitempty"`
	// Value is a small free-form detail: a fault name, a count, a flag.
	Value string `json:"value,omitempty"`
	// Error is the error text of a fail or info.
	Error string `json:"error,omitempty"`
}

// String renders the op on one line, as a person reads a timeline.
func (o Op) String() string {
	s := fmt.Sprintf("%6d %-12s %-6s %-11s", o.Index, o.Process, o.Type, o.F)
	if len(o.Events) == 1 {
		s += " " + o.Events[0]
	} else if len(o.Events) > 1 {
		s += fmt.Sprintf(" %s (+%d)", o.Events[0], len(o.Events)-1)
	}
	if o.Value != "" {
		s += " " + o.Value
	}
	if o.Error != "" {
		s += " err=" + o.Error
	}
	return s
}

// Recorder appends operations; it is safe for concurrent use. The zero
// value is ready and uses time.Now for ops recorded without a time.
type Recorder struct {
	mu  sync.Mutex
	ops []Op
	// Now stamps ops whose Time is zero. Default time.Now.
	Now func() time.Time
}

// Record appends op, assigning its Index (and Time, when zero), and returns
// it as stored.
func (r *Recorder) Record(op Op) Op {
	r.mu.Lock()
	defer r.mu.Unlock()
	op.Index = int64(len(r.ops))
	if op.Time.IsZero() {
		if r.Now != nil {
			op.Time = r.Now()
		} else {
			op.Time = time.Now()
		}
	}
	r.ops = append(r.ops, op)
	return op
}

// Ops returns a copy of the history so far.
func (r *Recorder) Ops() []Op {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Op(nil), r.ops...)
}

// Len returns the number of ops recorded.
func (r *Recorder) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.ops)
}

// WriteJSONL writes ops as JSON Lines, one op per line.
func WriteJSONL(w io.Writer, ops []Op) error {
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	for _, op := range ops {
		if err := enc.Encode(op); err != nil {
			return fmt.Errorf("writing op %d: %w", op.Index, err)
		}
	}
	return bw.Flush()
}

// ReadJSONL reads a history written by WriteJSONL.
func ReadJSONL(r io.Reader) ([]Op, error) {
	var ops []Op
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	line := 0
	for sc.Scan() {
		line++
		if len(sc.Bytes()) == 0 {
			continue
		}
		var op Op
		if err := json.Unmarshal(sc.Bytes(), &op); err != nil {
			return nil, fmt.Errorf("history line %d: %w", line, err)
		}
		ops = append(ops, op)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading history: %w", err)
	}
	return ops, nil
}
