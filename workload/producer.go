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

// Producer writes business rows and gets events out by its Mode,
// recording every transaction as a commit operation: ok when COMMIT was
// acknowledged, fail when the transaction definitely did not commit, info
// when the outcome is unknown (the COMMIT's reply was lost).
type Producer struct {
	// Name is the history process, e.g. "producer-1".
	Name     string
	DB       Beginner
	Table    outbox.Table
	Business string // business table, a validated identifier
	Mode     Mode
	// Publisher is used by the unsafe variants only.
	Publisher relay.Publisher
	// PublishTimeout bounds an inline publish and its confirm.
	PublishTimeout time.Duration
	Rec            *history.Recorder
	// Now is the producer's own (possibly skewed) clock for its records.
	Now func() time.Time
	// Notify wakes listening relays at COMMIT.
	Notify bool
	// StampOccurredAt stamps each staged event's occurred_at with Now, as
	// an application that trusts its own clock does; otherwise the
	// database's now() decides.
	StampOccurredAt bool
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

// ErrProducerCrashed is returned by Do for a transaction that ended in a
// simulated crash of the producer.
var ErrProducerCrashed = errors.New("producer crashed")

func (p *Producer) record(op history.Op) {
	if p.Rec == nil {
		return
	}
	op.Process = p.Name
	if p.Now != nil {
		op.Time = p.Now()
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
	inv := history.Op{Type: history.Invoke, F: history.Commit, Events: evs}
	if t.CausedBy != "" {
		inv.CausedBy = []string{t.CausedBy}
	}
	p.record(inv)
	done := func(typ history.Type, err error) error {
		op := history.Op{Type: typ, F: history.Commit, Events: evs}
		if err != nil {
			op.Error = err.Error()
		}
		p.record(op)
		return err
	}

	tx, err := p.DB.Begin(ctx)
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
		if _, err := tx.Exec(ctx, `INSERT INTO `+p.Business+` (id, event_id, note) VALUES ($1, $2, $3)`,
			uuid.New(), e.ID, e.Type); err != nil {
			return abort(fmt.Errorf("business write: %w", err))
		}
		if p.Mode == Outbox {
			if p.StampOccurredAt && p.Now != nil && e.OccurredAt.IsZero() {
				e.OccurredAt = p.Now()
			}
			if err := outbox.Stage(ctx, tx, p.Table, e, outbox.StageOptions{Notify: p.Notify}); err != nil {
				return abort(err)
			}
		}
	}
	if p.Mode == PublishThenCommit {
		if err := p.publish(ctx, t.Events, true); err != nil {
			return abort(err)
		}
	}
	if t.Hold > 0 {
		select {
		case <-ctx.Done():
			return abort(ctx.Err())
		case <-time.After(t.Hold):
		}
	}
	if t.Rollback {
		return abort(errors.New("request failed: rolled back"))
	}
	if t.CrashAtCommit {
		return p.crashAtCommit(ctx, tx, evs, t.CrashDelay)
	}
	if err := tx.Commit(ctx); err != nil {
		// A COMMIT that errored may or may not have committed, unless the
		// server said so before COMMIT was sent.
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

// crashed records the producer's death and its restart with an empty
// memory: whatever it had open is left with an unknown outcome.
func (p *Producer) crashed(where string) {
	p.record(history.Op{Type: history.Info, F: history.Crash, Meta: history.Meta{Detail: where}})
	p.record(history.Op{Type: history.Info, F: history.Restart})
}

// crashAtCommit sends COMMIT and kills the producer's connection delay
// later, as the death of the process would. A reply that arrives first is
// recorded (the process saw it before it died); otherwise the commit stays
// open in the history, its outcome unknown.
func (p *Producer) crashAtCommit(ctx context.Context, tx pgx.Tx, evs []string, delay time.Duration) error {
	raw := tx.Conn().PgConn().Conn()
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
		_ = raw.Close()
		p.crashed("at-commit")
		<-errc
	}
	return ErrProducerCrashed
}

// publish sends events inline, recording each as a publish operation.
func (p *Producer) publish(ctx context.Context, events []outbox.Event, confirm bool) error {
	timeout := p.PublishTimeout
	if timeout == 0 {
		timeout = 2 * time.Second
	}
	for _, e := range events {
		id := []string{e.ID.String()}
		p.record(history.Op{Type: history.Invoke, F: history.Publish, Events: id})
		pctx, cancel := context.WithTimeout(ctx, timeout)
		conf, err := p.Publisher.Publish(pctx, relay.Message{ID: e.ID.String(), Type: e.Type, Payload: e.Payload})
		if err == nil && confirm {
			err = conf.Wait(pctx)
		}
		cancel()
		if err != nil {
			p.record(history.Op{Type: history.Fail, F: history.Publish, Events: id, Error: err.Error()})
			return fmt.Errorf("publishing %s: %w", e.ID, err)
		}
		typ := history.OK
		if !confirm {
			typ = history.Info // sent, never confirmed
		}
		p.record(history.Op{Type: typ, F: history.Publish, Events: id})
	}
	return nil
}

// ambiguous reports whether a COMMIT error leaves the outcome unknown: the
// connection broke or the context ended after COMMIT may have reached the
// server. A server error (e.g. a serialization failure) is definite.
func ambiguous(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return false
	}
	return true
}
