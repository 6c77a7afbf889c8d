package relay_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/outboxlab/outboxlab/relay"
	"github.com/outboxlab/outboxlab/relay/amqptest"
)

// fakeBroker starts a broker in the test's process with exchange events
// and queue q bound by key, and a publisher to it.
func fakeBroker(t *testing.T, key string) (*amqptest.Server, *relay.AMQPPublisher) {
	t.Helper()
	b := amqptest.Start(t)
	if err := (relay.Topology{Exchange: "events", Queue: "q", BindingKey: key}).Declare(context.Background(), b.URL()); err != nil {
		t.Fatal(err)
	}
	p, err := relay.NewAMQPPublisher(relay.AMQPConfig{URL: b.URL(), Exchange: "events"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return b, p
}

// TestFakeBrokerReturnsEveryMessageInFlight: of several unroutable
// messages in flight at once, each one's confirm reports its return,
// whichever returns came in before it was awaited.
func TestFakeBrokerReturnsEveryMessageInFlight(t *testing.T) {
	_, p := fakeBroker(t, "order.placed")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var cs []relay.Confirmation
	for _, id := range []string{"r1", "r2", "r3"} {
		c, err := p.Publish(ctx, relay.Message{ID: id, Type: "nobody.listens", Payload: []byte(`{}`)})
		if err != nil {
			t.Fatal(err)
		}
		cs = append(cs, c)
	}
	for i, c := range cs {
		if err := c.Wait(ctx); !errors.Is(err, relay.ErrReturned) {
			t.Errorf("message %d of 3 in flight: %v, want ErrReturned", i+1, err)
		}
	}
}

// TestFakeBrokerPublishesOnAFreshConnectionOnceTheOldOneClosed: once
// the broker dropped the connection and the publisher saw it closed, the
// next publish dials again and succeeds at once.
func TestFakeBrokerPublishesOnAFreshConnectionOnceTheOldOneClosed(t *testing.T) {
	b, p := fakeBroker(t, "#")
	if err := fakePublish(t, p, "e1", "t"); err != nil {
		t.Fatal(err)
	}
	b.DropConnections()
	for deadline := time.Now().Add(5 * time.Second); !p.SessionClosed(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the publisher never saw its connection closed")
		}
	}
	if err := fakePublish(t, p, "e2", "t"); err != nil {
		t.Errorf("the first publish after the drop: %v, want it on a fresh connection", err)
	}
	if n := p.Dials(); n != 2 {
		t.Errorf("%d dials, want 2", n)
	}
}

// TestFakeBrokerDialsAfreshAfterALateConfirm: a confirm that did not come
// within the wait is an outage, and the connection is not trusted again:
// the next publish dials afresh.
func TestFakeBrokerDialsAfreshAfterALateConfirm(t *testing.T) {
	b, p := fakeBroker(t, "#")
	b.HoldConfirms(true)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	c, err := p.Publish(ctx, relay.Message{ID: "late", Type: "t", Payload: []byte(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	err = c.Wait(ctx)
	cancel()
	if !errors.Is(err, relay.ErrBrokerUnavailable) {
		t.Fatalf("a confirm that never came: %v, want ErrBrokerUnavailable", err)
	}
	b.HoldConfirms(false)
	if err := fakePublish(t, p, "next", "t"); err != nil {
		t.Fatalf("the publish after the late confirm: %v", err)
	}
	if n := p.Dials(); n != 2 {
		t.Errorf("%d dials, want 2: the connection of the late confirm was used again", n)
	}
}

// TestFakeBrokerConfirmThatArrivedWinsOverADeadline: a confirm that has
// arrived is success even when the wait's context has ended too (amqp091
// picks at random between the two).
func TestFakeBrokerConfirmThatArrivedWinsOverADeadline(t *testing.T) {
	_, p := fakeBroker(t, "#")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := p.Publish(ctx, relay.Message{ID: "e1", Type: "t", Payload: []byte(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	ended, stop := context.WithCancel(context.Background())
	stop()
	for i := range 32 {
		if err := c.Wait(ended); err != nil {
			t.Fatalf("wait %d with an ended context on an arrived confirm: %v", i+1, err)
		}
	}
}

// TestFakeBrokerClosedChannelIsAnOutageNotANack: when the broker closes
// the channel with a publish in flight, amqp091 resolves its confirm as a
// nack; the publisher reports an outage (the message's fate is unknown),
// not a broker's nack, and dials afresh.
func TestFakeBrokerClosedChannelIsAnOutageNotANack(t *testing.T) {
	b, p := fakeBroker(t, "#")
	b.CloseChannelOnPublish(true)
	err := fakePublish(t, p, "e1", "t")
	if !errors.Is(err, relay.ErrBrokerUnavailable) || errors.Is(err, relay.ErrNacked) {
		t.Fatalf("a publish whose channel the broker closed: %v, want ErrBrokerUnavailable and no ErrNacked", err)
	}
	b.CloseChannelOnPublish(false)
	if err := fakePublish(t, p, "e2", "t"); err != nil {
		t.Fatalf("the publish after: %v", err)
	}
	if n := p.Dials(); n != 2 {
		t.Errorf("%d dials, want 2", n)
	}
}

// TestFakeBrokerDialsAfreshWhenTheChannelClosedUnseen: the broker closed
// the channel (its connection stays open) while no confirm was awaited, so
// nothing marked the session broken: the next publish still sees the
// closed channel, dials afresh and is confirmed, rather than failing on
// the dead channel.
func TestFakeBrokerDialsAfreshWhenTheChannelClosedUnseen(t *testing.T) {
	b, p := fakeBroker(t, "#")
	b.CloseChannelOnPublish(true)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := p.Publish(ctx, relay.Message{ID: "e1", Type: "t", Payload: []byte(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.(relay.DoneConfirmation).Done(): // the channel closed
	case <-ctx.Done():
		t.Fatal("the broker's close of the channel never reached the publisher")
	}
	b.CloseChannelOnPublish(false)
	if err := fakePublish(t, p, "e2", "t"); err != nil {
		t.Fatalf("the publish after the channel closed: %v, want it confirmed on a fresh channel", err)
	}
	if n := p.Dials(); n != 2 {
		t.Errorf("%d dials, want 2", n)
	}
}
