package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// relay is the loop: one database connection, one broker connection,
// each opened when missing and dropped on any error, and one batch at a
// time, each in a transaction of its own.
type relay struct {
	cfg  config
	log  *logger
	stop <-chan struct{}
	q    queries

	db *pgx.Conn
	mq *broker
	// publish publishes a batch's rows and waits for their confirms:
	// publishBatch, or a fake in tests.
	publish func([]row) ([]result, error)
	// node is the broker node to dial next, modulo the nodes.
	node int
	// highWater is the highest seq published (skip-late only).
	highWater int64
}

func newRelay(cfg config, lg *logger, stop <-chan struct{}) *relay {
	r := &relay{cfg: cfg, log: lg, stop: stop, q: queries{table: cfg.tableSQL, bug: cfg.bug}}
	r.publish = r.publishBatch
	return r
}

func (r *relay) stopping() bool {
	select {
	case <-r.stop:
		return true
	default:
		return false
	}
}

// sleep waits d or until the stop; it reports whether to go on.
func (r *relay) sleep(d time.Duration) bool {
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

// loop runs batches until the stop, which it checks between batches: a
// batch under way is finished. A full batch is followed by the next at
// once, a failed one by a pause that doubles from the poll interval up to
// a second (or the poll interval, when that is longer).
func (r *relay) loop() {
	types := "any type"
	if r.cfg.types != nil {
		types = strings.Join(r.cfg.types.names(), ", ")
	}
	r.log.printf("starting: table %s, exchange %q, %d broker node(s), batch %d, poll %s, publish timeout %s, store timeout %s, max attempts %d, backoff %s to %s, types: %s, bug mode: %s",
		r.cfg.tableSQL, r.cfg.exchange, len(r.cfg.amqpURLs), r.cfg.batchSize, r.cfg.pollInterval, r.cfg.publishTimeout,
		r.cfg.storeTimeout, r.cfg.maxAttempts, r.cfg.backoffBase, r.cfg.backoffMax, types, r.cfg.bug)
	failures := 0
	for !r.stopping() {
		n, err := r.batch()
		pause := r.cfg.pollInterval
		switch {
		case err != nil && r.cfg.bug == bugNoBackoff:
			r.log.printf("batch failed: %v", err)
			pause = 0
		case err != nil:
			failures++
			r.log.printf("batch failed: %v", err)
			pause = min(r.cfg.pollInterval<<min(failures-1, 16), max(r.cfg.pollInterval, time.Second))
		case n == r.cfg.batchSize:
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

// batch runs one batch in one transaction: it claims rows with their row
// locks, parks the poison ones, publishes the others and waits for their
// confirms while it holds the locks, then marks the confirmed rows, counts
// the failures of the refused ones and commits, which frees every row it
// held: a row neither marked nor failed (its publish unconfirmed) is
// pending again for the next batch. It returns how many rows it claimed,
// and the trouble of the database or the broker that stopped it. A
// database error rolls the transaction back (every write of the batch
// with it); a broker outage commits what the batch did before it.
func (r *relay) batch() (int, error) {
	if err := r.ensureDB(); err != nil {
		return 0, fmt.Errorf("connecting to the database: %w", err)
	}
	tx, err := r.begin()
	if err != nil {
		r.dropDB()
		return 0, fmt.Errorf("beginning the batch: %w", err)
	}
	committed := false
	defer func() {
		if !committed {
			r.rollback(tx)
		}
	}()
	rows, err := r.claim(tx)
	if err != nil {
		r.dropDB()
		return 0, fmt.Errorf("claiming rows: %w", err)
	}
	if len(rows) == 0 {
		return 0, nil // the deferred rollback ends the transaction
	}

	var publishable []row
	for _, rw := range rows {
		if why := r.cfg.types.check(rw.topic, rw.body); why != nil {
			if err := r.park(tx, rw, why); err != nil {
				r.dropDB()
				return len(rows), err
			}
			continue
		}
		publishable = append(publishable, rw)
	}

	if r.cfg.bug == bugCommitFirst {
		if err := r.mark(tx, seqs(publishable)); err != nil {
			r.dropDB()
			return len(rows), err
		}
		if err := r.commit(tx); err != nil {
			r.dropDB()
			return len(rows), err
		}
		committed = true
		_, perr := r.publish(publishable)
		if perr != nil {
			r.dropBroker()
			return len(rows), fmt.Errorf("broker: %w (the batch's %d row(s) were marked published before)", perr, len(publishable))
		}
		return len(rows), nil
	}

	results, brokerErr := r.publish(publishable)
	if brokerErr != nil {
		r.dropBroker()
	}
	s := settle(r.cfg.bug, publishable, results)
	if err := r.mark(tx, s.mark); err != nil {
		r.dropDB()
		return len(rows), fmt.Errorf("%w; %d published row(s) left pending", err, len(s.mark))
	}
	for _, f := range s.fail {
		if err := r.fail(tx, f.row, f.why); err != nil {
			r.dropDB()
			return len(rows), fmt.Errorf("%w; %d published row(s) left pending", err, len(s.mark))
		}
	}
	if err := r.commit(tx); err != nil {
		r.dropDB()
		return len(rows), fmt.Errorf("%w; %d published row(s) left pending", err, len(s.mark))
	}
	committed = true
	if r.cfg.bug == bugSkipLate {
		for _, seq := range s.mark {
			r.highWater = max(r.highWater, seq)
		}
	}
	left := len(publishable) - len(s.mark) - len(s.fail)
	if len(s.mark) > 0 || len(s.fail) > 0 || left > 0 {
		r.log.printf("batch of %d: %d published, %d failed, %d poison, %d left pending", len(rows), len(s.mark), len(s.fail), len(rows)-len(publishable), left)
	}
	if brokerErr != nil {
		return len(rows), fmt.Errorf("broker: %w; %d row(s) left pending, no attempt consumed", brokerErr, left)
	}
	return len(rows), nil
}

func seqs(rows []row) []int64 {
	out := make([]int64, len(rows))
	for i, r := range rows {
		out[i] = r.seq
	}
	return out
}

// store is a context for one database statement.
func (r *relay) store() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), r.cfg.storeTimeout)
}

func (r *relay) begin() (pgx.Tx, error) {
	ctx, cancel := r.store()
	defer cancel()
	return r.db.Begin(ctx)
}

func (r *relay) commit(tx pgx.Tx) error {
	ctx, cancel := r.store()
	defer cancel()
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("committing the batch: %w", err)
	}
	return nil
}

// rollback ends a transaction that is not committed, within a second; a
// connection that cannot is dropped, which ends it on the server.
func (r *relay) rollback(tx pgx.Tx) {
	if r.db == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := tx.Rollback(ctx); err != nil && !errors.Is(err, pgx.ErrTxClosed) {
		r.dropDB()
	}
}

// claim selects and locks the batch's rows.
func (r *relay) claim(tx pgx.Tx) ([]row, error) {
	ctx, cancel := r.store()
	defer cancel()
	if r.cfg.bug == bugLockTable {
		if _, err := tx.Exec(ctx, r.q.lockTable()); err != nil {
			return nil, err
		}
	}
	sql, args := r.q.claim(r.cfg.batchSize, r.highWater)
	rows, err := tx.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(cr pgx.CollectableRow) (row, error) {
		var (
			rw   row
			body string
		)
		err := cr.Scan(&rw.seq, &rw.topic, &body, &rw.corr, &rw.failures)
		rw.body = []byte(body)
		return rw, err
	})
}

// mark sets published_at on the confirmed rows.
func (r *relay) mark(tx pgx.Tx, seqs []int64) error {
	if len(seqs) == 0 {
		return nil
	}
	ctx, cancel := r.store()
	defer cancel()
	sql, args := r.q.mark(seqs)
	tag, err := tx.Exec(ctx, sql, args...)
	if err != nil {
		return fmt.Errorf("marking %d row(s) published: %w", len(seqs), err)
	}
	if n := tag.RowsAffected(); n != int64(len(seqs)) {
		// Only without row locks (no-lock) can another relay have been
		// first.
		r.log.printf("marked %d of %d confirmed row(s): the others were no longer pending", n, len(seqs))
	}
	return nil
}

// fail counts a failure of a row with its backoff, parking it at the
// attempt limit.
func (r *relay) fail(tx pgx.Tx, rw row, why error) error {
	n := rw.failures + 1
	wait := r.cfg.backoff(n)
	ctx, cancel := r.store()
	defer cancel()
	sql, args := r.q.fail(rw.seq, wait, r.cfg.maxAttempts)
	var (
		failures int
		parked   bool
	)
	err := tx.QueryRow(ctx, sql, args...).Scan(&failures, &parked)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		r.log.printf("seq %d failed (%v) and was no longer pending", rw.seq, why)
	case err != nil:
		return fmt.Errorf("counting a failure of seq %d (%v): %w", rw.seq, why, err)
	case parked:
		r.log.printf("seq %d parked after %d failure(s): %v", rw.seq, failures, why)
	default:
		r.log.printf("seq %d failed (%v): attempt %d of %d, eligible again in %s", rw.seq, why, failures, r.cfg.maxAttempts, wait)
	}
	return nil
}

// park parks a poison row at once (drop-poison deletes it).
func (r *relay) park(tx pgx.Tx, rw row, why error) error {
	ctx, cancel := r.store()
	defer cancel()
	sql, args := r.q.park(rw.seq)
	if _, err := tx.Exec(ctx, sql, args...); err != nil {
		return fmt.Errorf("parking seq %d (%v): %w", rw.seq, why, err)
	}
	verb := "parked"
	if r.cfg.bug == bugDropPoison {
		verb = "deleted"
	}
	r.log.printf("seq %d %s: %v", rw.seq, verb, why)
	return nil
}

// ensureDB connects to the database when there is no open connection.
// The session bounds each statement by the store timeout and a
// transaction left idle by idleInTransaction, on the server too.
func (r *relay) ensureDB() error {
	if r.db != nil && !r.db.IsClosed() {
		return nil
	}
	r.dropDB()
	ctx, cancel := context.WithTimeout(context.Background(), dialTimeout+time.Second)
	defer cancel()
	cc := r.cfg.dbConfig.Copy()
	if cc.RuntimeParams == nil {
		cc.RuntimeParams = map[string]string{}
	}
	cc.RuntimeParams["application_name"] = "rowlock " + r.cfg.relayID
	cc.RuntimeParams["statement_timeout"] = strconv.FormatInt(r.cfg.storeTimeout.Milliseconds(), 10)
	cc.RuntimeParams["idle_in_transaction_session_timeout"] = strconv.FormatInt(r.cfg.idleInTransaction().Milliseconds(), 10)
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return err
	}
	r.db = conn
	r.log.printf("connected to the database")
	return nil
}

func (r *relay) dropDB() {
	if r.db == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = r.db.Close(ctx)
	r.db = nil
}
