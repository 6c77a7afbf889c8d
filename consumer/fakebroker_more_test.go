package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxlab/outboxlab/consumer"
	"github.com/outboxlab/outboxlab/relay"
	"github.com/outboxlab/outboxlab/relay/amqptest"
)

// sourceRun runs s into c until the test ends and records every
// delivery's message and outcome.
type sourceRun struct {
	mu   sync.Mutex
	msgs []consumer.Message
	outs []consumer.Outcome
	errs []error
}

func observeSource(t *testing.T, s *consumer.AMQPSource, c *consumer.Consumer) *sourceRun {
	t.Helper()
	r := &sourceRun{}
	s.MinBackoff, s.MaxBackoff = 10*time.Millisecond, 20*time.Millisecond
	s.Observe = func(m consumer.Message, o consumer.Outcome, err error) {
		r.mu.Lock()
		r.msgs, r.outs, r.errs = append(r.msgs, m), append(r.outs, o), append(r.errs, err)
		r.mu.Unlock()
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx, c) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return r
}

// handled is how many deliveries the source handled so far.
func (r *sourceRun) handled() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.outs)
}

// waitUntil waits up to 5 s for ok.
func waitUntil(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !ok(); {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 5 s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func newConsumer(t *testing.T, in consumer.Inbox, maxDeliveries int) *consumer.Consumer {
	t.Helper()
	c, err := consumer.New(consumer.Config{Name: "c", MaxDeliveries: maxDeliveries}, in, nil)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestSourceDialsTheNextNodeAfterALostConnection: when the connection to
// its node is lost, the source dials the next node of its list first, not
// the one that just dropped it, and consumes there.
func TestSourceDialsTheNextNodeAfterALostConnection(t *testing.T) {
	a, b := amqptest.Start(t), amqptest.Start(t)
	in := &memInbox{seen: map[string]bool{}}
	r := observeSource(t, &consumer.AMQPSource{URL: a.URL() + "," + b.URL(), Queue: "q"}, newConsumer(t, in, 3))
	a.Enqueue("q", "e1", "t", []byte(`{}`))
	waitUntil(t, "a delivery from the first node", func() bool { return r.handled() >= 1 })
	a.DropConnections()
	waitUntil(t, "a connection to the second node", func() bool { return b.Dials() >= 1 })
	if n := a.Dials(); n != 1 {
		t.Errorf("the first node was dialled %d times before the second, want once: after a lost connection the next node comes first", n)
	}
	b.Enqueue("q", "e2", "t", []byte(`{}`))
	waitUntil(t, "a delivery from the second node", func() bool { return r.handled() >= 2 })
}

// TestSourceCountsQuorumRedeliveries: a quorum queue's x-delivery-count
// header (earlier deliveries) makes the delivery's count one more, so that
// a message the inbox keeps failing is dead-lettered at MaxDeliveries
// however often the source itself saw it.
func TestSourceCountsQuorumRedeliveries(t *testing.T) {
	bk := amqptest.Start(t)
	in := &memInbox{seen: map[string]bool{}, failures: map[string]int{"p": 100}}
	r := observeSource(t, &consumer.AMQPSource{URL: bk.URL(), Queue: "q"}, newConsumer(t, in, 3))
	bk.EnqueueCounted("q", "p", "t", []byte(`{}`), 2)
	waitUntil(t, "the delivery handled", func() bool { return r.handled() >= 1 })
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.msgs[0].Deliveries != 3 || r.outs[0] != consumer.DeadLettered {
		t.Errorf("a third delivery (x-delivery-count 2) counted %d and was %v; want 3 and dead-lettered", r.msgs[0].Deliveries, r.outs[0])
	}
}

// TestSourceForgetsTheCountOfAHandledMessage: once a message is applied,
// its count is forgotten: a later delivery of the same id (a republish)
// counts from one again, rather than dead-lettering a healthy message.
func TestSourceForgetsTheCountOfAHandledMessage(t *testing.T) {
	bk := amqptest.Start(t)
	in := &memInbox{seen: map[string]bool{}}
	r := observeSource(t, &consumer.AMQPSource{URL: bk.URL(), Queue: "q"}, newConsumer(t, in, 3))
	for i := range 3 {
		bk.Enqueue("q", "e1", "t", []byte(`{}`))
		waitUntil(t, fmt.Sprintf("delivery %d", i+1), func() bool { return r.handled() >= i+1 })
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	var counts []int
	for _, m := range r.msgs {
		counts = append(counts, m.Deliveries)
	}
	if !slices.Equal(counts, []int{1, 1, 1}) || !slices.Equal(r.outs, []consumer.Outcome{consumer.Applied, consumer.Duplicate, consumer.Duplicate}) {
		t.Errorf("deliveries counted %v with outcomes %v; want 1, 1, 1: applied, duplicate, duplicate", counts, r.outs)
	}
}

// TestSourceKeepsItsConnectionThroughRowFailures: a failed apply
// (requeued), a dead-lettered delivery without an id and a duplicate are
// answered on the same connection; only an ack that could not be sent
// makes the source connect again (the broker redelivers).
func TestSourceKeepsItsConnectionThroughRowFailures(t *testing.T) {
	bk := amqptest.Start(t)
	in := &memInbox{seen: map[string]bool{}, failures: map[string]int{"flaky": 1}}
	r := observeSource(t, &consumer.AMQPSource{URL: bk.URL(), Queue: "q"}, newConsumer(t, in, 3))
	for _, id := range []string{"flaky", "", "e1", "e1"} {
		bk.Enqueue("q", id, "t", []byte(`{}`))
	}
	waitUntil(t, "every delivery handled", func() bool { return r.handled() >= 5 })
	if n := bk.Dials(); n != 1 {
		t.Errorf("the source connected %d times; want once: a row's failure is no connection's", n)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, err := range r.errs {
		if r.outs[i] != consumer.DeadLettered && err != nil {
			t.Errorf("delivery %d (%s, %v) reported %v", i, r.msgs[i].ID, r.outs[i], err)
		}
	}
}

// failingAck is a delivery whose ack cannot be sent.
type failingAck struct{ consumer.Delivery }

func (d failingAck) Ack(context.Context) error {
	return fmt.Errorf("%w: the channel is gone", consumer.ErrAckFailed)
}

// TestSourceReconnectsAfterAFailedAck: an ack that could not be sent
// means the channel is gone; the source connects again, and the broker's
// redelivery is absorbed by the inbox.
func TestSourceReconnectsAfterAFailedAck(t *testing.T) {
	bk := amqptest.Start(t)
	var once sync.Once
	in := &memInbox{seen: map[string]bool{}}
	s := &consumer.AMQPSource{URL: bk.URL(), Queue: "q", Wrap: func(d consumer.Delivery) consumer.Delivery {
		var out consumer.Delivery = d
		once.Do(func() { out = failingAck{d} })
		return out
	}}
	observeSource(t, s, newConsumer(t, in, 3))
	bk.Enqueue("q", "e1", "t", []byte(`{}`))
	waitUntil(t, "a second connection after the failed ack", func() bool { return bk.Dials() >= 2 })
}

// TestSourceAsksForHeartbeats: the source's connections ask the broker
// for 10-second heartbeats, so that a dead peer is noticed.
func TestSourceAsksForHeartbeats(t *testing.T) {
	bk := amqptest.Start(t)
	observeSource(t, &consumer.AMQPSource{URL: bk.URL(), Queue: "q"}, newConsumer(t, &memInbox{seen: map[string]bool{}}, 3))
	waitUntil(t, "a connection", func() bool { return len(bk.Heartbeats()) >= 1 })
	if got := bk.Heartbeats()[0]; got != 10 {
		t.Errorf("heartbeat %d s, want 10", got)
	}
}

// TestSourceGivesUpAMuteBrokerWhenItsContextEnds: a broker that accepts
// the connection and never answers holds the handshake; when the source's
// context ends, its socket is closed at once, not left to its deadline.
func TestSourceGivesUpAMuteBrokerWhenItsContextEnds(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	closed := make(chan time.Duration, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		start := time.Now()
		buf := make([]byte, 64)
		for {
			if _, err := c.Read(buf); err != nil {
				closed <- time.Since(start)
				_ = c.Close()
				return
			}
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	s := &consumer.AMQPSource{URL: "amqp://" + l.Addr().String() + "/", Queue: "q"}
	if err := s.Run(ctx, newConsumer(t, &memInbox{}, 3)); err != nil {
		t.Fatal(err)
	}
	select {
	case d := <-closed:
		if d > 2*time.Second {
			t.Errorf("the socket closed %s after the handshake began", d)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("the socket to a mute broker was still open 2 s after the source's context ended")
	}
}

// answeringDelivery is a delivery whose ack and nack answer err.
type answeringDelivery struct {
	m   consumer.Message
	err error

	acks, nacks []bool
}

func (d *answeringDelivery) Message() consumer.Message { return d.m }
func (d *answeringDelivery) Ack(context.Context) error {
	d.acks = append(d.acks, true)
	return d.err
}
func (d *answeringDelivery) Nack(_ context.Context, requeue bool) error {
	d.nacks = append(d.nacks, requeue)
	return d.err
}

// TestHandleReportsOnlyTheNacksThatFailed: a requeue and a dead-letter
// whose nack went through report no error; one whose nack failed says so.
func TestHandleReportsOnlyTheNacksThatFailed(t *testing.T) {
	in := &memInbox{seen: map[string]bool{}, failures: map[string]int{"m": 100}}
	c := newConsumer(t, in, 2)
	nackErr := errors.New("connection reset")
	for _, tc := range []struct {
		deliveries int
		err        error
		want       consumer.Outcome
		requeue    bool
	}{
		{1, nil, consumer.Requeued, true},
		{2, nil, consumer.DeadLettered, false},
		{1, nackErr, consumer.Requeued, true},
		{2, nackErr, consumer.DeadLettered, false},
	} {
		d := &answeringDelivery{m: consumer.Message{ID: "m", Deliveries: tc.deliveries}, err: tc.err}
		out, err := c.Handle(context.Background(), d)
		if out != tc.want || !slices.Equal(d.nacks, []bool{tc.requeue}) {
			t.Errorf("delivery %d: %v with nacks %v, want %v with one nack (requeue %v)", tc.deliveries, out, d.nacks, tc.want, tc.requeue)
		}
		if (err != nil) != (tc.err != nil) || (tc.err != nil && !errors.Is(err, nackErr)) {
			t.Errorf("delivery %d with nack answering %v: Handle returned %v", tc.deliveries, tc.err, err)
		}
	}
}

func TestOutcomeNames(t *testing.T) {
	for o, want := range map[consumer.Outcome]string{
		consumer.Applied: "applied", consumer.Duplicate: "duplicate", consumer.Requeued: "requeued", consumer.DeadLettered: "dead-lettered",
	} {
		if got := o.String(); got != want {
			t.Errorf("%d.String() = %q, want %q", o, got, want)
		}
	}
	var zero consumer.Outcome
	if zero == consumer.Applied || zero.String() != "" {
		t.Errorf("the zero outcome is %q: it must be no outcome", zero)
	}
}

func TestNewPGInboxRefusesAMissingEffect(t *testing.T) {
	pool, err := pgxpool.New(context.Background(), "postgres://127.0.0.1:1/none")
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := consumer.NewPGInbox(pool, "c", nil); err == nil {
		t.Error("an inbox without an effect was made")
	}
	if _, err := consumer.NewPGInbox(nil, "c", consumer.RecordEffect("c")); err == nil {
		t.Error("an inbox without a pool was made")
	}
	if _, err := consumer.NewPGInbox(pool, "", consumer.RecordEffect("c")); err == nil {
		t.Error("an inbox without a consumer name was made")
	}
}

// TestSourceDeclaresItsTopologyAndRefusesAnotherQueue: a source whose
// topology declares the queue it consumes declares it and consumes from
// it; one whose topology declares another queue is refused at once.
func TestSourceDeclaresItsTopologyAndRefusesAnotherQueue(t *testing.T) {
	bk := amqptest.Start(t)
	other := &consumer.AMQPSource{URL: bk.URL(), Queue: "q", Topology: &relay.Topology{Exchange: "events", Queue: "elsewhere", BindingKey: "#"}}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := other.Run(ctx, newConsumer(t, &memInbox{seen: map[string]bool{}}, 3)); err == nil || !strings.Contains(err.Error(), `"elsewhere"`) {
		t.Fatalf("a topology of another queue: %v, want it refused", err)
	}
	in := &memInbox{seen: map[string]bool{}}
	r := observeSource(t, &consumer.AMQPSource{URL: bk.URL(), Queue: "q", Topology: &relay.Topology{Exchange: "events", Queue: "q", BindingKey: "#"}},
		newConsumer(t, in, 3))
	waitUntil(t, "the topology declared", func() bool { return slices.Contains(bk.Bindings("q"), "#") })
	bk.Enqueue("q", "e1", "t", []byte(`{}`))
	waitUntil(t, "the delivery handled", func() bool { return r.handled() >= 1 })
}
