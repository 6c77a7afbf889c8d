package sim

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"time"

	seedpkg "github.com/outboxlab/outboxlab/seed"
	"github.com/outboxlab/outboxlab/workload"

	"github.com/google/uuid"

	"github.com/outboxlab/outboxlab/consumer"
	"github.com/outboxlab/outboxlab/history"
	"github.com/outboxlab/outboxlab/outbox"
	"github.com/outboxlab/outboxlab/relay"
)

// Registry returns the decoder the simulated relays use: the workload's
// registry, which knows workload.TypeOrderPlaced and TypeOrderPaid, and
// workload.TypeRejected, a type the simulated broker always returns; not
// workload.TypeUnknown.
func Registry() *outbox.Registry {
	reg := workload.Registry()
	reg.Register(workload.TypeRejected, workload.OrderPlaced{})
	return reg
}

var registry = Registry()

var discard = slog.New(slog.DiscardHandler)

// world is one simulation: the fakes, the processes and the scheduler.
type world struct {
	seed uint64
	sw   Swarm
	opts Options
	v    Variant

	sched *rand.Rand // which process steps, how much time passes
	frng  *rand.Rand // faults and fault outcomes
	wrng  *rand.Rand // the workload

	clock  *Clock
	store  *Store
	broker *Broker
	inbox  *Inbox
	// db is the run's database on the SQL tier (Options.SQL); nil on the
	// fakes.
	db *seedDB
	// ops is the history: one writer at a time, so no lock.
	ops []history.Op
	dec relay.Decoder

	procs []*proc

	steps int
	quiet int
	// phase is "safety", "liveness" or "check".
	phase string
	// producing is false once the workload stopped.
	producing bool
	// driven: producers take jobs from their queues only.
	driven bool

	windows     []window
	hits        map[Fault]int
	dbDown      bool
	confirmLoss bool
	nacking     bool
	pendingJump time.Duration
	jumpFor     *proc

	// stops counts the relays stopped (FaultStop), longestStop the most
	// steps one took to return; shutdown holds the promises of their
	// shutdown they broke, by relay.
	stops, longestStop int
	shutdown           map[string]string

	nextEvent uint64
	poison    map[string]bool
	dbStart   time.Time
	events    int
	err       error
}

func newWorld(seed uint64, opts Options) *world {
	opts = opts.withDefaults()
	w := &world{
		seed:      seed,
		opts:      opts,
		v:         opts.Variant,
		sched:     seedpkg.Rand(seed, seedpkg.Scheduler),
		frng:      seedpkg.Rand(seed, seedpkg.Nemesis),
		wrng:      seedpkg.Rand(seed, seedpkg.SimWorkload),
		clock:     NewClock(),
		broker:    NewBroker(),
		inbox:     NewInbox(),
		hits:      make(map[Fault]int),
		poison:    make(map[string]bool),
		producing: true,
	}
	w.sw = swarmOf(seed, opts)
	w.store = NewStore(w.clock) // empty on the SQL tier
	w.dbStart = w.clock.Now()
	w.broker.Reject = map[string]bool{workload.TypeRejected: true}
	w.dec = registry
	if w.v.WrapDecoder != nil {
		w.dec = w.v.WrapDecoder(w.dec)
	}
	if opts.SQL != nil {
		ctx, cancel := harnessCtx()
		w.db, w.err = opts.SQL.open(ctx)
		cancel()
	}
	add := func(k kind, name, id string, index int) {
		p := &proc{w: w, name: name, id: id, kind: k, index: index, weight: 1}
		if w.db != nil && w.err == nil {
			ctx, cancel := harnessCtx()
			p.db, w.err = w.db.proc(ctx, k)
			cancel()
			if p.db != nil && p.db.steps != nil {
				p.db.steps.p = p
			}
		}
		p.store = &storePort{p: p}
		p.pub = &pubPort{p: p}
		p.inbox = &inboxPort{p: p}
		p.cons = &consumerPort{p: p}
		w.procs = append(w.procs, p)
	}
	for i := range w.sw.Producers {
		add(kindProducer, "producer-"+strconv.Itoa(i+1), "", i)
	}
	for i := range w.sw.Replicas {
		id := string(rune('a' + i))
		add(kindRelay, "relay-"+id, id, i)
	}
	for i := range w.sw.Consumers {
		add(kindConsumer, "consumer-"+strconv.Itoa(i+1), "", i)
	}
	for _, p := range w.procs {
		switch p.kind {
		case kindProducer:
			p.weight = w.sw.ProducerWeight
		case kindRelay:
			p.weight = w.sw.RelayWeight
		case kindConsumer:
			p.weight = w.sw.ConsumerWeight
		}
		w.boot(p)
	}
	w.phase = history.PhaseSafety
	w.record(history.Op{Time: w.clock.Now(), Process: "runner", Type: history.Info, F: history.Phase, Meta: history.Meta{Phase: history.PhaseSafety}})
	return w
}

// record appends op to the history, numbering it.
func (w *world) record(op history.Op) {
	if w.ops == nil {
		w.ops = make([]history.Op, 0, 4*w.opts.Steps)
	}
	op.Index = int64(len(w.ops))
	w.ops = append(w.ops, op)
}

// progress notes that a call changed something.
func (w *world) progress() { w.quiet = 0 }

// boot starts p's coroutine with a fresh memory.
func (w *world) boot(p *proc) {
	switch p.kind {
	case kindProducer:
		p.boot(w.producerBody)
	case kindRelay:
		// A fresh process has a fresh listener: what the last one
		// received is gone.
		p.wake = make(chan struct{}, 1)
		p.cancel, p.stopping = nil, false
		p.boot(w.relayBody)
	case kindConsumer:
		p.boot(w.consumerBody)
	}
}

// resume gives p one step: it runs until its next fake call or returns.
// A relay waiting between ticks that cannot go on yet (no wake-up, its
// timer not due) stays where it is.
func (w *world) resume(p *proc) {
	if !p.alive {
		return
	}
	if p.at == callIdle && p.kind == kindRelay && !p.dying && !p.stopping && !p.wakeable() {
		return
	}
	if p.stopping && !p.dying {
		p.stopSteps++
		if p.stopSteps == w.stopBound()+1 {
			w.brokeShutdown(p, fmt.Sprintf("still running %d of its steps after its shutdown began", w.stopBound()))
		}
	}
	if _, ok := p.next(); !ok {
		p.alive = false
		switch {
		case p.dying:
			w.crashed(p)
		case p.stopping:
			w.exited(p)
		default:
			p.finished = true
		}
	}
}

// crash kills p at its pending call: the call fails before or after its
// effect, every later call fails at once, the coroutine unwinds and its
// memory is dropped.
func (w *world) crash(p *proc) {
	if !p.alive {
		p.down = true
		w.procRecord(p, history.Crash)
		return
	}
	p.dying = true
	p.verdict = vCrashBefore
	if w.frng.IntN(2) == 0 {
		p.verdict = vCrashAfter
	}
	w.resume(p)
	if p.alive {
		panic(fmt.Sprintf("sim: %s did not unwind after its crash", p.name))
	}
}

// crashed finishes a crash once p's coroutine returned.
func (w *world) crashed(p *proc) {
	p.closeOpen()
	p.down = true
	p.rel, p.cns = nil, nil
	p.conn++
	p.stopping = false
	if p.kind == kindConsumer {
		w.broker.disconnect(p.name)
	}
	w.procRecord(p, history.Crash)
}

// restart brings a crashed p back with an empty memory and the same name.
func (w *world) restart(p *proc) {
	if !p.down {
		return
	}
	w.procRecord(p, history.Restart)
	w.boot(p)
}

func (w *world) procRecord(p *proc, f history.Func) {
	w.record(history.Op{Time: w.clock.Now(), Process: p.name, Type: history.Info, F: f})
}

// pick draws the next process to step, weighted, among the runnable
// ones; nil when none can run.
func (w *world) pick() *proc {
	total := 0
	for _, p := range w.procs {
		if p.runnable() {
			total += p.weight
		}
	}
	if total == 0 {
		return nil
	}
	n := w.sched.IntN(total)
	for _, p := range w.procs {
		if !p.runnable() {
			continue
		}
		if n < p.weight {
			return p
		}
		n -= p.weight
	}
	return nil
}

// step advances time a little and gives one process a step.
func (w *world) step() {
	w.steps++
	w.quiet++
	w.clock.Advance(time.Duration(w.sched.Int64N(int64(w.sw.StepTime) + 1)))
	if w.pendingJump > 0 && w.othersIdle(w.jumpFor) {
		w.clock.Advance(w.pendingJump)
		w.pendingJump, w.jumpFor = 0, nil
	}
	if p := w.pick(); p != nil {
		w.resume(p)
	}
}

// othersIdle reports whether every relay but skip is between ticks, so a
// clock jump expires only the leases of the paused one.
func (w *world) othersIdle(skip *proc) bool {
	for _, p := range w.procs {
		if p == skip || p.kind != kindRelay || p.down || !p.alive {
			continue
		}
		if p.at != callIdle {
			return false
		}
	}
	return true
}

// relayBody runs the production relay's run loop, relay.Run, on the
// simulation's poll timer and wake channel (see runloop.go), until the
// process dies.
func (w *world) relayBody(p *proc) {
	cfg := w.relayConfig(p)
	var store relay.Store = p.store
	if w.v.WrapStore != nil {
		store = w.v.WrapStore(p, store)
	}
	var pub relay.Publisher = p.pub
	if w.v.WrapPublisher != nil {
		pub = w.v.WrapPublisher(p, pub)
	}
	r, err := relay.New(cfg, store, pub, relay.Options{Logger: discard, Decoder: w.dec, SerialStore: true, NewTimer: p.newTimer})
	if err != nil {
		w.err = fmt.Errorf("building %s: %w", p.name, err)
		p.dying = true
		return
	}
	p.rel = r
	if p.stopping {
		return // stopped before it got to run
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p.cancel = cancel
	// The listener sends one wake-up once it is connected.
	var wake <-chan struct{} = p.wake
	if w.v.WrapWake != nil {
		wake = w.v.WrapWake(p, wake)
	}
	p.listening = wake != nil
	w.reconnected(p)
	_ = r.Run(ctx, wake)
}

// consumerBody runs the production consumer over the broker and inbox
// fakes.
func (w *world) consumerBody(p *proc) {
	var in consumer.Inbox = p.inbox
	if w.v.WrapInbox != nil {
		in = w.v.WrapInbox(p, in)
	}
	c, err := consumer.New(consumer.Config{Name: "sim", MaxDeliveries: ConsumerMaxDeliveries}, in, discard)
	if err != nil {
		w.err = fmt.Errorf("building %s: %w", p.name, err)
		p.dying = true
		return
	}
	p.cns = c
	ctx := context.Background()
	for !p.dying {
		d, err := p.cons.next()
		if err != nil || d == nil {
			continue
		}
		_, _ = c.Handle(ctx, d)
	}
}

// RealTimeout is the relay's PublishTimeout and StoreTimeout in the
// simulation: long enough in real time that no timer ever fires during a
// run; the fakes decide timeouts themselves.
const RealTimeout = time.Hour

// ConsumerMaxDeliveries is the simulated consumer's MaxDeliveries: high,
// so that a long database cut on the consumer requeues rather than
// dead-letters (dead-lettering is the consumer's promise under test
// elsewhere).
const ConsumerMaxDeliveries = 1 << 20

// newEvent makes the next workload event; poison events are recorded in
// w.poison.
func (w *world) newEvent() outbox.Event {
	w.nextEvent++
	var id uuid.UUID
	id[6] = 0x40
	id[8] = 0x80
	n := w.nextEvent
	for i := 15; i >= 10; i-- {
		id[i] = byte(n)
		n >>= 8
	}
	k := int(w.wrng.Int64N(1000))
	e := outbox.Event{ID: id, Type: workload.TypeOrderPlaced,
		Payload: []byte(`{"order_id":"o` + strconv.Itoa(k) + `","amount":` + strconv.Itoa(k) + `}`)}
	if k%2 == 1 {
		e.Type = workload.TypeOrderPaid
	}
	if w.wrng.IntN(4) == 0 {
		c := id
		c[0] = 0xc0
		e.CorrelationID = &c
	}
	if w.wrng.Float64() < w.sw.Poison {
		switch w.wrng.IntN(3) {
		case 0:
			e.Type = workload.TypeUnknown
		case 1:
			e.Payload = []byte(`{"order_id":"o1","amount":"lots"}`)
		case 2:
			e.Type = workload.TypeRejected
		}
		w.poison[id.String()] = true
	}
	return e
}
