package sim

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxlab/outboxlab/relay"
	"github.com/outboxlab/outboxlab/testenv"
)

// brokerBackend is a broker under the broker suite: the simulation's fake,
// or RabbitMQ through relay.AMQPPublisher. Its queue is bound with the
// key "order.#".
type brokerBackend struct {
	// publish publishes m and waits for its confirm.
	publish func(t testing.TB, m relay.Message, opts relay.PublishOptions) error
	// get takes the head of the queue; false when it is empty.
	get func(t testing.TB) (relay.Message, bool)
	// restart restarts the broker; nil when the backend cannot.
	restart func(t testing.TB)
	// consume opens a consumer channel on the queue (basic.consume with
	// manual acknowledgements) with prefetch.
	consume func(t testing.TB, prefetch int) suiteChannel
	// dead waits until the dead-letter queue holds n messages and takes
	// their ids, in order.
	dead func(t testing.TB, n int) []string
}

// suiteDelivery is what the suite reads of one delivery.
type suiteDelivery struct {
	ID          string
	Tag         uint64
	Redelivered bool
}

// suiteChannel is a consumer channel of a broker under the suite.
type suiteChannel interface {
	// next waits for the next delivery pushed to the channel.
	next(t testing.TB) suiteDelivery
	// none fails the test when a delivery is pushed to the channel.
	none(t testing.TB)
	// ack, nack and reject settle tag; an error closed the channel.
	ack(t testing.TB, tag uint64, multiple bool) error
	nack(t testing.TB, tag uint64, multiple, requeue bool) error
	reject(t testing.TB, tag uint64, requeue bool) error
	// close closes the channel.
	close(t testing.TB)
}

// runBrokerSuite runs the cases every broker must pass for the
// simulation's fake to stand in for RabbitMQ.
func runBrokerSuite(t *testing.T, newBackend func(t testing.TB) brokerBackend) {
	msg := func(id, typ string) relay.Message {
		return relay.Message{ID: id, Type: typ, CorrelationID: "c-" + id, Payload: []byte(`{"n":1}`)}
	}
	t.Run("ConfirmedWhenRoutable", func(t *testing.T) {
		b := newBackend(t)
		if err := b.publish(t, msg("m1", "order.placed"), relay.DefaultPublishOptions()); err != nil {
			t.Fatalf("publish = %v, want a confirm", err)
		}
		got, ok := b.get(t)
		if !ok {
			t.Fatal("the queue is empty after a confirmed publish")
		}
		if got.ID != "m1" || got.Type != "order.placed" || got.CorrelationID != "c-m1" || string(got.Payload) != `{"n":1}` {
			t.Fatalf("delivered %+v, want the message as published", got)
		}
	})
	t.Run("ReturnedWhenUnroutable", func(t *testing.T) {
		b := newBackend(t)
		err := b.publish(t, msg("m2", "audit.logged"), relay.DefaultPublishOptions())
		if !errors.Is(err, relay.ErrReturned) {
			t.Fatalf("mandatory publish nobody takes = %v, want ErrReturned", err)
		}
		if got, ok := b.get(t); ok {
			t.Fatalf("a returned message was queued: %+v", got)
		}
	})
	t.Run("NotMandatoryUnroutableIsDropped", func(t *testing.T) {
		b := newBackend(t)
		if err := b.publish(t, msg("m3", "audit.logged"), relay.PublishOptions{Persistent: true}); err != nil {
			t.Fatalf("non-mandatory publish = %v, want a confirm (and the message dropped)", err)
		}
		if got, ok := b.get(t); ok {
			t.Fatalf("an unroutable message was queued: %+v", got)
		}
	})
	t.Run("PersistentSurvivesRestartTransientDoesNot", func(t *testing.T) {
		b := newBackend(t)
		if b.restart == nil {
			t.Skip("the backend cannot restart its broker")
		}
		if err := b.publish(t, msg("kept", "order.placed"), relay.DefaultPublishOptions()); err != nil {
			t.Fatal(err)
		}
		if err := b.publish(t, msg("lost", "order.placed"), relay.PublishOptions{Mandatory: true}); err != nil {
			t.Fatal(err)
		}
		b.restart(t)
		got, ok := b.get(t)
		if !ok || got.ID != "kept" {
			t.Fatalf("after a restart got %+v (%v), want the persistent message", got, ok)
		}
		if extra, ok := b.get(t); ok {
			t.Fatalf("a transient message survived the restart: %+v", extra)
		}
	})
}

// runDeliverySuite runs the cases of what a delivery carries and how it
// changes: tags per channel that start again on a new channel, the
// redelivered flag, requeue on a channel's close, nack and reject,
// multiple acks, an unknown tag and prefetch.
func runDeliverySuite(t *testing.T, newBackend func(t testing.TB) brokerBackend) {
	for _, c := range deliveryCases {
		t.Run(c.name, func(t *testing.T) { c.run(t, newBackend(t)) })
	}
}

// suitePublish publishes ids, persistent and mandatory.
func suitePublish(t testing.TB, b brokerBackend, ids ...string) {
	t.Helper()
	for _, id := range ids {
		if err := b.publish(t, relay.Message{ID: id, Type: "order.placed", Payload: []byte(`{}`)}, relay.DefaultPublishOptions()); err != nil {
			t.Fatal(err)
		}
	}
}

// expect fails t unless the channel's next delivery is want.
func expect(t testing.TB, ch suiteChannel, want suiteDelivery) {
	t.Helper()
	if got := ch.next(t); got != want {
		t.Fatalf("delivered %+v, want %+v", got, want)
	}
}

// deliveryCases are the cases of runDeliverySuite.
var deliveryCases = []struct {
	name string
	run  func(t testing.TB, b brokerBackend)
}{
	{"TagsStartAgainOnANewChannel", func(t testing.TB, b brokerBackend) {
		suitePublish(t, b, "a", "b")
		ch := b.consume(t, 10)
		expect(t, ch, suiteDelivery{"a", 1, false})
		expect(t, ch, suiteDelivery{"b", 2, false})
		for _, tag := range []uint64{1, 2} {
			if err := ch.ack(t, tag, false); err != nil {
				t.Fatal(err)
			}
		}
		ch.close(t)
		suitePublish(t, b, "c")
		ch = b.consume(t, 10)
		expect(t, ch, suiteDelivery{"c", 1, false})
	}},
	{"CloseRequeuesUnackedRedelivered", func(t testing.TB, b brokerBackend) {
		suitePublish(t, b, "a", "b", "c")
		ch := b.consume(t, 2)
		expect(t, ch, suiteDelivery{"a", 1, false})
		expect(t, ch, suiteDelivery{"b", 2, false})
		ch.none(t) // the prefetch is full
		ch.close(t)
		ch = b.consume(t, 10)
		expect(t, ch, suiteDelivery{"a", 1, true})
		expect(t, ch, suiteDelivery{"b", 2, true})
		expect(t, ch, suiteDelivery{"c", 3, false})
	}},
	{"PrefetchHoldsBackUntilAnAck", func(t testing.TB, b brokerBackend) {
		suitePublish(t, b, "a", "b", "c")
		ch := b.consume(t, 2)
		expect(t, ch, suiteDelivery{"a", 1, false})
		expect(t, ch, suiteDelivery{"b", 2, false})
		ch.none(t)
		if err := ch.ack(t, 1, false); err != nil {
			t.Fatal(err)
		}
		expect(t, ch, suiteDelivery{"c", 3, false})
	}},
	{"NackRequeueRedeliversWithANewTag", func(t testing.TB, b brokerBackend) {
		suitePublish(t, b, "a")
		ch := b.consume(t, 1)
		expect(t, ch, suiteDelivery{"a", 1, false})
		if err := ch.nack(t, 1, false, true); err != nil {
			t.Fatal(err)
		}
		expect(t, ch, suiteDelivery{"a", 2, true})
		if err := ch.reject(t, 2, true); err != nil {
			t.Fatal(err)
		}
		expect(t, ch, suiteDelivery{"a", 3, true})
	}},
	{"NackAndRejectWithoutRequeueDeadLetter", func(t testing.TB, b brokerBackend) {
		suitePublish(t, b, "a", "b")
		ch := b.consume(t, 10)
		expect(t, ch, suiteDelivery{"a", 1, false})
		expect(t, ch, suiteDelivery{"b", 2, false})
		if err := ch.nack(t, 1, false, false); err != nil {
			t.Fatal(err)
		}
		if err := ch.reject(t, 2, false); err != nil {
			t.Fatal(err)
		}
		if got := b.dead(t, 2); !slices.Equal(got, []string{"a", "b"}) {
			t.Fatalf("dead-lettered %v, want [a b]", got)
		}
		ch.close(t)
		b.consume(t, 10).none(t)
	}},
	{"AckMultipleSettlesEveryEarlierTag", func(t testing.TB, b brokerBackend) {
		suitePublish(t, b, "a", "b", "c")
		ch := b.consume(t, 10)
		expect(t, ch, suiteDelivery{"a", 1, false})
		expect(t, ch, suiteDelivery{"b", 2, false})
		expect(t, ch, suiteDelivery{"c", 3, false})
		if err := ch.ack(t, 2, true); err != nil {
			t.Fatal(err)
		}
		ch.close(t)
		ch = b.consume(t, 10)
		expect(t, ch, suiteDelivery{"c", 1, true})
		ch.none(t)
	}},
	{"UnknownTagClosesTheChannel", func(t testing.TB, b brokerBackend) {
		suitePublish(t, b, "a", "b")
		ch := b.consume(t, 10)
		expect(t, ch, suiteDelivery{"a", 1, false})
		expect(t, ch, suiteDelivery{"b", 2, false})
		if err := ch.ack(t, 1, false); err != nil {
			t.Fatal(err)
		}
		if err := ch.ack(t, 1, false); err == nil {
			t.Fatal("a second ack of tag 1 succeeded; want the channel closed (PRECONDITION_FAILED)")
		}
		ch = b.consume(t, 10)
		expect(t, ch, suiteDelivery{"b", 1, true})
	}},
}

// fakeChannel is a suiteChannel on the simulation's fake.
type fakeChannel struct{ c *Channel }

func (f fakeChannel) next(t testing.TB) suiteDelivery {
	t.Helper()
	m, ok := f.c.Next()
	if !ok {
		t.Fatal("no delivery pushed to the channel")
	}
	return suiteDelivery{m.ID, m.Tag, m.Redelivered}
}

func (f fakeChannel) none(t testing.TB) {
	t.Helper()
	if m, ok := f.c.Next(); ok {
		t.Fatalf("delivered %s (tag %d), want nothing", m.ID, m.Tag)
	}
}

func (f fakeChannel) ack(_ testing.TB, tag uint64, multiple bool) error {
	return f.c.Ack(tag, multiple)
}
func (f fakeChannel) nack(_ testing.TB, tag uint64, multiple, requeue bool) error {
	return f.c.Nack(tag, multiple, requeue)
}
func (f fakeChannel) reject(_ testing.TB, tag uint64, requeue bool) error {
	return f.c.Reject(tag, requeue)
}
func (f fakeChannel) close(testing.TB) { f.c.Close() }

// newFakeBackend is the simulation's fake under the suites.
func newFakeBackend(testing.TB) brokerBackend {
	b := NewBroker()
	b.Bind("order.#")
	return brokerBackend{
		publish: func(_ testing.TB, m relay.Message, opts relay.PublishOptions) error {
			switch b.Publish(m, opts) {
			case Nacked:
				return relay.ErrNacked
			case Returned:
				return relay.ErrReturned
			}
			return nil
		},
		get: func(testing.TB) (relay.Message, bool) {
			m, ok := b.Get()
			return m.Message, ok
		},
		restart: func(testing.TB) { b.Restart() },
		consume: func(_ testing.TB, prefetch int) suiteChannel { return fakeChannel{b.Open("suite", prefetch)} },
		dead: func(t testing.TB, n int) []string {
			t.Helper()
			var ids []string
			for _, m := range b.Dead() {
				ids = append(ids, m.ID)
			}
			if len(ids) != n {
				t.Fatalf("dead-letter queue holds %v, want %d messages", ids, n)
			}
			return ids
		},
	}
}

func TestDeliverySuiteFake(t *testing.T) { runDeliverySuite(t, newFakeBackend) }

func TestBrokerSuiteFake(t *testing.T) { runBrokerSuite(t, newFakeBackend) }

// recordingTB is a testing.TB whose failures are recorded instead of
// failing the test: a case run on it ends at its first Fatal.
type recordingTB struct {
	testing.TB
	failed bool
	msg    string
}

func (r *recordingTB) Helper() {}
func (r *recordingTB) Errorf(format string, args ...any) {
	if !r.failed {
		r.msg = fmt.Sprintf(format, args...)
	}
	r.failed = true
}
func (r *recordingTB) Fatalf(format string, args ...any) {
	r.Errorf(format, args...)
	runtime.Goexit()
}
func (r *recordingTB) Fatal(args ...any) { r.Fatalf("%s", fmt.Sprint(args...)) }

// runRecorded runs one case on a recordingTB in a goroutine of its own and
// returns what failed it ("" when it passed).
func runRecorded(t *testing.T, run func(testing.TB)) string {
	r := &recordingTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		run(r)
	}()
	<-done
	if !r.failed {
		return ""
	}
	return r.msg
}

// sharedTags is a drifting fake's channel: its tags continue one
// sequence shared by every channel, as the fake once numbered them.
type sharedTags struct {
	fakeChannel
	base uint64
}

func (s sharedTags) next(t testing.TB) suiteDelivery {
	d := s.fakeChannel.next(t)
	d.Tag += s.base
	return d
}
func (s sharedTags) ack(t testing.TB, tag uint64, multiple bool) error {
	return s.fakeChannel.ack(t, tag-s.base, multiple)
}

// unflagged is a drifting fake's channel: it never sets the redelivered
// flag.
type unflagged struct{ fakeChannel }

func (u unflagged) next(t testing.TB) suiteDelivery {
	d := u.fakeChannel.next(t)
	d.Redelivered = false
	return d
}

// TestDeliverySuiteCatchesDriftingFakes shows the delivery suite failing
// fakes that drift from RabbitMQ: one whose tags run on across channels,
// one that never flags a redelivery.
func TestDeliverySuiteCatchesDriftingFakes(t *testing.T) {
	drifts := []struct {
		name, caseName string
		wrap           func(c fakeChannel, opened int) suiteChannel
	}{
		{"tags shared by every channel", "TagsStartAgainOnANewChannel", func(c fakeChannel, opened int) suiteChannel {
			return sharedTags{c, uint64(100 * (opened - 1))}
		}},
		{"no redelivered flag", "CloseRequeuesUnackedRedelivered", func(c fakeChannel, _ int) suiteChannel { return unflagged{c} }},
	}
	for _, d := range drifts {
		be := newFakeBackend(t)
		consume, opened := be.consume, 0
		be.consume = func(t testing.TB, prefetch int) suiteChannel {
			opened++
			return d.wrap(consume(t, prefetch).(fakeChannel), opened)
		}
		run := deliveryCase(t, d.caseName)
		if msg := runRecorded(t, func(tb testing.TB) { run(tb, be) }); msg == "" {
			t.Errorf("%s: case %s passed a fake with %s", d.name, d.caseName, d.name)
		} else {
			t.Logf("%s: %s fails: %s", d.name, d.caseName, msg)
		}
		if msg := runRecorded(t, func(tb testing.TB) { run(tb, newFakeBackend(t)) }); msg != "" {
			t.Errorf("%s: the faithful fake fails: %s", d.caseName, msg)
		}
	}
}

// deliveryCase returns the delivery suite's case named name.
func deliveryCase(t *testing.T, name string) func(testing.TB, brokerBackend) {
	for _, c := range deliveryCases {
		if c.name == name {
			return c.run
		}
	}
	t.Fatalf("no delivery case %s", name)
	return nil
}

var queueSeq atomic.Int64

// rabbitMQ returns the RabbitMQ the suites run on and how to restart it:
// the one at OUTBOX_TEST_AMQP_URL when set (restarted only when
// OUTBOX_TEST_RABBITMQ_CONTAINER names its Docker container, else restart
// is nil), else the test environment's, which it restarts through
// testenv. Skipped under -short.
func rabbitMQ(t *testing.T) (url string, restart func(t testing.TB)) {
	t.Helper()
	if testing.Short() {
		t.Skip("needs RabbitMQ (skipped with -short)")
	}
	url = os.Getenv("OUTBOX_TEST_AMQP_URL")
	if url == "" {
		env := testenv.StartT(t, testenv.Options{})
		url = env.DirectAMQPURL()
		restart = func(t testing.TB) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			if err := env.RabbitMQ().Restart(ctx); err != nil {
				t.Fatal(err)
			}
			if err := env.RabbitMQ().WaitReady(ctx); err != nil {
				t.Fatal(err)
			}
		}
	} else if container := os.Getenv("OUTBOX_TEST_RABBITMQ_CONTAINER"); container != "" {
		restart = func(t testing.TB) { restartContainer(t, container, url) }
	}
	return url, restart
}

// TestBrokerSuiteRabbitMQ runs the broker suite on RabbitMQ (see
// rabbitMQ). Skipped under -short.
func TestBrokerSuiteRabbitMQ(t *testing.T) {
	url, restart := rabbitMQ(t)
	runBrokerSuite(t, func(t testing.TB) brokerBackend { return newRabbitBackend(t, url, restart) })
}

// TestDeliverySuiteRabbitMQ runs the delivery suite on RabbitMQ (see
// rabbitMQ). Skipped under -short.
func TestDeliverySuiteRabbitMQ(t *testing.T) {
	url, restart := rabbitMQ(t)
	runDeliverySuite(t, func(t testing.TB) brokerBackend { return newRabbitBackend(t, url, restart) })
}

// newRabbitBackend declares a topology of the test's own on the broker at
// url (its queue bound with "order.#", dead-lettering to queue.dead),
// removed when the test ends, and drives it through relay.AMQPPublisher
// and amqp091 channels.
func newRabbitBackend(t testing.TB, url string, restart func(t testing.TB)) brokerBackend {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n := queueSeq.Add(1)
	exchange := fmt.Sprintf("simsuite.%d.%d", os.Getpid(), n)
	queue := exchange + ".q"
	if err := relay.DeclareTopology(ctx, url, exchange, queue, "order.#"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = relay.WithChannel(ctx, url, func(ch *amqp.Channel) error {
			_, _ = ch.QueueDelete(queue, false, false, false)
			_, _ = ch.QueueDelete(queue+".dead", false, false, false)
			_ = ch.ExchangeDelete(queue+".dlx", false, false)
			return ch.ExchangeDelete(exchange, false, false)
		})
	})
	getFrom := func(t testing.TB, q string) (amqp.Delivery, bool) {
		t.Helper()
		var (
			got amqp.Delivery
			ok  bool
		)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		err := relay.WithChannel(ctx, url, func(ch *amqp.Channel) error {
			var err error
			got, ok, err = ch.Get(q, true)
			return err
		})
		if err != nil {
			t.Fatalf("getting from %s: %v", q, err)
		}
		return got, ok
	}
	return brokerBackend{
		publish: func(t testing.TB, m relay.Message, opts relay.PublishOptions) error {
			pub, err := relay.NewAMQPPublisher(relay.AMQPConfig{URL: url, Exchange: exchange, Options: &opts})
			if err != nil {
				t.Fatal(err)
			}
			defer pub.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			c, err := pub.Publish(ctx, m)
			if err != nil {
				return err
			}
			return c.Wait(ctx)
		},
		get: func(t testing.TB) (relay.Message, bool) {
			d, ok := getFrom(t, queue)
			return relay.Message{ID: d.MessageId, Type: d.Type, CorrelationID: d.CorrelationId, Payload: d.Body}, ok
		},
		restart: restart,
		consume: func(t testing.TB, prefetch int) suiteChannel { return openRabbitChannel(t, url, queue, prefetch) },
		dead: func(t testing.TB, n int) []string {
			t.Helper()
			var ids []string
			for deadline := time.Now().Add(10 * time.Second); len(ids) < n; {
				d, ok := getFrom(t, queue+".dead")
				if ok {
					ids = append(ids, d.MessageId)
					continue
				}
				if time.Now().After(deadline) {
					t.Fatalf("dead-letter queue gave %v within 10 s, want %d messages", ids, n)
				}
				time.Sleep(20 * time.Millisecond)
			}
			return ids
		},
	}
}

// rabbitChannel is a suiteChannel on RabbitMQ: a connection of its own
// with one channel consuming the queue with manual acknowledgements.
type rabbitChannel struct {
	conn       *amqp.Connection
	ch         *amqp.Channel
	deliveries <-chan amqp.Delivery
	prefetch   int
}

func openRabbitChannel(t testing.TB, url, queue string, prefetch int) *rabbitChannel {
	t.Helper()
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Qos(prefetch, 0, false); err != nil {
		t.Fatal(err)
	}
	deliveries, err := ch.Consume(queue, "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	return &rabbitChannel{conn: conn, ch: ch, deliveries: deliveries, prefetch: prefetch}
}

func (r *rabbitChannel) next(t testing.TB) suiteDelivery {
	t.Helper()
	select {
	case d, ok := <-r.deliveries:
		if !ok {
			t.Fatal("the channel closed while a delivery was awaited")
		}
		return suiteDelivery{d.MessageId, d.DeliveryTag, d.Redelivered}
	case <-time.After(10 * time.Second):
		t.Fatal("no delivery pushed to the channel within 10 s")
	}
	return suiteDelivery{}
}

// none waits half a second: RabbitMQ pushes a delivery it may push within
// milliseconds of the settle that allows it.
func (r *rabbitChannel) none(t testing.TB) {
	t.Helper()
	select {
	case d, ok := <-r.deliveries:
		if ok {
			t.Fatalf("delivered %s (tag %d), want nothing", d.MessageId, d.DeliveryTag)
		}
	case <-time.After(500 * time.Millisecond):
	}
}

// sync makes a round trip on the channel after an asynchronous
// acknowledgement: it fails when the broker closed the channel for it.
func (r *rabbitChannel) sync(err error) error {
	if err != nil {
		return err
	}
	return r.ch.Qos(r.prefetch, 0, false)
}

func (r *rabbitChannel) ack(_ testing.TB, tag uint64, multiple bool) error {
	return r.sync(r.ch.Ack(tag, multiple))
}

func (r *rabbitChannel) nack(_ testing.TB, tag uint64, multiple, requeue bool) error {
	return r.sync(r.ch.Nack(tag, multiple, requeue))
}

func (r *rabbitChannel) reject(_ testing.TB, tag uint64, requeue bool) error {
	return r.sync(r.ch.Reject(tag, requeue))
}

// close closes the channel's connection, as a consumer that goes away
// does.
func (r *rabbitChannel) close(testing.TB) { _ = r.conn.Close() }

// restartContainer restarts the broker's container and waits until it
// accepts connections again.
func restartContainer(t testing.TB, name, url string) {
	t.Helper()
	if out, err := exec.Command("docker", "restart", name).CombinedOutput(); err != nil {
		t.Fatalf("docker restart %s: %v: %s", name, err, out)
	}
	deadline := time.Now().Add(90 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := relay.WithChannel(ctx, url, func(*amqp.Channel) error { return nil })
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("broker not back within 90s after restart: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
