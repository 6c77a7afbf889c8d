package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxlab/outboxlab/contract"
	"github.com/outboxlab/outboxlab/history"
	"github.com/outboxlab/outboxlab/outbox"
	"github.com/outboxlab/outboxlab/relay"
)

// infraURLs returns the database and broker of the integration tests, or
// skips.
func infraURLs(t *testing.T) (db, broker string) {
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

// processEnv is one test's schema, table, exchange and queue, and a
// consumer counting deliveries by message id.
type processEnv struct {
	dbURL, amqpURL  string
	pool            *pgxpool.Pool
	table           outbox.Table
	exchange, queue string
	mu              sync.Mutex
	byID            map[string]int
	deliveries      int
	seq             uint64
}

func newProcessEnv(t *testing.T, name string) *processEnv {
	t.Helper()
	dbURL, amqpURL := infraURLs(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	schema := "cmd_" + name
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`DROP SCHEMA IF EXISTS ` + schema + ` CASCADE`,
		`CREATE SCHEMA ` + schema,
		`DELETE FROM public.outbox_migrations WHERE table_name = '` + schema + `.outbox'`,
	} {
		if _, err := pool.Exec(ctx, q); err != nil && !strings.Contains(err.Error(), "does not exist") {
			t.Fatalf("%s: %v", q, err)
		}
	}
	e := &processEnv{dbURL: dbURL, amqpURL: amqpURL, pool: pool, table: outbox.MustParseTable(schema + ".outbox"),
		exchange: "cmd." + name + ".events", queue: "cmd." + name + ".q", byID: map[string]int{}}
	if err := relay.DeclareTopology(ctx, amqpURL, e.exchange, e.queue, "#"); err != nil {
		t.Fatal(err)
	}
	conn, err := amqp.Dial(amqpURL)
	if err != nil {
		t.Fatal(err)
	}
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueuePurge(e.queue, false); err != nil {
		t.Fatal(err)
	}
	ds, err := ch.Consume(e.queue, "", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for d := range ds {
			e.mu.Lock()
			e.byID[d.MessageId]++
			e.deliveries++
			e.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = conn.Close()
		<-done
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = pool.Exec(ctx, `DROP SCHEMA IF EXISTS `+schema+` CASCADE`)
		_, _ = pool.Exec(ctx, `DELETE FROM public.outbox_migrations WHERE table_name = $1`, e.table.String())
		pool.Close()
		_ = relay.WithChannel(ctx, amqpURL, func(ch *amqp.Channel) error {
			for _, q := range []string{e.queue, e.queue + ".dead"} {
				_, _ = ch.QueueDelete(q, false, false, false)
			}
			_ = ch.ExchangeDelete(e.queue+".dlx", false, false)
			return ch.ExchangeDelete(e.exchange, false, false)
		})
	})
	return e
}

// env returns the relay's environment for this test with short durations;
// the publish timeout leaves room for a loaded machine, since a confirm
// that misses it is published again.
func (e *processEnv) env(relayID string) map[string]string {
	return map[string]string{
		contract.EnvDatabaseURL:    e.dbURL,
		contract.EnvAMQPURL:        e.amqpURL,
		contract.EnvTable:          e.table.String(),
		contract.EnvExchange:       e.exchange,
		contract.EnvRelayID:        relayID,
		contract.EnvMigrate:        "true",
		contract.EnvPollInterval:   "50ms",
		contract.EnvLease:          "5s",
		contract.EnvPublishTimeout: "2s",
		contract.EnvBackoffBase:    "50ms",
		contract.EnvBackoffMax:     "200ms",
		contract.EnvMaxAttempts:    "3",
		contract.EnvSweepInterval:  "100ms",
		contract.EnvLogLevel:       "debug",
	}
}

func (e *processEnv) waitTable(t *testing.T) {
	t.Helper()
	waitUntil(t, 30*time.Second, "the relay to migrate its table", func() bool {
		var ok bool
		_ = e.pool.QueryRow(context.Background(), `SELECT to_regclass($1) IS NOT NULL`, e.table.String()).Scan(&ok)
		return ok
	})
}

// stage commits n events of typ and returns their ids.
func (e *processEnv) stage(t *testing.T, n int, typ string, payload string) []string {
	t.Helper()
	ctx := context.Background()
	tx, err := e.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	var ids []string
	for range n {
		e.seq++
		// Ids from a counter: deterministic and unique per test.
		id := uuid.NewSHA1(uuid.NameSpaceOID, []byte(fmt.Sprintf("%s/%d", e.table, e.seq)))
		ev := outbox.Event{ID: id, Type: typ, Payload: json.RawMessage(payload)}
		if err := outbox.Stage(ctx, tx, e.table, ev, outbox.StageOptions{Notify: true}); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id.String())
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	return ids
}

func (e *processEnv) count(t *testing.T, where string, args ...any) int {
	t.Helper()
	var n int
	if err := e.pool.QueryRow(context.Background(), `SELECT count(*) FROM `+e.table.Ident()+` WHERE `+where, args...).Scan(&n); err != nil {
		t.Fatalf("count: %v", err)
	}
	return n
}

func (e *processEnv) delivered() (deliveries int, byID map[string]int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make(map[string]int, len(e.byID))
	for k, v := range e.byID {
		out[k] = v
	}
	return e.deliveries, out
}

func waitUntil(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", within, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestProcessPublishesParksServesMetricsAndStops(t *testing.T) {
	e := newProcessEnv(t, "happy")
	env := e.env("relay-p1")
	metrics := freePort(t)
	env[contract.EnvMetricsAddr] = metrics
	env[contract.EnvTypes] = "order.placed:order_id=string;amount=integer"
	env[contract.EnvClockOffset] = "-5m"
	p := start(t, env)
	e.waitTable(t)
	good := e.stage(t, 50, "order.placed", `{"order_id":"o1","amount":5}`)
	unknown := e.stage(t, 2, "order.teleported", `{}`)
	bad := e.stage(t, 2, "order.placed", `{"order_id":"o1","amount":"lots"}`)
	waitUntil(t, 60*time.Second, "good rows delivered and marked, poison parked", func() bool {
		_, byID := e.delivered()
		return len(byID) == len(good) && e.count(t, `processed_at IS NOT NULL`) == len(good) &&
			e.count(t, `faulted_at IS NOT NULL`) == len(unknown)+len(bad)
	})
	if _, byID := e.delivered(); len(byID) != len(good) {
		t.Errorf("%d distinct events delivered, want the %d good ones", len(byID), len(good))
	}
	if n := e.count(t, `id = ANY($1::uuid[]) AND attempts = 0`, unknown); n != len(unknown) {
		t.Errorf("unknown types consumed attempts")
	}
	if n := e.count(t, `id = ANY($1::uuid[]) AND attempts = 3`, bad); n != len(bad) {
		t.Errorf("undecodable rows not parked after 3 attempts")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	body, err := httpGet(ctx, "http://"+metrics+"/metrics")
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf(`outbox_relay_published_total{table=%q} %d`, e.table.String(), len(good))
	if !strings.Contains(body, want) {
		t.Errorf("metrics lack %q", want)
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, 30*time.Second); code != exitOK {
		t.Fatalf("exit code %d after SIGTERM, want 0", code)
	}
	lines := p.logLines(t)
	if len(lines) == 0 {
		t.Fatal("no JSON log lines")
	}
	last := lines[len(lines)-1]
	if last["msg"] != "relay stopped" || last["published"] != float64(len(good)) || last["parked"] != float64(len(unknown)+len(bad)) {
		t.Errorf("last log line = %v, want the totals", last)
	}
	// Log times follow the skewed process clock, five minutes behind.
	ts, err := time.Parse(time.RFC3339Nano, last["time"].(string))
	if err != nil {
		t.Fatal(err)
	}
	if behind := time.Since(ts); behind < 4*time.Minute || behind > 6*time.Minute {
		t.Errorf("log time %s is %s behind, want about 5m", ts, behind)
	}
	for _, u := range []string{e.dbURL, e.amqpURL} {
		if pu, err := url.Parse(u); err == nil && pu.User != nil {
			if pw, ok := pu.User.Password(); ok && strings.Contains(p.output(), ":"+pw+"@") {
				t.Errorf("logs leak the password of %s", relay.RedactURL(u))
			}
		}
	}
}

// TestProcessKilledBetweenConfirmAndMark kills the relay with a failpoint
// after the broker confirmed and before the mark: the rows stay pending
// and a restarted relay publishes them again, never losing one. Both
// lifetimes write records to one OUTBOX_RECORDS file: the killed one's
// end at the failpoint, with what it flushed before (its claim with the
// lease on the database clock, its confirmed publishes), the restarted
// one's with its marks and a clean stop.
func TestProcessKilledBetweenConfirmAndMark(t *testing.T) {
	e := newProcessEnv(t, "crash")
	env := e.env("relay-crash")
	env[contract.EnvFailpoints] = "after-confirm-before-mark=kill"
	records := filepath.Join(t.TempDir(), "records.jsonl")
	env[recordsEnv] = records
	p := start(t, env)
	e.waitTable(t)
	ids := e.stage(t, 10, "order.placed", `{}`)
	if code := p.wait(t, 30*time.Second); code != -int(syscall.SIGKILL) {
		t.Fatalf("exit %d, want death by SIGKILL at the failpoint", code)
	}
	waitUntil(t, 10*time.Second, "the killed relay's publishes", func() bool {
		n, _ := e.delivered()
		return n == len(ids)
	})
	if n := e.count(t, `processed_at IS NULL AND attempts = 0`); n != len(ids) {
		t.Fatalf("%d rows pending after the crash, want %d", n, len(ids))
	}
	// The restarted relay waits out the dead one's lease (5 s), then
	// publishes again and marks.
	env2 := e.env("relay-restarted")
	env2[recordsEnv] = records
	p2 := start(t, env2)
	waitUntil(t, 30*time.Second, "the restarted relay to mark every row", func() bool {
		return e.count(t, `processed_at IS NOT NULL AND locked_by = 'relay-restarted'`) == len(ids)
	})
	_, byID := e.delivered()
	for _, id := range ids {
		if byID[id] != 2 {
			t.Errorf("event %s delivered %d times, want 2 (once per relay)", id, byID[id])
		}
	}
	if err := p2.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p2.wait(t, 30*time.Second); code != exitOK {
		t.Fatalf("exit code %d, want 0", code)
	}
	checkCrashRecords(t, records, ids)
}

// checkCrashRecords reads the records of TestProcessKilledBetweenConfirmAndMark.
func checkCrashRecords(t *testing.T, path string, ids []string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	lives, err := history.ReadRecords(f)
	if err != nil {
		t.Fatal(err)
	}
	if len(lives) != 2 {
		t.Fatalf("%d lifetimes in the records, want 2", len(lives))
	}
	killed, restarted := lives[0], lives[1]
	if killed.Stopped() {
		t.Error("the killed lifetime recorded a clean stop")
	}
	var last history.Op
	claimed, confirmed := map[string]bool{}, 0
	for _, op := range killed.Ops {
		if op.Process != "relay-crash" {
			t.Errorf("record of process %q, want relay-crash", op.Process)
		}
		switch {
		case op.F == history.Failpoint:
			last = op
		case op.F == history.Claim && op.Type == history.OK:
			if op.DBTime.IsZero() || op.Until.Sub(op.DBTime) != 5*time.Second {
				t.Errorf("claim %v: want locked_at and a 5s lease on the database clock", op)
			}
			for _, id := range op.Events {
				claimed[id] = true
			}
		case op.F == history.Publish && op.Type == history.OK && op.Confirm == history.ConfirmAck:
			confirmed++
		case op.F == history.Mark:
			t.Errorf("the killed lifetime recorded a mark: %v", op)
		}
	}
	if last.Failpoint != relay.FailAfterConfirmBeforeMark {
		t.Errorf("last failpoint recorded %q, want %s", last.Failpoint, relay.FailAfterConfirmBeforeMark)
	}
	if len(claimed) != len(ids) || confirmed != len(ids) {
		t.Errorf("killed lifetime: %d rows claimed, %d publishes confirmed; want %d of each", len(claimed), confirmed, len(ids))
	}
	if !restarted.Stopped() {
		t.Error("the restarted lifetime's records do not end with a stop")
	}
	marked := 0
	for _, op := range restarted.Ops {
		if op.F == history.Mark && op.Type == history.OK {
			if op.DBTime.IsZero() {
				t.Errorf("mark %v without its processed_at", op)
			}
			marked += len(op.Events)
		}
	}
	if marked != len(ids) {
		t.Errorf("restarted lifetime marked %d rows, want %d", marked, len(ids))
	}
}

// TestProcessWithoutItsTableSaysHowToCreateIt is a container test
// (PostgreSQL and RabbitMQ; skipped under -short): a relay started without
// OUTBOX_MIGRATE on a table nobody created exits 2 at once, saying how to
// create it, instead of failing every tick.
func TestProcessWithoutItsTableSaysHowToCreateIt(t *testing.T) {
	e := newProcessEnv(t, "notable")
	env := e.env("relay-notable")
	delete(env, contract.EnvMigrate)
	p := start(t, env)
	if code := p.wait(t, 30*time.Second); code != exitConfig {
		t.Fatalf("exit code %d, want %d\n%s", code, exitConfig, p.output())
	}
	for _, want := range []string{contract.EnvTable, e.table.String(), "OUTBOX_MIGRATE=true", "migrations"} {
		if !strings.Contains(p.output(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, p.output())
		}
	}
}
