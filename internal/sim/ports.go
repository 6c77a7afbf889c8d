package sim

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/outboxlab/outboxlab/consumer"
	"github.com/outboxlab/outboxlab/history"
	"github.com/outboxlab/outboxlab/relay"
	"github.com/outboxlab/outboxlab/workload"
)

// begin opens one fake call of p: it yields to the scheduler, records the
// invoke and checks the link. When the call must not take effect it
// returns the error to hand back (and has recorded the failure). lost
// reports a cut link that loses the reply: the caller applies the effect,
// then fails with err.
func (p *proc) begin(c call, f history.Func, events []string, m history.Meta, link bool) (h uint64, v verdict, lost bool, err error) {
	v = p.enter(c)
	if failed(v) {
		return 0, v, false, errCrashed
	}
	// A claim or a sweep that finds nothing changes nothing: it is
	// recorded only when it took rows or failed.
	h = p.invokeMaybe(f, events, m, c == callClaim || c == callSweep)
	if link {
		if p.w.frng.Float64() >= p.w.sw.LostReply {
			err = fmt.Errorf("%s: %w", f, errLinkDown)
			p.complete(h, history.Fail, events, history.Meta{}, err)
			return h, v, false, err
		}
		return h, v, true, fmt.Errorf("%s: reply lost: %w", f, errLinkDown)
	}
	return h, v, false, nil
}

// end closes a call whose effect ran: info when the reply was lost or the
// process died before reading it, otherwise t with the events and value
// given. It returns the error the caller gets.
func (p *proc) end(h uint64, v verdict, lost bool, linkErr error, t history.Type, invoked, events []string, m history.Meta, failErr error) error {
	switch {
	case lost:
		p.complete(h, history.Info, invoked, history.Meta{}, linkErr)
		return linkErr
	case v == vCrashAfter:
		p.complete(h, history.Info, invoked, history.Meta{}, errCrashed)
		return errCrashed
	}
	p.complete(h, t, events, m, failErr)
	return nil
}

func (p *proc) dbDown() bool { return p.cutDB || p.w.dbDown }

// claiming notes a claim of p: a relay whose shutdown began must not.
func (p *proc) claiming() {
	if p.stopping && !p.dying {
		p.w.brokeShutdown(p, "claimed after its shutdown began")
	}
}

func (p *proc) brokerDown() bool { return p.cutMQ || !p.w.broker.up }

// storePort is a process's connection to the outbox table: the fake's, or
// on the SQL tier its own connection to PostgreSQL (sqlports.go). It
// implements relay.Store and RawStore.
type storePort struct {
	p   *proc
	buf []*row
}

var _ RawStore = (*storePort)(nil)

// RawStore is implemented by the store a Variant's WrapStore receives, on
// top of relay.Store: statements a correct relay never issues, for
// mutants to build broken relays from. Each is one atomic statement and
// one step, recorded like the relay.Store call it resembles.
type RawStore interface {
	relay.Store
	// Now returns the database clock (SELECT now()).
	Now(ctx context.Context) (time.Time, error)
	// Scan returns up to limit rows in claim order (occurred_at, id),
	// pending or not as all says, without locking anything. Not recorded.
	Scan(ctx context.Context, limit int, all bool) ([]RowState, error)
	// Lease sets locked_by, locked_at = now() and locked_until = until on
	// the pending rows of ids, whatever their lease, and returns them.
	// Recorded as a Claim.
	Lease(ctx context.Context, owner string, ids []uuid.UUID, until time.Time) ([]relay.Row, error)
	// MarkUnfenced sets processed_at on the pending rows of ids, whoever
	// holds them. Recorded as a Mark.
	MarkUnfenced(ctx context.Context, ids []uuid.UUID) ([]uuid.UUID, error)
	// Delete deletes the rows of ids whatever their state. Recorded as a
	// Sweep.
	Delete(ctx context.Context, ids []uuid.UUID) (int, error)
}

func idsOfRows(rs []*row) []string {
	if len(rs) == 0 {
		return nil
	}
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.idStr
	}
	return out
}

func relayRows(rs []*row) []relay.Row {
	if len(rs) == 0 {
		return nil
	}
	out := make([]relay.Row, len(rs))
	for i, r := range rs {
		out[i] = r.relayRow()
	}
	return out
}

func (s *storePort) idStrings(ids []uuid.UUID) []string {
	if len(ids) == 0 {
		return nil
	}
	out := make([]string, len(ids))
	for i, id := range ids {
		if r := s.p.w.store.byID[id]; r != nil {
			out[i] = r.idStr
		} else {
			out[i] = id.String()
		}
	}
	return out
}

func (s *storePort) dbTime() history.Meta {
	return history.Meta{DBTime: s.p.w.clock.Now()}
}

// Claim implements relay.Store.
func (s *storePort) Claim(ctx context.Context, owner string, limit int, lease time.Duration) ([]relay.Row, error) {
	p := s.p
	p.claiming()
	h, v, lost, err := p.begin(callClaim, history.Claim, nil, history.Meta{}, p.dbDown())
	if err != nil && !lost {
		return nil, fmt.Errorf("claiming: %w", err)
	}
	if p.db != nil {
		return s.sqlClaim(ctx, h, v, lost, err, owner, limit, lease)
	}
	s.buf = p.w.store.claim(owner, limit, lease, s.buf[:0])
	if len(s.buf) > 0 {
		p.w.progress()
	}
	ids := idsOfRows(s.buf)
	var leased history.Meta
	if len(s.buf) > 0 {
		// The lease the claim took, on the database clock, as the
		// relay's records carry it on containers.
		leased = history.Meta{DBTime: s.buf[0].LockedAt, Until: s.buf[0].LockedUntil}
	}
	if err := p.end(h, v, lost, err, history.OK, nil, ids, leased, nil); err != nil {
		return nil, fmt.Errorf("claiming: %w", err)
	}
	return relayRows(s.buf), nil
}

// Mark implements relay.Store.
func (s *storePort) Mark(ctx context.Context, owner string, ids []uuid.UUID) ([]uuid.UUID, error) {
	p := s.p
	invoked := s.idStrings(ids)
	h, v, lost, err := p.begin(callMark, history.Mark, invoked, history.Meta{}, p.dbDown())
	if err != nil && !lost {
		return nil, fmt.Errorf("marking: %w", err)
	}
	if p.db != nil {
		return s.sqlMark(ctx, h, v, lost, err, invoked, ids, func() ([]uuid.UUID, error) { return p.db.raw.Mark(ctx, owner, ids) })
	}
	s.buf = p.w.store.mark(owner, ids, s.buf[:0])
	if len(s.buf) > 0 {
		p.w.progress()
	}
	if err := p.end(h, v, lost, err, history.OK, invoked, idsOfRows(s.buf), s.dbTime(), nil); err != nil {
		return nil, fmt.Errorf("marking: %w", err)
	}
	out := make([]uuid.UUID, len(s.buf))
	for i, r := range s.buf {
		out[i] = r.ID
	}
	return out, nil
}

// Retry implements relay.Store.
func (s *storePort) Retry(ctx context.Context, owner string, id uuid.UUID, policy relay.RetryPolicy, cause string) (relay.RetryResult, error) {
	p := s.p
	invoked := s.idStrings([]uuid.UUID{id})
	h, v, lost, err := p.begin(callRetry, history.Retry, invoked, history.Meta{}, p.dbDown())
	if err != nil && !lost {
		return relay.RetryResult{}, fmt.Errorf("recording attempt: %w", err)
	}
	if p.db != nil {
		return s.sqlRetry(ctx, h, v, lost, err, invoked, owner, id, policy, cause)
	}
	res, _ := p.w.store.Retry(ctx, owner, id, policy, cause)
	return s.endRetry(h, v, lost, err, invoked, res)
}

// endRetry records the outcome of a retry, on either backend: the
// attempts, whether it parked, the database time and the row's next
// eligible time, or a lost lease.
func (s *storePort) endRetry(h uint64, v verdict, lost bool, err error, invoked []string, res relay.RetryResult) (relay.RetryResult, error) {
	p := s.p
	if res.Applied {
		p.w.progress()
	}
	t, value, ferr := history.OK, history.Meta{Attempts: res.Attempts, Parked: res.Parked, DBTime: p.w.clock.Now(), Until: res.Until}, error(nil)
	if !res.Applied {
		t, value, ferr = history.Fail, history.Meta{}, relay.ErrLeaseLost
	}
	if err := p.end(h, v, lost, err, t, invoked, invoked, value, ferr); err != nil {
		return relay.RetryResult{}, fmt.Errorf("recording attempt: %w", err)
	}
	return res, nil
}

// Park implements relay.Store.
func (s *storePort) Park(ctx context.Context, owner string, id uuid.UUID, cause string) (bool, error) {
	p := s.p
	invoked := s.idStrings([]uuid.UUID{id})
	h, v, lost, err := p.begin(callPark, history.Park, invoked, history.Meta{}, p.dbDown())
	if err != nil && !lost {
		return false, fmt.Errorf("parking: %w", err)
	}
	if p.db != nil {
		return s.sqlPark(ctx, h, v, lost, err, invoked, owner, id, cause)
	}
	ok, _ := p.w.store.Park(ctx, owner, id, cause)
	return s.endPark(h, v, lost, err, invoked, ok)
}

// endPark records the outcome of a park, on either backend: done, or a
// lost lease.
func (s *storePort) endPark(h uint64, v verdict, lost bool, err error, invoked []string, ok bool) (bool, error) {
	p := s.p
	if ok {
		p.w.progress()
	}
	t, value, ferr := history.OK, s.dbTime(), error(nil)
	if !ok {
		t, value, ferr = history.Fail, history.Meta{}, relay.ErrLeaseLost
	}
	if err := p.end(h, v, lost, err, t, invoked, invoked, value, ferr); err != nil {
		return false, fmt.Errorf("parking: %w", err)
	}
	return ok, nil
}

// Sweep implements relay.Store.
func (s *storePort) Sweep(ctx context.Context, retention time.Duration, limit int) (int, error) {
	p := s.p
	h, v, lost, err := p.begin(callSweep, history.Sweep, nil, history.Meta{}, p.dbDown())
	if err != nil && !lost {
		return 0, fmt.Errorf("sweeping: %w", err)
	}
	if p.db != nil {
		return s.sqlSweep(ctx, h, v, lost, err, retention, limit)
	}
	s.buf = p.w.store.sweep(retention, limit, s.buf[:0])
	if err := p.end(h, v, lost, err, history.OK, nil, idsOfRows(s.buf), s.dbTime(), nil); err != nil {
		return 0, fmt.Errorf("sweeping: %w", err)
	}
	return len(s.buf), nil
}

// Stats implements relay.Store. It is a read and is not recorded.
func (s *storePort) Stats(ctx context.Context) (relay.Stats, error) {
	p := s.p
	if v := p.enter(callStats); failed(v) {
		return relay.Stats{}, errCrashed
	}
	if p.dbDown() {
		return relay.Stats{}, fmt.Errorf("reading stats: %w", errLinkDown)
	}
	if p.db != nil {
		var st relay.Stats
		err := p.sqlRun(ctx, func() (e error) { st, e = p.db.raw.Stats(ctx); return e })
		return st, err
	}
	return p.w.store.Stats(ctx)
}

// Now implements RawStore.
func (s *storePort) Now(ctx context.Context) (time.Time, error) {
	p := s.p
	if v := p.enter(callRaw); failed(v) {
		return time.Time{}, errCrashed
	}
	if p.dbDown() {
		return time.Time{}, fmt.Errorf("reading the database clock: %w", errLinkDown)
	}
	if p.db != nil {
		var now time.Time
		err := p.sqlRun(ctx, func() (e error) { now, e = p.db.raw.Now(ctx); return e })
		return now.UTC(), err
	}
	return p.w.clock.Now(), nil
}

// Scan implements RawStore.
func (s *storePort) Scan(ctx context.Context, limit int, all bool) ([]RowState, error) {
	p := s.p
	if v := p.enter(callRaw); failed(v) {
		return nil, errCrashed
	}
	if p.dbDown() {
		return nil, fmt.Errorf("scanning: %w", errLinkDown)
	}
	if p.db != nil {
		var rows []RowState
		err := p.sqlRun(ctx, func() (e error) { rows, e = p.db.raw.Scan(ctx, limit, all); return e })
		return rows, err
	}
	var out []RowState
	if all {
		for _, r := range p.w.store.Rows() {
			if len(out) == limit {
				break
			}
			out = append(out, r)
		}
		return out, nil
	}
	for _, r := range p.w.store.pending {
		if len(out) == limit {
			break
		}
		out = append(out, r.RowState)
	}
	return out, nil
}

// Lease implements RawStore.
func (s *storePort) Lease(ctx context.Context, owner string, ids []uuid.UUID, until time.Time) ([]relay.Row, error) {
	p := s.p
	p.claiming()
	h, v, lost, err := p.begin(callClaim, history.Claim, nil, history.Meta{}, p.dbDown())
	if err != nil && !lost {
		return nil, fmt.Errorf("leasing: %w", err)
	}
	if p.db != nil {
		return s.sqlLease(ctx, h, v, lost, err, owner, ids, until)
	}
	s.buf = s.buf[:0]
	now := p.w.clock.Now()
	for _, id := range ids {
		if r := p.w.store.byID[id]; r != nil && r.Pending() {
			r.LockedBy, r.LockedAt, r.LockedUntil = owner, now, until.Truncate(time.Microsecond)
			s.buf = append(s.buf, r)
		}
	}
	if len(s.buf) > 0 {
		p.w.progress()
	}
	if err := p.end(h, v, lost, err, history.OK, nil, idsOfRows(s.buf), history.Meta{}, nil); err != nil {
		return nil, fmt.Errorf("leasing: %w", err)
	}
	return relayRows(s.buf), nil
}

// MarkUnfenced implements RawStore.
func (s *storePort) MarkUnfenced(ctx context.Context, ids []uuid.UUID) ([]uuid.UUID, error) {
	p := s.p
	invoked := s.idStrings(ids)
	h, v, lost, err := p.begin(callMark, history.Mark, invoked, history.Meta{}, p.dbDown())
	if err != nil && !lost {
		return nil, fmt.Errorf("marking: %w", err)
	}
	if p.db != nil {
		return s.sqlMark(ctx, h, v, lost, err, invoked, ids, func() ([]uuid.UUID, error) { return p.db.raw.MarkUnfenced(ctx, ids) })
	}
	s.buf = p.w.store.markAny(ids, s.buf[:0])
	if len(s.buf) > 0 {
		p.w.progress()
	}
	if err := p.end(h, v, lost, err, history.OK, invoked, idsOfRows(s.buf), s.dbTime(), nil); err != nil {
		return nil, fmt.Errorf("marking: %w", err)
	}
	out := make([]uuid.UUID, len(s.buf))
	for i, r := range s.buf {
		out[i] = r.ID
	}
	return out, nil
}

// Delete implements RawStore.
func (s *storePort) Delete(ctx context.Context, ids []uuid.UUID) (int, error) {
	p := s.p
	h, v, lost, err := p.begin(callSweep, history.Sweep, nil, history.Meta{}, p.dbDown())
	if err != nil && !lost {
		return 0, fmt.Errorf("deleting: %w", err)
	}
	if p.db != nil {
		return s.sqlDeleteIDs(ctx, h, v, lost, err, ids)
	}
	s.buf = p.w.store.deleteAny(ids, s.buf[:0])
	if err := p.end(h, v, lost, err, history.OK, nil, idsOfRows(s.buf), s.dbTime(), nil); err != nil {
		return 0, fmt.Errorf("deleting: %w", err)
	}
	return len(s.buf), nil
}

// pubPort is a process's publisher channel on the simulated broker. It
// implements relay.Publisher.
type pubPort struct {
	p *proc
	// quiet: the publisher records its publishes itself (a producer).
	quiet bool
}

// errCrashedInFlight is a publish's error when its process died right
// after sending it: whether the broker has it is unknown to the sender.
var errCrashedInFlight = fmt.Errorf("%w with the publish in flight: %w", errCrashed, workload.ErrUnknownOutcome)

// confirmation is the pending confirm of one publish.
type confirmation struct {
	pp      *pubPort
	h       uint64
	events  []string
	id      string
	outcome PublishOutcome
	lost    bool
	epoch   int
	conn    int
	waited  bool
}

// Publish implements relay.Publisher: the message is routed at once; its
// outcome reaches the publisher at Wait.
func (pp *pubPort) Publish(_ context.Context, m relay.Message) (relay.Confirmation, error) {
	opts := relay.DefaultPublishOptions()
	if o := pp.p.w.v.PublishOptions; o != nil {
		opts = *o
	}
	c, err := pp.publish(m, opts)
	if err != nil {
		return nil, err
	}
	return c, nil
}

func (pp *pubPort) publish(m relay.Message, opts relay.PublishOptions) (*confirmation, error) {
	p := pp.p
	w := p.w
	v := p.enter(callPublish)
	if failed(v) {
		return nil, errCrashed
	}
	events := []string{m.ID}
	var h uint64 // 0 for a quiet publisher: complete(0, ...) records nothing
	if !pp.quiet {
		h = p.invoke(history.Publish, events, history.Meta{})
	}
	if p.brokerDown() {
		err := fmt.Errorf("publishing %s: %w", m.ID, relay.ErrBrokerUnavailable)
		p.complete(h, history.Fail, events, history.Meta{}, err)
		return nil, err
	}
	c := &confirmation{pp: pp, h: h, events: events, id: m.ID, epoch: w.broker.epoch, conn: p.conn}
	switch {
	case w.nacking && w.frng.IntN(2) == 0:
		c.outcome = Nacked
	case w.confirmLoss && w.frng.IntN(2) == 0:
		c.lost = true
		if w.frng.IntN(2) == 0 {
			c.outcome = w.broker.Publish(m, opts)
		} else {
			c.outcome = Nacked
		}
	default:
		c.outcome = w.broker.Publish(m, opts)
	}
	w.progress()
	if v == vCrashAfter {
		// Sent, and the process died: the open publish closes as info
		// with the crash.
		return nil, errCrashedInFlight
	}
	return c, nil
}

// Wait implements relay.Confirmation.
func (c *confirmation) Wait(context.Context) error {
	p := c.pp.p
	w := p.w
	if c.waited {
		return errors.New("confirmation awaited twice")
	}
	c.waited = true
	v := p.enter(callWait)
	if failed(v) {
		return errCrashed
	}
	var (
		t   = history.OK
		err error
	)
	switch {
	case c.epoch != w.broker.epoch || c.conn != p.conn || p.brokerDown():
		t, err = history.Info, fmt.Errorf("waiting for confirm of %s: channel closed: %w", c.id, relay.ErrBrokerUnavailable)
	case c.lost:
		t, err = history.Info, fmt.Errorf("waiting for confirm of %s: %w", c.id,
			errors.Join(context.DeadlineExceeded, relay.ErrBrokerUnavailable))
	case c.outcome == Nacked:
		t, err = history.Fail, fmt.Errorf("publishing %s: %w", c.id, relay.ErrNacked)
	case c.outcome == Returned:
		t, err = history.Fail, fmt.Errorf("publishing %s: %w", c.id, relay.ErrReturned)
	}
	if v == vCrashAfter {
		p.complete(c.h, history.Info, c.events, history.Meta{}, errCrashed)
		return errCrashed
	}
	p.complete(c.h, t, c.events, history.Meta{}, err)
	return err
}

// abandon closes a publish nobody will wait for: its outcome stays
// unknown to the publisher.
func (c *confirmation) abandon() {
	c.waited = true
	c.pp.p.complete(c.h, history.Info, c.events, history.Meta{}, errors.New("confirm not awaited"))
}

// consumerPort is a consumer process's channel on the simulated broker.
type consumerPort struct {
	p *proc
	// ch is the consumer's channel; a new one is opened when the
	// consumer next asks for a delivery after it closed.
	ch *Channel
}

// delivery implements consumer.Delivery for one message: it is settled on
// the channel that delivered it, by its tag.
type delivery struct {
	cp  *consumerPort
	ch  *Channel
	tag uint64
	msg consumer.Message
}

// next takes the first delivery the broker pushed to the consumer's
// channel, opening a channel when it has none, or returns nil when there
// is none.
func (cp *consumerPort) next() (*delivery, error) {
	p := cp.p
	w := p.w
	v := p.enter(callNext)
	if failed(v) {
		return nil, errCrashed
	}
	if p.brokerDown() {
		return nil, fmt.Errorf("consuming: %w", errLinkDown)
	}
	if cp.ch == nil || cp.ch.Closed() {
		cp.ch = w.broker.Open(p.name, w.sw.Prefetch)
	}
	m, ok := cp.ch.Next()
	if !ok {
		return nil, nil
	}
	w.progress()
	p.record(history.OK, history.Deliver, []string{m.ID}, history.Meta{Redelivered: m.Redelivered}, "")
	if v == vCrashAfter {
		return nil, errCrashed
	}
	return &delivery{cp: cp, ch: cp.ch, tag: m.Tag, msg: consumerMessage(&m)}, nil
}

// Message implements consumer.Delivery.
func (d *delivery) Message() consumer.Message { return d.msg }

// Ack implements consumer.Delivery.
func (d *delivery) Ack(context.Context) error {
	return d.settle(callAck, func() error { return d.ch.Ack(d.tag, false) })
}

// Nack implements consumer.Delivery.
func (d *delivery) Nack(_ context.Context, requeue bool) error {
	return d.settle(callNack, func() error { return d.ch.Nack(d.tag, false, requeue) })
}

// settle runs one acknowledgement on the delivery's channel. A closed
// channel (the consumer crashed or lost its connection since, the broker
// restarted) fails it; a tag the channel does not hold (settled before)
// closes the channel, as RabbitMQ does.
func (d *delivery) settle(c call, run func() error) error {
	p := d.cp.p
	w := p.w
	v := p.enter(c)
	if failed(v) {
		return errCrashed
	}
	if d.ch.Closed() || p.brokerDown() {
		return fmt.Errorf("settling %s: channel closed: %w", d.msg.ID, errLinkDown)
	}
	if err := run(); err != nil {
		return fmt.Errorf("settling %s: %w", d.msg.ID, err)
	}
	w.progress()
	if v == vCrashAfter {
		return errCrashed
	}
	return nil
}

// inboxPort is a consumer process's connection to its database: the inbox
// and effects tables. It implements consumer.Inbox and RawInbox.
type inboxPort struct {
	p *proc
}

// RawInbox is implemented by the inbox a Variant's WrapInbox receives, on
// top of consumer.Inbox, for mutants.
type RawInbox interface {
	consumer.Inbox
	// Effect applies the effect of m without recording or checking its id
	// in the inbox. Recorded as an Apply.
	Effect(ctx context.Context, m consumer.Message) error
	// ApplyAs is Apply with key in the inbox in place of m's id: the
	// effect of m runs and key is recorded, atomically, unless key was
	// recorded before. Recorded as an Apply of m.
	ApplyAs(ctx context.Context, key string, m consumer.Message) (duplicate bool, err error)
	// Seen reads whether key is in the inbox, in a statement of its own.
	// Not recorded.
	Seen(ctx context.Context, key string) (bool, error)
	// Record records key in the inbox, whether or not it was there (a
	// conflict is ignored), and runs the effect of m, atomically, without
	// looking at what the inbox held. Recorded as an Apply of m.
	Record(ctx context.Context, key string, m consumer.Message) error
}

var _ RawInbox = (*inboxPort)(nil)

// Apply implements consumer.Inbox.
func (ip *inboxPort) Apply(ctx context.Context, m consumer.Message) (bool, error) {
	p := ip.p
	if p.db != nil {
		return ip.sqlApplySteps(ctx, m)
	}
	events := []string{m.ID}
	h, v, lost, err := p.begin(callApply, history.Apply, events, history.Meta{}, p.dbDown())
	if err != nil && !lost {
		return false, fmt.Errorf("applying %s: %w", m.ID, err)
	}
	if p.db != nil {
		return ip.sqlApply(ctx, h, v, lost, err, m, false)
	}
	dup := p.w.inbox.apply(m.ID)
	p.w.progress()
	if err := p.end(h, v, lost, err, history.OK, events, events, history.Meta{Duplicate: dup}, nil); err != nil {
		return false, fmt.Errorf("applying %s: %w", m.ID, err)
	}
	return dup, nil
}

// Effect implements RawInbox.
func (ip *inboxPort) Effect(ctx context.Context, m consumer.Message) error {
	p := ip.p
	events := []string{m.ID}
	h, v, lost, err := p.begin(callApply, history.Apply, events, history.Meta{}, p.dbDown())
	if err != nil && !lost {
		return fmt.Errorf("applying %s: %w", m.ID, err)
	}
	if p.db != nil {
		_, err := ip.sqlApply(ctx, h, v, lost, err, m, true)
		return err
	}
	p.w.inbox.effect(m.ID)
	p.w.progress()
	if err := p.end(h, v, lost, err, history.OK, events, events, history.Meta{}, nil); err != nil {
		return fmt.Errorf("applying %s: %w", m.ID, err)
	}
	return nil
}

// ApplyAs implements RawInbox.
func (ip *inboxPort) ApplyAs(ctx context.Context, key string, m consumer.Message) (bool, error) {
	return ip.applyKeyed(ctx, key, m, true)
}

// Record implements RawInbox.
func (ip *inboxPort) Record(ctx context.Context, key string, m consumer.Message) error {
	_, err := ip.applyKeyed(ctx, key, m, false)
	return err
}

// applyKeyed records key and runs the effect of m, unless check and key
// was recorded before.
func (ip *inboxPort) applyKeyed(ctx context.Context, key string, m consumer.Message, check bool) (bool, error) {
	p := ip.p
	events := []string{m.ID}
	h, v, lost, err := p.begin(callApply, history.Apply, events, history.Meta{}, p.dbDown())
	if err != nil && !lost {
		return false, fmt.Errorf("applying %s: %w", m.ID, err)
	}
	var dup bool
	if p.db != nil {
		serr := p.sqlRun(ctx, func() (e error) { dup, e = sqlApplyKeyed(ctx, p.db, key, m, check); return e })
		if serr != nil {
			return false, p.sqlFailed(h, events, serr, "applying "+m.ID)
		}
	} else {
		dup = p.w.inbox.applyKeyed(key, m.ID, check)
	}
	p.w.progress()
	if err := p.end(h, v, lost, err, history.OK, events, events, history.Meta{Duplicate: dup}, nil); err != nil {
		return false, fmt.Errorf("applying %s: %w", m.ID, err)
	}
	return dup, nil
}

// Seen implements RawInbox.
func (ip *inboxPort) Seen(ctx context.Context, key string) (bool, error) {
	p := ip.p
	if v := p.enter(callRaw); failed(v) {
		return false, errCrashed
	}
	if p.dbDown() {
		return false, fmt.Errorf("reading the inbox: %w", errLinkDown)
	}
	if p.db != nil {
		var seen bool
		err := p.sqlRun(ctx, func() error {
			return p.db.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM inbox WHERE consumer = $1 AND message_id = $2)`,
				sqlConsumer, key).Scan(&seen)
		})
		if err != nil {
			return false, fmt.Errorf("reading the inbox: %w", err)
		}
		return seen, nil
	}
	return p.w.inbox.seen[key], nil
}
