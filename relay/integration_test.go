package relay_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/outboxlab/outboxlab/outbox"
	"github.com/outboxlab/outboxlab/relay"
)

// testConfig is a relay configuration with durations short enough for
// tests. The publish timeout leaves room for a loaded machine: a test
// without faults asserts that nothing is published twice, and a confirm
// that misses its timeout is published again. Tests about leases and
// timeouts shorten them.
func testConfig(id string) relay.Config {
	return relay.Config{
		RelayID:        id,
		PollInterval:   50 * time.Millisecond,
		BatchSize:      100,
		Lease:          12 * time.Second,
		MaxAttempts:    3,
		BackoffBase:    50 * time.Millisecond,
		BackoffMax:     200 * time.Millisecond,
		Retention:      time.Hour,
		SweepInterval:  50 * time.Millisecond,
		PublishTimeout: 5 * time.Second,
		StoreTimeout:   5 * time.Second,
		PublishWindow:  50,
	}
}

// newRelay builds a relay on db and a publisher to b.
func newRelay(t testing.TB, cfg relay.Config, db *dbEnv, b *brokerEnv, opts relay.Options) *relay.Relay {
	t.Helper()
	r, err := relay.New(cfg, relay.NewPGStore(db.Pool, db.Table), newPublisher(t, b.URL, b.Exchange), opts)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// runRelay runs r until the test ends, woken by wake (may be nil).
func runRelay(t testing.TB, r *relay.Relay, wake <-chan struct{}) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx, wake) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("relay run: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("relay did not stop within 30s of its context ending")
		}
	})
}

// pausePoint is a Failpoints that holds every pass through one failpoint
// until released.
type pausePoint struct {
	name    string
	reached chan struct{}
	release chan struct{}
	once    sync.Once
}

func newPausePoint(name string) *pausePoint {
	return &pausePoint{name: name, reached: make(chan struct{}), release: make(chan struct{})}
}

func (p *pausePoint) Inject(ctx context.Context, name string) error {
	if name != p.name {
		return nil
	}
	p.once.Do(func() { close(p.reached) })
	select {
	case <-p.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func TestTwoReplicasPublishEveryRowOnce(t *testing.T) {
	db := newDB(t)
	b := newBroker(t, true)
	ids := newIDSource(t, 21)
	c := collect(t, b.URL, b.Queue)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	var replicas []*relay.Relay
	for _, id := range []string{"relay-a", "relay-b"} {
		r := newRelay(t, testConfig(id), db, b, relay.Options{})
		wake, err := relay.Listen(ctx, db.URL, db.Table, relay.ListenConfig{})
		if err != nil {
			t.Fatal(err)
		}
		runRelay(t, r, wake)
		replicas = append(replicas, r)
	}
	// Stage while the replicas run, in transactions of 100 that notify.
	const n = 10_000
	staged := make(map[string]bool, n)
	for start := 0; start < n; start += 100 {
		tx, err := db.Pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for i := start; i < start+100; i++ {
			e := outbox.Event{ID: ids.next(), Type: "order.placed", Payload: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i))}
			staged[e.ID.String()] = true
			if err := outbox.Stage(ctx, tx, db.Table, e, outbox.StageOptions{Notify: true}); err != nil {
				t.Fatal(err)
			}
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 2*time.Minute, "every row processed and delivered", func() (bool, error) {
		_, distinct, _ := c.counts()
		return distinct == n && count(t, db, `processed_at IS NOT NULL`) == n, nil
	})
	deliveries, distinct, duplicated := c.counts()
	if deliveries != n || duplicated != 0 {
		t.Errorf("%d deliveries of %d events, %d duplicated; want each exactly once", deliveries, distinct, duplicated)
	}
	for _, d := range c.deliveries() {
		if !staged[d.MessageId] {
			t.Fatalf("delivered an event never staged: %s", d.MessageId)
		}
	}
	var published, lost int64
	for _, r := range replicas {
		published += r.Totals().Published.Load()
		lost += r.Totals().LostLeases.Load()
		t.Logf("%s published %d", r.Config().RelayID, r.Totals().Published.Load())
	}
	if published != n || lost != 0 {
		t.Errorf("replicas marked %d rows with %d lost leases, want %d and 0", published, lost, n)
	}
	if count(t, db, `attempts <> 0 OR faulted_at IS NOT NULL`) != 0 {
		t.Errorf("healthy rows consumed attempts or were parked")
	}
}

func TestExpiredLeaseFencesLateMark(t *testing.T) {
	db := newDB(t)
	b := newBroker(t, true)
	ids := newIDSource(t, 22)
	c := collect(t, b.URL, b.Queue)
	evs := stageRows(t, db, ids, 5, "order.placed", time.Time{})

	cfg := testConfig("relay-a")
	cfg.Lease = 1200 * time.Millisecond
	cfg.PublishTimeout = 500 * time.Millisecond
	hold := newPausePoint(relay.FailAfterConfirmBeforeMark)
	a := newRelay(t, cfg, db, b, relay.Options{Failpoints: hold})
	bRelay := newRelay(t, testConfig("relay-b"), db, b, relay.Options{})

	type result struct {
		res relay.TickResult
		err error
	}
	aDone := make(chan result, 1)
	go func() {
		res, err := a.Tick(context.Background())
		aDone <- result{res, err}
	}()
	select {
	case <-hold.reached:
	case <-time.After(10 * time.Second):
		t.Fatal("relay-a never reached the point between confirm and mark")
	}
	// relay-a has published and holds its confirms; its lease runs out by
	// the database clock.
	waitFor(t, 10*time.Second, "relay-a's leases to expire", func() (bool, error) {
		return count(t, db, `locked_by = 'relay-a' AND locked_until < now()`) == len(evs), nil
	})
	res, err := bRelay.Tick(context.Background())
	if err != nil || res.Published != len(evs) {
		t.Fatalf("relay-b tick = %+v, %v; want all %d published", res, err, len(evs))
	}
	close(hold.release)
	ra := <-aDone
	if ra.err != nil {
		t.Fatalf("relay-a tick: %v", ra.err)
	}
	if ra.res.Published != 0 || ra.res.LostLeases != len(evs) {
		t.Errorf("relay-a's late mark: %+v, want 0 published and %d lost leases", ra.res, len(evs))
	}
	if got := a.Totals().LostLeases.Load(); got != int64(len(evs)) {
		t.Errorf("relay-a counted %d lost leases, want %d", got, len(evs))
	}
	if n := count(t, db, `processed_at IS NOT NULL AND locked_by = 'relay-b'`); n != len(evs) {
		t.Errorf("%d rows marked by relay-b, want %d", n, len(evs))
	}
	// Both relays published: each event reaches the queue twice, which the
	// lost lease explains.
	waitFor(t, 10*time.Second, "both publishes of every event", func() (bool, error) {
		d, _, _ := c.counts()
		return d == 2*len(evs), nil
	})
}

// stageMixed stages good, unknown-type and undecodable rows interleaved and
// returns their ids by kind.
func stageMixed(t testing.TB, db *dbEnv, ids *idSource, good, unknown, undecodable int) (g, u, d []uuid.UUID) {
	t.Helper()
	ctx := context.Background()
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	for i := 0; i < good+unknown+undecodable; i++ {
		e := outbox.Event{ID: ids.next(), Type: "order.placed", Payload: json.RawMessage(fmt.Sprintf(`{"order_id":"o%d","amount":%d}`, i, i))}
		switch {
		case i%4 == 1 && len(u) < unknown:
			e.Type = "order.teleported"
			u = append(u, e.ID)
		case i%4 == 3 && len(d) < undecodable:
			e.Payload = json.RawMessage(`{"order_id":"o","amount":"lots"}`)
			d = append(d, e.ID)
		case len(g) < good:
			g = append(g, e.ID)
		case len(u) < unknown:
			e.Type = "order.teleported"
			u = append(u, e.ID)
		default:
			e.Payload = json.RawMessage(`{"order_id":"o","amount":"lots"}`)
			d = append(d, e.ID)
		}
		if err := outbox.Stage(ctx, tx, db.Table, e, outbox.StageOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	return g, u, d
}

type orderPlaced struct {
	OrderID string `json:"order_id"`
	Amount  int    `json:"amount"`
}

func TestPoisonIsParkedOthersFlowParkedNeverSwept(t *testing.T) {
	db := newDB(t)
	b := newBroker(t, true)
	ids := newIDSource(t, 23)
	c := collect(t, b.URL, b.Queue)
	good, unknown, undecodable := stageMixed(t, db, ids, 60, 4, 4)

	reg := outbox.NewRegistry()
	reg.Register("order.placed", orderPlaced{})
	cfg := testConfig("relay-a")
	cfg.BatchSize = 10 // poison spread over several batches
	cfg.Retention = 300 * time.Millisecond
	r := newRelay(t, cfg, db, b, relay.Options{Decoder: reg})
	runRelay(t, r, nil)

	waitFor(t, 30*time.Second, "good rows processed, poison parked, processed rows swept", func() (bool, error) {
		_, distinct, _ := c.counts()
		return distinct == len(good) && count(t, db, `faulted_at IS NOT NULL`) == len(unknown)+len(undecodable) &&
			count(t, db, `true`) == len(unknown)+len(undecodable), nil
	})
	if n := count(t, db, `id = ANY($1) AND faulted_at IS NOT NULL AND attempts = 0 AND processed_at IS NULL`, unknown); n != len(unknown) {
		t.Errorf("%d of %d unknown-type rows parked at once without attempts", n, len(unknown))
	}
	if n := count(t, db, `id = ANY($1) AND faulted_at IS NOT NULL AND attempts = $2 AND processed_at IS NULL`, undecodable, cfg.MaxAttempts); n != len(undecodable) {
		t.Errorf("%d of %d undecodable rows parked after exactly %d attempts", n, len(undecodable), cfg.MaxAttempts)
	}
	deliveries, _, duplicated := c.counts()
	if deliveries != len(good) || duplicated != 0 {
		t.Errorf("%d deliveries, %d duplicated; want each of %d good rows once", deliveries, duplicated, len(good))
	}
	for _, id := range append(unknown, undecodable...) {
		if c.times(id.String()) != 0 {
			t.Errorf("poison row %s was published", id)
		}
	}
	if got := r.Totals().Parked.Load(); got != int64(len(unknown)+len(undecodable)) {
		t.Errorf("relay counted %d parked, want %d", got, len(unknown)+len(undecodable))
	}
	// Parked rows outlive many sweeps past their retention.
	ticks := r.Totals().Ticks.Load()
	waitFor(t, 10*time.Second, "20 more ticks, each due to sweep", func() (bool, error) {
		return r.Totals().Ticks.Load() > ticks+20, nil
	})
	if n := count(t, db, `faulted_at IS NOT NULL`); n != len(unknown)+len(undecodable) {
		t.Errorf("parked rows deleted: %d left", n)
	}
}

func TestUnroutablePublishIsNotMarked(t *testing.T) {
	db := newDB(t)
	b := newBroker(t, false) // no queue bound: every publish is returned
	ids := newIDSource(t, 24)
	evs := stageRows(t, db, ids, 3, "order.placed", time.Time{})
	r := newRelay(t, testConfig("relay-a"), db, b, relay.Options{})
	res, err := r.Tick(context.Background())
	if err != nil {
		t.Fatalf("tick: %v", err)
	}
	if res.Published != 0 || res.Attempts != len(evs) {
		t.Errorf("tick = %+v, want nothing published and one attempt per row", res)
	}
	if n := count(t, db, `processed_at IS NULL AND attempts = 1 AND last_error LIKE '%unroutable%'`); n != len(evs) {
		t.Errorf("%d of %d returned rows left pending with one attempt", n, len(evs))
	}
}

// watchRetention polls the table until stop and fails the test if a
// processed row disappears before its processed_at + retention by the
// database clock.
func watchRetention(t *testing.T, db *dbEnv, retention time.Duration, stop <-chan struct{}) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		ctx := context.Background()
		known := map[uuid.UUID]time.Time{}
		for {
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
			// The rows come from one snapshot; clock_timestamp() read after
			// it is no earlier than the snapshot, so a row missing from it
			// while that time is still inside its retention was deleted
			// too early, whatever the sweep's own timing.
			tx, err := db.Pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
			if err != nil {
				t.Errorf("retention watch: %v", err)
				return
			}
			present := map[uuid.UUID]bool{}
			rows, err := tx.Query(ctx, `SELECT id, processed_at FROM `+db.Table.Ident()+` WHERE processed_at IS NOT NULL`)
			for err == nil && rows.Next() {
				var id uuid.UUID
				var p time.Time
				if err = rows.Scan(&id, &p); err == nil {
					known[id] = p
					present[id] = true
				}
			}
			if err == nil {
				rows.Close()
				err = rows.Err()
			}
			var after time.Time
			if err == nil {
				err = tx.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&after)
			}
			_ = tx.Rollback(ctx)
			if err != nil {
				t.Errorf("retention watch: %v", err)
				return
			}
			for id, p := range known {
				if !present[id] {
					if after.Before(p.Add(retention)) {
						t.Errorf("row %s processed at %s was swept by %s, before its retention of %s", id, p, after, retention)
					}
					delete(known, id)
				}
			}
		}
	}()
	return done
}

func TestClockSkewDoesNotChangeBehaviour(t *testing.T) {
	for _, offset := range []time.Duration{-10 * time.Minute, 0, 10 * time.Minute} {
		t.Run(fmt.Sprintf("offset=%s", offset), func(t *testing.T) {
			db := newDB(t)
			b := newBroker(t, true)
			ids := newIDSource(t, 25)
			c := collect(t, b.URL, b.Queue)
			const n = 300
			stageRows(t, db, ids, n, "order.placed", time.Time{})
			cfg := testConfig("relay-skewed")
			cfg.Now = func() time.Time { return time.Now().Add(offset) }
			cfg.Retention = 1500 * time.Millisecond
			stop := make(chan struct{})
			watched := watchRetention(t, db, cfg.Retention, stop)
			r := newRelay(t, cfg, db, b, relay.Options{})
			runRelay(t, r, nil)
			waitFor(t, 30*time.Second, "every row delivered", func() (bool, error) {
				_, distinct, _ := c.counts()
				return distinct == n, nil
			})
			// Leases were computed by the database: exactly Lease long.
			if k := count(t, db, `locked_until - locked_at <> $1::bigint * interval '1 microsecond'`, cfg.Lease.Microseconds()); k != 0 {
				t.Errorf("%d leases not exactly %s long", k, cfg.Lease)
			}
			waitFor(t, 30*time.Second, "every processed row swept after retention", func() (bool, error) {
				return count(t, db, `true`) == 0, nil
			})
			close(stop)
			<-watched
			deliveries, _, duplicated := c.counts()
			if deliveries != n || duplicated != 0 {
				t.Errorf("%d deliveries, %d duplicated; want %d once each", deliveries, duplicated, n)
			}
			if r.Totals().Swept.Load() != n || r.Totals().LostLeases.Load() != 0 {
				t.Errorf("swept %d, lost %d leases; want %d and 0", r.Totals().Swept.Load(), r.Totals().LostLeases.Load(), n)
			}
		})
	}
}

func TestListenWakesAndSurvivesReconnect(t *testing.T) {
	db := newDB(t)
	ids := newIDSource(t, 26)
	ctx, cancel := context.WithCancel(context.Background())
	wake, err := relay.Listen(ctx, db.URL, db.Table, relay.ListenConfig{MinBackoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	expectWake(t, wake, 10*time.Second, "the first connect")
	stage := func() {
		tx, err := db.Pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		e := outbox.Event{ID: ids.next(), Type: "t", Payload: json.RawMessage(`{}`)}
		if err := outbox.Stage(ctx, tx, db.Table, e, outbox.StageOptions{Notify: true}); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	stage()
	expectWake(t, wake, 10*time.Second, "a notifying commit")
	// Kill the listening session; Listen reconnects and wakes once.
	tag, err := db.Pool.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query = $1`,
		"LISTEN "+quoteIdent(db.Table.Channel()))
	if err != nil {
		t.Fatal(err)
	}
	if tag.RowsAffected() != 1 {
		t.Fatalf("terminated %d listening sessions, want 1", tag.RowsAffected())
	}
	expectWake(t, wake, 10*time.Second, "the reconnect")
	waitFor(t, 10*time.Second, "the listener back", func() (bool, error) {
		var k int
		err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE query = $1`, "LISTEN "+quoteIdent(db.Table.Channel())).Scan(&k)
		return k == 1, err
	})
	// Drain a possible extra wake-up, then a new commit must wake again.
	select {
	case <-wake:
	default:
	}
	stage()
	expectWake(t, wake, 10*time.Second, "a notifying commit after the reconnect")
	cancel()
	expectWakeClosed(t, wake, 10*time.Second)
}

func quoteIdent(s string) string { return `"` + s + `"` }

func TestListenRejectsMalformedConnString(t *testing.T) {
	_, err := relay.Listen(context.Background(), "postgres://u:s3cret@h:port/db", outbox.MustParseTable("outbox"), relay.ListenConfig{})
	if err == nil {
		t.Fatal("Listen accepted a malformed connection string")
	}
	if strings.Contains(err.Error(), "s3cret") {
		t.Errorf("error: %v", err)
	}
}
