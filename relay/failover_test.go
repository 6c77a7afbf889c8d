package relay_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/outboxlab/outboxlab/chaos"
	"github.com/outboxlab/outboxlab/relay"
)

// TestSplitAMQPURLs: one URI or the comma-separated nodes of a cluster;
// an empty entry or a bad URI is an error that names it without its
// password.
func TestSplitAMQPURLs(t *testing.T) {
	got, err := relay.SplitAMQPURLs("amqp://u:p@a:5672/, amqp://u:p@b:5672/")
	if err != nil || len(got) != 2 || got[0] != "amqp://u:p@a:5672/" || got[1] != "amqp://u:p@b:5672/" {
		t.Errorf("two nodes: %q, %v", got, err)
	}
	if got, err := relay.SplitAMQPURLs("amqp://u:p@a/"); err != nil || len(got) != 1 {
		t.Errorf("one node: %q, %v", got, err)
	}
	for _, bad := range []string{"amqp://u:secret@a/,", "amqp://u:secret@a/,http://u:secret@b/", ""} {
		_, err := relay.SplitAMQPURLs(bad)
		if err == nil {
			t.Errorf("%q: no error", bad)
			continue
		}
		if strings.Contains(err.Error(), "secret") {
			t.Errorf("%q: the error shows the password: %v", bad, err)
		}
	}
}

// TestPublisherFailsOver: of the nodes a publisher is given, the first
// refuses connections, so it publishes through the second; when the
// second's link goes down, the next publish moves on to the third, and
// every confirmed message arrives.
func TestPublisherFailsOver(t *testing.T) {
	b := newBroker(t, true)
	link := newBrokerLink(t)
	c := collect(t, b.URL, b.Queue)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := "amqp://outbox:outbox@" + ln.Addr().String() + "/"
	_ = ln.Close() // nothing listens there now
	pub, err := relay.NewAMQPPublisher(relay.AMQPConfig{
		URL: refused + "," + link.URL + "," + b.URL, Exchange: b.Exchange, DialTimeout: 2 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pub.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	publish := func(id string) error {
		conf, err := pub.Publish(ctx, relay.Message{ID: id, Type: "order.placed", Payload: []byte(`{}`)})
		if err != nil {
			return err
		}
		return conf.Wait(ctx)
	}
	if err := publish("m1"); err != nil {
		t.Fatalf("publishing past a refusing node: %v", err)
	}
	if pub.Dials() != 1 {
		t.Errorf("%d connections opened, want 1 (the second node)", pub.Dials())
	}
	down := chaos.Down(link.Link)
	if err := down.Inject(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = down.Heal(context.Background()) })
	// The publish on the cut connection fails (or its confirm does): the
	// message is not counted as sent, and the next one fails over.
	var failedOver bool
	for i := 0; i < 5 && !failedOver; i++ {
		failedOver = publish("m2") == nil
	}
	if !failedOver {
		t.Fatal("the publisher did not move on to the third node")
	}
	if pub.Dials() != 2 {
		t.Errorf("%d connections opened, want 2", pub.Dials())
	}
	deadline := time.Now().Add(10 * time.Second)
	for c.times("m1") == 0 || c.times("m2") == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("deliveries m1=%d m2=%d, want both", c.times("m1"), c.times("m2"))
		}
		time.Sleep(20 * time.Millisecond)
	}
}
