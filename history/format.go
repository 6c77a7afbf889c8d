package history

import (
	"fmt"
	"strings"
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
	// Retry is a relay recording a row-level failure; Attempts holds the
	// attempts after it, and Parked is set when the row was faulted.
	Retry Func = "retry"
	// Park is a relay faulting a row at once.
	Park Func = "park"
	// Sweep is a relay deleting processed rows; ok carries the Events
	// deleted.
	Sweep Func = "sweep"
	// Deliver is the broker handing Events to a consumer; Redelivered marks
	// a redelivery.
	Deliver Func = "deliver"
	// Apply is a consumer applying an event's effect; ok: applied,
	// Duplicate when the inbox absorbed it without a second effect.
	Apply Func = "apply"
	// FaultStart and FaultStop bracket a fault window; Fault identifies it.
	FaultStart Func = "fault-start"
	FaultStop  Func = "fault-stop"
	// Crash records that Process died (memory lost); Restart that it came
	// back.
	Crash   Func = "crash"
	Restart Func = "restart"
	// Phase marks the start of a run phase: Phase is PhaseSafety,
	// PhaseLiveness or PhaseCheck.
	Phase Func = "phase"
	// Failpoint records that Process reached the failpoint named in
	// Meta.Failpoint, before the failpoint acted (a relay writes it, and
	// makes it durable, before a failpoint that may kill it).
	Failpoint Func = "failpoint"
	// Stop records that Process stopped cleanly: what it had in flight was
	// settled or abandoned and it recorded nothing after. A process whose
	// records end without a Stop died.
	Stop Func = "stop"
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
	// Meta holds the typed details of the operation; its fields are
	// promoted, so op.Attempts reads the attempts of a retry.
	Meta
	// Error is the error text of a fail or info.
	Error string `json:"error,omitempty"`
}

// Meta is the typed detail of an operation. Which fields a record carries
// depends on its function; checkers read only these fields, never Detail.
type Meta struct {
	// Fault identifies the fault of a FaultStart or FaultStop record.
	Fault *Fault `json:"fault,omitempty"`
	// Phase names the phase a Phase record starts: PhaseSafety,
	// PhaseLiveness or PhaseCheck.
	Phase string `json:"phase,omitempty"`
	// Attempts is a row's attempts after a Retry (at least 1).
	Attempts int `json:"attempts,omitempty"`
	// Parked says a Retry reached the attempt limit and faulted the row.
	Parked bool `json:"parked,omitempty"`
	// DBTime is the database clock at the statement a relay record is
	// about: a Claim (locked_at), a Mark (processed_at), a Retry, a Sweep.
	DBTime time.Time `json:"db_time,omitzero"`
	// Until is a time of the database clock after which a row is eligible
	// again: on a Claim ok the lease end (locked_until) of the rows it
	// claimed, on a Retry ok the row's next eligible time after its
	// backoff.
	Until time.Time `json:"until,omitzero"`
	// Cutoff, on a Sweep ok, is the retention cutoff of the database clock:
	// processed rows older than it were deleted.
	Cutoff time.Time `json:"cutoff,omitzero"`
	// Fenced counts the rows of a Mark ok (or the row of a Retry or Park
	// fail) that the lease fence left untouched: the relay no longer held
	// their lease, and the statement affected no row of them.
	Fenced int `json:"fenced,omitempty"`
	// Confirm is how the broker answered a relay's Publish: ConfirmAck,
	// ConfirmNack, ConfirmReturn, ConfirmTimeout or ConfirmClosed.
	Confirm string `json:"confirm,omitempty"`
	// Failpoint names the failpoint of a Failpoint record.
	Failpoint string `json:"failpoint,omitempty"`
	// CausedBy, on a Commit invoke, names the events whose consumption
	// caused the events of this commit.
	CausedBy []string `json:"caused_by,omitempty"`
	// Held, on a Commit invoke, is how long the transaction is held open
	// on purpose before its COMMIT (a slow request): not time the
	// database made it wait.
	Held time.Duration `json:"held_ns,omitempty"`
	// SQLState, on a Commit fail, is the SQLSTATE of the database's
	// error (40001 for a serialization failure, 40P01 for a deadlock).
	SQLState string `json:"sqlstate,omitempty"`
	// Queue names the queue of a Deliver when a run has several.
	Queue string `json:"queue,omitempty"`
	// Redelivered is the broker's redelivery flag on a Deliver.
	Redelivered bool `json:"redelivered,omitempty"`
	// Duplicate, on an Apply ok, says the inbox absorbed the delivery with
	// no second effect.
	Duplicate bool `json:"duplicate,omitempty"`
	// Detail is a few words for people reading a timeline ("failpoint
	// after-confirm-before-mark"); no checker reads it.
	Detail string `json:"detail,omitempty"`
}

// Confirm outcomes carried in Meta.Confirm of a Publish completion.
const (
	// ConfirmAck: the broker confirmed the message (ok).
	ConfirmAck = "ack"
	// ConfirmNack: the broker refused it with a negative confirm (fail).
	ConfirmNack = "nack"
	// ConfirmReturn: the broker returned it as unroutable (fail).
	ConfirmReturn = "return"
	// ConfirmTimeout: no confirm came within the publish timeout; the
	// broker may hold the message (info).
	ConfirmTimeout = "timeout"
	// ConfirmClosed: the channel or connection closed before the confirm;
	// the broker may hold the message (info).
	ConfirmClosed = "closed"
)

// Phase names carried in Meta.Phase of a Phase record.
const (
	// PhaseControl runs the first share of the workload before any relay
	// replica starts: the producers' transactions without a relay, the
	// control of what the relay costs them.
	PhaseControl = "control"
	// PhaseSafety runs the workload under faults.
	PhaseSafety = "safety"
	// PhaseLiveness heals every fault and waits for the backlog to drain.
	PhaseLiveness = "liveness"
	// PhaseCheck runs the checkers over the history and final state.
	PhaseCheck = "check"
)

// FaultClass says which part of the system a fault hits. It is shared by
// the fault injectors (chaos, sim), the checkers and the reports; a
// checker decides what a fault can explain from its class and targets,
// never from its name.
type FaultClass string

// Fault classes.
const (
	// ClassBroker: the broker is down, unreachable or slow, or confirms are
	// lost, as seen by the fault's targets.
	ClassBroker FaultClass = "broker"
	// ClassDB: the database is down, unreachable or slow.
	ClassDB FaultClass = "db"
	// ClassProcess: a relay, producer or consumer is killed, paused,
	// stopped or restarted, or dies at a failpoint.
	ClassProcess FaultClass = "process"
	// ClassClock: a process's clock is skewed.
	ClassClock FaultClass = "clock"
	// ClassOther: every other fault, e.g. a nack storm or a cut between
	// two parts of the harness that are neither broker nor database.
	ClassOther FaultClass = "other"
)

// Classes lists every fault class, in the order reports show them.
var Classes = []FaultClass{ClassBroker, ClassDB, ClassProcess, ClassClock, ClassOther}

// Valid reports whether c is one of Classes.
func (c FaultClass) Valid() bool {
	for _, k := range Classes {
		if c == k {
			return true
		}
	}
	return false
}

// Fault identifies one fault of a run: its name (unique within the run,
// for people and for pairing a start with its stop), what it does (Kind:
// "down", "kill", "pause", "clock-skew", ...), which part of the system it
// hits (Class) and which processes of the history it affects (Targets;
// empty means every process).
type Fault struct {
	Name    string     `json:"name"`
	Kind    string     `json:"kind,omitempty"`
	Class   FaultClass `json:"class"`
	Targets []string   `json:"targets,omitempty"`
}

// Hits reports whether the fault affects process: it has no targets, or
// process is one of them.
func (f Fault) Hits(process string) bool {
	if len(f.Targets) == 0 {
		return true
	}
	for _, t := range f.Targets {
		if t == process {
			return true
		}
	}
	return false
}

// String renders the op on one line, as a person reads a timeline.
func (o Op) String() string {
	s := fmt.Sprintf("%6d %-12s %-6s %-11s", o.Index, o.Process, o.Type, o.F)
	if len(o.Events) == 1 {
		s += " " + o.Events[0]
	} else if len(o.Events) > 1 {
		s += fmt.Sprintf(" %s (+%d)", o.Events[0], len(o.Events)-1)
	}
	if d := o.Meta.String(); d != "" {
		s += " " + d
	}
	if o.Error != "" {
		s += " err=" + o.Error
	}
	return s
}

// String renders the fields of m that are set, for timelines.
func (m Meta) String() string {
	var parts []string
	if m.Fault != nil {
		f := m.Fault.Name + " [" + string(m.Fault.Class)
		if m.Fault.Kind != "" {
			f += "/" + m.Fault.Kind
		}
		if len(m.Fault.Targets) > 0 {
			f += " -> " + strings.Join(m.Fault.Targets, ",")
		}
		parts = append(parts, f+"]")
	}
	if m.Phase != "" {
		parts = append(parts, m.Phase)
	}
	if m.Attempts > 0 {
		parts = append(parts, fmt.Sprintf("attempts=%d", m.Attempts))
	}
	if m.Parked {
		parts = append(parts, "parked")
	}
	if !m.DBTime.IsZero() {
		parts = append(parts, "db_time="+m.DBTime.UTC().Format(time.RFC3339Nano))
	}
	if !m.Until.IsZero() {
		parts = append(parts, "until="+m.Until.UTC().Format(time.RFC3339Nano))
	}
	if !m.Cutoff.IsZero() {
		parts = append(parts, "cutoff="+m.Cutoff.UTC().Format(time.RFC3339Nano))
	}
	if m.Fenced > 0 {
		parts = append(parts, fmt.Sprintf("fenced=%d", m.Fenced))
	}
	if m.Confirm != "" {
		parts = append(parts, "confirm="+m.Confirm)
	}
	if m.Failpoint != "" {
		parts = append(parts, "failpoint="+m.Failpoint)
	}
	if m.Held > 0 {
		parts = append(parts, "held="+m.Held.String())
	}
	if m.SQLState != "" {
		parts = append(parts, "sqlstate="+m.SQLState)
	}
	if len(m.CausedBy) > 0 {
		parts = append(parts, "caused-by="+strings.Join(m.CausedBy, ","))
	}
	if m.Queue != "" {
		parts = append(parts, "queue="+m.Queue)
	}
	if m.Redelivered {
		parts = append(parts, "redelivered")
	}
	if m.Duplicate {
		parts = append(parts, "duplicate")
	}
	if m.Detail != "" {
		parts = append(parts, m.Detail)
	}
	return strings.Join(parts, " ")
}

// Version is the version of the record format. The first line of a history
// file, and of every lifetime in a records file, is the header
// {"outboxlab_history":Version}; ReadJSONL and ReadRecords refuse any other
// version.
const Version = 2

// Header is the first line of a history file and of each lifetime of a
// records file.
const Header = `{"outboxlab_history":2}`
