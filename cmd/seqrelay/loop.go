package main

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"
)

// claimed is one row of a claimed batch.
type claimed struct {
	id         string
	typ        string
	payload    []byte
	corr       *string
	attempts   int
	occurredAt time.Time
}

// outcome is what a publish came to.
type outcome int

const (
	// published: the broker confirmed the message and did not return it.
	published outcome = iota
	// refused: the broker nacked or returned the message, a failure of
	// the row.
	refused
	// outage: no connection, a publish error, no confirm in time or a
	// closed channel: trouble of the broker, not of the row.
	outage
)

// errStopping: the stop came while a broker connection was being opened,
// before anything of the row was published.
var errStopping = errors.New("stopping before the publish")

// broker is one AMQP connection with one confirm-mode channel.
type broker struct {
	conn    *amqp.Connection
	ch      *amqp.Channel
	returns chan amqp.Return
}

// close ends the connection, waiting at most 300ms for the broker's
// answer.
func (b *broker) close() { _ = b.conn.CloseDeadline(time.Now().Add(300 * time.Millisecond)) }

// zeroUUID is where skip-late's high-water mark starts.
const zeroUUID = "00000000-0000-0000-0000-000000000000"

// seqRelay is the relay: one loop, one database connection, one broker
// connection, each opened when missing and dropped on any error.
type seqRelay struct {
	cfg  config
	log  *logger
	stop <-chan struct{}
	q    queries

	db *pgx.Conn
	mq *broker
	// highWater is the highest id claimed so far (skip-late only).
	highWater string
	// xidMark is the oldest transaction running before the last claim
	// that drained the backlog: rows written before it were all seen
	// (xid-mark only).
	xidMark int64
	// since is the database's time when the relay first connected
	// (since-start only).
	since time.Time
}

func newRelay(cfg config, lg *logger, stop <-chan struct{}) *seqRelay {
	return &seqRelay{
		cfg: cfg, log: lg, stop: stop,
		q:         queries{table: cfg.tableSQL, me: cfg.relayID, bug: cfg.bug, clock: lg.now},
		highWater: zeroUUID,
	}
}

func (r *seqRelay) stopping() bool {
	select {
	case <-r.stop:
		return true
	default:
		return false
	}
}

// sleep waits d or until the stop; it reports whether to go on.
func (r *seqRelay) sleep(d time.Duration) bool {
	if d <= 0 {
		return !r.stopping()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-r.stop:
		return false
	case <-t.C:
		return true
	}
}

// loop runs ticks until the stop. A full batch is followed by the next
// tick at once, a failed tick by a pause that doubles up to 1s.
func (r *seqRelay) loop() {
	types := "any type"
	if r.cfg.types != nil {
		types = strings.Join(r.cfg.types.names(), ", ")
	}
	r.log.printf("starting: table %s, exchange %q, batch %d, lease %s, poll %s, publish timeout %s, max attempts %d, types: %s, bug mode: %s",
		r.cfg.tableSQL, r.cfg.exchange, batchSize, lease, pollEvery, publishTimeout, r.cfg.maxAttempts, types, r.cfg.bug)
	failures := 0
	for !r.stopping() {
		n, err := r.tick()
		pause := pollEvery
		switch {
		case err != nil:
			failures++
			r.log.printf("tick failed: %v", err)
			pause = min(pollEvery<<min(failures-1, 8), failurePauseMax)
		case n == batchSize:
			failures, pause = 0, 0
		default:
			failures = 0
		}
		if !r.sleep(pause) {
			break
		}
	}
	r.dropBroker()
	r.dropDB()
	r.log.printf("stopped")
}

// tick claims a batch and handles its rows one by one. It returns how many
// rows it handled (a full batch handled to its end: claim again at once).
// It stops early, leaving the rest of the batch to its
// lease, at the stop, once leaseGuard has gone by since the claim began,
// or at the first error, which it returns.
func (r *seqRelay) tick() (int, error) {
	if err := r.ensureDB(); err != nil {
		return 0, fmt.Errorf("connecting to the database: %w", err)
	}
	began := time.Now()
	rows, err := r.claim()
	if err != nil {
		r.dropDB()
		return 0, fmt.Errorf("claiming rows: %w", err)
	}
	if len(rows) == 0 {
		return 0, nil
	}
	r.log.printf("claimed %d row(s) for %s", len(rows), lease)
	for i, row := range rows {
		left := len(rows) - i
		if r.stopping() {
			r.log.printf("stopping: %d claimed row(s) left to their lease", left)
			return i, nil
		}
		// no-fence trusts its claim to the end of the batch.
		if r.cfg.bug != bugNoFence && time.Since(began) > leaseGuard {
			r.log.printf("%s since the claim: %d claimed row(s) left to their lease", time.Since(began).Round(time.Millisecond), left)
			return i, nil
		}
		err := r.handle(row)
		if errors.Is(err, errStopping) {
			r.log.printf("stopping: %d claimed row(s) left to their lease", left)
			return i, nil
		}
		if err != nil {
			return i, fmt.Errorf("row %s: %w; %d claimed row(s) left to their lease", row.id, err, left)
		}
	}
	return len(rows), nil
}

// handle takes one claimed row to its end: parked, published and marked,
// or failed with backoff. An error stops the batch.
func (r *seqRelay) handle(row claimed) error {
	if err := r.cfg.types.check(row.typ, row.payload); err != nil {
		if r.cfg.bug == bugPoisonBlocks {
			return fmt.Errorf("cannot publish it (%v), stopping the batch", err)
		}
		return r.park(row, err)
	}
	if r.cfg.bug == bugMarkFirst {
		if err := r.mark(row); err != nil {
			return err
		}
	}
	out, err := r.publish(row)
	switch out {
	case published:
		if r.cfg.bug == bugMarkFirst {
			return nil
		}
		return r.mark(row)
	case refused:
		return r.fail(row, err)
	}
	if errors.Is(err, errStopping) {
		return err
	}
	r.dropBroker()
	if r.cfg.bug == bugEatAttempts {
		return r.fail(row, err)
	}
	return fmt.Errorf("broker: %w", err)
}

// claim runs the claim statement and returns the rows in the order they
// are handled: oldest occurred_at first (by id for skip-late).
func (r *seqRelay) claim() ([]claimed, error) {
	ctx, cancel := context.WithTimeout(context.Background(), dbTimeout)
	defer cancel()
	var mark int64
	if r.cfg.bug == bugXidMark || r.cfg.bug == bugXidHighWater {
		if err := r.db.QueryRow(ctx, snapshotXmin).Scan(&mark); err != nil {
			return nil, err
		}
	}
	sql, args := r.q.claim(batchSize, r.highWater, r.xidMark, r.since)
	rows, err := r.db.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	out, err := pgx.CollectRows(rows, func(cr pgx.CollectableRow) (claimed, error) {
		var (
			c       claimed
			payload string
		)
		err := cr.Scan(&c.id, &c.typ, &payload, &c.corr, &c.attempts, &c.occurredAt)
		c.payload = []byte(payload)
		return c, err
	})
	if err != nil {
		return nil, err
	}
	sort.Slice(out, func(i, j int) bool {
		if r.cfg.bug == bugSkipLate || out[i].occurredAt.Equal(out[j].occurredAt) {
			return out[i].id < out[j].id
		}
		return out[i].occurredAt.Before(out[j].occurredAt)
	})
	if r.cfg.bug == bugXidMark && len(out) < batchSize {
		// Drained: every row written before mark was pending and seen,
		// or is not pending. Correct on one server, whose transaction
		// ids only grow; a restored one's start again below the mark.
		r.xidMark = mark
	}
	if r.cfg.bug == bugXidHighWater && len(out) < batchSize {
		r.xidMark = max(r.xidMark, mark)
	}
	if r.cfg.bug == bugSkipLate {
		for _, c := range out {
			// The canonical text of a uuid sorts as PostgreSQL orders it.
			r.highWater = max(r.highWater, c.id)
		}
	}
	return out, nil
}

// mark sets processed_at under the lease; a mark that finds no row lost
// the lease, which is logged.
func (r *seqRelay) mark(row claimed) error {
	ctx, cancel := context.WithTimeout(context.Background(), dbTimeout)
	defer cancel()
	sql, args := r.q.mark(row.id)
	tag, err := r.db.Exec(ctx, sql, args...)
	if err != nil {
		r.dropDB()
		return fmt.Errorf("marking it processed: %w", err)
	}
	if tag.RowsAffected() == 0 {
		r.log.printf("lease lost on row %s: not marked (another relay took it over, or the lease ran out)", row.id)
	}
	return nil
}

// fail counts a failed attempt of the row, with backoff, parking it at
// the attempt limit.
func (r *seqRelay) fail(row claimed, why error) error {
	n := row.attempts + 1
	wait := backoff(n)
	ctx, cancel := context.WithTimeout(context.Background(), dbTimeout)
	defer cancel()
	sql, args := r.q.fail(row.id, wait, r.cfg.maxAttempts)
	var (
		attempts int
		parked   bool
	)
	err := r.db.QueryRow(ctx, sql, args...).Scan(&attempts, &parked)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		r.log.printf("lease lost on row %s: its failed attempt (%v) not counted", row.id, why)
		return nil
	case err != nil:
		r.dropDB()
		return fmt.Errorf("counting a failed attempt (%v): %w", why, err)
	case parked:
		r.log.printf("row %s parked after %d attempt(s): %v", row.id, attempts, why)
	default:
		r.log.printf("row %s failed (%v): attempt %d of %d, eligible again in %s", row.id, why, attempts, r.cfg.maxAttempts, wait)
	}
	return nil
}

// park faults a poison row at once.
func (r *seqRelay) park(row claimed, why error) error {
	ctx, cancel := context.WithTimeout(context.Background(), dbTimeout)
	defer cancel()
	sql, args := r.q.park(row.id)
	tag, err := r.db.Exec(ctx, sql, args...)
	if err != nil {
		r.dropDB()
		return fmt.Errorf("parking it (%v): %w", why, err)
	}
	if tag.RowsAffected() == 0 {
		r.log.printf("lease lost on row %s: not parked (%v)", row.id, why)
		return nil
	}
	r.log.printf("row %s parked: %v", row.id, why)
	return nil
}

// publish sends one row and waits for its confirm.
func (r *seqRelay) publish(row claimed) (outcome, error) {
	if err := r.ensureBroker(); err != nil {
		return outage, err
	}
	if r.stopping() {
		return outage, errStopping
	}
	mq := r.mq
	// Returns left over from earlier messages are of no interest.
	for drained := false; !drained; {
		select {
		case _, ok := <-mq.returns:
			if !ok {
				return outage, errors.New("the channel is closed")
			}
		default:
			drained = true
		}
	}
	msg := amqp.Publishing{
		ContentType:  "application/json",
		DeliveryMode: amqp.Persistent,
		MessageId:    row.id,
		Type:         row.typ,
		Body:         row.payload,
	}
	if r.cfg.bug == bugTransient {
		msg.DeliveryMode = amqp.Transient
	}
	if row.corr != nil {
		msg.CorrelationId = *row.corr
	}
	ctx, cancel := context.WithTimeout(context.Background(), publishTimeout)
	defer cancel()
	// A write the broker never reads would block past every context: the
	// watchdog closes the connection under it.
	watchdog := time.AfterFunc(publishTimeout+confirmGrace+time.Second, mq.close)
	defer watchdog.Stop()
	dc, err := mq.ch.PublishWithDeferredConfirmWithContext(ctx, r.cfg.exchange, row.typ, true, false, msg)
	if err != nil {
		return outage, fmt.Errorf("publishing: %w", err)
	}
	if dc == nil {
		return outage, errors.New("the channel is not in confirm mode")
	}
	acked, err := dc.WaitContext(ctx)
	if err != nil {
		// A confirm already on its way still counts.
		t := time.NewTimer(confirmGrace)
		select {
		case <-dc.Done():
			acked, err = dc.Acked(), nil
		case <-t.C:
		}
		t.Stop()
	}
	if err != nil {
		return outage, fmt.Errorf("no confirm within %s", publishTimeout)
	}
	if !acked {
		if mq.ch.IsClosed() || mq.conn.IsClosed() {
			return outage, errors.New("the channel closed before the confirm")
		}
		return refused, errors.New("nacked by the broker")
	}
	// The broker sends a return before the ack, and the library hands it
	// over before it completes the confirm: it is in the channel now.
	for {
		select {
		case ret, ok := <-mq.returns:
			if !ok {
				return published, nil
			}
			if ret.MessageId == row.id {
				return refused, fmt.Errorf("returned by the broker: %d %s", ret.ReplyCode, ret.ReplyText)
			}
		default:
			return published, nil
		}
	}
}

// ensureDB connects to the database when there is no open connection.
func (r *seqRelay) ensureDB() error {
	if r.db != nil && !r.db.IsClosed() {
		return nil
	}
	r.dropDB()
	ctx, cancel := context.WithTimeout(context.Background(), dbTimeout)
	defer cancel()
	cc := r.cfg.dbConfig.Copy()
	if cc.RuntimeParams == nil {
		cc.RuntimeParams = map[string]string{}
	}
	cc.RuntimeParams["application_name"] = "seqrelay " + r.cfg.relayID
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return err
	}
	if r.cfg.bug == bugSinceStart && r.since.IsZero() {
		if err := conn.QueryRow(ctx, `SELECT now()`).Scan(&r.since); err != nil {
			_ = conn.Close(ctx)
			return err
		}
	}
	r.db = conn
	r.log.printf("connected to the database")
	return nil
}

func (r *seqRelay) dropDB() {
	if r.db == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = r.db.Close(ctx)
	r.db = nil
}

// ensureBroker opens a connection and a confirm-mode channel when there
// are none open, within dialTimeout and a second.
func (r *seqRelay) ensureBroker() error {
	if r.mq != nil && !r.mq.conn.IsClosed() && !r.mq.ch.IsClosed() {
		return nil
	}
	r.dropBroker()
	type result struct {
		b   *broker
		err error
	}
	done := make(chan result, 1)
	go func() {
		b, err := dialBroker(r.cfg.amqpURL, r.cfg.relayID)
		done <- result{b, err}
	}()
	limit := dialTimeout + time.Second
	t := time.NewTimer(limit)
	defer t.Stop()
	select {
	case res := <-done:
		if res.err != nil {
			return res.err
		}
		r.mq = res.b
		r.log.printf("connected to the broker")
		return nil
	case <-t.C:
		// The channel's handshake hung after the connection's: close
		// whatever it opens once it is done.
		go func() {
			if res := <-done; res.b != nil {
				res.b.close()
			}
		}()
		return fmt.Errorf("no broker connection within %s", limit)
	}
}

func (r *seqRelay) dropBroker() {
	if r.mq == nil {
		return
	}
	r.mq.close()
	r.mq = nil
}

// dialBroker opens a connection, a channel in confirm mode and its
// returns. Its errors never hold the URL.
func dialBroker(url, id string) (*broker, error) {
	conn, err := amqp.DialConfig(url, amqp.Config{
		Dial: amqp.DefaultDial(dialTimeout),
		// A heartbeat longer than the lease: a replica frozen past its
		// lease (lease-expiry) comes back with its connection, and goes on
		// with its batch, as a relay does after a long GC pause. With 5 s
		// the broker dropped it during every such pause, so the no-fence
		// bug mode never got to mark the rows another replica took over.
		Heartbeat:  2 * lease,
		Properties: amqp.Table{"connection_name": "seqrelay " + id},
	})
	if err != nil {
		return nil, fmt.Errorf("connecting to the broker: %s", urlErrorText(err))
	}
	ch, err := conn.Channel()
	if err != nil {
		_ = conn.CloseDeadline(time.Now().Add(300 * time.Millisecond))
		return nil, fmt.Errorf("opening a channel: %w", err)
	}
	if err := ch.Confirm(false); err != nil {
		_ = conn.CloseDeadline(time.Now().Add(300 * time.Millisecond))
		return nil, fmt.Errorf("confirm mode: %w", err)
	}
	returns := ch.NotifyReturn(make(chan amqp.Return, 16))
	return &broker{conn: conn, ch: ch, returns: returns}, nil
}
