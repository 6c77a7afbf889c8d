package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outboxlab/outboxlab/testenv/pgserver"

	seedpkg "github.com/outboxlab/outboxlab/seed"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxlab/outboxlab/consumer"
	"github.com/outboxlab/outboxlab/relay"
)

var seq atomic.Int64

var nonIdent = regexp.MustCompile(`[^a-z0-9_]+`)

func testName(t testing.TB) string {
	name := strings.Trim(nonIdent.ReplaceAllString(strings.ToLower(t.Name()), "_"), "_")
	if len(name) > 40 {
		name = name[len(name)-40:]
	}
	return fmt.Sprintf("c%d_%s", seq.Add(1), name)
}

func infraURLs(t testing.TB) (db, broker string) {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test: needs PostgreSQL and RabbitMQ (skipped with -short)")
	}
	db, broker = os.Getenv("OUTBOX_TEST_DATABASE_URL"), os.Getenv("OUTBOX_TEST_AMQP_URL")
	if db == "" || broker == "" {
		e := sharedEnv(t)
		db, broker = e.DatabaseURL, e.AMQPURL
	}
	return db, broker
}

// newInboxDB creates a schema for the test on the integration tests'
// PostgreSQL, migrates the inbox in it and returns a pool whose search
// path is that schema.
func newInboxDB(t testing.TB) *pgxpool.Pool {
	t.Helper()
	base, _ := infraURLs(t)
	return newInboxDBOn(t, base, nil)
}

// newPGInboxDB is newInboxDB for a test that needs PostgreSQL alone: on
// OUTBOX_TEST_DATABASE_URL, else on a throwaway server of the test's own
// from the local binaries (testenv/pgserver), so that it runs under -short
// too; without the binaries, on the postgres container (skipped under
// -short).
func newPGInboxDB(t testing.TB) *pgxpool.Pool {
	t.Helper()
	return newPGInboxDBWith(t, nil)
}

// newPGInboxDBWith is newPGInboxDB with edit applied to the pool's
// configuration before the pool is made (nil: none).
func newPGInboxDBWith(t testing.TB, edit func(*pgxpool.Config)) *pgxpool.Pool {
	t.Helper()
	base := os.Getenv("OUTBOX_TEST_DATABASE_URL")
	if base == "" {
		base = pgserver.StartT(t).AdminURL()
	}
	return newInboxDBOn(t, base, edit)
}

// newInboxDBOn is newInboxDB on the server base names, with edit applied
// to the pool's configuration (nil: none).
func newInboxDBOn(t testing.TB, base string, edit func(*pgxpool.Config)) *pgxpool.Pool {
	t.Helper()
	schema := testName(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, `DROP SCHEMA IF EXISTS `+pgx.Identifier{schema}.Sanitize()+` CASCADE`); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(ctx, `CREATE SCHEMA `+pgx.Identifier{schema}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	cfg, err := pgxpool.ParseConfig(base)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	if edit != nil {
		edit(cfg)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 { // idempotent
		if err := consumer.MigrateInbox(ctx, pool); err != nil {
			t.Fatalf("MigrateInbox: %v", err)
		}
	}
	t.Cleanup(func() {
		pool.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if c, err := pgx.Connect(ctx, base); err == nil {
			_, _ = c.Exec(ctx, `DROP SCHEMA `+pgx.Identifier{schema}.Sanitize()+` CASCADE`)
			_ = c.Close(ctx)
		}
	})
	return pool
}

// newTopology declares an exchange and a dead-lettering queue for the test.
func newTopology(t testing.TB) (url, exchange, queue string) {
	t.Helper()
	_, url = infraURLs(t)
	name := testName(t)
	exchange, queue = name+".events", name+".q"
	remove := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = relay.Topology{Exchange: exchange, Queue: queue}.Remove(ctx, url)
	}
	// Names repeat from one run to the next: an interrupted run may have
	// left messages behind.
	remove()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := relay.DeclareTopology(ctx, url, exchange, queue, "#"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(remove)
	return url, exchange, queue
}

// publish sends every id (in order) through the relay's publisher and waits
// for the confirms.
func publish(t testing.TB, url, exchange string, ids []string) {
	t.Helper()
	p, err := relay.NewAMQPPublisher(relay.AMQPConfig{URL: url, Exchange: exchange})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var confs []relay.Confirmation
	for _, id := range ids {
		c, err := p.Publish(ctx, relay.Message{ID: id, Type: "order.placed", Payload: []byte(`{}`)})
		if err != nil {
			t.Fatal(err)
		}
		confs = append(confs, c)
	}
	for _, c := range confs {
		if err := c.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// outcomes counts what the consumer did, by outcome and by id.
type outcomes struct {
	mu   sync.Mutex
	by   map[consumer.Outcome]int
	ids  map[string][]consumer.Outcome
	errs []error
}

func newOutcomes() *outcomes {
	return &outcomes{by: map[consumer.Outcome]int{}, ids: map[string][]consumer.Outcome{}}
}

func (o *outcomes) observe(m consumer.Message, out consumer.Outcome, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.by[out]++
	o.ids[m.ID] = append(o.ids[m.ID], out)
	if err != nil {
		o.errs = append(o.errs, err)
	}
}

func (o *outcomes) count(out consumer.Outcome) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.by[out]
}

// runSource runs src until the test ends.
func runSource(t testing.TB, src *consumer.AMQPSource, c *consumer.Consumer) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx, c) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("source: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("source did not stop")
		}
	})
}

func waitFor(t testing.TB, within time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		ok, err := cond()
		if err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", within, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// lossyDelivery loses its first ack after the commit: either it nacks
// with requeue instead (the broker redelivers at once), or it fails the
// ack so the source drops its channel (the broker redelivers every unacked
// message of that channel).
type lossyDelivery struct {
	consumer.Delivery
	mode string
}

func (d *lossyDelivery) Ack(ctx context.Context) error {
	switch d.mode {
	case "requeue":
		return d.Delivery.Nack(ctx, true)
	case "drop-channel":
		return fmt.Errorf("%w: simulated loss of the channel before the ack", consumer.ErrAckFailed)
	}
	return d.Delivery.Ack(ctx)
}

func TestConsumerAppliesEveryEventOnceDespiteRedelivery(t *testing.T) {
	pool := newInboxDB(t)
	url, exchange, queue := newTopology(t)
	const seed = 31
	t.Logf("SEED=%d", seed)
	rng := seedpkg.Rand(seed, "consumer/deliveries")

	const n = 400
	var ids []string
	lose := map[string]string{}
	for i := range n {
		id := fmt.Sprintf("evt-%04d", i)
		ids = append(ids, id)
		switch r := rng.IntN(10); {
		case r == 0:
			lose[id] = "requeue"
		case r == 1:
			lose[id] = "drop-channel"
		}
	}
	// The relay may publish an event twice (a lost lease, a crash before
	// the mark): publish a seeded tenth again.
	var again []string
	for _, id := range ids {
		if rng.IntN(10) == 0 {
			again = append(again, id)
		}
	}
	publish(t, url, exchange, append(append([]string(nil), ids...), again...))

	name := "billing"
	inbox, err := consumer.NewPGInbox(pool, name, consumer.RecordEffect(name))
	if err != nil {
		t.Fatal(err)
	}
	c, err := consumer.New(consumer.Config{Name: name}, inbox, nil)
	if err != nil {
		t.Fatal(err)
	}
	obs := newOutcomes()
	var lostMu sync.Mutex
	lost := map[string]bool{}
	src := &consumer.AMQPSource{URL: url, Queue: queue, Prefetch: 32, Observe: obs.observe,
		MinBackoff: 10 * time.Millisecond, MaxBackoff: 100 * time.Millisecond,
		Wrap: func(d consumer.Delivery) consumer.Delivery {
			id := d.Message().ID
			lostMu.Lock()
			defer lostMu.Unlock()
			if mode, ok := lose[id]; ok && !lost[id] {
				lost[id] = true
				return &lossyDelivery{Delivery: d, mode: mode}
			}
			return d
		}}
	runSource(t, src, c)

	waitFor(t, 60*time.Second, "every event applied and the queue empty", func() (bool, error) {
		counts, err := consumer.EffectCounts(context.Background(), pool, name)
		if err != nil || len(counts) < n {
			return false, err
		}
		var left int
		err = relay.WithChannel(context.Background(), url, func(ch *amqp.Channel) error {
			q, err := ch.QueueDeclarePassive(queue, true, false, false, false, amqp.Table{"x-queue-type": "classic", "x-dead-letter-exchange": queue + ".dlx"})
			left = q.Messages
			return err
		})
		// Unacked messages are not "ready"; compare outcomes too.
		return err == nil && left == 0 && obs.count(consumer.Applied)+obs.count(consumer.Duplicate) >= n+len(again)+len(lose), err
	})
	counts, err := consumer.EffectCounts(context.Background(), pool, name)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if counts[id] != 1 {
			t.Errorf("event %s has %d effects, want exactly 1", id, counts[id])
		}
	}
	if len(counts) != n {
		t.Errorf("%d events have effects, want %d", len(counts), n)
	}
	lostMu.Lock()
	nLost := len(lost)
	lostMu.Unlock()
	if nLost != len(lose) {
		t.Fatalf("%d acks lost, planned %d: the redelivery path was not exercised", nLost, len(lose))
	}
	// Every lost ack and every second publish came back as a duplicate; a
	// dropped channel may also redeliver other in-flight messages.
	if dup := obs.count(consumer.Duplicate); dup < len(lose)+len(again) {
		t.Errorf("%d duplicates absorbed, want at least %d", dup, len(lose)+len(again))
	}
	if obs.count(consumer.Applied) != n {
		t.Errorf("%d applied, want %d", obs.count(consumer.Applied), n)
	}
}

// failingInbox fails every apply of one id.
type failingInbox struct {
	consumer.Inbox
	bad string
}

func (f failingInbox) Apply(ctx context.Context, m consumer.Message) (bool, error) {
	if m.ID == f.bad {
		return false, errors.New("effect failed")
	}
	return f.Inbox.Apply(ctx, m)
}

func TestConsumerDeadLettersAfterMaxDeliveries(t *testing.T) {
	pool := newInboxDB(t)
	url, exchange, queue := newTopology(t)
	publish(t, url, exchange, []string{"ok-1", "poison", "ok-2"})
	name := "ledger"
	inbox, err := consumer.NewPGInbox(pool, name, consumer.RecordEffect(name))
	if err != nil {
		t.Fatal(err)
	}
	c, err := consumer.New(consumer.Config{Name: name, MaxDeliveries: 3}, failingInbox{inbox, "poison"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	obs := newOutcomes()
	runSource(t, &consumer.AMQPSource{URL: url, Queue: queue, Observe: obs.observe}, c)
	dead := queue + ".dead"
	waitFor(t, 30*time.Second, "the poison message dead-lettered", func() (bool, error) {
		var q amqp.Queue
		err := relay.WithChannel(context.Background(), url, func(ch *amqp.Channel) error {
			var err error
			q, err = ch.QueueDeclarePassive(dead, true, false, false, false, amqp.Table{"x-queue-type": "classic"})
			return err
		})
		return err == nil && q.Messages == 1 && obs.count(consumer.Applied) == 2, err
	})
	obs.mu.Lock()
	got := obs.ids["poison"]
	obs.mu.Unlock()
	want := []consumer.Outcome{consumer.Requeued, consumer.Requeued, consumer.DeadLettered}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("poison outcomes = %v, want %v", got, want)
	}
	counts, err := consumer.EffectCounts(context.Background(), pool, name)
	if err != nil {
		t.Fatal(err)
	}
	if counts["poison"] != 0 || counts["ok-1"] != 1 || counts["ok-2"] != 1 {
		t.Errorf("effects = %v", counts)
	}
	var inInbox int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM inbox WHERE message_id = 'poison'`).Scan(&inInbox); err != nil {
		t.Fatal(err)
	}
	if inInbox != 0 {
		t.Error("a failed apply left its inbox row")
	}
}

func TestPGInboxApplyIsAtomic(t *testing.T) {
	pool := newPGInboxDB(t)
	ctx := context.Background()
	var calls int
	fail := true
	effect := func(ctx context.Context, tx pgx.Tx, m consumer.Message) error {
		calls++
		if err := consumer.RecordEffect("c")(ctx, tx, m); err != nil {
			return err
		}
		if fail {
			return errors.New("effect failed after writing")
		}
		return nil
	}
	in, err := consumer.NewPGInbox(pool, "c", effect)
	if err != nil {
		t.Fatal(err)
	}
	m := consumer.Message{ID: "m1", Type: "t"}
	if _, err := in.Apply(ctx, m); err == nil {
		t.Fatal("a failing effect applied")
	}
	counts, _ := consumer.EffectCounts(ctx, pool, "c")
	if counts["m1"] != 0 {
		t.Fatal("a failed effect committed its write")
	}
	fail = false
	if dup, err := in.Apply(ctx, m); err != nil || dup {
		t.Fatalf("retry after failure = %v, %v; want applied", dup, err)
	}
	if dup, err := in.Apply(ctx, m); err != nil || !dup {
		t.Fatalf("second apply = %v, %v; want duplicate", dup, err)
	}
	if calls != 2 {
		t.Errorf("effect ran %d times, want 2 (the failure and the success)", calls)
	}
	// Another consumer name applies the same message once more.
	other, _ := consumer.NewPGInbox(pool, "other", consumer.RecordEffect("other"))
	if dup, err := other.Apply(ctx, m); err != nil || dup {
		t.Fatalf("other consumer = %v, %v", dup, err)
	}
	counts, _ = consumer.EffectCounts(ctx, pool, "c")
	if counts["m1"] != 1 {
		t.Errorf("effects of c = %v", counts)
	}
}

// TestSourceFailsOverToTheNextNode: of the source's two nodes the first
// refuses connections; it consumes from the second.
func TestSourceFailsOverToTheNextNode(t *testing.T) {
	pool := newInboxDB(t)
	url, exchange, queue := newTopology(t)
	publish(t, url, exchange, []string{"f-1", "f-2"})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := "amqp://outbox:outbox@" + ln.Addr().String() + "/"
	_ = ln.Close()
	name := "failover"
	inbox, err := consumer.NewPGInbox(pool, name, consumer.RecordEffect(name))
	if err != nil {
		t.Fatal(err)
	}
	c, err := consumer.New(consumer.Config{Name: name}, inbox, nil)
	if err != nil {
		t.Fatal(err)
	}
	obs := newOutcomes()
	runSource(t, &consumer.AMQPSource{URL: refused + "," + url, Queue: queue, Observe: obs.observe}, c)
	waitFor(t, 30*time.Second, "both messages applied through the second node", func() (bool, error) {
		return obs.count(consumer.Applied) == 2, nil
	})
}

// TestProjectNewestKeepsTheNewestVersion applies versions of two entities
// out of order, with a redelivery, through an inbox whose effect is
// ProjectNewest: each entity ends at its newest version, whatever came
// last; a message that updates no entity leaves the projection alone.
func TestProjectNewestKeepsTheNewestVersion(t *testing.T) {
	pool := newPGInboxDB(t)
	ctx := context.Background()
	version := func(m consumer.Message) (string, int, bool) {
		entity, v, ok := strings.Cut(string(m.Payload), "@")
		if !ok {
			return "", 0, false
		}
		n, err := strconv.Atoi(v)
		return entity, n, err == nil
	}
	in, err := consumer.NewPGInbox(pool, "c", consumer.ProjectNewest("c", version))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []struct{ id, body string }{
		{"a1", "a@1"}, {"a3", "a@3"}, {"b2", "b@2"}, {"a2", "a@2"}, {"b1", "b@1"}, {"a1-again", "a@1"}, {"x", "no entity"},
	} {
		if _, err := in.Apply(ctx, consumer.Message{ID: m.id, Type: "t", Payload: []byte(m.body)}); err != nil {
			t.Fatalf("applying %s: %v", m.id, err)
		}
	}
	got, err := consumer.Projection(ctx, pool, "c")
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]int{"a": 3, "b": 2}; !maps.Equal(got, want) {
		t.Errorf("projection = %v, want %v", got, want)
	}
}
