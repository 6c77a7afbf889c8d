package consumer_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxlab/outboxlab/consumer"
)

// overlapTracer watches the statements of a pool's connections and counts
// the overlaps of concurrent applies of one message: an insert into the
// inbox that starts while another connection's transaction has inserted
// and not yet ended. Such an insert meets the other's uncommitted row: it
// is the moment two deliveries of one event are applied at once.
type overlapTracer struct {
	mu sync.Mutex
	// holding lists the connections whose open transaction inserted
	// into the inbox.
	holding map[*pgx.Conn]bool
	// overlaps counts the inbox inserts that started while another
	// connection held.
	overlaps int
}

var _ pgx.QueryTracer = (*overlapTracer)(nil)

type tracedSQL struct{}

// isInboxInsert reports whether sql writes the inbox.
func isInboxInsert(sql string) bool {
	return strings.HasPrefix(strings.TrimSpace(sql), "INSERT INTO inbox")
}

// TraceQueryStart implements pgx.QueryTracer.
func (o *overlapTracer) TraceQueryStart(ctx context.Context, conn *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if isInboxInsert(d.SQL) {
		o.mu.Lock()
		others := len(o.holding)
		if o.holding[conn] {
			others--
		}
		if others > 0 {
			o.overlaps++
		}
		o.mu.Unlock()
	}
	return context.WithValue(ctx, tracedSQL{}, d.SQL)
}

// TraceQueryEnd implements pgx.QueryTracer.
func (o *overlapTracer) TraceQueryEnd(ctx context.Context, conn *pgx.Conn, d pgx.TraceQueryEndData) {
	sql, _ := ctx.Value(tracedSQL{}).(string)
	o.mu.Lock()
	defer o.mu.Unlock()
	switch {
	case isInboxInsert(sql) && d.Err == nil && d.CommandTag.RowsAffected() > 0:
		o.holding[conn] = true
	case sql == "commit" || sql == "rollback":
		delete(o.holding, conn)
	}
}

// count returns the overlaps so far.
func (o *overlapTracer) count() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.overlaps
}

// concurrentRun is what concurrentApplies saw.
type concurrentRun struct {
	// effects counts the effects of each round's message.
	effects map[string]int
	// applied counts, per message, the applies that reported no
	// duplicate.
	applied map[string]int
	// overlapped counts the rounds in which applies overlapped.
	overlapped int
}

// concurrentApplies applies, in each of rounds rounds, a fresh message
// from goroutines goroutines released together by a barrier, on pool,
// whose connections outnumber the goroutines and are all open before the
// first round, so that no goroutine waits for a connection while another
// applies. tracer must be the pool's.
func concurrentApplies(t *testing.T, pool *pgxpool.Pool, tracer *overlapTracer, in consumer.Inbox, rounds, goroutines int) concurrentRun {
	t.Helper()
	ctx := t.Context()
	if int(pool.Config().MaxConns) <= goroutines {
		t.Fatalf("the pool has %d connections for %d goroutines: some would wait for one", pool.Config().MaxConns, goroutines)
	}
	// Open every connection first.
	var conns []*pgxpool.Conn
	for range goroutines {
		c, err := pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	for _, c := range conns {
		c.Release()
	}
	run := concurrentRun{applied: map[string]int{}}
	for r := range rounds {
		id := fmt.Sprintf("same-%02d", r)
		before := tracer.count()
		var ready, done sync.WaitGroup
		start := make(chan struct{})
		errs := make(chan error, goroutines)
		var mu sync.Mutex
		for range goroutines {
			ready.Add(1)
			done.Add(1)
			go func() {
				defer done.Done()
				ready.Done()
				<-start
				dup, err := in.Apply(ctx, consumer.Message{ID: id, Type: "t"})
				if err != nil {
					errs <- err
					return
				}
				if !dup {
					mu.Lock()
					run.applied[id]++
					mu.Unlock()
				}
			}()
		}
		ready.Wait()
		close(start)
		done.Wait()
		close(errs)
		for err := range errs {
			t.Errorf("round %d: %v", r, err)
		}
		if tracer.count() > before {
			run.overlapped++
		}
	}
	effects, err := consumer.EffectCounts(ctx, pool, "c")
	if err != nil {
		t.Fatal(err)
	}
	run.effects = effects
	return run
}

// newTracedInboxDB returns a pool of conns connections on a fresh inbox
// schema, watched by the tracer it returns.
func newTracedInboxDB(t *testing.T, conns int32) (*pgxpool.Pool, *overlapTracer) {
	t.Helper()
	tracer := &overlapTracer{holding: map[*pgx.Conn]bool{}}
	pool := newPGInboxDBWith(t, func(cfg *pgxpool.Config) {
		cfg.MaxConns = conns
		cfg.ConnConfig.Tracer = tracer
	})
	return pool, tracer
}

const (
	concurrentRounds     = 20
	concurrentGoroutines = 16
)

// TestPGInboxConcurrentDuplicates applies one message from 16 goroutines
// at once, 20 times: they start together behind a barrier, each on a
// connection of its own, and the tracer counts the rounds in which one
// goroutine's inbox insert met another's uncommitted row. Applies must
// have overlapped in some round, and in every round the unique key lets
// exactly one effect through and exactly one apply report no duplicate.
func TestPGInboxConcurrentDuplicates(t *testing.T) {
	pool, tracer := newTracedInboxDB(t, concurrentGoroutines+4)
	in, err := consumer.NewPGInbox(pool, "c", consumer.RecordEffect("c"))
	if err != nil {
		t.Fatal(err)
	}
	run := concurrentApplies(t, pool, tracer, in, concurrentRounds, concurrentGoroutines)
	t.Logf("%d of %d rounds overlapped (%d inserts met an uncommitted one)", run.overlapped, concurrentRounds, tracer.count())
	if run.overlapped == 0 {
		t.Fatalf("no round overlapped: the applies ran one after another and the test proved nothing")
	}
	for r := range concurrentRounds {
		id := fmt.Sprintf("same-%02d", r)
		if run.effects[id] != 1 || run.applied[id] != 1 {
			t.Errorf("%s: %d effects, %d applies not duplicate; want 1 and 1", id, run.effects[id], run.applied[id])
		}
	}
}

// checkThenInsert is an inbox whose dedupe check and inbox write are not
// atomic together: it looks the id up in a statement of its own, then
// writes the inbox row (ignoring a conflict: it has checked) and the
// effect in a transaction.
type checkThenInsert struct {
	pool *pgxpool.Pool
}

func (c checkThenInsert) Apply(ctx context.Context, m consumer.Message) (bool, error) {
	var seen bool
	if err := c.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM inbox WHERE consumer = 'c' AND message_id = $1)`, m.ID).Scan(&seen); err != nil {
		return false, fmt.Errorf("checking %s: %w", m.ID, err)
	}
	if seen {
		return true, nil
	}
	tx, err := c.pool.Begin(ctx)
	if err != nil {
		return false, fmt.Errorf("applying %s: %w", m.ID, err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if _, err := tx.Exec(ctx, `INSERT INTO inbox (consumer, message_id, message_type) VALUES ('c', $1, $2) ON CONFLICT DO NOTHING`, m.ID, m.Type); err != nil {
		return false, fmt.Errorf("applying %s: %w", m.ID, err)
	}
	if err := consumer.RecordEffect("c")(ctx, tx, m); err != nil {
		return false, err
	}
	if err := tx.Commit(ctx); err != nil {
		return false, fmt.Errorf("applying %s: commit: %w", m.ID, err)
	}
	return false, nil
}

// TestPGInboxConcurrentDuplicatesCatchesANonAtomicDedupe runs the same
// rounds against an inbox that checks, then writes: the concurrency the
// test above relies on applies some message more than once.
func TestPGInboxConcurrentDuplicatesCatchesANonAtomicDedupe(t *testing.T) {
	pool, tracer := newTracedInboxDB(t, concurrentGoroutines+4)
	run := concurrentApplies(t, pool, tracer, checkThenInsert{pool}, concurrentRounds, concurrentGoroutines)
	twice := 0
	for r := range concurrentRounds {
		if run.effects[fmt.Sprintf("same-%02d", r)] > 1 {
			twice++
		}
	}
	t.Logf("%d of %d rounds overlapped; %d rounds applied their message more than once", run.overlapped, concurrentRounds, twice)
	if twice == 0 {
		t.Fatal("a dedupe that checks, then writes, applied every message once: the rounds do not apply at the same moment")
	}
}
