package sim

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/outboxlab/outboxlab/consumer"
	"github.com/outboxlab/outboxlab/history"
	"github.com/outboxlab/outboxlab/outbox"
	"github.com/outboxlab/outboxlab/relay"
	"github.com/outboxlab/outboxlab/workload"
)

// This file holds the SQL-faithful effects of the ports (see sqldb.go):
// each port call yields, records its invoke and decides its link and
// crash outcome exactly as on the fakes (ports.go), then runs the
// production statement on the process's own connection, with the
// database clock set first.

// sqlRun sets the process's database clock and runs f.
func (p *proc) sqlRun(ctx context.Context, f func() error) error {
	if err := p.db.sync(ctx, p.w.clock.Now(), p.Now()); err != nil {
		return err
	}
	return f()
}

// sqlFailed completes h as failed with the error the server returned:
// the statement took no effect, whatever the link or crash outcome.
func (p *proc) sqlFailed(h uint64, invoked []string, serr error, what string) error {
	p.complete(h, history.Fail, invoked, history.Meta{}, serr)
	return fmt.Errorf("%s: %w", what, serr)
}

// harnessFailed stops the run on a failed read of the harness.
func (w *world) harnessFailed(err error) {
	if w.err == nil {
		w.err = err
	}
}

func rowIDStrings(rows []relay.Row) []string {
	if len(rows) == 0 {
		return nil
	}
	out := make([]string, len(rows))
	for i, r := range rows {
		out[i] = r.ID.String()
	}
	return out
}

func (s *storePort) sqlClaim(ctx context.Context, h uint64, v verdict, lost bool, err error, owner string, limit int, lease time.Duration) ([]relay.Row, error) {
	p := s.p
	var rows []relay.Row
	serr := p.sqlRun(ctx, func() (e error) { rows, e = p.db.raw.Claim(ctx, owner, limit, lease); return e })
	if serr != nil {
		return nil, p.sqlFailed(h, nil, serr, "claiming")
	}
	var leased history.Meta
	if len(rows) > 0 {
		p.w.progress()
		// The lease the claim took, as PGStore returns it and the
		// relay's records carry it on containers.
		leased = history.Meta{DBTime: rows[0].LockedAt, Until: rows[0].LockedUntil}
	}
	if err := p.end(h, v, lost, err, history.OK, nil, rowIDStrings(rows), leased, nil); err != nil {
		return nil, fmt.Errorf("claiming: %w", err)
	}
	return rows, nil
}

// sqlMark runs mark (the relay's Mark, or MarkUnfenced) and reports the
// rows marked in the order of ids, as the fake does.
func (s *storePort) sqlMark(ctx context.Context, h uint64, v verdict, lost bool, err error, invoked []string, ids []uuid.UUID, mark func() ([]uuid.UUID, error)) ([]uuid.UUID, error) {
	p := s.p
	var marked []uuid.UUID
	serr := p.sqlRun(ctx, func() (e error) { marked, e = mark(); return e })
	if serr != nil {
		return nil, p.sqlFailed(h, invoked, serr, "marking")
	}
	marked = inOrderOf(ids, marked)
	if len(marked) > 0 {
		p.w.progress()
	}
	if err := p.end(h, v, lost, err, history.OK, invoked, s.idStrings(marked), s.dbTime(), nil); err != nil {
		return nil, fmt.Errorf("marking: %w", err)
	}
	return marked, nil
}

func (s *storePort) sqlRetry(ctx context.Context, h uint64, v verdict, lost bool, err error, invoked []string, owner string, id uuid.UUID, policy relay.RetryPolicy, cause string) (relay.RetryResult, error) {
	p := s.p
	var res relay.RetryResult
	serr := p.sqlRun(ctx, func() (e error) { res, e = p.db.raw.Retry(ctx, owner, id, policy, cause); return e })
	if serr != nil {
		return relay.RetryResult{}, p.sqlFailed(h, invoked, serr, "recording attempt")
	}
	return s.endRetry(h, v, lost, err, invoked, res)
}

func (s *storePort) sqlPark(ctx context.Context, h uint64, v verdict, lost bool, err error, invoked []string, owner string, id uuid.UUID, cause string) (bool, error) {
	p := s.p
	var ok bool
	serr := p.sqlRun(ctx, func() (e error) { ok, e = p.db.raw.Park(ctx, owner, id, cause); return e })
	if serr != nil {
		return false, p.sqlFailed(h, invoked, serr, "parking")
	}
	return s.endPark(h, v, lost, err, invoked, ok)
}

// sqlDelete runs del (the relay's Sweep, or Delete) and records the rows
// it deleted: those of candidates no longer in the table after it, read
// by the harness, since neither statement returns its rows.
func (s *storePort) sqlDelete(ctx context.Context, h uint64, v verdict, lost bool, err error, what string, candidates func() ([]uuid.UUID, error), del func() (int, error)) (int, error) {
	p := s.p
	before, herr := candidates()
	if herr != nil {
		p.w.harnessFailed(herr)
		return 0, p.sqlFailed(h, nil, herr, what)
	}
	var n int
	serr := p.sqlRun(ctx, func() (e error) { n, e = del(); return e })
	if serr != nil {
		return 0, p.sqlFailed(h, nil, serr, what)
	}
	var gone []uuid.UUID
	if n > 0 {
		left, herr := p.db.db.existing(before)
		if herr != nil {
			p.w.harnessFailed(herr)
			return 0, p.sqlFailed(h, nil, herr, what)
		}
		gone = without(before, left)
		p.w.progress()
	}
	if err := p.end(h, v, lost, err, history.OK, nil, s.idStrings(gone), s.dbTime(), nil); err != nil {
		return 0, fmt.Errorf("%s: %w", what, err)
	}
	return n, nil
}

func (s *storePort) sqlSweep(ctx context.Context, h uint64, v verdict, lost bool, err error, retention time.Duration, limit int) (int, error) {
	raw := s.p.db.raw
	return s.sqlDelete(ctx, h, v, lost, err, "sweeping", s.p.db.db.processed,
		func() (int, error) { return raw.Sweep(ctx, retention, limit) })
}

func (s *storePort) sqlDeleteIDs(ctx context.Context, h uint64, v verdict, lost bool, err error, ids []uuid.UUID) (int, error) {
	raw := s.p.db.raw
	return s.sqlDelete(ctx, h, v, lost, err, "deleting", func() ([]uuid.UUID, error) { return s.p.db.db.existing(ids) },
		func() (int, error) { return raw.Delete(ctx, ids) })
}

func (s *storePort) sqlLease(ctx context.Context, h uint64, v verdict, lost bool, err error, owner string, ids []uuid.UUID, until time.Time) ([]relay.Row, error) {
	p := s.p
	var rows []relay.Row
	serr := p.sqlRun(ctx, func() (e error) {
		rows, e = p.db.raw.Lease(ctx, owner, ids, until.Truncate(time.Microsecond))
		return e
	})
	if serr != nil {
		return nil, p.sqlFailed(h, nil, serr, "leasing")
	}
	if len(rows) > 0 {
		p.w.progress()
	}
	if err := p.end(h, v, lost, err, history.OK, nil, rowIDStrings(rows), history.Meta{}, nil); err != nil {
		return nil, fmt.Errorf("leasing: %w", err)
	}
	return rows, nil
}

func (ip *inboxPort) sqlApply(ctx context.Context, h uint64, v verdict, lost bool, err error, m consumer.Message, effectOnly bool) (bool, error) {
	p := ip.p
	events := []string{m.ID}
	var dup bool
	serr := p.sqlRun(ctx, func() (e error) {
		if effectOnly {
			return sqlEffect(ctx, p.db, m)
		}
		dup, e = p.db.inbox.Apply(ctx, m)
		return e
	})
	if serr != nil {
		return false, p.sqlFailed(h, events, serr, "applying "+m.ID)
	}
	p.w.progress()
	meta := history.Meta{Duplicate: dup}
	if effectOnly {
		meta = history.Meta{}
	}
	if err := p.end(h, v, lost, err, history.OK, events, events, meta, nil); err != nil {
		return false, fmt.Errorf("applying %s: %w", m.ID, err)
	}
	return dup, nil
}

// sqlEffect applies the effect of m in a transaction of its own, without
// the inbox.
func sqlEffect(ctx context.Context, pd *procDB, m consumer.Message) error {
	tx, err := pd.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if err := consumer.RecordEffect(sqlConsumer)(ctx, tx, m); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// sqlApplyKeyed records key in the inbox and applies the effect of m in
// one transaction; with check, nothing runs when key was recorded before,
// and it reports a duplicate.
func sqlApplyKeyed(ctx context.Context, pd *procDB, key string, m consumer.Message, check bool) (bool, error) {
	tx, err := pd.pool.Begin(ctx)
	if err != nil {
		return false, fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	tag, err := tx.Exec(ctx, `INSERT INTO inbox (consumer, message_id, message_type) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING`,
		sqlConsumer, key, m.Type)
	if err != nil {
		return false, fmt.Errorf("recording %s in the inbox: %w", key, err)
	}
	if check && tag.RowsAffected() == 0 {
		return true, nil
	}
	if err := consumer.RecordEffect(sqlConsumer)(ctx, tx, m); err != nil {
		return false, err
	}
	if err := tx.Commit(ctx); err != nil {
		return false, fmt.Errorf("commit: %w", err)
	}
	return false, nil
}

// sqlBegin opens a producer's business transaction, with the database
// clock set before BEGIN: now() is the transaction's start throughout.
func (s producerStore) sqlBegin(ctx context.Context) (workload.Tx, error) {
	p := s.p
	pg := workload.PG{DB: p.db.pool, Table: SQLTable, Business: sqlBusiness, Notify: true}
	var tx workload.Tx
	if err := p.sqlRun(ctx, func() (e error) { tx, e = pg.Begin(ctx); return e }); err != nil {
		p.w.harnessFailed(fmt.Errorf("%s: begin: %w", p.name, err))
		return nil, err
	}
	p.db.tx = tx
	return &producerTx{p: p, sql: tx}, nil
}

// sqlWrite makes the business write and stages e.
func (t *producerTx) sqlWrite(ctx context.Context, e outbox.Event, stage bool) error {
	if err := t.sql.Write(ctx, e, stage); err != nil {
		t.p.w.harnessFailed(fmt.Errorf("%s: %w", t.p.name, err))
		return err
	}
	if stage {
		t.staged++
	}
	return nil
}

// sqlEnd commits or rolls back the open transaction.
func (t *producerTx) sqlEnd(commit bool) {
	if t.sql == nil {
		return
	}
	ctx, cancel := harnessCtx()
	defer cancel()
	tx := t.sql
	t.sql, t.p.db.tx = nil, nil
	if !commit {
		_ = tx.Rollback(ctx)
		return
	}
	if err := tx.Commit(ctx); err != nil {
		t.p.w.harnessFailed(fmt.Errorf("%s: commit: %w", t.p.name, err))
		return
	}
	w := t.p.w
	w.events += t.events
	w.progress()
	if t.staged > 0 {
		w.notify()
	}
}

// sqlNotify delivers the notifications of a committed staging
// transaction: each relay that listens now reads its LISTEN connection.
func (w *world) sqlNotify() {
	ctx, cancel := harnessCtx()
	defer cancel()
	for _, p := range w.procs {
		if !p.listens() {
			continue
		}
		got, err := p.db.notified(ctx)
		if err != nil {
			w.harnessFailed(err)
			return
		}
		if got {
			p.signal()
		}
	}
}

// sqlReconnected is a relay's listener connecting again: what was
// notified while it was away is dropped.
func (w *world) sqlReconnected(p *proc) {
	ctx, cancel := harnessCtx()
	defer cancel()
	if _, err := p.db.notified(ctx); err != nil {
		w.harnessFailed(err)
	}
}
