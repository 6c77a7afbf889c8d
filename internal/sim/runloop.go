package sim

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/outboxlab/outboxlab/checker"
	"github.com/outboxlab/outboxlab/relay"
)

// This file is what the simulation gives relay.Run in place of the
// process's clock and of relay.Listen: a poll timer on the database clock
// and a wake channel fed by simulated NOTIFYs. A relay process runs
// relay.Run itself, so its poll timer, its wake-ups, its drains past the
// poll interval and its shutdown are the production code's.
//
// A relay waits between ticks in Run's select, on the channel its timer's
// C returns: C is where the relay's coroutine hands the baton back
// (callIdle), and it returns only when the relay can go on. Then exactly
// one of the channels Run waits on is ready, so that Go's random choice
// among ready cases decides nothing: the wake channel when it holds a
// wake-up (the timer, due or not, fires at a later wait), else the timer,
// else ctx.Done (the relay is dying). A stopped relay (FaultStop) has its
// context ended and its wake channel closed, as SIGTERM leaves cmd/relay;
// its C returns at once, without waiting, so whichever of the two its
// select takes, Run must return without another step. The simulation
// cannot see inside the select: a run loop that blocks on a channel it
// was not made to wait on (one that ignores the wake channel it was given,
// say) blocks the simulation, and go test's timeout shows it there.
//
// The listener is modelled as relay.Listen behaves: a staging transaction
// that commits wakes every relay whose listening connection is up (a
// wake-up that finds the channel full is coalesced); notifications sent
// while a relay's link to the database is cut are lost, and the listener
// sends one wake-up when it connects, at boot and when the link heals.
// Reconnecting takes no time here.

// timer is a relay process's poll timer (relay.Timer): it fires once the
// database clock passes its deadline. Timers measure durations, so a
// clock skew does not move it.
type timer struct {
	p     *proc
	c     chan time.Time
	armed bool
	at    time.Time
}

var _ relay.Timer = (*timer)(nil)

// C implements relay.Timer: the relay waits here.
func (t *timer) C() <-chan time.Time {
	t.p.sleep()
	return t.c
}

// Reset implements relay.Timer.
func (t *timer) Reset(d time.Duration) {
	t.clear()
	t.armed = true
	t.at = t.p.w.clock.Now().Add(d)
}

// Stop implements relay.Timer.
func (t *timer) Stop() {
	t.clear()
	t.armed = false
}

// clear drops a firing not received.
func (t *timer) clear() {
	select {
	case <-t.c:
	default:
	}
}

// due reports whether the timer would fire now.
func (t *timer) due() bool {
	return t.armed && !t.p.w.clock.Now().Before(t.at)
}

// newTimer is the relay's relay.Options.NewTimer: there is one timer per
// process, reset at each boot.
func (p *proc) newTimer(d time.Duration) relay.Timer {
	if p.timer.c == nil {
		p.timer = timer{p: p, c: make(chan time.Time, 1)}
	}
	p.timer.Reset(d)
	if p.w.v.WrapTimer != nil {
		return p.w.v.WrapTimer(p, &p.timer)
	}
	return &p.timer
}

// wakeable reports whether a relay waiting between ticks can go on: a
// wake-up is in its channel or its timer is due.
func (p *proc) wakeable() bool {
	return len(p.wake) > 0 || p.timer.due()
}

// sleep is a relay waiting between ticks: it hands the baton back until
// it can go on, then makes one channel of Run's select ready. A dying or
// stopping relay does not wait: its context has ended (a dying one's ends
// here) and Run returns, whichever ready case its select takes.
func (p *proc) sleep() {
	for !p.dying && !p.stopping {
		p.enter(callIdle)
		if p.dying || p.stopping || p.wakeable() {
			break
		}
	}
	if p.dying {
		p.cancel()
		return
	}
	if p.stopping {
		return
	}
	if len(p.wake) == 0 && p.timer.due() {
		p.timer.armed = false
		p.timer.c <- p.w.clock.Now()
	}
}

// listens reports whether a NOTIFY reaches p now: it is a relay that
// listens, its coroutine runs and its link to the database is up. A
// paused relay still gets it: the notification waits in its connection.
func (p *proc) listens() bool {
	return p.kind == kindRelay && p.listening && p.alive && !p.down && !p.dying && !p.stopping && !p.dbDown()
}

// signal sends p one wake-up, coalesced with one already pending.
func (p *proc) signal() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// notify is the NOTIFY of a staging transaction that committed.
func (w *world) notify() {
	if w.db != nil {
		w.sqlNotify()
		return
	}
	for _, p := range w.procs {
		if p.listens() {
			p.signal()
		}
	}
}

// reconnected is a relay's listener connecting again after its link to
// the database came back: it sends one wake-up, since what was notified
// meanwhile is lost.
func (w *world) reconnected(p *proc) {
	if p.listens() {
		if w.db != nil {
			w.sqlReconnected(p)
		}
		p.signal()
	}
}

// nextTimer returns the earliest deadline among the poll timers of the
// relays waiting between ticks that can run.
func (w *world) nextTimer() (time.Time, bool) {
	var next time.Time
	ok := false
	for _, p := range w.procs {
		if p.kind != kindRelay || !p.alive || !p.runnable() || p.at != callIdle || !p.timer.armed {
			continue
		}
		if !ok || p.timer.at.Before(next) {
			next, ok = p.timer.at, true
		}
	}
	return next, ok
}

// StopBound is how many of its own steps a stopped relay may take to
// return from relay.Run: the call it was at, then settling its publish
// window (a confirm and at most one retry each) and marking its batches.
func StopBound(window int) int { return 3*window + 10 }

func (w *world) stopBound() int { return StopBound(w.sw.Window) }

// stopRelay begins a relay's shutdown, as SIGTERM does in cmd/relay: the
// context of its relay.Run ends and its listener, which shares it, closes
// the wake channel.
func (w *world) stopRelay(p *proc) {
	p.stopping, p.stopSteps = true, 0
	if p.cancel != nil {
		p.cancel()
	}
	close(p.wake)
	w.stops++
}

// exited finishes a stop once the relay's relay.Run returned: the process
// ended, and stays down until the fault stops.
func (w *world) exited(p *proc) {
	p.closeOpen()
	p.down = true
	p.rel = nil
	p.conn++
	p.stopping = false
	w.longestStop = max(w.longestStop, p.stopSteps)
}

// brokeShutdown notes that relay p broke a promise of its shutdown.
func (w *world) brokeShutdown(p *proc, why string) {
	if w.shutdown == nil {
		w.shutdown = map[string]string{}
	}
	if _, ok := w.shutdown[p.name]; !ok {
		w.shutdown[p.name] = why
	}
}

// CheckerShutdown names the result of a run's shutdowns (FaultStop): no
// relay claimed after its shutdown began, and each returned from
// relay.Run within StopBound of its steps. The simulation sees this
// itself, beside the history's checkers.
const CheckerShutdown = "shutdown"

// shutdownResult is the CheckerShutdown result of the run.
func (w *world) shutdownResult() checker.Result {
	res := checker.Result{Checker: CheckerShutdown, Valid: len(w.shutdown) == 0,
		Counts: map[string]int{"stops": w.stops, "longest_steps": w.longestStop}}
	if w.stops == 0 {
		res.Skipped = true
		res.Detail = "no relay was stopped"
		return res
	}
	res.Detail = fmt.Sprintf("%d stops must claim nothing more and return within %d of the relay's steps (longest %d)",
		w.stops, w.stopBound(), w.longestStop)
	for _, name := range slices.Sorted(maps.Keys(w.shutdown)) {
		res.Offending = append(res.Offending, name)
		if res.Reasons == nil {
			res.Reasons = map[string]string{}
		}
		res.Reasons[name] = w.shutdown[name]
	}
	return res
}
