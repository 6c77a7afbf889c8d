// Package relay publishes staged outbox rows to the broker: claim a batch
// under a lease, publish each row with a confirm, mark it processed only
// while the lease still holds, back off or park what fails, sweep what is
// old. Its two seams are Store (the outbox table) and Publisher (the broker);
// PostgreSQL and RabbitMQ implementations live here too.
package relay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/outboxlab/outboxlab/history"
)

// Options carries a relay's optional collaborators. The zero value is
// valid: no metrics, no failpoints, logs discarded, every message type known.
type Options struct {
	Logger     *slog.Logger
	Metrics    *Metrics
	Failpoints Failpoints
	// Decoder resolves message types; nil accepts every type and payload.
	Decoder Decoder
	// SerialStore makes the relay call the store only from the goroutine
	// that runs it, one call at a time. By default a mark runs on a
	// goroutine of its own while the relay claims and publishes the next
	// batch, so the Store must allow concurrent calls, as PGStore does
	// (every call takes its own pooled connection). The simulation's fakes
	// step a deterministic scheduler on every call and set it; the relay's
	// decisions are the same either way, only when it waits for a mark
	// differs.
	SerialStore bool
	// NewTimer makes Run's poll timer, armed to fire after d; nil makes a
	// real one (time.NewTimer). The simulation's timers run on its clock
	// and hand the baton back to its scheduler where Run waits.
	NewTimer func(d time.Duration) Timer
	// Records, when set, receives what the relay does as history
	// operations (see Records); nil records nothing and costs nothing.
	Records Records
}

// Timer is Run's poll timer, the seam of its clock: Run arms it for the
// poll interval after every tick, stops it when a wake-up comes first, and
// waits on C in between. A stopped or reset timer never delivers a
// firing from before, as a *time.Timer (Go 1.23 and later) does not.
type Timer interface {
	// C returns the channel the timer fires on. Run calls it each time it
	// waits, in the select that blocks, and nowhere else.
	C() <-chan time.Time
	// Reset arms the timer to fire once, d from now.
	Reset(d time.Duration)
	// Stop disarms the timer.
	Stop()
}

// realTimer is the production Timer.
type realTimer struct{ t *time.Timer }

func (t realTimer) C() <-chan time.Time   { return t.t.C }
func (t realTimer) Reset(d time.Duration) { t.t.Reset(d) }
func (t realTimer) Stop()                 { t.t.Stop() }

// Relay drains one outbox table. Several relays with distinct RelayIDs may
// drain the same table at once.
type Relay struct {
	cfg   Config
	store Store
	pub   Publisher
	// check is the Decoder's verdict on a row: its Validate, or Decode.
	check  func(messageType string, payload []byte) error
	log    *slog.Logger
	m      *Metrics
	fp     Failpoints
	serial bool
	timers func(time.Duration) Timer
	rec    Records
	// timed is the store's TimedStore, when it is one and rec is set.
	timed  TimedStore
	totals Totals

	lastSweep  time.Time
	lastReport time.Time
}

// Totals are a relay's running counts since it was built.
type Totals struct {
	Ticks, Claimed, Published, LostLeases, Attempts, Parked, Swept, BrokerFailures atomic.Int64
}

// TickResult counts what one tick did.
type TickResult struct {
	Batches    int
	Claimed    int
	Published  int
	LostLeases int
	Attempts   int
	Parked     int
	Swept      int
}

func (t *TickResult) add(o TickResult) {
	t.Batches += o.Batches
	t.Claimed += o.Claimed
	t.Published += o.Published
	t.LostLeases += o.LostLeases
	t.Attempts += o.Attempts
	t.Parked += o.Parked
	t.Swept += o.Swept
}

// New builds a relay. cfg gets its defaults, then must validate.
func New(cfg Config, store Store, pub Publisher, opts Options) (*Relay, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("relay config: %w", err)
	}
	if store == nil || pub == nil {
		return nil, errors.New("relay: store and publisher are required")
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	var timed TimedStore
	if opts.Records != nil {
		timed, _ = store.(TimedStore)
	}
	var check func(string, []byte) error
	switch d := opts.Decoder.(type) {
	case nil:
	case Validator:
		check = d.Validate
	default:
		check = func(messageType string, payload []byte) error {
			_, err := d.Decode(messageType, payload)
			return err
		}
	}
	return &Relay{
		check:  check,
		rec:    opts.Records,
		timed:  timed,
		cfg:    cfg,
		store:  store,
		pub:    pub,
		log:    log.With("relay", cfg.RelayID),
		m:      opts.Metrics,
		fp:     opts.Failpoints,
		serial: opts.SerialStore,
		timers: opts.NewTimer,
	}, nil
}

// Config returns the relay's configuration with defaults applied.
func (r *Relay) Config() Config { return r.cfg }

// Totals returns the relay's running counts.
func (r *Relay) Totals() *Totals { return &r.totals }

// Run ticks until ctx ends: drain everything eligible, then sleep until the
// poll interval passes or wake delivers (wake may be nil: polling only; a
// closed wake, as relay.Listen's when its context ends, leaves polling
// only). A failed tick is logged and the loop goes on.
//
// When ctx ends, the relay stops claiming at once: no tick starts, the
// claim on its way is cancelled, no sweep or backlog report runs and no
// row claimed but not yet published is published. What is in flight is
// finished or abandoned within PublishTimeout: the confirms awaited, the
// confirmed rows marked, the failed ones retried or parked, on a context
// that ends PublishTimeout after ctx. Then Run returns nil; the rows it
// leaves leased come back when their lease runs out.
func (r *Relay) Run(ctx context.Context, wake <-chan struct{}) error {
	work, release := afterShutdown(ctx, r.cfg.PublishTimeout)
	defer release()
	defer func() {
		r.record(history.OK, history.Stop, nil, history.Meta{}, nil)
		r.flushRecords()
	}()
	timer := r.newTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C():
		case _, ok := <-wake:
			if !ok {
				wake = nil
				continue
			}
			timer.Stop()
		}
		// The timer or a wake-up may have been ready beside ctx.Done, and
		// select picks among ready cases at random.
		if ctx.Err() != nil {
			return nil
		}
		start := r.cfg.Now()
		res, err := r.tick(work, ctx, ctx.Done(), wake)
		if err != nil {
			if r.m != nil {
				r.m.TickFailures.Inc()
			}
			r.log.Error("tick failed", "err", err, "published", res.Published)
		} else if res.Published > 0 || res.Parked > 0 || res.LostLeases > 0 {
			r.log.Debug("tick", "published", res.Published, "parked", res.Parked,
				"lost_leases", res.LostLeases, "batches", res.Batches)
		}
		if r.m != nil {
			r.m.TickDuration.Observe(r.cfg.Now().Sub(start).Seconds())
		}
		r.flushRecords()
		timer.Reset(r.cfg.PollInterval)
	}
}

// newTimer returns a poll timer armed to fire after d.
func (r *Relay) newTimer(d time.Duration) Timer {
	if r.timers != nil {
		return r.timers(d)
	}
	return realTimer{time.NewTimer(d)}
}

// afterShutdown returns the context of what a tick has in flight: it is
// not cancelled with ctx but ends grace after ctx ends, or when release
// is called.
func afterShutdown(ctx context.Context, grace time.Duration) (context.Context, context.CancelFunc) {
	work, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, func() {
		t := time.AfterFunc(grace, cancel)
		context.AfterFunc(work, func() { t.Stop() })
	})
	return work, func() {
		stop()
		cancel()
	}
}

// Tick drains every eligible row, batch by batch, sweeps when the sweep is
// due, and refreshes the backlog metrics. It stops at the first failure and
// returns the error; what got confirmed before it is marked (unless the
// failure was the store's) and every call it started has ended.
func (r *Relay) Tick(ctx context.Context) (TickResult, error) {
	return r.tick(ctx, ctx, nil, nil)
}

// tick is one tick. Claims, the sweep and the backlog report run on
// claims, and none of them starts once stop is closed (shutdown began);
// publishes, confirms, marks, retries and parks run on work. A nil stop
// never closes.
func (r *Relay) tick(work, claims context.Context, stop, wake <-chan struct{}) (TickResult, error) {
	r.totals.Ticks.Add(1)
	d := &drain{r: r, ctx: work, claims: claims, stop: stop}
	if err := d.run(wake); err != nil {
		return d.res, err
	}
	total := d.res
	if d.stopped() {
		return total, nil
	}
	if now := r.cfg.Now(); r.lastSweep.IsZero() || now.Sub(r.lastSweep) >= r.cfg.SweepInterval {
		n, err := r.sweep(claims)
		total.Swept += n
		if err != nil && d.stopped() {
			return total, nil // shutdown cut the sweep short
		}
		if err != nil {
			return total, err
		}
		r.lastSweep = now
	}
	// The backlog statistics count the whole table: refresh them once per
	// poll interval, not on every wake-up.
	if now := r.cfg.Now(); r.m != nil && (r.lastReport.IsZero() || now.Sub(r.lastReport) >= r.cfg.PollInterval) {
		if err := r.report(claims); err != nil && !d.stopped() {
			return total, err
		}
		r.lastReport = now
	}
	return total, nil
}

// flight is one claimed batch on its way to the broker: how many of its
// publishes still await their confirms and which rows were confirmed. It is
// marked once it is sealed (every row published or filed) and nothing of
// it is open.
type flight struct {
	confirmed []uuid.UUID
	open      int
	sealed    bool
	done      bool
}

// inflight is a publish awaiting its confirm.
type inflight struct {
	row  Row
	conf Confirmation
	dl   *deadline
	f    *flight
	// ids names the row in its Publish records; nil without Records.
	ids []string
}

// deadline is the context that bounds publishes and their confirms: it
// ends PublishTimeout after the first publish that used it. Publishes
// that start within deadlineShare of PublishTimeout after that one share
// it, so that a context and its timer are made once for hundreds of
// publishes rather than once for each; each publish is still bounded by
// at most PublishTimeout. It is cancelled once its last publish is
// settled or given up.
type deadline struct {
	ctx    context.Context
	cancel context.CancelFunc
	until  time.Time
	refs   int
}

// deadlineShare is the part of PublishTimeout by which a shared deadline
// may come earlier than a publish's own would.
const deadlineShare = 100

// publishDeadline returns the deadline of a publish starting now, holding
// one reference to it.
func (d *drain) publishDeadline() *deadline {
	timeout := d.r.cfg.PublishTimeout
	now := time.Now()
	if dl := d.dl; dl != nil && dl.until.Sub(now) >= timeout-timeout/deadlineShare {
		dl.refs++
		return dl
	}
	until := now.Add(timeout)
	ctx, cancel := context.WithDeadline(d.ctx, until)
	d.dl = &deadline{ctx: ctx, cancel: cancel, until: until, refs: 1}
	return d.dl
}

// release drops a publish's reference to dl, cancelling it after the last.
func (d *drain) release(dl *deadline) {
	dl.refs--
	if dl.refs > 0 {
		return
	}
	dl.cancel()
	if d.dl == dl {
		d.dl = nil
	}
}

// drain is one tick: it claims batch after batch and keeps the publish
// window full across them. While a batch is published, the claim of the
// next one runs (when this one was full) and the marks of earlier batches
// whose confirms are all in run too, each on a pooled connection of its
// own; the broker confirms meanwhile. The publishes of a batch wait until
// fewer than PublishWindow publishes await their confirms, so the rows
// leased and not yet marked stay below PublishWindow + 2 x BatchSize.
// With Options.SerialStore every store call runs on the relay's goroutine
// instead, at the moment it would start.
//
// A batch is still marked only after every confirm of it came in, only for
// its confirmed rows, and fenced by the lease: pipelining changes when the
// relay waits, never what it marks.
type drain struct {
	r *Relay
	// ctx is the context of publishes, confirms, marks, retries and
	// parks; claims that of claims.
	ctx, claims context.Context
	// stop closes when shutdown begins: no claim starts and no row is
	// published after it; what is in flight is settled and marked.
	stop    <-chan struct{}
	res     TickResult
	pending []inflight // oldest first, across batches

	// brokerErr stops publishing: what is in flight is settled and its
	// confirmed rows marked, the rest waits for its lease to expire.
	brokerErr error
	// storeErr stops claiming and marking: what is in flight is settled,
	// nothing more is marked.
	storeErr error
	// onWay holds the rows this drain claimed and has not yet marked or
	// filed (retried, parked, or left to their lease by a failed
	// confirm). A claim may return one of them again when its lease ran
	// out while the relay stood still (a pause, a stalled disk) between
	// the claim that leased it and this one: the claim renewed the lease
	// of the copy already on its way, which will publish and mark it or
	// file it, so the row is not published or filed a second time.
	onWay map[uuid.UUID]struct{}
	// stale holds the rows that left onWay while next was on its way: if
	// next returns one of them, it read the row before it was filed.
	stale map[uuid.UUID]struct{}
	// marks are the marks on their way, oldest first.
	marks []markCall
	// next is the claim of the next batch, started while the current one
	// is published; nil when none is on its way.
	next *call[[]Row]
	// dl is the deadline the next publish may share.
	dl *deadline
}

// markCall is the mark of one batch's confirmed rows, on its way.
type markCall struct {
	ids  []uuid.UUID
	call *call[[]uuid.UUID]
}

// maxMarks bounds the marks on their way at once, and so the pooled
// connections they hold.
const maxMarks = 2

// run drains until a claim comes back short, stop closes or a failure
// halts it, then settles and marks what is in flight. A short claim does
// not end the drain when a wake-up came in meanwhile (new rows committed)
// and the drain is younger than the poll interval: the next claim then
// runs while this batch is published and confirmed, so that under a
// steady trickle of commits the relay does not wait for one batch's
// confirms and mark before it claims the rows committed meanwhile. The
// bound lets the sweep and the backlog report run between drains.
func (d *drain) run(wake <-chan struct{}) error {
	r := d.r
	began := r.cfg.Now()
	for {
		// Room in the window first: the next batch's publishes go out
		// while the rest of the window is being confirmed.
		for len(d.pending) >= r.cfg.PublishWindow {
			if err := d.settle(); err != nil {
				return d.abort(err)
			}
		}
		if err := d.reapMarks(false); err != nil {
			return d.abort(err)
		}
		if d.halted() || d.stopped() {
			break
		}
		c := d.next
		if c == nil {
			// Nothing else of this drain would run while the claim does:
			// it runs on the drain's own goroutine, sparing a wake-up its
			// hand-off to another goroutine and back.
			c = d.startClaim(true)
		}
		rows, full, err := d.claimed(c)
		if err != nil || len(rows) == 0 && !full {
			break
		}
		if err := r.failpoint(d.ctx, FailAfterClaim); err != nil {
			return d.abort(err)
		}
		// The age is checked first: a wake-up taken and then not acted on
		// would leave its rows to the next poll.
		more := full || r.cfg.Now().Sub(began) < r.cfg.PollInterval && woken(wake)
		if more && !d.stopped() {
			// The next claim runs while this batch is published.
			d.next = d.startClaim(false)
		}
		f := &flight{}
		if err := d.publish(f, rows); err != nil {
			return d.abort(err)
		}
		f.sealed = true
		if err := d.complete(f); err != nil {
			return d.abort(err)
		}
		if d.halted() {
			break
		}
		if d.next == nil {
			// The claim came back short and no wake-up had come: settle
			// what is in flight, and go on if one comes meanwhile.
			again, err := d.linger(wake, began)
			if err != nil {
				return d.abort(err)
			}
			if !again {
				break
			}
			continue
		}
		if !full {
			// A trickle: take this batch's confirms (and start its mark)
			// while the next claim runs, rather than after it; but where
			// the confirms tell when they are in, publish the next batch
			// as soon as its claim is back: its rows need not wait for
			// the confirms before them.
			for len(d.pending) > 0 && !d.claimFirst() {
				if err := d.settle(); err != nil {
					return d.abort(err)
				}
			}
		}
	}
	return d.finish()
}

// linger settles the publishes in flight and waits for the marks on their
// way, as finish does, but watches wake meanwhile: when a wake-up comes
// (new rows committed) while the drain is younger than the poll interval,
// it reports true once the confirm it is settling is in (at once while it
// only waits for marks), and run claims the next batch while the marks
// still on their way go on, so that rows committed while a batch is
// confirmed and marked do not wait for the drain to end and the next tick
// to begin. A wake-up is only taken when it will be acted on. With
// Options.SerialStore the marks have ended before linger runs, and wake is
// read only between calls, as elsewhere.
func (d *drain) linger(wake <-chan struct{}, began time.Time) (bool, error) {
	r := d.r
	open := func() bool {
		return wake != nil && !d.halted() && !d.stopped() && r.cfg.Now().Sub(began) < r.cfg.PollInterval
	}
	again := func() bool {
		return open() && woken(wake)
	}
	for len(d.pending) > 0 {
		if err := d.settle(); err != nil {
			return false, err
		}
		if again() {
			return true, nil
		}
	}
	for len(d.marks) > 0 {
		if !d.marks[0].call.ready() && open() {
			select {
			case <-d.marks[0].call.done:
			case _, ok := <-wake:
				if ok {
					return true, nil
				}
				wake = nil
				continue
			}
		}
		if err := d.reapOldest(); err != nil {
			return false, err
		}
	}
	return again(), nil
}

// claimFirst waits until the oldest publish in flight is confirmed or the
// next claim is back, and reports whether the claim came first, when the
// oldest publish's confirmation tells when it is in (DoneConfirmation);
// otherwise it reports false at once.
func (d *drain) claimFirst() bool {
	dc, ok := d.pending[0].conf.(DoneConfirmation)
	if !ok || d.next == nil {
		return false
	}
	select {
	case <-dc.Done():
		return false
	default:
	}
	select {
	case <-dc.Done():
		return false
	case <-d.next.done:
		return true
	}
}

// woken reports, and takes, a pending wake-up.
func woken(wake <-chan struct{}) bool {
	select {
	case _, ok := <-wake:
		return ok
	default:
		return false
	}
}

// stopped reports whether shutdown began.
func (d *drain) stopped() bool {
	select {
	case <-d.stop:
		return true
	default:
		return false
	}
}

// startClaim starts the claim of the next batch, on a goroutine of its
// own unless inline is set or the store is serial.
func (d *drain) startClaim(inline bool) *call[[]Row] {
	r := d.r
	return start(r.serial || inline, func() ([]Row, error) {
		cctx, cancel := context.WithTimeout(d.claims, r.cfg.StoreTimeout)
		defer cancel()
		rows, err := r.store.Claim(cctx, r.cfg.RelayID, r.cfg.BatchSize, r.cfg.Lease)
		if r.rec != nil && (err != nil || len(rows) > 0) {
			r.recordClaim(rows, err)
		}
		return rows, err
	})
}

// claimed waits for the claim c (the one in d.next, if it is that one),
// counts what it leased and returns the rows this drain is to publish
// (those not already on their way) and whether the batch was full. A
// failed claim halts the drain, unless shutdown began: then it was
// cancelled, or its failure no longer matters, and what is in flight is
// still marked.
func (d *drain) claimed(c *call[[]Row]) ([]Row, bool, error) {
	rows, err := c.wait()
	stale := d.stale
	if c == d.next {
		d.next, d.stale = nil, nil
	}
	if err != nil {
		if d.stopped() {
			return nil, false, err
		}
		if d.storeErr == nil {
			d.storeErr = fmt.Errorf("claiming outbox rows: %w", err)
		}
		return nil, false, err
	}
	d.res.Batches++
	d.res.Claimed += len(rows)
	d.r.totals.Claimed.Add(int64(len(rows)))
	full := len(rows) == d.r.cfg.BatchSize
	if d.onWay == nil {
		d.onWay = make(map[uuid.UUID]struct{}, len(rows))
	}
	fresh := rows[:0]
	for _, row := range rows {
		_, again := d.onWay[row.ID]
		if _, ok := stale[row.ID]; ok {
			again = true
		}
		if !again {
			d.onWay[row.ID] = struct{}{}
			fresh = append(fresh, row)
		}
	}
	return fresh, full, nil
}

// filed notes that the row id left this drain's hands: marked, retried,
// parked, or left to its lease.
func (d *drain) filed(id uuid.UUID) {
	delete(d.onWay, id)
	if d.next != nil {
		if d.stale == nil {
			d.stale = make(map[uuid.UUID]struct{})
		}
		d.stale[id] = struct{}{}
	}
}

// publish sends the rows of f, settling the oldest publish whenever the
// window is full, until shutdown begins. It returns only a failpoint's
// error; failures of the broker or the store halt the drain and are
// returned by finish.
func (d *drain) publish(f *flight, rows []Row) error {
	r := d.r
	for _, row := range rows {
		if d.halted() || d.stopped() {
			return nil
		}
		if r.check != nil {
			if derr := r.check(row.Type, row.Payload); derr != nil {
				r.rowFailed(d.ctx, row, derr, &d.res)
				d.filed(row.ID)
				continue
			}
		}
		if len(d.pending) >= r.cfg.PublishWindow {
			if err := d.settle(); err != nil {
				return err
			}
			if d.halted() || d.stopped() {
				return nil
			}
		}
		dl := d.publishDeadline()
		var ids []string
		if r.rec != nil {
			ids = []string{row.ID.String()}
			r.record(history.Invoke, history.Publish, ids, history.Meta{}, nil)
		}
		conf, perr := r.pub.Publish(dl.ctx, MessageOf(row))
		if perr != nil {
			// Not sent.
			r.record(history.Fail, history.Publish, ids, history.Meta{}, perr)
			d.release(dl)
			r.confirmFailed(perr)
			if Classify(perr) == ClassBroker {
				d.brokerErr = fmt.Errorf("publishing %s: %w", row.ID, perr)
				return nil
			}
			r.rowFailed(d.ctx, row, perr, &d.res)
			d.filed(row.ID)
			continue
		}
		d.pending = append(d.pending, inflight{row: row, conf: conf, dl: dl, f: f, ids: ids})
		f.open++
		if err := r.failpoint(d.ctx, FailAfterPublishBeforeConfirm); err != nil {
			return err
		}
	}
	return nil
}

// settle waits for the oldest publish in flight, files its outcome and
// marks its batch when that was the batch's last open publish.
func (d *drain) settle() error {
	r := d.r
	p := d.pending[0]
	d.pending[0] = inflight{}
	d.pending = d.pending[1:]
	werr := p.conf.Wait(p.dl.ctx)
	d.release(p.dl)
	p.f.open--
	if r.rec != nil {
		t, c := confirmOutcome(werr)
		r.record(t, history.Publish, p.ids, history.Meta{Confirm: c}, werr)
	}
	switch {
	case werr == nil:
		p.f.confirmed = append(p.f.confirmed, p.row.ID)
	case Classify(werr) == ClassBroker:
		d.filed(p.row.ID)
		r.confirmFailed(werr)
		if d.brokerErr == nil {
			d.brokerErr = fmt.Errorf("confirming %s: %w", p.row.ID, werr)
		}
	default:
		r.confirmFailed(werr)
		r.rowFailed(d.ctx, p.row, werr, &d.res)
		d.filed(p.row.ID)
	}
	return d.complete(p.f)
}

// complete starts the mark of f once it is sealed and nothing of it is in
// flight. It returns only a failpoint's error; a failed mark halts the
// drain when its outcome comes in.
func (d *drain) complete(f *flight) error {
	if !f.sealed || f.open > 0 || f.done {
		return nil
	}
	f.done = true
	if len(f.confirmed) == 0 || d.storeErr != nil {
		return nil
	}
	r := d.r
	if err := r.failpoint(d.ctx, FailAfterConfirmBeforeMark); err != nil {
		return err
	}
	if len(d.marks) >= maxMarks {
		if err := d.reapOldest(); err != nil {
			return err
		}
	}
	ids := f.confirmed
	d.marks = append(d.marks, markCall{ids: ids, call: start(r.serial, func() ([]uuid.UUID, error) {
		mctx, cancel := context.WithTimeout(d.ctx, r.cfg.StoreTimeout)
		defer cancel()
		return r.mark(mctx, ids)
	})})
	return d.reapMarks(false)
}

// reapMarks files the outcome of the marks that are done, oldest first,
// or of every mark when wait is set. It returns only a failpoint's error.
func (d *drain) reapMarks(wait bool) error {
	for len(d.marks) > 0 && (wait || d.marks[0].call.ready()) {
		if err := d.reapOldest(); err != nil {
			return err
		}
	}
	return nil
}

// reapOldest waits for the oldest mark on its way and files its outcome:
// published rows, lost leases, or a store failure that halts the drain.
func (d *drain) reapOldest() error {
	m := d.marks[0]
	d.marks[0] = markCall{}
	d.marks = d.marks[1:]
	marked, err := m.call.wait()
	for _, id := range m.ids {
		d.filed(id)
	}
	if err != nil {
		if d.storeErr == nil {
			d.storeErr = fmt.Errorf("marking %d confirmed rows: %w", len(m.ids), err)
		}
		return nil
	}
	d.r.marked(m.ids, marked, &d.res)
	return d.r.failpoint(d.ctx, FailAfterMark)
}

// halted reports whether a broker or store failure stopped the drain.
func (d *drain) halted() bool { return d.brokerErr != nil || d.storeErr != nil }

// finish settles every publish still in flight, marking each batch as it
// completes, and returns what halted the drain, if anything.
func (d *drain) finish() error {
	for len(d.pending) > 0 {
		if err := d.settle(); err != nil {
			return d.abort(err)
		}
	}
	if err := d.reapMarks(true); err != nil {
		return d.abort(err)
	}
	if d.next != nil {
		// A failure halted the drain after the next claim started: its rows
		// stay leased, as the rest of a halted batch does, until the lease
		// runs out.
		_, _, _ = d.claimed(d.next)
	}
	if d.brokerErr != nil {
		d.r.totals.BrokerFailures.Add(1)
	}
	return errors.Join(d.storeErr, d.brokerErr)
}

// abort gives up the publishes in flight (a failpoint ended the tick),
// lets the marks on their way end without filing them, and returns err.
func (d *drain) abort(err error) error {
	for _, p := range d.pending {
		d.release(p.dl)
		r := d.r
		r.record(history.Info, history.Publish, p.ids, history.Meta{}, errNotAwaited)
	}
	d.pending = nil
	for _, m := range d.marks {
		_, _ = m.call.wait()
	}
	d.marks = nil
	if d.next != nil {
		_, _ = d.next.wait()
		d.next = nil
	}
	return err
}

// call is a store call on its way. start runs fn on a goroutine of its own,
// or at once on the caller's when serial is set; either way wait returns
// its outcome.
type call[T any] struct {
	done chan struct{}
	v    T
	err  error
}

func start[T any](serial bool, fn func() (T, error)) *call[T] {
	c := &call[T]{done: make(chan struct{})}
	if serial {
		c.v, c.err = fn()
		close(c.done)
		return c
	}
	go func() {
		defer close(c.done)
		c.v, c.err = fn()
	}()
	return c
}

// ready reports whether the call has ended.
func (c *call[T]) ready() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// wait returns the call's outcome once it has ended.
func (c *call[T]) wait() (T, error) {
	<-c.done
	return c.v, c.err
}

// marked counts the rows a mark of ids marked and those whose lease was
// lost.
func (r *Relay) marked(ids, marked []uuid.UUID, res *TickResult) {
	res.Published += len(marked)
	r.totals.Published.Add(int64(len(marked)))
	if r.m != nil {
		r.m.Published.Add(float64(len(marked)))
	}
	if lost := len(ids) - len(marked); lost > 0 {
		res.LostLeases += lost
		r.totals.LostLeases.Add(int64(lost))
		if r.m != nil {
			r.m.LostLeases.Add(float64(lost))
		}
		r.log.Warn("lease lost before mark: rows published but left to their new holder",
			"lost", lost, "ids", missing(ids, marked))
	}
}

// rowFailed files a row-level failure: park poison at once, otherwise one
// attempt and a backoff (parking at the limit). Store errors here are
// logged, not returned: the lease runs out and the row comes back.
func (r *Relay) rowFailed(ctx context.Context, row Row, cause error, res *TickResult) {
	sctx, cancel := context.WithTimeout(ctx, r.cfg.StoreTimeout)
	defer cancel()
	var ids []string
	if r.rec != nil {
		ids = []string{row.ID.String()}
	}
	if Classify(cause) == ClassPoison {
		r.record(history.Invoke, history.Park, ids, history.Meta{}, nil)
		ok, err := r.store.Park(sctx, r.cfg.RelayID, row.ID, cause.Error())
		switch {
		case err != nil:
			r.record(history.Info, history.Park, ids, history.Meta{}, err)
		case !ok:
			r.record(history.Fail, history.Park, ids, history.Meta{Fenced: 1}, ErrLeaseLost)
		default:
			r.record(history.OK, history.Park, ids, history.Meta{}, nil)
		}
		switch {
		case err != nil:
			r.log.Error("parking row", "id", row.ID, "cause", cause, "err", err)
		case !ok:
			r.lostLease(row.ID, "park", res)
		default:
			res.Parked++
			r.totals.Parked.Add(1)
			if r.m != nil {
				r.m.Parked.Inc()
			}
			r.log.Warn("row parked", "id", row.ID, "type", row.Type, "cause", cause)
		}
		return
	}
	r.record(history.Invoke, history.Retry, ids, history.Meta{}, nil)
	out, err := r.store.Retry(sctx, r.cfg.RelayID, row.ID, r.cfg.Policy(), cause.Error())
	switch {
	case err != nil:
		r.record(history.Info, history.Retry, ids, history.Meta{}, err)
	case !out.Applied:
		r.record(history.Fail, history.Retry, ids, history.Meta{Fenced: 1}, ErrLeaseLost)
	default:
		r.record(history.OK, history.Retry, ids, history.Meta{Attempts: out.Attempts, Parked: out.Parked, DBTime: out.At, Until: out.Until}, nil)
	}
	switch {
	case err != nil:
		r.log.Error("recording attempt", "id", row.ID, "cause", cause, "err", err)
	case !out.Applied:
		r.lostLease(row.ID, "retry", res)
	default:
		res.Attempts++
		r.totals.Attempts.Add(1)
		if r.m != nil {
			r.m.Attempts.Inc()
		}
		if out.Parked {
			res.Parked++
			r.totals.Parked.Add(1)
			if r.m != nil {
				r.m.Parked.Inc()
			}
			r.log.Warn("row parked after attempts", "id", row.ID, "attempts", out.Attempts, "cause", cause)
		} else {
			r.log.Info("row failed, backing off", "id", row.ID, "attempts", out.Attempts, "cause", cause)
		}
	}
}

func (r *Relay) lostLease(id uuid.UUID, op string, res *TickResult) {
	res.LostLeases++
	r.totals.LostLeases.Add(1)
	if r.m != nil {
		r.m.LostLeases.Inc()
	}
	r.log.Warn("lease lost", "id", id, "op", op)
}

func (r *Relay) confirmFailed(err error) {
	if r.m != nil {
		r.m.ConfirmsFailed.WithLabelValues(Classify(err).String()).Inc()
	}
}

// sweep deletes processed rows past retention in small batches, until
// ctx ends.
func (r *Relay) sweep(ctx context.Context) (int, error) {
	total := 0
	for {
		if err := ctx.Err(); err != nil {
			return total, fmt.Errorf("sweeping processed rows: %w", err)
		}
		sctx, cancel := context.WithTimeout(ctx, r.cfg.StoreTimeout)
		n, err := r.sweepOnce(sctx)
		cancel()
		total += n
		if err != nil {
			return total, fmt.Errorf("sweeping processed rows: %w", err)
		}
		if n < r.cfg.SweepBatch {
			break
		}
	}
	r.totals.Swept.Add(int64(total))
	if r.m != nil {
		r.m.Swept.Add(float64(total))
	}
	return total, nil
}

func (r *Relay) report(ctx context.Context) error {
	sctx, cancel := context.WithTimeout(ctx, r.cfg.StoreTimeout)
	st, err := r.store.Stats(sctx)
	cancel()
	if err != nil {
		return fmt.Errorf("reading backlog stats: %w", err)
	}
	r.m.Backlog.Set(float64(st.Pending))
	r.m.Faulted.Set(float64(st.Faulted))
	r.m.OldestEligible.Set(st.OldestEligibleAge.Seconds())
	return nil
}

func (r *Relay) failpoint(ctx context.Context, name string) error {
	if r.fp == nil {
		return nil
	}
	if r.rec != nil {
		// Durable before the failpoint acts: it may kill the process.
		r.record(history.OK, history.Failpoint, nil, history.Meta{Failpoint: name}, nil)
		r.rec.Flush()
	}
	if err := r.fp.Inject(ctx, name); err != nil {
		return fmt.Errorf("failpoint %s: %w", name, err)
	}
	return nil
}

// missing returns the ids of want not in got.
func missing(want, got []uuid.UUID) []uuid.UUID {
	seen := make(map[uuid.UUID]bool, len(got))
	for _, id := range got {
		seen[id] = true
	}
	var out []uuid.UUID
	for _, id := range want {
		if !seen[id] {
			out = append(out, id)
		}
	}
	return out
}

// errNotAwaited completes the Publish record of a confirm the relay gave
// up on (a failpoint ended the tick).
var errNotAwaited = errors.New("confirm not awaited")

// recordClaim records a claim that leased rows or failed: an invoke and
// its completion, both when the statement returned.
func (r *Relay) recordClaim(rows []Row, err error) {
	r.record(history.Invoke, history.Claim, nil, history.Meta{}, nil)
	if err != nil {
		// A claim cut short may have committed: its outcome is unknown.
		r.record(history.Info, history.Claim, nil, history.Meta{}, err)
	} else {
		r.record(history.OK, history.Claim, rowIDStrings(rows),
			history.Meta{DBTime: rows[0].LockedAt, Until: rows[0].LockedUntil}, nil)
	}
	r.rec.Flush()
}

// mark marks the confirmed rows of ids, recording the mark when the
// relay records.
func (r *Relay) mark(ctx context.Context, ids []uuid.UUID) ([]uuid.UUID, error) {
	if r.rec == nil {
		return r.store.Mark(ctx, r.cfg.RelayID, ids)
	}
	strs := idStrings(ids)
	r.record(history.Invoke, history.Mark, strs, history.Meta{}, nil)
	var (
		marked []uuid.UUID
		at     time.Time
		err    error
	)
	if r.timed != nil {
		marked, at, err = r.timed.MarkAt(ctx, r.cfg.RelayID, ids)
	} else {
		marked, err = r.store.Mark(ctx, r.cfg.RelayID, ids)
	}
	if err != nil {
		// The statement may have committed before it failed.
		r.record(history.Info, history.Mark, strs, history.Meta{}, err)
		return marked, err
	}
	done := strs
	if len(marked) != len(ids) {
		done = idStrings(marked)
	}
	r.record(history.OK, history.Mark, done, history.Meta{DBTime: at, Fenced: len(ids) - len(marked)}, nil)
	return marked, nil
}

// sweepOnce runs one sweep statement, recording it when it deleted rows
// or failed.
func (r *Relay) sweepOnce(ctx context.Context) (int, error) {
	if r.rec == nil {
		return r.store.Sweep(ctx, r.cfg.Retention, r.cfg.SweepBatch)
	}
	var (
		ids []string
		at  time.Time
		n   int
		err error
	)
	if r.timed != nil {
		var got []uuid.UUID
		got, at, err = r.timed.SweepIDs(ctx, r.cfg.Retention, r.cfg.SweepBatch)
		ids, n = idStrings(got), len(got)
	} else {
		n, err = r.store.Sweep(ctx, r.cfg.Retention, r.cfg.SweepBatch)
	}
	switch {
	case err != nil:
		r.record(history.Invoke, history.Sweep, nil, history.Meta{}, nil)
		r.record(history.Info, history.Sweep, nil, history.Meta{}, err)
	case n > 0:
		m := history.Meta{DBTime: at}
		if !at.IsZero() {
			m.Cutoff = at.Add(-r.cfg.Retention)
		}
		r.record(history.Invoke, history.Sweep, nil, history.Meta{}, nil)
		r.record(history.OK, history.Sweep, ids, m, nil)
	}
	return n, err
}
