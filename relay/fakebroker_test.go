package relay_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxlab/outboxlab/relay"
	"github.com/outboxlab/outboxlab/relay/amqptest"
)

// The tests in this file run the AMQP publisher and the topology helpers
// against relay/amqptest, a broker in the test's process, so that they run
// under -short; the same behaviours are tested against RabbitMQ in
// amqp_test.go.

func fakePublish(t *testing.T, p *relay.AMQPPublisher, id, typ string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := p.Publish(ctx, relay.Message{ID: id, Type: typ, CorrelationID: "corr-" + id, Payload: []byte(`{"n":1}`)})
	if err != nil {
		return err
	}
	return c.Wait(ctx)
}

// TestFakeBrokerPublishConfirmed: a routed publish is confirmed, with the
// contract's properties; an unroutable mandatory one is returned; a
// nacked one is refused; a transient non-mandatory one is neither
// persistent nor returned.
func TestFakeBrokerPublishConfirmed(t *testing.T) {
	b := amqptest.Start(t)
	if err := (relay.Topology{Exchange: "events", Queue: "q", BindingKey: "order.placed"}).Declare(context.Background(), b.URL()); err != nil {
		t.Fatalf("declaring the topology: %v", err)
	}
	if got := b.Bindings("q"); len(got) != 1 || got[0] != "order.placed" {
		t.Fatalf("queue q bound with %v, want [order.placed]", got)
	}
	p, err := relay.NewAMQPPublisher(relay.AMQPConfig{URL: b.URL(), Exchange: "events"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := fakePublish(t, p, "e1", "order.placed"); err != nil {
		t.Fatalf("routed publish: %v", err)
	}
	got := b.Published()
	if len(got) != 1 {
		t.Fatalf("broker took %d messages, want 1", len(got))
	}
	m := got[0]
	if m.Exchange != "events" || m.RoutingKey != "order.placed" || m.MessageID != "e1" || m.Type != "order.placed" ||
		m.CorrelationID != "corr-e1" || m.ContentType != "application/json" || m.DeliveryMode != 2 || !m.Mandatory || string(m.Body) != `{"n":1}` {
		t.Errorf("published %+v, want the contract's properties, persistent and mandatory", m)
	}
	if n := b.Queued("q"); n != 1 {
		t.Errorf("queue q holds %d messages, want 1", n)
	}
	if err := fakePublish(t, p, "e2", "nobody.listens"); !errors.Is(err, relay.ErrReturned) {
		t.Errorf("unroutable mandatory publish: %v, want ErrReturned", err)
	}
	// Returned once is not returned for ever: the same id routed later
	// is confirmed.
	if err := fakePublish(t, p, "e3", "order.placed"); err != nil {
		t.Errorf("routed publish after a return: %v", err)
	}
	b.NackPublishes(true)
	if err := fakePublish(t, p, "e4", "order.placed"); !errors.Is(err, relay.ErrNacked) {
		t.Errorf("nacked publish: %v, want ErrNacked", err)
	}
	b.NackPublishes(false)
	if err := fakePublish(t, p, "e5", "order.placed"); err != nil {
		t.Errorf("publish after the nacks stopped: %v", err)
	}
	if n := p.Dials(); n != 1 {
		t.Errorf("%d dials for one healthy connection, want 1", n)
	}

	transient := relay.PublishOptions{}
	tp, err := relay.NewAMQPPublisher(relay.AMQPConfig{URL: b.URL(), Exchange: "events", Options: &transient})
	if err != nil {
		t.Fatal(err)
	}
	defer tp.Close()
	if err := fakePublish(t, tp, "t1", "nobody.listens"); err != nil {
		t.Errorf("unroutable non-mandatory publish: %v, want confirmed", err)
	}
	last := b.Published()[len(b.Published())-1]
	if last.DeliveryMode == 2 || last.Mandatory {
		t.Errorf("transient publish went out as %+v", last)
	}
}

// TestFakeBrokerRedial: a connection the broker dropped is dialled again
// on the next publish, which then succeeds; a publish after Close fails.
func TestFakeBrokerRedial(t *testing.T) {
	b := amqptest.Start(t)
	if err := (relay.Topology{Exchange: "events", Queue: "q", BindingKey: "#"}).Declare(context.Background(), b.URL()); err != nil {
		t.Fatal(err)
	}
	p, err := relay.NewAMQPPublisher(relay.AMQPConfig{URL: b.URL(), Exchange: "events", DeclareExchange: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := fakePublish(t, p, "e1", "t"); err != nil {
		t.Fatal(err)
	}
	b.DropConnections()
	deadline := time.Now().Add(5 * time.Second)
	var last error
	for i := 2; time.Now().Before(deadline); i++ {
		if last = fakePublish(t, p, fmt.Sprintf("e%d", i), "t"); last == nil {
			break
		}
		if !errors.Is(last, relay.ErrBrokerUnavailable) {
			t.Fatalf("publish on a dropped connection: %v, want ErrBrokerUnavailable", last)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if last != nil {
		t.Fatalf("no publish succeeded after the connection dropped: %v", last)
	}
	if n := p.Dials(); n != 2 {
		t.Errorf("%d dials, want 2 (one again after the drop)", n)
	}
	if err := p.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
	if err := fakePublish(t, p, "late", "t"); err == nil {
		t.Error("publish after Close succeeded")
	}
}

// TestFakeBrokerTopology: Declare binds the queue and its dead letters,
// Remove deletes them, WithChannel hands over a working channel and
// passes fn's error on; a declare without an exchange is refused.
func TestFakeBrokerTopology(t *testing.T) {
	b := amqptest.Start(t)
	ctx := context.Background()
	top := relay.Topology{Exchange: "events", Queue: "q", BindingKey: "#"}
	if err := top.Declare(ctx, b.URL()); err != nil {
		t.Fatalf("declare: %v", err)
	}
	if got := b.Bindings("q"); len(got) != 1 || got[0] != "#" {
		t.Errorf("q bound with %v, want [#]", got)
	}
	if got := b.Bindings(top.DeadLetterQueue()); len(got) != 1 {
		t.Errorf("dead-letter queue bound with %v, want one binding", got)
	}
	if err := (relay.Topology{Queue: "q"}).Declare(ctx, b.URL()); err == nil {
		t.Error("a topology without an exchange was declared")
	}
	boom := errors.New("boom")
	if err := relay.WithChannel(ctx, b.URL(), func(*amqp.Channel) error { return boom }); !errors.Is(err, boom) {
		t.Errorf("WithChannel passed on %v, want fn's error", err)
	}
	if err := relay.WithChannel(ctx, b.URL(), func(*amqp.Channel) error { return nil }); err != nil {
		t.Errorf("WithChannel: %v", err)
	}
	if err := top.Remove(ctx, b.URL()); err != nil {
		t.Fatalf("remove: %v", err)
	}
	if got := b.Bindings("q"); got != nil {
		t.Errorf("q still bound with %v after Remove", got)
	}
}

// TestFakeBrokerFailover: with a cluster's two nodes in its URL, the
// publisher dials the first; when that connection is lost it tries the
// other node first, although the first still answers.
func TestFakeBrokerFailover(t *testing.T) {
	a, b := amqptest.Start(t), amqptest.Start(t)
	for _, n := range []*amqptest.Server{a, b} {
		if err := (relay.Topology{Exchange: "events", Queue: "q", BindingKey: "#"}).Declare(context.Background(), n.URL()); err != nil {
			t.Fatal(err)
		}
	}
	p, err := relay.NewAMQPPublisher(relay.AMQPConfig{URL: a.URL() + "," + b.URL(), Exchange: "events"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := fakePublish(t, p, "e1", "t"); err != nil {
		t.Fatal(err)
	}
	if len(a.Published()) != 1 || len(b.Published()) != 0 {
		t.Fatalf("first publish reached node a %d and node b %d times, want a once", len(a.Published()), len(b.Published()))
	}
	a.DropConnections()
	deadline := time.Now().Add(5 * time.Second)
	for i := 2; len(b.Published()) == 0; i++ {
		if time.Now().After(deadline) {
			t.Fatalf("no publish reached node b after node a's connection was lost (a took %d)", len(a.Published()))
		}
		_ = fakePublish(t, p, fmt.Sprintf("e%d", i), "t")
		time.Sleep(10 * time.Millisecond)
	}
	if n := len(a.Published()); n != 1 {
		t.Errorf("node a took %d publishes, want only the first: the lost node is tried last", n)
	}
}

// TestFakeBrokerReturnsWithManyInFlight publishes far more messages than
// the publisher buffers returns for before it awaits any confirm, half of
// them unroutable in runs of varying length, and wants every return told
// apart from every routed message.
func TestFakeBrokerReturnsWithManyInFlight(t *testing.T) {
	b := amqptest.Start(t)
	if err := (relay.Topology{Exchange: "events", Queue: "q", BindingKey: "routed"}).Declare(context.Background(), b.URL()); err != nil {
		t.Fatalf("declaring the topology: %v", err)
	}
	p, err := relay.NewAMQPPublisher(relay.AMQPConfig{URL: b.URL(), Exchange: "events"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const n = 1500
	confs := make([]relay.Confirmation, n)
	routable := make([]bool, n)
	for i := range n {
		routable[i] = (i/7+i/3)%2 == 0
		typ := "nowhere"
		if routable[i] {
			typ = "routed"
		}
		c, err := p.Publish(ctx, relay.Message{ID: fmt.Sprintf("m%d", i), Type: typ, Payload: []byte(`{}`)})
		if err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
		confs[i] = c
	}
	returned := 0
	for i, c := range confs {
		err := c.Wait(ctx)
		switch {
		case routable[i] && err != nil:
			t.Errorf("routable publish %d: %v", i, err)
		case !routable[i] && !errors.Is(err, relay.ErrReturned):
			t.Errorf("unroutable publish %d: %v, want ErrReturned", i, err)
		case !routable[i]:
			returned++
		}
	}
	if returned < n/3 {
		t.Errorf("%d of %d publishes returned; the pattern should return about half", returned, n)
	}
}
