package sim

import (
	"errors"
	"fmt"
	"time"
)

// World is a simulation driven from outside, one action at a time: by a
// property test's state machine instead of the seeded workload and
// nemesis. The seed still decides the swarm parameters (which Options.Tune
// may override) and the outcomes the fakes draw (a crash before or after
// its call's effect, a reply lost on a cut link). Every fault an action
// injects is recorded as the nemesis would record it.
type World struct {
	w *world
}

// NewWorld builds a driven world: no workload runs and no fault starts
// unless an action says so.
func NewWorld(seed uint64, opts Options) *World {
	sql := opts.SQL
	opts.SQL = nil
	w := newWorld(seed, opts)
	if sql != nil {
		w.err = errors.New("a driven World runs on the fakes only, not on Options.SQL")
	}
	w.driven = true
	return &World{w: w}
}

// Swarm returns the world's parameters.
func (d *World) Swarm() Swarm { return d.w.sw }

// Now returns the database clock.
func (d *World) Now() time.Time { return d.w.clock.Now() }

func (d *World) names(k kind) []string {
	var out []string
	for _, p := range d.w.procs {
		if p.kind == k {
			out = append(out, p.name)
		}
	}
	return out
}

// Producers, Relays and Consumers name the world's processes.
func (d *World) Producers() []string { return d.names(kindProducer) }

// Relays names the relay replicas.
func (d *World) Relays() []string { return d.names(kindRelay) }

// Consumers names the consumers.
func (d *World) Consumers() []string { return d.names(kindConsumer) }

func (d *World) proc(name string) *proc {
	for _, p := range d.w.procs {
		if p.name == name {
			return p
		}
	}
	panic(fmt.Sprintf("sim: no process %q", name))
}

// untilIdle steps p until it is back between two pieces of work, at most
// limit steps; it returns the steps taken.
func (d *World) untilIdle(p *proc, limit int) int {
	n := 0
	for n < limit && p.runnable() && p.alive {
		d.w.steps++
		d.w.resume(p)
		n++
		if p.at == callIdle {
			break
		}
	}
	return n
}

// Commit has producer run one business transaction staging events events,
// committing it or rolling it back, to its end (unless the producer is
// paused, crashed or cut off, in which case it ends as those make it).
func (d *World) Commit(producer string, events int, rollback bool) {
	p := d.proc(producer)
	p.jobs = append(p.jobs, job{Events: events, Rollback: rollback})
	d.untilIdle(p, 10000)
}

// Step gives the named process one step: it runs up to its next fake
// call. It reports false when the process cannot run (paused, crashed).
func (d *World) Step(name string) bool {
	p := d.proc(name)
	if !p.runnable() || !p.alive {
		return false
	}
	d.w.steps++
	d.w.resume(p)
	return true
}

// Tick lets a relay run until it is between ticks again. A relay waiting
// between ticks first sees its poll timer fire, as if its poll interval
// had passed (a timer it did not arm does not fire).
func (d *World) Tick(relay string) {
	p := d.proc(relay)
	if p.at == callIdle && p.timer.armed {
		p.timer.at = d.w.clock.Now()
	}
	d.untilIdle(p, 10000)
}

// Advance moves the database clock forward. A relay caught in the middle
// of a batch whose leases this expires was, in effect, frozen while that
// time passed: the advance is recorded as a pause of that relay, as a
// real run would have to cause it.
func (d *World) Advance(by time.Duration) {
	until := d.w.clock.Now().Add(by)
	var stalled []string
	for _, p := range d.w.procs {
		if p.kind != kindRelay || !p.alive || p.down || p.at == callIdle || p.paused {
			continue
		}
		for _, r := range d.w.store.pending {
			if r.LockedBy == p.id && !r.LockedUntil.After(until) {
				stalled = append(stalled, p.name)
				break
			}
		}
	}
	for _, name := range stalled {
		d.Pause(name)
	}
	d.w.clock.Advance(by)
	for _, name := range stalled {
		d.Resume(name)
	}
}

func (d *World) start(f Fault, name string, skew time.Duration) {
	var p *proc
	if name != "" {
		p = d.proc(name)
	}
	d.w.startFault(f, p, -1, skew)
}

func (d *World) stop(f Fault, name string) {
	var p *proc
	if name != "" {
		p = d.proc(name)
	}
	if i := d.w.active(f, p); i >= 0 {
		d.w.stopFault(i)
	}
}

// Crash kills a process at its pending call; it stays down until Restart.
func (d *World) Crash(name string) { d.start(FaultKill, name, 0) }

// Restart brings a crashed process back with an empty memory.
func (d *World) Restart(name string) { d.stop(FaultKill, name) }

// Pause stops giving a process steps; Resume gives them again.
func (d *World) Pause(name string) { d.start(FaultPause, name, 0) }

// Resume ends a pause.
func (d *World) Resume(name string) { d.stop(FaultPause, name) }

// Link is one of a process's connections.
type Link int

// Links.
const (
	LinkDB Link = iota
	LinkBroker
)

func (l Link) fault() Fault {
	if l == LinkBroker {
		return FaultBrokerCut
	}
	return FaultDBCut
}

// Cut cuts one of a process's links; Heal restores it.
func (d *World) Cut(name string, l Link) { d.start(l.fault(), name, 0) }

// Heal restores a cut link.
func (d *World) Heal(name string, l Link) { d.stop(l.fault(), name) }

// BrokerDown takes the broker away from everyone; BrokerUp brings it back.
func (d *World) BrokerDown() { d.start(FaultBrokerDown, "", 0) }

// BrokerUp ends a broker outage.
func (d *World) BrokerUp() { d.stop(FaultBrokerDown, "") }

// BrokerRestart restarts the broker: transient messages are lost, unacked
// deliveries come back redelivered, every channel closes.
func (d *World) BrokerRestart() {
	d.start(FaultBrokerRestart, "", 0)
	d.stop(FaultBrokerRestart, "")
}

// ConfirmLoss makes half the confirms never arrive until ConfirmsBack.
func (d *World) ConfirmLoss() { d.start(FaultConfirmLoss, "", 0) }

// ConfirmsBack ends a confirm loss.
func (d *World) ConfirmsBack() { d.stop(FaultConfirmLoss, "") }

// Skew offsets a relay's clock by by (zero ends the skew).
func (d *World) Skew(relay string, by time.Duration) {
	d.stop(FaultSkew, relay)
	if by != 0 {
		d.start(FaultSkew, relay, by)
	}
}

// Redeliver drops every consumer's broker connection for a moment: their
// unacked deliveries go back to the queue, flagged redelivered.
func (d *World) Redeliver() {
	for _, name := range d.Consumers() {
		if d.w.active(FaultBrokerCut, d.proc(name)) >= 0 {
			continue
		}
		d.start(FaultBrokerCut, name, 0)
		d.stop(FaultBrokerCut, name)
	}
}

// Finish ends the run like Run does: heal everything, restart what
// crashed, drain, sweep, and check.
func (d *World) Finish() Result { return d.w.finish() }
