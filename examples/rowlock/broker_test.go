package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// amqpURLEnv names a RabbitMQ broker the end-to-end test may declare an
// exchange and a queue on. Unset, with dbURLEnv, it is skipped: it starts
// nothing itself.
const amqpURLEnv = "ROWLOCK_TEST_AMQP_URL"

// TestRelayOnPostgreSQLAndRabbitMQ runs the process (run) against a real
// database and broker, without the harness: the deliveries carry what
// docs/contract.md §2.2 says, poison and unroutable rows end parked, and
// SIGTERM stops it with exit 0. OUTBOX_AMQP_URL lists a node that is down
// first: the relay goes on to the next.
func TestRelayOnPostgreSQLAndRabbitMQ(t *testing.T) {
	url := os.Getenv(amqpURLEnv)
	if url == "" {
		t.Skipf("%s is not set: no RabbitMQ to publish to", amqpURLEnv)
	}
	db := newOutboxDB(t)
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	exchange := db.schema
	if err := ch.ExchangeDeclare(exchange, "topic", true, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	q, err := ch.QueueDeclare("", false, true, true, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind(q.Name, "order.#", exchange, false, nil); err != nil {
		t.Fatal(err)
	}
	deliveries, err := ch.Consume(q.Name, "", true, true, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}

	body := `{"order_id": "o1", "amount": 5}`
	var healthy []string
	for i := range 5 {
		healthy = append(healthy, messageID(db.stageIn(db.conn, "order.placed", body, time.Now().Add(time.Duration(i)*time.Millisecond))))
	}
	unknown := db.stageIn(db.conn, "order.teleported", body, time.Now())
	undecodable := db.stageIn(db.conn, "order.paid", `{"order_id": "o2", "amount": "lots"}`, time.Now())
	unroutable := db.stageIn(db.conn, "audit.oversized", body, time.Now())

	e := harnessEnv()
	e["OUTBOX_DATABASE_URL"] = db.url
	e["OUTBOX_TABLE"] = db.schema + ".outbox"
	e["OUTBOX_EXCHANGE"] = exchange
	e["OUTBOX_AMQP_URL"] = "amqp://guest:guest@127.0.0.1:1/," + url
	sigs := make(chan os.Signal, 1)
	exited := make(chan int, 1)
	go func() { exited <- run(e.get, testWriter{t}, sigs) }()

	var got []string
	timeout := time.After(20 * time.Second)
	for len(got) < len(healthy) {
		select {
		case d := <-deliveries:
			got = append(got, d.MessageId)
			var v map[string]any
			switch {
			case d.Exchange != exchange || d.RoutingKey != "order.placed" || d.Type != "order.placed":
				t.Errorf("delivery %s: exchange %q, routing key %q, type %q", d.MessageId, d.Exchange, d.RoutingKey, d.Type)
			case d.DeliveryMode != amqp.Persistent || d.ContentType != "application/json":
				t.Errorf("delivery %s: delivery mode %d, content type %q", d.MessageId, d.DeliveryMode, d.ContentType)
			case d.CorrelationId != "7d2b3c9e-1111-4222-8333-444455556666":
				t.Errorf("delivery %s: correlation id %q", d.MessageId, d.CorrelationId)
			case json.Unmarshal(d.Body, &v) != nil || v["order_id"] != "o1":
				t.Errorf("delivery %s: body %s", d.MessageId, d.Body)
			}
		case code := <-exited:
			t.Fatalf("the relay exited with %d", code)
		case <-timeout:
			t.Fatalf("delivered %v, want %v", got, healthy)
		}
	}
	if !slices.Equal(got, healthy) {
		t.Errorf("delivered %v, want %v in order", got, healthy)
	}

	// The unroutable row is parked at its third failure, after backoffs of
	// 100ms and 200ms.
	want := map[int64]state{unknown: {dead: true}, undecodable: {dead: true}, unroutable: {dead: true, attempts: 3, retryIn: 400 * time.Millisecond}}
	deadline := time.Now().Add(10 * time.Second)
	for seq, w := range want {
		for {
			s, _ := db.row(seq)
			if s == w || time.Now().After(deadline) {
				if s != w {
					t.Errorf("seq %d: %+v, want %+v", seq, s, w)
				}
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	for _, id := range healthy {
		var seq int64
		fmt.Sscan(id, &seq)
		if s, _ := db.row(seq); s != (state{published: true}) {
			t.Errorf("seq %d: %+v, want published", seq, s)
		}
	}
	select {
	case d := <-deliveries:
		t.Errorf("an extra delivery: %s %s", d.MessageId, d.RoutingKey)
	case <-time.After(300 * time.Millisecond):
	}

	sigs <- syscall.SIGTERM
	select {
	case code := <-exited:
		if code != exitOK {
			t.Errorf("exit code %d after SIGTERM, want 0", code)
		}
	case <-time.After(stopBound):
		t.Fatal("no exit within the stop bound after SIGTERM")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var sessions int
	if err := db.conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = 'rowlock relay-a'`).Scan(&sessions); err != nil {
		t.Fatal(err)
	}
	if sessions != 0 {
		t.Errorf("%d session(s) of the relay left after its exit", sessions)
	}
}
