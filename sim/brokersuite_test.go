package sim

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
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
	publish func(t *testing.T, m relay.Message, opts relay.PublishOptions) error
	// get takes the head of the queue; false when it is empty.
	get func(t *testing.T) (relay.Message, bool)
	// restart restarts the broker; nil when the backend cannot.
	restart func(t *testing.T)
}

// runBrokerSuite runs the cases every broker must pass for the
// simulation's fake to stand in for RabbitMQ.
func runBrokerSuite(t *testing.T, newBackend func(t *testing.T) brokerBackend) {
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

func TestBrokerSuiteFake(t *testing.T) {
	runBrokerSuite(t, func(t *testing.T) brokerBackend {
		b := NewBroker()
		b.Bind("order.#")
		return brokerBackend{
			publish: func(_ *testing.T, m relay.Message, opts relay.PublishOptions) error {
				switch b.Publish(m, opts) {
				case Nacked:
					return relay.ErrNacked
				case Returned:
					return relay.ErrReturned
				}
				return nil
			},
			get: func(*testing.T) (relay.Message, bool) {
				m, ok := b.Get()
				return m.Message, ok
			},
			restart: func(*testing.T) { b.Restart() },
		}
	})
}

var queueSeq atomic.Int64

// TestBrokerSuiteRabbitMQ runs the suite on RabbitMQ: the one at
// OUTBOX_TEST_AMQP_URL when set (its restart case then runs only when
// OUTBOX_TEST_RABBITMQ_CONTAINER names its Docker container), else the
// test environment's, which it restarts through testenv. Skipped under
// -short.
func TestBrokerSuiteRabbitMQ(t *testing.T) {
	if testing.Short() {
		t.Skip("needs RabbitMQ (skipped with -short)")
	}
	url := os.Getenv("OUTBOX_TEST_AMQP_URL")
	var restart func(t *testing.T)
	if url == "" {
		env := testenv.StartT(t, testenv.Options{})
		url = env.DirectAMQPURL()
		restart = func(t *testing.T) {
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
		restart = func(t *testing.T) { restartContainer(t, container, url) }
	}
	runBrokerSuite(t, func(t *testing.T) brokerBackend {
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
		be := brokerBackend{
			publish: func(t *testing.T, m relay.Message, opts relay.PublishOptions) error {
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
			get: func(t *testing.T) (relay.Message, bool) {
				var (
					got relay.Message
					ok  bool
				)
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				err := relay.WithChannel(ctx, url, func(ch *amqp.Channel) error {
					d, found, err := ch.Get(queue, true)
					if err != nil || !found {
						return err
					}
					got = relay.Message{ID: d.MessageId, Type: d.Type, CorrelationID: d.CorrelationId, Payload: d.Body}
					ok = true
					return nil
				})
				if err != nil {
					t.Fatalf("getting from %s: %v", queue, err)
				}
				return got, ok
			},
		}
		be.restart = restart
		return be
	})
}

// restartContainer restarts the broker's container and waits until it
// accepts connections again.
func restartContainer(t *testing.T, name, url string) {
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
