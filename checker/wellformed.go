package checker

import (
	"fmt"
	"strings"

	"github.com/outboxlab/outboxlab/history"
)

// WellFormed checks the history itself: indexes strictly increase, every
// record has a known type, and every completion of an operation that needs
// an invoke (all but Deliver, FaultStart, FaultStop, Crash, Restart and
// Phase) completes an invoke of the same process and function, and every
// FaultStart and FaultStop names its fault with a known class. A history
// that fails here may mislead every other checker.
func WellFormed(h []history.Op, s State, cfg Config) Result { return analyze(h, s, cfg).wellFormed() }

func (a *analysis) wellFormed() Result {
	v := a.verdict(NameWellFormed)
	var problems []string
	bad := func(op history.Op, format string, args ...any) {
		msg := fmt.Sprintf("#%d %s %s %s: ", op.Index, op.Process, op.Type, op.F) + fmt.Sprintf(format, args...)
		problems = append(problems, msg)
		for _, id := range op.Events {
			v.offend(id, "%s", msg)
		}
	}
	for i, op := range a.raw {
		if i > 0 && op.Index <= a.raw[i-1].Index {
			bad(op, "index does not increase (previous #%d)", a.raw[i-1].Index)
		}
		switch op.Type {
		case history.Invoke, history.OK, history.Fail, history.Info:
		default:
			bad(op, "unknown type %q", op.Type)
		}
		if op.F == history.FaultStart || op.F == history.FaultStop {
			switch {
			case op.Fault == nil || op.Fault.Name == "":
				bad(op, "fault record without the fault's identity")
			case !op.Fault.Class.Valid():
				bad(op, "fault %q of unknown class %q", op.Fault.Name, op.Fault.Class)
			}
		}
	}
	for _, p := range a.pairs {
		if p.Invoke != nil || standalone(p.Done.F) {
			continue
		}
		bad(*p.Done, "completes no open invoke")
	}
	v.counts["problems"] = len(problems)
	if len(problems) == 0 {
		return v.result(fmt.Sprintf("%d records, %d operations", len(a.raw), len(a.pairs)))
	}
	r := v.result("")
	r.Valid = false
	shown := problems[:min(len(problems), 3)]
	r.Detail = fmt.Sprintf("%d malformed record(s): %s", len(problems), strings.Join(shown, "; "))
	return r
}

// standalone reports whether records of f may stand without an invoke.
func standalone(f history.Func) bool {
	switch f {
	case history.Deliver, history.FaultStart, history.FaultStop, history.Crash, history.Restart, history.Phase,
		history.Failpoint, history.Stop:
		return true
	}
	return false
}
