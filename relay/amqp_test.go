package relay_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxlab/outboxlab/relay"
)

func newPublisher(t testing.TB, url, exchange string) *relay.AMQPPublisher {
	t.Helper()
	p, err := relay.NewAMQPPublisher(relay.AMQPConfig{URL: url, Exchange: exchange, Name: t.Name()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func publishAndWait(ctx context.Context, p relay.Publisher, m relay.Message) error {
	conf, err := p.Publish(ctx, m)
	if err != nil {
		return err
	}
	return conf.Wait(ctx)
}

func TestAMQPPublisherConfirmsWithContractProperties(t *testing.T) {
	b := newBroker(t, true)
	ids := newIDSource(t, 11)
	p := newPublisher(t, b.URL, b.Exchange)
	c := collect(t, b.URL, b.Queue)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	const n = 300
	want := make(map[string]relay.Message, n)
	var confs []relay.Confirmation
	for i := range n {
		corr := ids.next()
		m := relay.Message{ID: ids.next().String(), Type: fmt.Sprintf("order.t%d", i%3), CorrelationID: corr.String(),
			Payload: []byte(fmt.Sprintf(`{"n":%d}`, i))}
		want[m.ID] = m
		conf, err := p.Publish(ctx, m)
		if err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
		confs = append(confs, conf)
	}
	for i, conf := range confs {
		if err := conf.Wait(ctx); err != nil {
			t.Fatalf("confirm %d: %v", i, err)
		}
	}
	waitFor(t, 10*time.Second, "every message at the queue", func() (bool, error) {
		d, _, _ := c.counts()
		return d == n, nil
	})
	for _, d := range c.deliveries() {
		m, ok := want[d.MessageId]
		switch {
		case !ok:
			t.Fatalf("unexpected message %q", d.MessageId)
		case d.RoutingKey != m.Type || d.Type != m.Type:
			t.Errorf("routing key %q, type %q, want %q", d.RoutingKey, d.Type, m.Type)
		case d.Exchange != b.Exchange:
			t.Errorf("exchange %q", d.Exchange)
		case d.CorrelationId != m.CorrelationID:
			t.Errorf("correlation id %q, want %q", d.CorrelationId, m.CorrelationID)
		case d.ContentType != "application/json":
			t.Errorf("content type %q", d.ContentType)
		case d.DeliveryMode != amqp.Persistent:
			t.Errorf("delivery mode %d, want persistent", d.DeliveryMode)
		case string(d.Body) != string(m.Payload):
			t.Errorf("body %q, want %q", d.Body, m.Payload)
		case d.Timestamp.IsZero():
			t.Errorf("no timestamp")
		}
	}
	if p.Dials() != 1 {
		t.Errorf("publisher dialled %d times, want 1", p.Dials())
	}
}

// TestAMQPPublisherTellsReturnedFromRouted interleaves routable and
// unroutable publishes on one channel: every unroutable one must come back
// as ErrReturned although RabbitMQ acks it, and no routed one may.
func TestAMQPPublisherTellsReturnedFromRouted(t *testing.T) {
	b := newBroker(t, false)
	ids := newIDSource(t, 12)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	extraQueue(t, b, "routed", "routed", nil)
	p := newPublisher(t, b.URL, b.Exchange)
	const n = 400
	type sent struct {
		conf     relay.Confirmation
		routable bool
	}
	var all []sent
	for i := range n {
		// A seeded pattern mixes the two kinds in runs of varying length.
		routable := ids.next()[0]%2 == 0
		typ := "nowhere"
		if routable {
			typ = "routed"
		}
		conf, err := p.Publish(ctx, relay.Message{ID: ids.next().String(), Type: typ, Payload: []byte(`{}`)})
		if err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
		all = append(all, sent{conf, routable})
	}
	var returned, routed int
	for i, s := range all {
		err := s.conf.Wait(ctx)
		switch {
		case s.routable && err != nil:
			t.Errorf("routable publish %d: %v", i, err)
		case !s.routable && !errors.Is(err, relay.ErrReturned):
			t.Errorf("unroutable publish %d: got %v, want ErrReturned", i, err)
		case s.routable:
			routed++
		default:
			returned++
			if relay.Classify(err) != relay.ClassRow {
				t.Errorf("a return is classified %v, want row", relay.Classify(err))
			}
		}
	}
	if returned == 0 || routed == 0 {
		t.Fatalf("the pattern did not mix: %d returned, %d routed", returned, routed)
	}
}

func TestAMQPPublisherNack(t *testing.T) {
	b := newBroker(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	extraQueue(t, b, "full", "#", amqp.Table{"x-max-length": int32(1), "x-overflow": "reject-publish"})
	p := newPublisher(t, b.URL, b.Exchange)
	if err := publishAndWait(ctx, p, relay.Message{ID: "first", Type: "t", Payload: []byte(`{}`)}); err != nil {
		t.Fatalf("first publish: %v", err)
	}
	err := publishAndWait(ctx, p, relay.Message{ID: "second", Type: "t", Payload: []byte(`{}`)})
	if !errors.Is(err, relay.ErrNacked) || errors.Is(err, relay.ErrBrokerUnavailable) {
		t.Fatalf("publish to a full queue: %v, want ErrNacked", err)
	}
	// A full queue is the broker's state, not the row's: the batch stops
	// and no attempt is spent.
	if relay.Classify(err) != relay.ClassBroker {
		t.Errorf("a nack is classified %v, want broker", relay.Classify(err))
	}
}

func TestAMQPPublisherRedialsAfterConnectionLoss(t *testing.T) {
	b := newBroker(t, true)
	c := collect(t, b.URL, b.Queue)
	p := newPublisher(t, b.URL, b.Exchange)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := publishAndWait(ctx, p, relay.Message{ID: "before", Type: "t", Payload: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	// A confirm outstanding when the connection drops is not a success.
	conf, err := p.Publish(ctx, relay.Message{ID: "during", Type: "t", Payload: []byte(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	p.DropConnection()
	if err := conf.Wait(ctx); err != nil && !errors.Is(err, relay.ErrBrokerUnavailable) {
		t.Errorf("confirm across a dropped connection: %v, want nil or ErrBrokerUnavailable", err)
	}
	// The next publishes dial again; the first may still find the dying
	// connection, which is a broker-level failure, never a row-level one.
	waitFor(t, 10*time.Second, "a publish after the drop", func() (bool, error) {
		err := publishAndWait(ctx, p, relay.Message{ID: "after", Type: "t", Payload: []byte(`{}`)})
		if err != nil && !errors.Is(err, relay.ErrBrokerUnavailable) {
			return false, err
		}
		return err == nil, nil
	})
	if p.Dials() != 2 {
		t.Errorf("dials = %d, want 2", p.Dials())
	}
	waitFor(t, 5*time.Second, "the message published after the drop", func() (bool, error) {
		return c.times("after") >= 1, nil
	})
}

func TestAMQPPublisherUnreachableBroker(t *testing.T) {
	// A port nothing listens on: the dial fails at once.
	url := "amqp://outbox:s3cret@127.0.0.1:1/"
	p, err := relay.NewAMQPPublisher(relay.AMQPConfig{URL: url, Exchange: "events", DialTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = p.Publish(ctx, relay.Message{ID: "x", Type: "t", Payload: []byte(`{}`)})
	if !errors.Is(err, relay.ErrBrokerUnavailable) {
		t.Fatalf("publish to an unreachable broker: %v, want ErrBrokerUnavailable", err)
	}
	if relay.Classify(err) != relay.ClassBroker {
		t.Errorf("classified %v, want broker", relay.Classify(err))
	}
	if got := err.Error(); strings.Contains(got, "s3cret") {
		t.Errorf("error leaks the password: %s", got)
	}
}
