package sim

import (
	"context"
	"errors"
	"iter"
	"time"

	"github.com/outboxlab/outboxlab/consumer"
	"github.com/outboxlab/outboxlab/history"
	"github.com/outboxlab/outboxlab/relay"
)

// errCrashed is what every call of a crashed process returns while its
// goroutine unwinds.
var errCrashed = errors.New("process crashed")

// errLinkDown is what a call over a cut link returns.
var errLinkDown = errors.New("connection reset by peer")

// kind is what a process runs.
type kind uint8

const (
	kindProducer kind = iota + 1
	kindRelay
	kindConsumer
)

// call names the fake call a process is blocked at.
type call uint8

const (
	callNone call = iota
	callIdle
	callBegin
	callStage
	callCommit
	callClaim
	callMark
	callRetry
	callPark
	callSweep
	callStats
	callRaw
	callPublish
	callWait
	callNext
	callAck
	callNack
	callApply
)

// verdict is what the scheduler decided for a process's pending call.
type verdict uint8

const (
	// vGo: the call runs.
	vGo verdict = iota
	// vCrashBefore: the process dies before the call takes effect.
	vCrashBefore
	// vCrashAfter: the call takes effect, then the process dies before
	// it learns the outcome.
	vCrashAfter
	// vDead: the process is already dying; the call fails without effect
	// and without a step.
	vDead
)

// failed reports whether a call with verdict v fails without effect.
func failed(v verdict) bool { return v == vCrashBefore || v == vDead }

// Process is a simulated process as a Variant's hooks see it.
type Process interface {
	// Name is the process's name in the history, e.g. "relay-a".
	Name() string
	// Now is the process's own clock: the database clock plus its skew.
	Now() time.Time
}

// openOp is an invoke still waiting for its completion.
type openOp struct {
	f      history.Func
	events []string
	meta   history.Meta
	id     uint64
	// lazy: the invoke is recorded only with a completion that matters
	// (a claim or sweep that found nothing is not recorded at all).
	lazy bool
}

// proc is one simulated process: a coroutine that runs production code
// (a relay, a consumer) or a workload (a producer) and hands the baton
// back to the scheduler at every fake call.
type proc struct {
	w     *world
	name  string
	id    string // relay id
	kind  kind
	index int

	weight int

	next  func() (struct{}, bool)
	stop  func()
	yield func(struct{}) bool

	alive    bool // its coroutine runs
	down     bool // crashed and not restarted
	finished bool // a producer that stopped producing
	dying    bool // crash in progress: every call fails without effect
	silent   bool // torn down at the end of a run: record nothing
	paused   bool
	cutDB    bool
	cutMQ    bool
	offset   time.Duration

	at      call
	verdict verdict
	// conn counts the process's broker connections; deliveries of an older
	// connection can no longer be acknowledged.
	conn int

	open   []openOp
	nextOp uint64

	// ports, built once and reused across restarts.
	store *storePort
	pub   *pubPort
	inbox *inboxPort
	cons  *consumerPort

	// db is the process's connections on the SQL tier; nil on the fakes.
	db *procDB

	jobs []job
	rel  *relay.Relay
	cns  *consumer.Consumer

	// A relay's run loop: its poll timer, the wake channel its listener
	// feeds (buffered 1, a fresh one at each boot, closed when the relay
	// is stopped), whether it listens at all, and the cancel of
	// relay.Run's context.
	timer     timer
	wake      chan struct{}
	listening bool
	cancel    context.CancelFunc
	// stopping: a FaultStop ended the relay's context and it has not
	// returned yet; stopSteps counts its steps since.
	stopping  bool
	stopSteps int
}

// Name returns the process's name.
func (p *proc) Name() string { return p.name }

// Now returns the process's clock.
func (p *proc) Now() time.Time { return p.w.clock.Now().Add(p.offset) }

// boot starts a fresh coroutine running body; it runs up to its first
// fake call on the first resume.
func (p *proc) boot(body func(p *proc)) {
	p.dying, p.silent, p.down, p.finished = false, false, false, false
	p.verdict = vGo
	p.at = callNone
	p.alive = true
	p.next, p.stop = iter.Pull(func(yield func(struct{}) bool) {
		p.yield = yield
		body(p)
	})
}

// enter is the yield point in front of every fake call: it hands the
// baton to the scheduler and returns what the scheduler decided. A dying
// process does not yield; its calls fail at once.
func (p *proc) enter(c call) verdict {
	if p.dying {
		return vDead
	}
	p.at = c
	if !p.yield(struct{}{}) {
		p.dying = true
		p.silent = true
		return vDead
	}
	p.at = callNone
	v := p.verdict
	p.verdict = vGo
	return v
}

// idle is a step in which the process does nothing: a producer holding
// its transaction open, or waiting for a job. (A relay waits between ticks
// in its timer's C, see runloop.go.)
func (p *proc) idle() {
	p.enter(callIdle)
}

// record appends an op stamped with the process's clock.
func (p *proc) record(t history.Type, f history.Func, events []string, m history.Meta, errText string) {
	if p.silent {
		return
	}
	p.w.record(history.Op{Time: p.Now(), Process: p.name, Type: t, F: f, Events: events, Meta: m, Error: errText})
}

// invoke records an invoke and remembers it as open; it returns a handle
// for complete.
func (p *proc) invoke(f history.Func, events []string, m history.Meta) uint64 {
	return p.invokeMaybe(f, events, m, false)
}

// invokeMaybe is invoke, deferring the record when lazy.
func (p *proc) invokeMaybe(f history.Func, events []string, m history.Meta, lazy bool) uint64 {
	p.nextOp++
	p.open = append(p.open, openOp{f: f, events: events, meta: m, id: p.nextOp, lazy: lazy})
	if !lazy {
		p.record(history.Invoke, f, events, m, "")
	}
	return p.nextOp
}

// complete records the completion of the open op h.
func (p *proc) complete(h uint64, t history.Type, events []string, m history.Meta, err error) {
	for i := range p.open {
		if p.open[i].id != h {
			continue
		}
		op := p.open[i]
		copy(p.open[i:], p.open[i+1:])
		p.open = p.open[:len(p.open)-1]
		if op.lazy {
			if t == history.OK && len(events) == 0 {
				return
			}
			p.record(history.Invoke, op.f, op.events, op.meta, "")
		}
		var text string
		if err != nil {
			text = err.Error()
		}
		p.record(t, op.f, events, m, text)
		return
	}
}

// closeOpen completes every open op of a process that died as info.
func (p *proc) closeOpen() {
	for len(p.open) > 0 {
		p.complete(p.open[0].id, history.Info, p.open[0].events, history.Meta{}, errCrashed)
	}
}

// runnable reports whether the scheduler may give p a step.
func (p *proc) runnable() bool {
	return !p.down && !p.finished && !p.paused
}
