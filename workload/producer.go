// Package workload is what producers do in every tier: the producer modes
// (the outbox, and the unsafe dual writes it replaces, kept for teaching),
// the message types and their registry, the shape of a run's business
// transactions and the plan drawn from a seed, and the producer that runs
// a plan against PostgreSQL and, for the unsafe modes, a publisher.
package workload

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxlab/outboxlab/history"
	"github.com/outboxlab/outboxlab/outbox"
	"github.com/outboxlab/outboxlab/relay"
)

// Mode is how a producer gets its event to the broker: through the
// outbox, or one of the unsafe dual writes the outbox replaces.
type Mode string

// Producer modes.
const (
	// Outbox stages the event in the business transaction; a relay
	// publishes it after COMMIT.
	Outbox Mode = "outbox"
	// PublishThenCommit publishes (with a confirm) before COMMIT: a rollback
	// after the publish leaves a phantom event.
	PublishThenCommit Mode = "publish-then-commit"
	// CommitThenPublish commits, then publishes inline with a confirm: a
	// crash or a broker outage between the two loses the event.
	CommitThenPublish Mode = "commit-then-publish"
	// Optimistic commits, then publishes without waiting for a confirm and
	// with no relay behind it: whatever the broker drops is gone.
	Optimistic Mode = "optimistic"
)

// Modes lists every producer mode, the safe one first.
var Modes = []Mode{Outbox, PublishThenCommit, CommitThenPublish, Optimistic}

// ParseMode returns the mode named s.
func ParseMode(s string) (Mode, error) {
	for _, m := range Modes {
		if string(m) == s {
			return m, nil
		}
	}
	return "", fmt.Errorf("unknown producer mode %q (want one of %v)", s, Modes)
}

// Unsafe reports whether m is one of the dual writes kept for teaching.
func (m Mode) Unsafe() bool { return m != Outbox }

// Beginner opens transactions; *pgxpool.Pool is one.
type Beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Store opens the business transactions a Producer runs: PG on PostgreSQL,
// the simulation's store in the deterministic tier.
type Store interface {
	Begin(ctx context.Context) (Tx, error)
}

// Tx is one business transaction as a producer sees it.
type Tx interface {
	// Write makes the business write of e and, when stage is set, stages
	// e in the outbox in the same transaction.
	Write(ctx context.Context, e outbox.Event, stage bool) error
	// Commit sends COMMIT. An error that wraps ErrNotSent says COMMIT never
	// left the process; any other error but a server's leaves the outcome
	// unknown.
	Commit(ctx context.Context) error
	// Rollback ends the transaction without committing.
	Rollback(ctx context.Context) error
	// Kill drops the transaction's connection, as the death of its process
	// would, while a Commit may be in flight.
	Kill()
}

// ErrNotSent marks an error of a call that never reached the other side:
// a COMMIT that was not sent (the transaction definitely did not commit)
// or a publish that was not sent.
var ErrNotSent = errors.New("not sent")

// ErrUnknownOutcome marks a publish error after which the producer cannot
// tell whether the broker has the message (its process died with the
// publish in flight).
var ErrUnknownOutcome = errors.New("outcome unknown")

// PG is the Store of a PostgreSQL database: business rows in Business,
// events staged in Table.
type PG struct {
	DB       Beginner
	Table    outbox.Table
	Business string // business table, a validated identifier
	// Notify wakes listening relays at COMMIT.
	Notify bool
	// Schema, when it is an own schema (outbox.Schema.Own), stages the
	// events instead of package outbox (and Notify is its business).
	Schema outbox.Schema
	// IDs keeps the id the database gives each row, in the staging
	// transaction, when Schema returns one (outbox.Schema.ReturnsID).
	IDs *IDs
	// Route, when set, gives per event the PG whose outbox stages it, in
	// the same transaction: events of one transaction may go to the
	// outboxes of several contexts in one database.
	Route func(e outbox.Event) PG
	// Producer is the producer whose transactions these are, for an
	// outbox whose own writer commits (outbox.Schema.Commit): the
	// writer publishes, and acts on the database after COMMIT, as that
	// producer does (Producer.afterCommit). Nil: the writer gets neither.
	Producer *Producer
}

// Begin implements Store.
func (s PG) Begin(ctx context.Context) (Tx, error) {
	tx, err := s.DB.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return &pgTx{s: s, tx: tx}, nil
}

type pgTx struct {
	s  PG
	tx pgx.Tx
	// staged are the events an outbox's own writer stores at Commit
	// (outbox.Schema.Commit).
	staged []outbox.Event
}

func (t *pgTx) Write(ctx context.Context, e outbox.Event, stage bool) error {
	if _, err := t.tx.Exec(ctx, `INSERT INTO `+t.s.Business+` (id, event_id, note) VALUES ($1, $2, $3)`,
		uuid.New(), e.ID, e.Type); err != nil {
		return fmt.Errorf("business write: %w", err)
	}
	if !stage {
		return nil
	}
	st := t.s
	if st.Route != nil {
		st = st.Route(e)
	}
	if st.Schema.Commit != nil {
		if st.Table != t.s.Table {
			return fmt.Errorf("staging event %s: the writer of outbox %s commits one table per transaction, and this one also stages in %s", e.ID, t.s.Table, st.Table)
		}
		t.staged = append(t.staged, e)
		return nil
	}
	_, err := st.Stage(ctx, t.tx, e)
	return err
}

// Stage stages e in s's outbox inside tx: through s.Schema when it is an
// own schema, else through package outbox (with a wake-up when Notify).
// When the schema returns the id the database gave the row
// (outbox.Schema.ReturnsID), Stage keeps it in s.IDs, in memory and
// inside tx, and returns it; otherwise dbID is "".
func (s PG) Stage(ctx context.Context, tx pgx.Tx, e outbox.Event) (dbID string, err error) {
	if !s.Schema.Own() {
		return "", outbox.Stage(ctx, tx, s.Table, e, outbox.StageOptions{Notify: s.Notify})
	}
	dbID, err = s.Schema.StageIn(ctx, tx, s.Table, e)
	if err != nil || dbID == "" {
		return "", err
	}
	if err := s.IDs.Keep(ctx, tx, dbID, e.ID); err != nil {
		return dbID, err
	}
	return dbID, nil
}

// Commit sends COMMIT, or, for an outbox whose own writer commits
// (outbox.Schema.Commit), hands the transaction and the events staged in
// it to the writer. An error of the writer's before it sent COMMIT is
// ErrNotSent: the transaction did not commit.
func (t *pgTx) Commit(ctx context.Context) error {
	if t.s.Schema.Commit == nil {
		return t.tx.Commit(ctx)
	}
	var sent atomic.Bool
	c := outbox.Commit{Tx: t.tx, Table: t.s.Table, Events: t.staged,
		Send: func(ctx context.Context) error { sent.Store(true); return t.tx.Commit(ctx) }}
	if t.s.Producer != nil {
		c.Publish, c.After = t.s.Producer.afterCommit(t.s.DB)
	}
	err := t.s.Schema.Commit(ctx, c)
	if err != nil && !sent.Load() {
		rbctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = t.tx.Rollback(rbctx)
		return fmt.Errorf("%w: %w", ErrNotSent, err)
	}
	return err
}

func (t *pgTx) Rollback(ctx context.Context) error { return t.tx.Rollback(ctx) }
func (t *pgTx) Kill()                              { _ = t.tx.Conn().PgConn().Conn().Close() }

// Producer writes business rows and gets events out by its Mode,
// recording every transaction as a commit operation: ok when COMMIT was
// acknowledged, fail when the transaction definitely did not commit, info
// when the outcome is unknown (the COMMIT's reply was lost).
type Producer struct {
	// Name is the history process, e.g. "producer-1".
	Name  string
	Store Store
	Mode  Mode
	// Publisher is used by the unsafe variants only.
	Publisher relay.Publisher
	// PublishTimeout bounds an inline publish and its confirm.
	PublishTimeout time.Duration
	Rec            Recorder
	// Now is the producer's own (possibly skewed) clock: the app clock
	// that stamps occurred_at (StampOccurredAt).
	Now func() time.Time
	// Stamp is the clock of its records' times, the one clock every
	// process of the history shares (the simulation's, the host's wall
	// clock); nil leaves the time to Rec. A skewed Now must never stamp
	// records: histories of several processes merge by time.
	Stamp func() time.Time
	// Pause waits d on the producer's clock for a held transaction; nil
	// waits on a real timer.
	Pause func(ctx context.Context, d time.Duration) error
	// StampOccurredAt stamps each staged event's occurred_at with Now, as
	// an application that trusts its own clock does; otherwise the
	// database's now() decides.
	StampOccurredAt bool

	// gate keeps what an outbox's own writer does after COMMIT
	// (afterCommit) to the producer's life: a crash ends what its
	// earlier life committed, and Stop ends everything.
	gate struct {
		sync.Mutex
		life     int
		stopped  bool
		inflight sync.WaitGroup
	}
}

// ErrProducerGone is the error of what an outbox's own writer tries
// after COMMIT once the producer that committed died, or stopped.
var ErrProducerGone = errors.New("the producer that committed is gone")

// afterCommit returns what an outbox's own writer acts through after
// COMMIT of a transaction of this producer's (outbox.Commit's Publish
// and After): its publish, recorded as its own, and transactions on db.
// Both act only while the producer lives the life in which it committed
// (a crash begins a new one) and has not stopped, and Stop waits for
// those in flight; otherwise they fail at once with ErrProducerGone,
// having done nothing.
func (p *Producer) afterCommit(db Beginner) (publish func(context.Context, outbox.Event) error, after func(context.Context, func(pgx.Tx) error) error) {
	p.gate.Lock()
	life := p.gate.life
	p.gate.Unlock()
	enter := func() bool {
		p.gate.Lock()
		defer p.gate.Unlock()
		if p.gate.stopped || p.gate.life != life {
			return false
		}
		p.gate.inflight.Add(1)
		return true
	}
	publish = func(ctx context.Context, e outbox.Event) error {
		if p.Publisher == nil || !enter() {
			return ErrProducerGone
		}
		defer p.gate.inflight.Done()
		return p.publishOne(ctx, e, true)
	}
	after = func(ctx context.Context, fn func(pgx.Tx) error) error {
		if db == nil || !enter() {
			return ErrProducerGone
		}
		defer p.gate.inflight.Done()
		return pgx.BeginFunc(ctx, beginner{db}, fn)
	}
	return publish, after
}

// beginner is a Beginner as pgx.BeginFunc takes it.
type beginner struct{ Beginner }

func (b beginner) Begin(ctx context.Context) (pgx.Tx, error) { return b.Beginner.Begin(ctx) }

// Stop ends what an outbox's own writer may still do after the COMMITs
// of this producer (afterCommit): it waits for what is in flight and
// refuses the rest. The producer runs no transaction after it.
func (p *Producer) Stop() {
	p.gate.Lock()
	p.gate.stopped = true
	p.gate.Unlock()
	p.gate.inflight.Wait()
}

// Recorder takes the producer's operations; *history.Recorder is one.
type Recorder interface {
	Record(op history.Op) history.Op
}

// Txn is one business transaction of the workload.
type Txn struct {
	Events []outbox.Event
	// Rollback aborts the transaction after staging (a failed request).
	Rollback bool
	// Hold keeps the transaction open this long before COMMIT, so that
	// later transactions commit first (commit-order inversion).
	Hold time.Duration
	// CrashAfterCommit stops the producer right after COMMIT, as a process
	// that died there would: the unsafe variants never publish.
	CrashAfterCommit bool
	// CrashAtCommit kills the producer while its COMMIT is in flight: the
	// connection is closed CrashDelay after COMMIT was sent, unless the
	// reply came first. Whether the transaction committed is then unknown
	// to the producer (and to the history); only the database knows.
	CrashAtCommit bool
	CrashDelay    time.Duration
	// CausedBy names the event whose consumption caused this one
	// (multi-hop pipelines).
	CausedBy string
}

// ErrRolledBack is the error of a transaction the business logic rolled
// back on purpose.
var ErrRolledBack = errors.New("request failed: rolled back")

// ErrProducerCrashed is returned by Do for a transaction that ended in a
// simulated crash of the producer.
var ErrProducerCrashed = errors.New("producer crashed")

func (p *Producer) record(op history.Op) {
	if p.Rec == nil {
		return
	}
	op.Process = p.Name
	if p.Stamp != nil {
		op.Time = p.Stamp()
	}
	p.Rec.Record(op)
}

func ids(events []outbox.Event) []string {
	out := make([]string, len(events))
	for i, e := range events {
		out[i] = e.ID.String()
	}
	return out
}

// Do runs one transaction. Its error says what the caller saw; the history
// says what is known of the outcome.
func (p *Producer) Do(ctx context.Context, t Txn) error {
	evs := ids(t.Events)
	inv := history.Op{Type: history.Invoke, F: history.Commit, Events: evs, Meta: history.Meta{Held: t.Hold}}
	if t.CausedBy != "" {
		inv.CausedBy = []string{t.CausedBy}
	}
	p.record(inv)
	done := func(typ history.Type, err error) error {
		op := history.Op{Type: typ, F: history.Commit, Events: evs}
		if err != nil {
			op.Error = err.Error()
			if pgErr := (*pgconn.PgError)(nil); typ == history.Fail && errors.As(err, &pgErr) {
				op.SQLState = pgErr.Code
			}
		}
		p.record(op)
		return err
	}

	tx, err := p.Store.Begin(ctx)
	if err != nil {
		return done(history.Fail, fmt.Errorf("begin: %w", err))
	}
	// abort rolls back and reports the transaction as definitely not
	// committed: nothing was sent as COMMIT.
	abort := func(err error) error {
		rbctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = tx.Rollback(rbctx)
		return done(history.Fail, err)
	}
	for _, e := range t.Events {
		stage := p.Mode == Outbox
		if stage && p.StampOccurredAt && p.Now != nil && e.OccurredAt.IsZero() {
			e.OccurredAt = p.Now()
		}
		if err := tx.Write(ctx, e, stage); err != nil {
			return abort(err)
		}
	}
	if p.Mode == PublishThenCommit {
		if err := p.publish(ctx, t.Events, true); err != nil {
			return abort(err)
		}
	}
	if t.Hold > 0 {
		if err := p.pause(ctx, t.Hold); err != nil {
			return abort(err)
		}
	}
	if t.Rollback {
		return abort(ErrRolledBack)
	}
	if t.CrashAtCommit {
		return p.crashAtCommit(ctx, tx, evs, t.CrashDelay)
	}
	if err := tx.Commit(ctx); err != nil {
		// A COMMIT that errored may or may not have committed, unless the
		// server said so or COMMIT was never sent.
		if ambiguous(err) {
			return done(history.Info, fmt.Errorf("commit: %w", err))
		}
		return done(history.Fail, fmt.Errorf("commit: %w", err))
	}
	done(history.OK, nil)
	if t.CrashAfterCommit {
		p.crashed("after-commit")
		return ErrProducerCrashed
	}
	switch p.Mode {
	case CommitThenPublish:
		return p.publish(ctx, t.Events, true)
	case Optimistic:
		return p.publish(ctx, t.Events, false)
	}
	return nil
}

// pause holds a transaction open for d.
func (p *Producer) pause(ctx context.Context, d time.Duration) error {
	if p.Pause != nil {
		return p.Pause(ctx, d)
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return nil
	}
}

// crashed records the producer's death and its restart with an empty
// memory: whatever it had open is left with an unknown outcome.
func (p *Producer) crashed(where string) {
	p.gate.Lock()
	p.gate.life++
	p.gate.Unlock()
	p.record(history.Op{Type: history.Info, F: history.Crash, Meta: history.Meta{Detail: where}})
	p.record(history.Op{Type: history.Info, F: history.Restart})
}

// crashAtCommit sends COMMIT and kills the producer's connection delay
// later, as the death of the process would. A reply that arrives first is
// recorded (the process saw it before it died); otherwise the commit stays
// open in the history, its outcome unknown.
func (p *Producer) crashAtCommit(ctx context.Context, tx Tx, evs []string, delay time.Duration) error {
	errc := make(chan error, 1)
	go func() { errc <- tx.Commit(ctx) }()
	timer := time.NewTimer(delay)
	defer timer.Stop()
	select {
	case err := <-errc:
		op := history.Op{Type: history.OK, F: history.Commit, Events: evs}
		if err != nil {
			op.Type = history.Info
			if !ambiguous(err) {
				op.Type = history.Fail
			}
			op.Error = err.Error()
		}
		p.record(op)
		p.crashed("after-commit")
	case <-timer.C:
		tx.Kill()
		p.crashed("at-commit")
		<-errc
	}
	return ErrProducerCrashed
}

// publish sends events inline, recording each as a publish operation.
func (p *Producer) publish(ctx context.Context, events []outbox.Event, confirm bool) error {
	for _, e := range events {
		if err := p.publishOne(ctx, e, confirm); err != nil {
			return err
		}
	}
	return nil
}

// publishOne sends e, waiting for the broker's confirm when confirm is
// set, and records it as a publish operation.
func (p *Producer) publishOne(ctx context.Context, e outbox.Event, confirm bool) error {
	timeout := p.PublishTimeout
	if timeout == 0 {
		timeout = 2 * time.Second
	}
	id := []string{e.ID.String()}
	p.record(history.Op{Type: history.Invoke, F: history.Publish, Events: id})
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	m := relay.MessageOf(relay.Row{ID: e.ID, Type: e.Type, Payload: e.Payload, CorrelationID: e.CorrelationID})
	conf, err := p.Publisher.Publish(pctx, m)
	sent := err == nil
	if sent && confirm {
		err = conf.Wait(pctx)
	}
	if err != nil {
		// A publish that was not sent, or that the broker refused, is
		// a failure; a sent one whose confirm never came, or one in
		// flight when the process died, has an unknown outcome.
		typ := history.Fail
		if errors.Is(err, ErrUnknownOutcome) ||
			(sent && !errors.Is(err, relay.ErrNacked) && !errors.Is(err, relay.ErrReturned)) {
			typ = history.Info
		}
		p.record(history.Op{Type: typ, F: history.Publish, Events: id, Error: err.Error()})
		return fmt.Errorf("publishing %s: %w", e.ID, err)
	}
	typ := history.OK
	if !confirm {
		typ = history.Info // sent, never confirmed
	}
	p.record(history.Op{Type: typ, F: history.Publish, Events: id})
	return nil
}

// ambiguous reports whether a COMMIT error leaves the outcome unknown: the
// connection broke or the context ended after COMMIT may have reached the
// server. A server error (e.g. a serialization failure) is definite.
func ambiguous(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) || errors.Is(err, ErrNotSent) {
		return false
	}
	return true
}
