package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxlab/outboxlab/outbox"
	"github.com/outboxlab/outboxlab/relay"
)

// appKeyed names the sessions of the keyed lease run (its listener's
// carry appListenSuffix too), so that its PostgreSQL processes are told
// apart as a relay's are.
const appKeyed = "outboxlab-bench-keyed"

// keyedLeaser is the latency run "keyed": the floor of a relay that is
// woken by NOTIFY and leases a row before it publishes it, as the design
// asks. Each staging transaction sends its event's id as the NOTIFY's
// payload; the leaser LISTENs on a connection of its own and, for the ids
// that came in, leases those rows by their primary key in one statement
// (committed without waiting for the WAL flush, as the relay's claim is),
// then publishes each row it leased on one channel with confirms. It does
// nothing else: no scan of the pending index, no order, no batch size, no
// mark, no records. What it takes between a COMMIT and a confirm is the
// three hops that any such relay takes (the NOTIFY's delivery, one round
// trip to the database, publish -> confirm), so no relay that leases
// after the NOTIFY is faster at these commits on this machine.
type keyedLeaser struct {
	w     *workload
	table outbox.Table
	// exchange is where each leased row's event goes, as the relay sends
	// it (persistent, mandatory, the same properties).
	exchange string
	listen   *pgx.Conn
	pool     *pgxpool.Pool
	conn     *amqp.Connection
	ch       *amqp.Channel
	conf     *confirmTaker

	claimStart, claimAt, publishAt []atomic.Int64

	mu     sync.Mutex
	ids    []string
	signal chan struct{}

	cancel context.CancelFunc
	done   sync.WaitGroup
	// calls and nanos count the lease statements and their time, as
	// timedStore counts a relay's claims and marks.
	calls, nanos atomic.Int64
	errMu        sync.Mutex
	err          error
	stopped      bool
}

// keyedLeaseSQL leases the rows of $1 that are still eligible, as the
// relay's claim does ($2 owner, $3 lease in microseconds), by key.
//
// The rows are pending when coalesce(processed_at, faulted_at) is NULL,
// the claim's predicate written so that the planner cannot use the
// pending index for it: the leaser marks nothing, so that index holds
// every row of the run, and a generic plan made on the run's first, small
// table scanned all of it with a filter on id, a cost that grew with the
// run. Written so, each row is found by its primary key, as a relay's
// lease by key would find it.
func keyedLeaseSQL(t outbox.Table) string {
	return `UPDATE ` + t.Ident() + `
SET locked_by = $2, locked_at = now(), locked_until = now() + $3::bigint * interval '1 microsecond'
WHERE id = ANY($1) AND coalesce(processed_at, faulted_at) IS NULL AND (locked_until IS NULL OR locked_until < now())
RETURNING id`
}

// startKeyed opens the leaser's connections, LISTENs, and starts it; it
// returns once the LISTEN is in place, so that no NOTIFY of the run is
// missed. onConfirm is told of each confirm, by message id, as it comes.
func startKeyed(ctx context.Context, in *infra, w *workload, table outbox.Table,
	claimStart, claimAt, publishAt []atomic.Int64, onConfirm func(id string, at time.Time)) (*keyedLeaser, error) {
	k := &keyedLeaser{w: w, table: table, exchange: in.exchange, claimStart: claimStart, claimAt: claimAt, publishAt: publishAt, signal: make(chan struct{}, 1)}
	fail := func(err error) (*keyedLeaser, error) {
		k.close()
		return nil, fmt.Errorf("keyed lease: %w", err)
	}
	var err error
	if k.listen, err = pgx.Connect(ctx, withApplicationName(in.dbURL, appKeyed+appListenSuffix)); err != nil {
		return fail(fmt.Errorf("connecting the listener: %w", relay.RedactError(err, in.dbURL)))
	}
	if _, err := k.listen.Exec(ctx, "LISTEN "+pgx.Identifier{table.Channel()}.Sanitize()); err != nil {
		return fail(fmt.Errorf("LISTEN %s: %w", table.Channel(), err))
	}
	pcfg, err := pgxpool.ParseConfig(withApplicationName(in.dbURL, appKeyed))
	if err != nil {
		return fail(err)
	}
	pcfg.MaxConns, pcfg.MinConns = 1, 1
	if k.pool, err = pgxpool.NewWithConfig(ctx, pcfg); err != nil {
		return fail(fmt.Errorf("connecting: %w", relay.RedactError(err, in.dbURL)))
	}
	// The statement is prepared before the clock starts, as the relay's
	// are by the warm-up: lease nothing once.
	if _, err := k.lease(ctx, nil); err != nil {
		return fail(err)
	}
	if k.conn, err = dialAMQP(ctx, in.amqpURL, "outboxlab-bench-keyed"); err != nil {
		return fail(err)
	}
	if k.ch, err = k.conn.Channel(); err == nil {
		err = k.ch.Confirm(false)
	}
	if err != nil {
		return fail(fmt.Errorf("opening a channel with confirms: %w", err))
	}
	// The confirms are awaited on ctx: stop ends the leaser first, then
	// takes the confirms of what it published.
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	k.cancel = cancel
	k.conf = takeConfirms(ctx, w.len(), "keyed lease", func(i int, at time.Time) { onConfirm(w.idStr[i], at) })
	k.done.Add(2)
	go k.receive(rctx)
	go k.run(rctx)
	return k, nil
}

// receive queues the id of every notification and signals run.
func (k *keyedLeaser) receive(ctx context.Context) {
	defer k.done.Done()
	for {
		n, err := k.listen.WaitForNotification(ctx)
		if err != nil {
			if ctx.Err() == nil {
				k.fail(fmt.Errorf("waiting for a notification: %w", err))
			}
			return
		}
		k.mu.Lock()
		k.ids = append(k.ids, n.Payload)
		k.mu.Unlock()
		select {
		case k.signal <- struct{}{}:
		default:
		}
	}
}

// run leases and publishes the rows of the ids that came in, all that
// came in since its last lease in one statement.
func (k *keyedLeaser) run(ctx context.Context) {
	defer k.done.Done()
	for {
		select {
		case <-ctx.Done():
			return
		case <-k.signal:
		}
		k.mu.Lock()
		ids := k.ids
		k.ids = nil
		k.mu.Unlock()
		if len(ids) == 0 {
			continue
		}
		arg := make([]pgtype.UUID, 0, len(ids))
		for _, s := range ids {
			id, err := uuid.Parse(s)
			if err != nil {
				k.fail(fmt.Errorf("notification payload %q: %w", s, err))
				return
			}
			arg = append(arg, pgtype.UUID{Bytes: id, Valid: true})
		}
		started := time.Now()
		leased, err := k.lease(ctx, arg)
		at := time.Now()
		if err != nil {
			if ctx.Err() == nil {
				k.fail(err)
			}
			return
		}
		for _, id := range leased {
			i, ok := k.w.index[id.String()]
			if !ok {
				continue
			}
			k.claimStart[i].Store(started.UnixNano())
			k.claimAt[i].Store(at.UnixNano())
			k.publishAt[i].Store(time.Now().UnixNano())
			dc, err := k.ch.PublishWithDeferredConfirmWithContext(ctx, k.exchange, MessageType, true, false, k.w.publishing(i))
			if err != nil {
				if ctx.Err() == nil {
					k.fail(fmt.Errorf("publishing event %d: %w", i, err))
				}
				return
			}
			k.conf.add(i, dc)
		}
	}
}

// lease runs the keyed lease of ids, committing without waiting for the
// WAL flush, and returns the ids it leased.
func (k *keyedLeaser) lease(ctx context.Context, ids []pgtype.UUID) ([]uuid.UUID, error) {
	if ids == nil {
		ids = []pgtype.UUID{}
	}
	start := time.Now()
	var b pgx.Batch
	// The relay's own preamble: asynchronous commit, no sequential scan.
	b.Queue(`SELECT set_config('synchronous_commit', 'off', true), set_config('enable_seqscan', 'off', true)`)
	b.Queue(keyedLeaseSQL(k.table), ids, appKeyed, time.Hour.Microseconds())
	br := k.pool.SendBatch(ctx, &b)
	var leased []uuid.UUID
	_, err := br.Exec()
	if err == nil {
		var rows pgx.Rows
		if rows, err = br.Query(); err == nil {
			leased, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (uuid.UUID, error) {
				var id pgtype.UUID
				err := r.Scan(&id)
				return id.Bytes, err
			})
		}
	}
	if err = errors.Join(err, br.Close()); err != nil {
		return nil, fmt.Errorf("leasing %d rows of %s by key: %w", len(ids), k.table, err)
	}
	k.calls.Add(1)
	k.nanos.Add(int64(time.Since(start)))
	return leased, nil
}

// statements reports the lease statements issued and their time.
func (k *keyedLeaser) statements() (calls, nanos int64) {
	return k.calls.Load(), k.nanos.Load()
}

// fail keeps the leaser's first failure.
func (k *keyedLeaser) fail(err error) {
	k.errMu.Lock()
	defer k.errMu.Unlock()
	if k.err == nil {
		k.err = fmt.Errorf("keyed lease: %w", err)
	}
}

// failure returns the leaser's first failure, if any.
func (k *keyedLeaser) failure() error {
	k.errMu.Lock()
	defer k.errMu.Unlock()
	return k.err
}

// stop ends the leaser, waits for every confirm of what it published and
// closes its connections; it returns its first failure.
func (k *keyedLeaser) stop() error {
	k.errMu.Lock()
	if k.stopped {
		k.errMu.Unlock()
		return nil
	}
	k.stopped = true
	k.errMu.Unlock()
	k.cancel()
	k.done.Wait()
	err := k.conf.close()
	k.close()
	return errors.Join(k.failure(), err)
}

// close closes whatever connections are open.
func (k *keyedLeaser) close() {
	if k.conn != nil {
		_ = k.conn.Close()
	}
	if k.pool != nil {
		k.pool.Close()
	}
	if k.listen != nil {
		_ = k.listen.Close(context.Background())
	}
}
