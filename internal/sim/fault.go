package sim

import (
	"time"

	"github.com/outboxlab/outboxlab/history"
)

// Fault is a kind of fault the simulation injects.
type Fault string

// Faults of the simulation. Each is recorded in the history with its
// class (Fault.Class) and its target process, if any; its name ("kill
// relay-a", "cut relay-a->db") is for people.
const (
	// FaultKill crashes a process at its pending call (before or after the
	// call takes effect); it restarts with empty memory when the fault
	// stops.
	FaultKill Fault = "kill"
	// FaultPause stops giving a process steps while time goes on; a pause
	// may jump the database clock past the lease, so the paused relay's
	// claims expire.
	FaultPause Fault = "pause"
	// FaultDBCut cuts a process's link to the database: its calls fail,
	// and a share of them fail after taking effect (lost reply).
	FaultDBCut Fault = "db-cut"
	// FaultBrokerCut cuts a process's link to the broker: publishes fail,
	// pending confirms never come, a consumer's deliveries go back to the
	// queue.
	FaultBrokerCut Fault = "broker-cut"
	// FaultDBDown takes the database away from every process.
	FaultDBDown Fault = "db-down"
	// FaultBrokerDown takes the broker away from every process.
	FaultBrokerDown Fault = "broker-down"
	// FaultBrokerRestart restarts the broker: transient messages are lost,
	// unacked deliveries are requeued as redelivered, every channel closes;
	// the broker is down until the fault stops.
	FaultBrokerRestart Fault = "broker-restart"
	// FaultConfirmLoss makes half the confirms never arrive: Wait fails
	// with a timeout after the message may or may not have been enqueued.
	FaultConfirmLoss Fault = "confirm-loss"
	// FaultNack makes the broker nack half the publishes. A nack is a
	// row-level failure that consumes an attempt, so a long or repeated
	// nack storm parks healthy rows by design: the swarm never draws it;
	// Options.Tune may enable it. It is of class history.ClassOther: the
	// broker refuses messages, it is not an outage.
	FaultNack Fault = "nack"
	// FaultUnbind unbinds the queue: mandatory publishes are returned, a
	// row-level failure like a nack (the swarm never draws it either).
	FaultUnbind Fault = "unbind"
	// FaultSkew offsets a relay's clock (used for its sweeps and its
	// history times, never for leases).
	FaultSkew Fault = "skew"
	// FaultStop stops a relay as SIGTERM does: the context of its
	// relay.Run ends and its listener's wake channel closes. The relay
	// must claim nothing more and return once it settled what it has in
	// flight, within StopBound of its own steps (the "shutdown" result of
	// a run); it restarts with empty memory when the fault stops.
	FaultStop Fault = "stop"
)

// AllFaults lists every fault.
var AllFaults = []Fault{FaultKill, FaultPause, FaultDBCut, FaultBrokerCut, FaultDBDown, FaultBrokerDown,
	FaultBrokerRestart, FaultConfirmLoss, FaultNack, FaultUnbind, FaultSkew, FaultStop}

// SwarmFaults lists the faults the swarm draws from, in the order it
// draws them: every fault whose effect the relay must absorb without
// consuming attempts.
var SwarmFaults = []Fault{FaultKill, FaultPause, FaultDBCut, FaultBrokerCut, FaultDBDown, FaultBrokerDown,
	FaultBrokerRestart, FaultConfirmLoss, FaultSkew, FaultStop}

// targeted reports whether the fault hits one process.
func (f Fault) targeted() bool {
	switch f {
	case FaultKill, FaultPause, FaultDBCut, FaultBrokerCut, FaultSkew, FaultStop:
		return true
	}
	return false
}

// canHit reports whether f may hit p.
func (f Fault) canHit(p *proc) bool {
	switch f {
	case FaultSkew, FaultStop:
		return p.kind == kindRelay
	case FaultBrokerCut:
		return p.kind == kindRelay || p.kind == kindConsumer
	}
	return true
}

// Class returns the part of the system f hits.
func (f Fault) Class() history.FaultClass {
	switch f {
	case FaultKill, FaultPause, FaultStop:
		return history.ClassProcess
	case FaultDBCut, FaultDBDown:
		return history.ClassDB
	case FaultBrokerCut, FaultBrokerDown, FaultBrokerRestart, FaultConfirmLoss:
		return history.ClassBroker
	case FaultSkew:
		return history.ClassClock
	}
	return history.ClassOther
}

// ref returns the identity of f on target ("" for untargeted faults) as
// the history records it.
func (f Fault) ref(target string) history.Fault {
	ref := history.Fault{Name: f.name(target), Kind: string(f), Class: f.Class()}
	if target != "" {
		ref.Targets = []string{target}
	}
	return ref
}

// name is the fault's name in the history.
func (f Fault) name(target string) string {
	switch f {
	case FaultKill:
		return "kill " + target
	case FaultPause:
		return "pause " + target
	case FaultDBCut:
		return "cut " + target + "->db"
	case FaultBrokerCut:
		return "cut " + target + "->broker"
	case FaultDBDown:
		return "db-down"
	case FaultBrokerDown:
		return "broker-down"
	case FaultBrokerRestart:
		return "broker-restart"
	case FaultConfirmLoss:
		return "broker-confirm-loss"
	case FaultNack:
		return "nack-storm"
	case FaultUnbind:
		return "queue-unbound"
	case FaultSkew:
		return "clock-skew " + target
	case FaultStop:
		return "stop " + target
	}
	return string(f)
}

// window is one active fault.
type window struct {
	fault  Fault
	target *proc
	ref    history.Fault
	until  int // step at which the nemesis stops it; -1: stopped by hand
}

// active returns the index of the active window of f on target, or -1.
func (w *world) active(f Fault, target *proc) int {
	for i, win := range w.windows {
		if win.fault == f && win.target == target {
			return i
		}
	}
	return -1
}

// startFault starts f on target (nil for untargeted faults). It does
// nothing when the same fault already hits the same target, or the
// target cannot take it.
func (w *world) startFault(f Fault, target *proc, until int, skew time.Duration) bool {
	if w.active(f, target) >= 0 || (f.targeted() && (target == nil || !f.canHit(target))) {
		return false
	}
	if (f == FaultKill || f == FaultStop) && target.down || f == FaultStop && (!target.alive || target.stopping) {
		return false
	}
	ref := f.ref("")
	if target != nil {
		ref = f.ref(target.name)
	}
	w.windows = append(w.windows, window{fault: f, target: target, ref: ref, until: until})
	w.nemesisRecord(history.FaultStart, ref)
	w.hits[f]++
	switch f {
	case FaultKill:
		w.crash(target)
	case FaultPause:
		target.paused = true
		if !w.driven && target.kind == kindRelay && w.frng.IntN(2) == 0 {
			// The pause lasts long enough in database time that a lease
			// may run out: between half and one and a half leases.
			w.pendingJump = w.sw.Lease/2 + time.Duration(w.frng.Int64N(int64(w.sw.Lease)))
			w.jumpFor = target
		}
	case FaultDBCut:
		target.cutDB = true
	case FaultBrokerCut:
		target.cutMQ = true
		target.conn++
		if target.kind == kindConsumer {
			w.broker.disconnect(target.name)
		}
	case FaultDBDown:
		w.dbDown = true
	case FaultBrokerDown:
		w.broker.up = false
		w.dropConnections()
	case FaultBrokerRestart:
		w.broker.Restart()
		w.broker.up = false
		w.dropConnections()
	case FaultConfirmLoss:
		w.confirmLoss = true
	case FaultNack:
		w.nacking = true
	case FaultUnbind:
		w.broker.bound = false
	case FaultSkew:
		target.offset = skew
	case FaultStop:
		w.stopRelay(target)
	}
	return true
}

// dropConnections closes every process's broker connection: unacked
// deliveries go back to the queue, pending confirms never come.
func (w *world) dropConnections() {
	for _, p := range w.procs {
		p.conn++
		if p.kind == kindConsumer {
			w.broker.disconnect(p.name)
		}
	}
}

// stopFault stops the i-th active window.
func (w *world) stopFault(i int) {
	win := w.windows[i]
	w.windows = append(w.windows[:i], w.windows[i+1:]...)
	t := win.target
	switch win.fault {
	case FaultKill:
		w.restart(t)
	case FaultPause:
		t.paused = false
		if w.jumpFor == t {
			w.pendingJump, w.jumpFor = 0, nil
		}
	case FaultDBCut:
		t.cutDB = false
		w.reconnected(t)
	case FaultBrokerCut:
		t.cutMQ = false
	case FaultDBDown:
		w.dbDown = false
		for _, p := range w.procs {
			w.reconnected(p)
		}
	case FaultBrokerDown, FaultBrokerRestart:
		if w.active(FaultBrokerDown, nil) < 0 && w.active(FaultBrokerRestart, nil) < 0 {
			w.broker.up = true
		}
	case FaultConfirmLoss:
		w.confirmLoss = false
	case FaultNack:
		w.nacking = false
	case FaultUnbind:
		w.broker.bound = true
	case FaultSkew:
		t.offset = 0
	case FaultStop:
		if t.alive && t.stopping {
			// Still stopping (paused, or past its bound): killed, as a
			// supervisor does after its grace period.
			w.crash(t)
		}
		w.restart(t)
	}
	w.nemesisRecord(history.FaultStop, win.ref)
}

// nemesis stops the windows that are due and starts new ones at the
// swarm's rates.
func (w *world) nemesis() {
	for i := 0; i < len(w.windows); {
		if win := w.windows[i]; win.until >= 0 && win.until <= w.steps {
			w.stopFault(i)
			continue
		}
		i++
	}
	for _, fr := range w.sw.Faults {
		if w.frng.Float64() >= fr.Rate {
			continue
		}
		var target *proc
		if fr.Fault.targeted() {
			target = w.procs[w.frng.IntN(len(w.procs))]
		}
		until := w.steps + 1 + w.frng.IntN(fr.MaxSteps)
		var skew time.Duration
		if fr.Fault == FaultSkew {
			skew = time.Duration(w.frng.Int64N(int64(4*time.Hour))) - 2*time.Hour
		}
		w.startFault(fr.Fault, target, until, skew)
	}
}

// healAll stops every active fault, oldest first.
func (w *world) healAll() {
	for len(w.windows) > 0 {
		w.stopFault(0)
	}
}

func (w *world) nemesisRecord(f history.Func, ref history.Fault) {
	w.record(history.Op{Time: w.clock.Now(), Process: "nemesis", Type: history.Info, F: f, Meta: history.Meta{Fault: &ref}})
}
