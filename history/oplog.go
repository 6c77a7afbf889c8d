package history

import "github.com/outboxlab/outboxlab/oplog"

// The operations a history holds, and their encoding, are the record format
// of package oplog, which the production relay links without this package.
// The names below keep history's API for its callers; they are the same
// types and values, not copies.

// Types of the record format.
type (
	Type       = oplog.Type
	Func       = oplog.Func
	Op         = oplog.Op
	Meta       = oplog.Meta
	FaultClass = oplog.FaultClass
	Fault      = oplog.Fault
)

// Constants of the record format.
const (
	Invoke         = oplog.Invoke
	OK             = oplog.OK
	Fail           = oplog.Fail
	Info           = oplog.Info
	Commit         = oplog.Commit
	Publish        = oplog.Publish
	Claim          = oplog.Claim
	Mark           = oplog.Mark
	Retry          = oplog.Retry
	Park           = oplog.Park
	Sweep          = oplog.Sweep
	Deliver        = oplog.Deliver
	Apply          = oplog.Apply
	FaultStart     = oplog.FaultStart
	FaultStop      = oplog.FaultStop
	Crash          = oplog.Crash
	Restart        = oplog.Restart
	Phase          = oplog.Phase
	Failpoint      = oplog.Failpoint
	Stop           = oplog.Stop
	ConfirmAck     = oplog.ConfirmAck
	ConfirmNack    = oplog.ConfirmNack
	ConfirmReturn  = oplog.ConfirmReturn
	ConfirmTimeout = oplog.ConfirmTimeout
	ConfirmClosed  = oplog.ConfirmClosed
	PhaseSafety    = oplog.PhaseSafety
	PhaseLiveness  = oplog.PhaseLiveness
	PhaseCheck     = oplog.PhaseCheck
	ClassBroker    = oplog.ClassBroker
	ClassDB        = oplog.ClassDB
	ClassProcess   = oplog.ClassProcess
	ClassClock     = oplog.ClassClock
	ClassOther     = oplog.ClassOther
	Version        = oplog.Version
	Header         = oplog.Header
)

// Classes is oplog.Classes.
var Classes = oplog.Classes

// AppendJSON is oplog.AppendJSON.
func AppendJSON(buf []byte, op *Op) []byte { return oplog.AppendJSON(buf, op) }
