package scenarios

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/outboxlab/outboxlab/workload"

	"github.com/jackc/pgx/v5"

	"github.com/outboxlab/outboxlab/chaos"
	"github.com/outboxlab/outboxlab/history"
	"github.com/outboxlab/outboxlab/testenv"
)

// services returns the service containers a fault may have left down:
// PostgreSQL, and RabbitMQ or every node of the cluster.
func (r *run) services() []*testenv.Container {
	out := []*testenv.Container{r.env.Postgres()}
	if c := r.env.RabbitMQ(); c != nil {
		out = append(out, c)
	}
	if cl := r.env.Cluster(); cl != nil {
		for i := range cl.Len() {
			out = append(out, cl.Node(i))
		}
	}
	return out
}

// ensureRunning restarts or thaws whatever a fault left down: the relay
// replicas, PostgreSQL and RabbitMQ (every node of a cluster, which must
// then report them all running).
func (r *run) ensureRunning(ctx context.Context) error {
	for _, c := range r.services() {
		st, err := c.State(ctx)
		if err != nil {
			return err
		}
		if st.Paused {
			if err := c.Unpause(ctx); err != nil {
				return err
			}
		}
		if !st.Running {
			if err := c.Start(ctx); err != nil {
				return err
			}
		}
		if err := c.WaitReady(ctx); err != nil {
			return err
		}
	}
	if cl := r.env.Cluster(); cl != nil {
		if err := cl.WaitRunning(ctx, cl.Len()); err != nil {
			return err
		}
	}
	for _, bc := range r.contexts {
		for _, s := range bc.relays {
			if err := s.ensureRunning(ctx); err != nil {
				return fmt.Errorf("relay %s: %w", s.name, err)
			}
		}
	}
	return nil
}

// committedIDs returns the events of commits that completed ok, and those
// published with a confirm.
func (r *run) committedIDs() (committed, confirmed map[string]bool) {
	committed, confirmed = map[string]bool{}, map[string]bool{}
	for _, op := range r.rec.Ops() {
		if op.Type != history.OK {
			continue
		}
		switch op.F {
		case history.Commit:
			for _, id := range op.Events {
				committed[id] = true
			}
		case history.Publish:
			for _, id := range op.Events {
				confirmed[id] = true
			}
		}
	}
	return committed, confirmed
}

// backlog is what is left to drain.
type backlog struct {
	// pending: an outbox row is still pending (neither processed nor
	// faulted).
	pending bool
	// missing counts the events that must arrive and have not been
	// applied; ready the messages ready in the consumer queues.
	missing, ready int
}

// drained reports that the backlog is gone: no pending outbox row, every
// event that must arrive applied (its effect in the effects table), and no
// message left in a queue.
func (r *run) drained(ctx context.Context) (bool, error) {
	b, err := r.readBacklog(ctx)
	return err == nil && !b.pending && b.missing == 0 && b.ready == 0, err
}

// StallFor is how long the liveness phase waits on a backlog that cannot
// drain any more (no pending row, no message ready, no delivery or apply
// recorded) before it ends: the events still missing then are lost, and
// waiting out DrainWithin would change nothing.
const StallFor = 5 * time.Second

// stalled reports that nothing is left that could drain the backlog: no
// pending row, no message ready, events still missing, and no delivery
// or apply recorded since the last call.
func (r *run) stalled(ctx context.Context) (bool, error) {
	b, err := r.readBacklog(ctx)
	if err != nil {
		return false, err
	}
	n := r.arrivals()
	moved := n != r.lastArrivals
	r.lastArrivals = n
	return !b.pending && b.ready == 0 && b.missing > 0 && !moved, nil
}

// arrivals counts the Deliver and Apply records so far.
func (r *run) arrivals() int {
	n := 0
	for _, op := range r.rec.Ops() {
		if op.F == history.Deliver || op.F == history.Apply {
			n++
		}
	}
	return n
}

// readBacklog reads what is left to drain, after making sure that
// whatever a fault left down runs again.
func (r *run) readBacklog(ctx context.Context) (backlog, error) {
	var b backlog
	if !r.ensured {
		if err := r.ensureRunning(ctx); err != nil {
			return b, err
		}
		r.ensured = true
	}
	committed, confirmed := r.committedIDs()
	if r.sc.Standby != "" {
		// A commit a failover undid has nothing left to drain: its
		// business row is gone with its outbox row (checker.Failover).
		biz, err := r.readBusiness(ctx)
		if err != nil {
			return b, err
		}
		for id := range committed {
			if !biz[id] {
				delete(committed, id)
			}
		}
	}
	expect := map[string]bool{}
	if r.mode == workload.Outbox {
		faulted := map[string]bool{}
		for _, bc := range r.contexts {
			rows, err := r.fx.Admin.Query(ctx, `SELECT id::text, processed_at IS NULL AND faulted_at IS NULL, faulted_at IS NOT NULL FROM `+bc.rows)
			if err != nil {
				return b, err
			}
			var (
				id              string
				pending, parked bool
			)
			_, err = pgx.ForEachRow(rows, []any{&id, &pending, &parked}, func() error {
				switch {
				case pending && r.plan.Poison[bc.ids.Event(id)] && !r.relay.Promises.Parks:
					// A relay that parks nothing retries poison for ever:
					// its row stays pending, and nothing drains it.
				case pending:
					b.pending = true
				case parked:
					faulted[id] = true
				case !r.plan.Poison[id]:
					expect[id] = true
				}
				return nil
			})
			if err != nil {
				return b, err
			}
			if b.pending {
				return b, nil
			}
		}
		for id := range committed {
			if !r.plan.Poison[id] && !faulted[id] {
				expect[id] = true
			}
		}
	} else {
		for id := range committed {
			if confirmed[id] {
				expect[id] = true
			}
		}
	}
	// An event has arrived when its effect is applied, whatever the
	// consumer's inbox says (a consumer without dedupe writes none).
	rows, err := r.fx.Admin.Query(ctx, `SELECT DISTINCT message_id FROM `+pgx.Identifier{r.fx.Schema, "effects"}.Sanitize())
	if err != nil {
		return b, err
	}
	applied, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return b, err
	}
	got := make(map[string]bool, len(applied))
	for _, id := range applied {
		got[id] = true
	}
	for id := range expect {
		if !got[id] {
			b.missing++
		}
	}
	b.ready, err = r.fx.QueueDepth(ctx)
	return b, err
}

// deliveries counts the Deliver records so far.
func (r *run) deliveries() int {
	n := 0
	for _, op := range r.rec.Ops() {
		if op.F == history.Deliver {
			n++
		}
	}
	return n
}

// settle stops the relays (SIGTERM: each finishes its batch), lets the
// consumers take what is left in the queues, stops them, and takes what
// is still queued (dead letters included).
func (r *run) settle(ctx context.Context) ([]string, error) {
	for _, p := range r.producers {
		p.Stop()
	}
	var wg sync.WaitGroup
	for _, bc := range r.contexts {
		for _, s := range bc.relays {
			wg.Go(func() {
				if h := s.handle(); h != nil {
					_ = h.Stop(ctx, relayStopTimeout)
				}
			})
		}
	}
	wg.Wait()
	// The queues are empty and no delivery came in over the last poll.
	wctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	last := -1
	_ = chaos.WaitFor(wctx, 300*time.Millisecond, func(ctx context.Context) (bool, error) {
		n, err := r.fx.QueueDepth(ctx)
		if err != nil {
			return false, nil
		}
		d := r.deliveries()
		quiet := n == 0 && d == last
		last = d
		return quiet, nil
	})
	cancel()
	r.consumersStop()
	r.consumersDone.Wait()
	return r.fx.TakeQueued(ctx)
}

// teardown removes everything the run made and leaves the environment as
// it found it: services running and ready, links enabled without toxics.
func (r *run) teardown() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if r.usage != nil {
		r.usage.stop()
	}
	if r.consumersStop != nil {
		r.consumersStop()
		r.consumersDone.Wait()
	}
	if r.nemesis != nil {
		_ = r.nemesis.HealAll(ctx)
	}
	for _, p := range r.publishers {
		_ = p.Close()
	}
	var wg sync.WaitGroup
	for _, bc := range r.contexts {
		for _, s := range bc.relays {
			wg.Go(func() { _ = s.remove(ctx) })
		}
	}
	wg.Wait()
	if err := r.dropRoles(ctx); err != nil {
		r.logf("teardown: %v", err)
	}
	if err := r.unobserveBroker(ctx); err != nil {
		r.logf("teardown: %v", err)
	}
	if err := r.resetEnv(ctx); err != nil {
		r.logf("teardown: %v", err)
	}
	if r.fx != nil {
		if err := r.fx.Close(ctx); err != nil {
			r.logf("teardown: %v", err)
		}
	}
	if r.recordsDir != "" {
		if err := os.RemoveAll(r.recordsDir); err != nil {
			r.logf("teardown: %v", err)
		}
	}
}

// resetEnv brings PostgreSQL and RabbitMQ up and every link back to
// enabled with no toxics.
func (r *run) resetEnv(ctx context.Context) error {
	var errs []error
	for _, c := range r.services() {
		st, err := c.State(ctx)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if st.Paused {
			errs = append(errs, c.Unpause(ctx))
		}
		if !st.Running {
			errs = append(errs, c.Start(ctx))
		}
		errs = append(errs, c.WaitReady(ctx))
	}
	for _, l := range r.env.Links() {
		p, err := r.env.Proxy(l.Name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		toxics, err := p.Toxics()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, t := range toxics {
			errs = append(errs, p.RemoveToxic(t.Name))
		}
		if !p.Enabled {
			errs = append(errs, p.Enable())
		}
	}
	return errors.Join(errs...)
}
