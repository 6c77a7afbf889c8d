package relay_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	seedpkg "github.com/outboxlab/outboxlab/seed"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxlab/outboxlab/outbox"
	"github.com/outboxlab/outboxlab/relay"
)

// idSource makes event ids from a seed, so a failing run can be replayed.
type idSource struct {
	mu  sync.Mutex
	rng *rand.Rand
}

func newIDSource(t testing.TB, seed uint64) *idSource {
	t.Logf("SEED=%d", seed)
	return &idSource{rng: seedpkg.Rand(seed, "relay/ids")}
}

func (s *idSource) next() uuid.UUID {
	s.mu.Lock()
	defer s.mu.Unlock()
	var id uuid.UUID
	for i := range id {
		id[i] = byte(s.rng.Uint32())
	}
	id[6] = id[6]&0x0f | 0x40
	id[8] = id[8]&0x3f | 0x80
	return id
}

// stageRows commits n events of type typ, one transaction each batch of
// 500, with occurred_at = base + i ms when base is set, and returns them in
// staging order.
func stageRows(t testing.TB, db *dbEnv, ids *idSource, n int, typ string, base time.Time) []outbox.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	evs := make([]outbox.Event, n)
	for i := range evs {
		evs[i] = outbox.Event{ID: ids.next(), Type: typ, Payload: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i))}
		if !base.IsZero() {
			evs[i].OccurredAt = base.Add(time.Duration(i) * time.Millisecond)
		}
	}
	for start := 0; start < n; start += 500 {
		tx, err := db.Pool.Begin(ctx)
		if err != nil {
			t.Fatalf("begin: %v", err)
		}
		for _, e := range evs[start:min(start+500, n)] {
			if err := outbox.Stage(ctx, tx, db.Table, e, outbox.StageOptions{}); err != nil {
				t.Fatalf("stage: %v", err)
			}
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatalf("commit: %v", err)
		}
	}
	return evs
}

func rowIDs(rows []relay.Row) []uuid.UUID {
	out := make([]uuid.UUID, len(rows))
	for i, r := range rows {
		out[i] = r.ID
	}
	return out
}

func eventIDs(evs []outbox.Event) []uuid.UUID {
	out := make([]uuid.UUID, len(evs))
	for i, e := range evs {
		out[i] = e.ID
	}
	return out
}

func count(t testing.TB, db *dbEnv, where string, args ...any) int {
	t.Helper()
	var n int
	if err := db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM `+db.Table.Ident()+` WHERE `+where, args...).Scan(&n); err != nil {
		t.Fatalf("counting %s: %v", where, err)
	}
	return n
}

func TestStageCommitsOrRollsBackWithBusinessRow(t *testing.T) {
	db := newDB(t)
	ids := newIDSource(t, 1)
	ctx := context.Background()
	if _, err := db.Pool.Exec(ctx, `CREATE TABLE orders (id int PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	write := func(order int, e outbox.Event, commit bool) error {
		tx, err := db.Pool.Begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(ctx)
		if _, err := tx.Exec(ctx, `INSERT INTO orders VALUES ($1)`, order); err != nil {
			return err
		}
		if err := outbox.Stage(ctx, tx, db.Table, e, outbox.StageOptions{Notify: true}); err != nil {
			return err
		}
		if !commit {
			return tx.Rollback(ctx)
		}
		return tx.Commit(ctx)
	}
	committed := outbox.Event{ID: ids.next(), Type: "order.placed", Payload: json.RawMessage(`{}`)}
	if err := write(1, committed, true); err != nil {
		t.Fatalf("committing: %v", err)
	}
	rolledBack := outbox.Event{ID: ids.next(), Type: "order.placed", Payload: json.RawMessage(`{}`)}
	if err := write(2, rolledBack, false); err != nil {
		t.Fatalf("rolling back: %v", err)
	}
	// A failing stage (the id exists) fails the business write with it.
	if err := write(3, committed, true); err == nil {
		t.Fatal("staging a duplicate id committed")
	}
	var orders []int
	rows, _ := db.Pool.Query(ctx, `SELECT id FROM orders ORDER BY id`)
	orders, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(orders, []int{1}) {
		t.Errorf("orders = %v, want [1]", orders)
	}
	if n := count(t, db, `true`); n != 1 {
		t.Errorf("outbox has %d rows, want 1", n)
	}
	if n := count(t, db, `id = $1`, committed.ID); n != 1 {
		t.Errorf("committed event missing")
	}
	if n := count(t, db, `id = $1`, rolledBack.ID); n != 0 {
		t.Errorf("rolled-back event present")
	}
}

func TestPGStoreClaimsOldestFirst(t *testing.T) {
	db := newDB(t)
	ids := newIDSource(t, 2)
	store := relay.NewPGStore(db.Pool, db.Table)
	ctx := context.Background()
	now, err := store.DBNow(ctx)
	if err != nil {
		t.Fatal(err)
	}
	evs := stageRows(t, db, ids, 10, "t", now.Add(-time.Hour))
	// Stage the same instants in reverse: insertion order must not matter.
	late := stageRows(t, db, ids, 3, "t", now.Add(-2*time.Hour))
	want := append(eventIDs(late), eventIDs(evs)...)

	a, err := store.Claim(ctx, "a", 4, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if got := rowIDs(a); !slices.Equal(got, want[:4]) {
		t.Errorf("first claim = %v, want %v", got, want[:4])
	}
	b, err := store.Claim(ctx, "b", 100, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if got := rowIDs(b); !slices.Equal(got, want[4:]) {
		t.Errorf("second claim = %v, want %v", got, want[4:])
	}
	if r := a[0]; r.Type != "t" || string(r.Payload) != `{"n": 0}` || r.Attempts != 0 || !r.OccurredAt.Equal(now.Add(-2*time.Hour)) {
		t.Errorf("claimed row = %+v", r)
	}
	if n := count(t, db, `locked_by = 'a' AND locked_until > now() + interval '50 seconds'`); n != 4 {
		t.Errorf("%d rows leased to a for a minute, want 4", n)
	}
	c, err := store.Claim(ctx, "c", 100, time.Minute)
	if err != nil || len(c) != 0 {
		t.Errorf("third claim = %v, %v; want nothing while leases hold", c, err)
	}
}

func TestPGStoreConcurrentClaimsNeverOverlap(t *testing.T) {
	db := newDB(t)
	ids := newIDSource(t, 3)
	store := relay.NewPGStore(db.Pool, db.Table)
	evs := stageRows(t, db, ids, 2000, "t", time.Time{})
	var (
		mu     sync.Mutex
		seen   = map[uuid.UUID]string{}
		dups   []uuid.UUID
		wg     sync.WaitGroup
		errsMu sync.Mutex
		errs   []error
	)
	for w := range 4 {
		owner := fmt.Sprintf("w%d", w)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				rows, err := store.Claim(context.Background(), owner, 37, time.Minute)
				if err != nil {
					errsMu.Lock()
					errs = append(errs, err)
					errsMu.Unlock()
					return
				}
				if len(rows) == 0 {
					return
				}
				mu.Lock()
				for _, r := range rows {
					if _, ok := seen[r.ID]; ok {
						dups = append(dups, r.ID)
					}
					seen[r.ID] = owner
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("claims failed: %v", errs)
	}
	if len(dups) > 0 {
		t.Errorf("%d rows claimed twice under live leases, e.g. %v", len(dups), dups[0])
	}
	if len(seen) != len(evs) {
		t.Errorf("claimed %d distinct rows, want %d", len(seen), len(evs))
	}
}

func TestPGStoreExpiredLeaseFencesLateWrites(t *testing.T) {
	db := newDB(t)
	ids := newIDSource(t, 4)
	store := relay.NewPGStore(db.Pool, db.Table)
	ctx := context.Background()
	stageRows(t, db, ids, 2, "t", time.Time{})
	a, err := store.Claim(ctx, "a", 10, 300*time.Millisecond)
	if err != nil || len(a) != 2 {
		t.Fatalf("claim by a = %v, %v", a, err)
	}
	if b, err := store.Claim(ctx, "b", 10, time.Minute); err != nil || len(b) != 0 {
		t.Fatalf("b claimed %v, %v under a's live lease", b, err)
	}
	// Wait by the database clock, the only clock leases follow.
	var b []relay.Row
	waitFor(t, 5*time.Second, "a's lease to expire", func() (bool, error) {
		b, err = store.Claim(ctx, "b", 10, time.Minute)
		return len(b) == 2, err
	})
	marked, err := store.Mark(ctx, "a", rowIDs(a))
	if err != nil || len(marked) != 0 {
		t.Errorf("a's late mark marked %v, %v; want nothing", marked, err)
	}
	if res, err := store.Retry(ctx, "a", a[0].ID, relay.RetryPolicy{MaxAttempts: 5, BackoffBase: time.Second, BackoffMax: time.Second}, "late"); err != nil || res.Applied {
		t.Errorf("a's late retry = %+v, %v; want not applied", res, err)
	}
	if ok, err := store.Park(ctx, "a", a[1].ID, "late"); err != nil || ok {
		t.Errorf("a's late park = %v, %v; want false", ok, err)
	}
	if n := count(t, db, `attempts = 0 AND faulted_at IS NULL AND processed_at IS NULL`); n != 2 {
		t.Errorf("late writes changed rows: %d untouched, want 2", n)
	}
	marked, err = store.Mark(ctx, "b", rowIDs(b))
	if err != nil || len(marked) != 2 {
		t.Errorf("b's mark = %v, %v; want both", marked, err)
	}
	// Marking twice marks nothing the second time.
	if again, err := store.Mark(ctx, "b", rowIDs(b)); err != nil || len(again) != 0 {
		t.Errorf("second mark = %v, %v", again, err)
	}
}

func TestPGStoreRetryBacksOffThenParks(t *testing.T) {
	db := newDB(t)
	ids := newIDSource(t, 5)
	store := relay.NewPGStore(db.Pool, db.Table)
	ctx := context.Background()
	evs := stageRows(t, db, ids, 1, "t", time.Time{})
	policy := relay.RetryPolicy{MaxAttempts: 3, BackoffBase: 400 * time.Millisecond, BackoffMax: time.Second}
	for attempt, wantDelay := range []time.Duration{400 * time.Millisecond, 800 * time.Millisecond, time.Second} {
		var rows []relay.Row
		waitFor(t, 5*time.Second, fmt.Sprintf("row eligible for attempt %d", attempt+1), func() (bool, error) {
			var err error
			rows, err = store.Claim(ctx, "a", 10, time.Minute)
			return len(rows) == 1, err
		})
		if rows[0].Attempts != attempt {
			t.Fatalf("claimed with attempts %d, want %d", rows[0].Attempts, attempt)
		}
		res, err := store.Retry(ctx, "a", evs[0].ID, policy, fmt.Sprintf("failure %d", attempt+1))
		if err != nil {
			t.Fatal(err)
		}
		want := relay.RetryResult{Applied: true, Attempts: attempt + 1, Parked: attempt+1 == policy.MaxAttempts}
		if got := res; got.At.IsZero() || got.Until.Sub(got.At) != wantDelay {
			t.Errorf("retry %d tells its time %s and next eligible time %s, want %s apart on the database clock", attempt+1, got.At, got.Until, wantDelay)
		}
		res.At, res.Until = time.Time{}, time.Time{}
		if res != want {
			t.Errorf("retry %d = %+v, want %+v", attempt+1, res, want)
		}
		var left time.Duration
		var lastErr string
		err = db.Pool.QueryRow(ctx, `SELECT extract(epoch FROM locked_until - now())::float8 * interval '1 second', last_error FROM `+
			db.Table.Ident()).Scan(&left, &lastErr)
		if err != nil {
			t.Fatal(err)
		}
		if left > wantDelay || left < wantDelay-300*time.Millisecond {
			t.Errorf("after attempt %d the row waits %s, want about %s", attempt+1, left, wantDelay)
		}
		if lastErr != fmt.Sprintf("failure %d", attempt+1) {
			t.Errorf("last_error = %q", lastErr)
		}
		if res.Parked {
			break
		}
	}
	if n := count(t, db, `faulted_at IS NOT NULL AND attempts = 3 AND processed_at IS NULL`); n != 1 {
		t.Fatalf("row not parked after 3 attempts")
	}
	// A parked row is never claimed again, nor marked by its last holder.
	if rows, err := store.Claim(ctx, "b", 10, time.Minute); err != nil || len(rows) != 0 {
		t.Errorf("parked row claimed: %v, %v", rows, err)
	}
	if marked, err := store.Mark(ctx, "a", eventIDs(evs)); err != nil || len(marked) != 0 {
		t.Errorf("parked row marked: %v, %v", marked, err)
	}
}

func TestPGStoreParkIsImmediateAndKept(t *testing.T) {
	db := newDB(t)
	ids := newIDSource(t, 6)
	store := relay.NewPGStore(db.Pool, db.Table)
	ctx := context.Background()
	evs := stageRows(t, db, ids, 2, "t", time.Time{})
	if _, err := store.Claim(ctx, "a", 10, time.Minute); err != nil {
		t.Fatal(err)
	}
	if ok, err := store.Park(ctx, "a", evs[0].ID, "unknown message type"); err != nil || !ok {
		t.Fatalf("park = %v, %v", ok, err)
	}
	if n := count(t, db, `id = $1 AND faulted_at IS NOT NULL AND attempts = 0 AND last_error = 'unknown message type'`, evs[0].ID); n != 1 {
		t.Error("parked row not faulted with its cause")
	}
	st, err := store.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Faulted != 1 || st.Pending != 1 || st.Eligible != 0 || st.Processed != 0 {
		t.Errorf("stats = %+v, want 1 faulted, 1 pending (leased, not eligible)", st)
	}
	// Sweeping with any retention leaves it.
	if n, err := store.Sweep(ctx, time.Microsecond, 100); err != nil || n != 0 {
		t.Errorf("sweep deleted %d, %v", n, err)
	}
}

func TestPGStoreSweepsOnlyProcessedPastRetention(t *testing.T) {
	db := newDB(t)
	ids := newIDSource(t, 7)
	store := relay.NewPGStore(db.Pool, db.Table)
	ctx := context.Background()
	old := stageRows(t, db, ids, 5, "old", time.Time{})
	fresh := stageRows(t, db, ids, 1, "fresh", time.Time{})
	stageRows(t, db, ids, 1, "pending", time.Time{})
	parked := stageRows(t, db, ids, 1, "parked", time.Time{})
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := db.Pool.Exec(ctx, sql, args...); err != nil {
			t.Fatal(err)
		}
	}
	exec(`UPDATE `+db.Table.Ident()+` SET processed_at = now() - interval '2 hours' WHERE id = ANY($1)`, eventIDs(old))
	exec(`UPDATE `+db.Table.Ident()+` SET processed_at = now() WHERE id = $1`, fresh[0].ID)
	exec(`UPDATE `+db.Table.Ident()+` SET faulted_at = now() - interval '30 days', occurred_at = now() - interval '30 days' WHERE id = $1`, parked[0].ID)
	exec(`UPDATE ` + db.Table.Ident() + ` SET occurred_at = now() - interval '30 days' WHERE message_type = 'pending'`)

	// Batches of at most limit rows.
	if n, err := store.Sweep(ctx, time.Hour, 2); err != nil || n != 2 {
		t.Fatalf("sweep = %d, %v; want a batch of 2", n, err)
	}
	// SweepIDs names what it deleted and the database time it did.
	got, at, err := store.SweepIDs(ctx, time.Hour, 100)
	if err != nil || len(got) != 3 || at.IsZero() {
		t.Fatalf("sweep = %v at %s, %v; want the other 3 old rows and the statement's time", got, at, err)
	}
	for _, id := range got {
		if !slices.ContainsFunc(old, func(e outbox.Event) bool { return e.ID == id }) {
			t.Errorf("sweep names %s, not an old processed row", id)
		}
	}
	// The fresh row goes only once retention has passed by the database
	// clock.
	if n, err := store.Sweep(ctx, time.Second, 100); err != nil || n != 0 {
		t.Fatalf("swept %d fresh rows, %v", n, err)
	}
	waitFor(t, 5*time.Second, "retention to pass", func() (bool, error) {
		n, err := store.Sweep(ctx, time.Second, 100)
		return n == 1, err
	})
	if n := count(t, db, `true`); n != 2 {
		t.Errorf("%d rows left, want the pending and the parked one", n)
	}
	if n := count(t, db, `message_type IN ('pending', 'parked')`); n != 2 {
		t.Error("sweep deleted a pending or parked row")
	}
}

func TestPGStoreStats(t *testing.T) {
	db := newDB(t)
	ids := newIDSource(t, 8)
	store := relay.NewPGStore(db.Pool, db.Table)
	ctx := context.Background()
	now, err := store.DBNow(ctx)
	if err != nil {
		t.Fatal(err)
	}
	stageRows(t, db, ids, 3, "t", now.Add(-time.Minute))
	evs := stageRows(t, db, ids, 4, "t", now.Add(-10*time.Minute))
	if _, err := db.Pool.Exec(ctx, `UPDATE `+db.Table.Ident()+` SET processed_at = now() WHERE id = $1`, evs[0].ID); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `UPDATE `+db.Table.Ident()+` SET faulted_at = now() WHERE id = $1`, evs[1].ID); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `UPDATE `+db.Table.Ident()+` SET locked_by = 'x', locked_until = now() + interval '1 hour' WHERE id = $1`, evs[2].ID); err != nil {
		t.Fatal(err)
	}
	st, err := store.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Pending != 5 || st.Eligible != 4 || st.Faulted != 1 || st.Processed != 1 {
		t.Errorf("stats = %+v, want pending 5, eligible 4, faulted 1, processed 1", st)
	}
	// The oldest eligible row is evs[3], staged 10 minutes ago + 3 ms.
	if age := st.OldestEligibleAge; age < 10*time.Minute-time.Second || age > 10*time.Minute+5*time.Second {
		t.Errorf("oldest eligible age = %s, want about 10m", age)
	}
}

func TestClaimUsesPendingIndex(t *testing.T) {
	db := newDB(t)
	ctx := context.Background()
	// A realistic outbox: a long tail of processed rows awaiting the sweep
	// and a small backlog.
	_, err := db.Pool.Exec(ctx, `INSERT INTO `+db.Table.Ident()+` (id, message_type, payload, occurred_at, processed_at)
		SELECT gen_random_uuid(), 't', '{}', now() - i * interval '1 second',
		       CASE WHEN i > 200 THEN now() END
		FROM generate_series(1, 50000) AS i`)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `ANALYZE `+db.Table.Ident()); err != nil {
		t.Fatal(err)
	}
	store := relay.NewPGStore(db.Pool, db.Table)
	rows, err := db.Pool.Query(ctx, `EXPLAIN `+store.ClaimSQL(), 100, "a", int64(120e6))
	if err != nil {
		t.Fatal(err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	plan := strings.Join(lines, "\n")
	index := db.Table.PendingIndex()
	if !strings.Contains(plan, "Index Scan using "+index) {
		t.Errorf("claim plan does not scan %s:\n%s", index, plan)
	}
	t.Logf("claim plan:\n%s", plan)
	if strings.Contains(plan, "Seq Scan") {
		t.Errorf("claim plan has a sequential scan:\n%s", plan)
	}
}

// TestClaimPlanHoldsAsTheTableGrows checks the plan a connection keeps for
// the claim: pgx prepares the statement once per connection, and after
// five runs PostgreSQL keeps one generic plan, planned with the table's
// statistics of that moment. Planned on a new, never analyzed table, the
// claim's update once read the whole table with a filter on ctid, and
// went on doing so as the table grew until autovacuum analyzed it. Here
// the plan is made on a small table on the store's one connection, the
// table then grows by 20,000 processed rows that nothing analyzes, and a
// claim must still start no sequential scan of it.
func TestClaimPlanHoldsAsTheTableGrows(t *testing.T) {
	db := newDB(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg := db.Pool.Config()
	cfg.MaxConns, cfg.MinConns = 1, 1
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	store := relay.NewPGStore(pool, db.Table)
	ids := newIDSource(t, 19)
	claimOne := func() {
		t.Helper()
		stageRows(t, db, ids, 1, "t", time.Time{})
		rows, err := store.Claim(ctx, "a", 100, time.Minute)
		if err != nil || len(rows) != 1 {
			t.Fatalf("claim: %d rows, %v", len(rows), err)
		}
		if _, err := store.Mark(ctx, "a", []uuid.UUID{rows[0].ID}); err != nil {
			t.Fatal(err)
		}
	}
	// Ten claims: the generic plan is made at the sixth.
	for range 10 {
		claimOne()
	}
	if _, err := db.Pool.Exec(ctx, `INSERT INTO `+db.Table.Ident()+` (id, message_type, payload, processed_at)
		SELECT gen_random_uuid(), 't', '{}', now() FROM generate_series(1, 20000)`); err != nil {
		t.Fatal(err)
	}
	// The sequential scans of the table, as the store's connection saw
	// them: its own statistics flushed, a fresh snapshot read.
	seqScans := func() int64 {
		t.Helper()
		var n int64
		err := pool.AcquireFunc(ctx, func(c *pgxpool.Conn) error {
			if _, err := c.Exec(ctx, `SELECT pg_stat_force_next_flush()`); err != nil {
				return err
			}
			if _, err := c.Exec(ctx, `SELECT pg_stat_clear_snapshot()`); err != nil {
				return err
			}
			return c.QueryRow(ctx, `SELECT seq_scan FROM pg_stat_user_tables WHERE relid = $1::regclass`, db.Table.Ident()).Scan(&n)
		})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := seqScans()
	for range 3 {
		claimOne()
	}
	if after := seqScans(); after != before {
		t.Errorf("3 claims and marks on a grown table started %d sequential scans of it", after-before)
	}
}
