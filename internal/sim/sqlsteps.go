package sim

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/outboxlab/outboxlab/consumer"
	"github.com/outboxlab/outboxlab/history"
)

// This file makes each statement of a consumer's apply on the SQL tier a
// scheduler step. consumer.PGInbox.Apply runs unchanged: BEGIN, the inbox
// write, the effect and COMMIT each pass through the pool's query tracer,
// stmtStepper, which hands the baton to the scheduler before the
// statement goes out, so two consumers applying the same event
// interleave at every statement, and a crash or a cut link can fall
// between any two of them. The ack that follows the commit is a step of
// its own already (ports.go).
//
// A statement that must fail (the process crashed before it, or its link
// is cut) is never sent: the tracer first rolls back the transaction the
// connection has open, as the server does when it loses the connection,
// then hands pgx a context that has ended, which fails the statement
// without a round trip and leaves the connection usable. A cut link that
// loses the reply lets the statement run; every later statement of the
// apply then fails the same way, and the apply reports the link's error,
// unknown in outcome only when the lost statement was the COMMIT. The
// ROLLBACK that ends a failed apply always runs, without a step: it is
// what the server does for a connection it lost.
//
// Statements are still serialised: only one process runs at a time. A
// consumer's statement that would wait on a row lock another consumer's
// open transaction holds cannot be released while it waits (the holder
// runs only when the waiter yields), so a consumer's connections have a
// short lock_timeout (consumerLockTimeout): the statement fails at once,
// the apply fails and the delivery is requeued, where production would
// wait for the holder to end and then find the row.

// consumerLockTimeout is the lock_timeout of a consumer's connections on
// the SQL tier.
const consumerLockTimeout = "20ms"

// stmtStepper is the query tracer of a consumer process's pool.
type stmtStepper struct {
	p *proc
	// active: the process is inside an apply whose statements are steps.
	active bool
	// first is called at the first step of an apply, once the process
	// runs it.
	first func()
	// broken: the link failed during the apply; every later statement
	// fails without being sent.
	broken bool
	// linkErr is the link's failure the apply reports.
	linkErr error
	// lostCommit: the reply of the COMMIT was lost; the apply's outcome is
	// unknown.
	lostCommit bool
	// losing is the statement whose reply will be lost.
	losing string
}

var _ pgx.QueryTracer = (*stmtStepper)(nil)

// start begins an apply: first runs at its first step.
func (s *stmtStepper) start(first func()) {
	*s = stmtStepper{p: s.p, active: true, first: first}
}

// stop ends an apply.
func (s *stmtStepper) stop() { s.active = false }

// TraceQueryStart implements pgx.QueryTracer: it is the step in front of
// each statement.
func (s *stmtStepper) TraceQueryStart(ctx context.Context, conn *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if !s.active || strings.EqualFold(strings.TrimSpace(d.SQL), "rollback") {
		return ctx
	}
	p := s.p
	if s.broken {
		return s.fail(ctx, conn)
	}
	v := p.enter(callApply)
	if failed(v) {
		s.broken = true
		return s.fail(ctx, conn)
	}
	if s.first != nil {
		s.first()
		s.first = nil
	}
	if p.dbDown() {
		if p.w.frng.Float64() >= p.w.sw.LostReply {
			s.broken = true
			s.linkErr = fmt.Errorf("statement: %w", errLinkDown)
			return s.fail(ctx, conn)
		}
		s.losing = d.SQL
	}
	return ctx
}

// TraceQueryEnd implements pgx.QueryTracer: a statement whose reply is
// lost leaves the connection broken.
func (s *stmtStepper) TraceQueryEnd(_ context.Context, _ *pgx.Conn, _ pgx.TraceQueryEndData) {
	if !s.active || s.losing == "" {
		return
	}
	s.broken = true
	s.linkErr = fmt.Errorf("statement: reply lost: %w", errLinkDown)
	s.lostCommit = strings.EqualFold(strings.TrimSpace(s.losing), "commit")
	s.losing = ""
}

// fail rolls back the connection's open transaction and returns a
// context that has ended, so that pgx fails the statement without
// sending it.
func (s *stmtStepper) fail(ctx context.Context, conn *pgx.Conn) context.Context {
	if conn.PgConn().TxStatus() != 'I' {
		hctx, cancel := harnessCtx()
		_, err := conn.PgConn().Exec(hctx, "ROLLBACK").ReadAll()
		cancel()
		if err != nil {
			s.p.w.harnessFailed(fmt.Errorf("%s: rolling back after a failed statement: %w", s.p.name, err))
		}
	}
	done, cancel := context.WithCancel(ctx)
	cancel()
	return done
}

// sqlApplySteps is Apply on the SQL tier: the production inbox's
// statements, each a step.
func (ip *inboxPort) sqlApplySteps(ctx context.Context, m consumer.Message) (bool, error) {
	p := ip.p
	events := []string{m.ID}
	if err := p.db.sync(ctx, p.w.clock.Now(), p.Now()); err != nil {
		p.w.harnessFailed(fmt.Errorf("%s: %w", p.name, err))
		return false, err
	}
	var h uint64
	invoked := false
	st := p.db.steps
	st.start(func() { h, invoked = p.invoke(history.Apply, events, history.Meta{}), true })
	dup, err := p.db.inbox.Apply(ctx, m)
	st.stop()
	if !invoked {
		return false, errors.Join(errCrashed, err)
	}
	switch {
	case p.dying:
		p.complete(h, history.Info, events, history.Meta{}, errCrashed)
		return false, errCrashed
	case st.linkErr != nil:
		t := history.Fail
		if st.lostCommit {
			t = history.Info
		}
		p.complete(h, t, events, history.Meta{}, st.linkErr)
		return false, fmt.Errorf("applying %s: %w", m.ID, st.linkErr)
	case err != nil:
		p.complete(h, history.Fail, events, history.Meta{}, err)
		return false, err
	}
	p.w.progress()
	p.complete(h, history.OK, events, history.Meta{Duplicate: dup}, nil)
	return dup, nil
}
