package wmrelay_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wamqp "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"

	"github.com/outboxlab/outboxlab/contract"
	"github.com/outboxlab/outboxlab/outbox"
	"github.com/outboxlab/outboxlab/target/watermill/wmoutbox"
	"github.com/outboxlab/outboxlab/target/watermill/wmrelay"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func contractEnv() map[string]string {
	return map[string]string{
		contract.EnvDatabaseURL:  "postgres://outbox:secret@db:5432/outbox",
		contract.EnvAMQPURL:      " amqp://outbox:secret@rabbit-1:5672/ , amqp://outbox:secret@rabbit-2:5672/",
		contract.EnvTable:        "sc_run_1.orders_outbox",
		contract.EnvExchange:     "outboxlab.sc_run_1.orders",
		contract.EnvRelayID:      "relay-a",
		contract.EnvPollInterval: "100ms",
	}
}

func TestFromEnv(t *testing.T) {
	c, err := wmrelay.FromEnv(env(contractEnv()))
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case c.AMQPURL != "amqp://outbox:secret@rabbit-1:5672/":
		t.Errorf("AMQP URL %q, want the first of the list, trimmed", c.AMQPURL)
	case c.Table.String() != "sc_run_1.orders_outbox" || c.Exchange != "outboxlab.sc_run_1.orders" || c.RelayID != "relay-a":
		t.Errorf("config %+v", c)
	case c.PollInterval != 100*time.Millisecond:
		t.Errorf("poll interval %s, want 100ms", c.PollInterval)
	}
	m := contractEnv()
	m[contract.EnvFailpoints] = "after-confirm-before-mark=2*off->kill"
	if c, err := wmrelay.FromEnv(env(m)); err != nil || c.Failpoints == nil {
		t.Errorf("OUTBOX_FAILPOINTS: %v, %v; want the failpoint programmed", c.Failpoints, err)
	}
	m[contract.EnvFailpoints] = "after-claim=sleep(1s)"
	if _, err := wmrelay.FromEnv(env(m)); err == nil || !strings.Contains(err.Error(), contract.EnvFailpoints) {
		t.Errorf("a failpoint the replica does not pass: %v, want an error naming OUTBOX_FAILPOINTS", err)
	}
	m = contractEnv()
	delete(m, contract.EnvPollInterval)
	if c, err := wmrelay.FromEnv(env(m)); err != nil || c.PollInterval != 0 {
		t.Errorf("without OUTBOX_POLL_INTERVAL: %s, %v; want 0 (watermill's default)", c.PollInterval, err)
	}
}

// TestFromEnvNamesEveryProblem feeds bad settings and wants one error
// that names each variable, and no credential.
func TestFromEnvNamesEveryProblem(t *testing.T) {
	_, err := wmrelay.FromEnv(env(map[string]string{
		contract.EnvAMQPURL:      " , ",
		contract.EnvTable:        "a.b.c",
		contract.EnvExchange:     "no spaces",
		contract.EnvPollInterval: "-1s",
	}))
	if err == nil {
		t.Fatal("accepted")
	}
	for _, v := range []string{contract.EnvDatabaseURL, contract.EnvAMQPURL, contract.EnvTable, contract.EnvExchange, contract.EnvPollInterval} {
		if !strings.Contains(err.Error(), v) {
			t.Errorf("error does not name %s: %v", v, err)
		}
	}
	m := contractEnv()
	m[contract.EnvTable] = "orders; DROP TABLE x"
	if _, err := wmrelay.FromEnv(env(m)); err == nil || strings.Contains(err.Error(), "secret") {
		t.Errorf("a table name that is not an identifier: %v", err)
	}
}

// TestAMQPConfig checks the publisher's settings the contract needs:
// the durable topic exchange, routing key = the topic (the envelope's
// destination topic), confirms and mandatory, and watermill's default
// marshaler with the UUID in its header.
func TestAMQPConfig(t *testing.T) {
	c := wmrelay.AMQPConfig("amqp://x", "ex")
	if err := c.ValidatePublisher(); err != nil {
		t.Fatal(err)
	}
	switch {
	case c.Exchange.GenerateName("order.placed") != "ex" || c.Exchange.Type != "topic" || !c.Exchange.Durable:
		t.Errorf("exchange %+v, want the durable topic exchange ex", c.Exchange)
	case c.Publish.GenerateRoutingKey("order.placed") != "order.placed":
		t.Error("routing key is not the topic")
	case !c.Publish.ConfirmDelivery || !c.Publish.Mandatory:
		t.Errorf("publish %+v, want confirms and mandatory", c.Publish)
	}
	if _, ok := c.Marshaler.(wamqp.DefaultMarshaler); !ok {
		t.Errorf("marshaler %T, want watermill's default", c.Marshaler)
	}
	s := wmrelay.SubscriberConfig(wmoutbox.For(outbox.MustParseTable("orders_outbox")), 0)
	if s.ConsumerGroup != wmoutbox.ConsumerGroup || s.AckDeadline != nil || s.ResendInterval != 0 || s.InitializeSchema {
		t.Errorf("subscriber %+v, want the shared consumer group and watermill's defaults", s)
	}
}

// TestRunStopsWhileDialing runs a replica whose broker refuses
// connections: it keeps dialing, and returns at once, with no error,
// when its context ends.
func TestRunStopsWhileDialing(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there any more
	c, err := wmrelay.FromEnv(env(map[string]string{
		contract.EnvDatabaseURL: "postgres://outbox@127.0.0.1:1/outbox", contract.EnvAMQPURL: "amqp://guest:guest@" + addr + "/",
		contract.EnvTable: "orders_outbox", contract.EnvExchange: "orders",
	}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- wmrelay.Run(ctx, c, watermill.NopLogger{}) }()
	time.Sleep(300 * time.Millisecond)
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("Run did not return within 2 s of its context's end")
	}
}
