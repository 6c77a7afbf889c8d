package relay_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxlab/outboxlab/relay"
)

// brokerEnv is one test's broker topology: an exchange of its own and a
// queue bound to it with "#".
type brokerEnv struct {
	URL      string
	Exchange string
	Queue    string
}

// newBroker declares a fresh exchange and queue named after the test and
// deletes them when the test ends. With bind false the queue is not
// created, so every publish is unroutable.
func newBroker(t testing.TB, bind bool) *brokerEnv {
	t.Helper()
	url := baseAMQPURL(t)
	name := strings.Trim(nonIdent.ReplaceAllString(strings.ToLower(t.Name()), "_"), "_")
	if len(name) > 60 {
		name = name[len(name)-60:]
	}
	b := &brokerEnv{URL: url, Exchange: fmt.Sprintf("t%d.%s.events", schemaSeq.Add(1), name)}
	queue := ""
	if bind {
		queue = strings.TrimSuffix(b.Exchange, ".events") + ".q"
		b.Queue = queue
	}
	// Names repeat from one run to the next: remove what an interrupted
	// run may have left, messages included.
	deleteTopology(t, url, b.Exchange, queue)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := relay.DeclareTopology(ctx, url, b.Exchange, queue, "#"); err != nil {
		t.Fatalf("declaring topology: %v", err)
	}
	t.Cleanup(func() { deleteTopology(t, url, b.Exchange, queue) })
	return b
}

// deleteTopology removes Topology{exchange, queue} and every queue named
// extra. Deleting what does not exist is not an error.
func deleteTopology(t testing.TB, url, exchange, queue string, extra ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err := relay.Topology{Exchange: exchange, Queue: queue}.Remove(ctx, url)
	if len(extra) > 0 {
		err = errors.Join(err, relay.WithChannel(ctx, url, func(ch *amqp.Channel) error {
			for _, q := range extra {
				if _, err := ch.QueueDelete(q, false, false, false); err != nil {
					return err
				}
			}
			return nil
		}))
	}
	if err != nil {
		t.Logf("deleting broker topology: %v", err)
	}
}

// extraQueue declares a non-durable queue bound to b's exchange with key
// and args, and deletes it (with its messages) before and after the test.
func extraQueue(t testing.TB, b *brokerEnv, name, key string, args amqp.Table) string {
	t.Helper()
	queue := b.Exchange + "." + name
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err := relay.WithChannel(ctx, b.URL, func(ch *amqp.Channel) error {
		if _, err := ch.QueueDelete(queue, false, false, false); err != nil {
			return err
		}
		if _, err := ch.QueueDeclare(queue, false, false, false, false, args); err != nil {
			return err
		}
		return ch.QueueBind(queue, key, b.Exchange, false, nil)
	})
	if err != nil {
		t.Fatalf("declaring queue %s: %v", queue, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_ = relay.WithChannel(ctx, b.URL, func(ch *amqp.Channel) error {
			_, err := ch.QueueDelete(queue, false, false, false)
			return err
		})
	})
	return queue
}

// collector consumes a queue with auto-ack and keeps every delivery.
type collector struct {
	mu   sync.Mutex
	got  []amqp.Delivery
	byID map[string]int
	conn *amqp.Connection
	done chan struct{}
}

// collect starts consuming queue until the test ends.
func collect(t testing.TB, url, queue string) *collector {
	t.Helper()
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatalf("collector: %v", err)
	}
	ch, err := conn.Channel()
	if err != nil {
		t.Fatalf("collector: %v", err)
	}
	if err := ch.Qos(500, 0, false); err != nil {
		t.Fatalf("collector: %v", err)
	}
	ds, err := ch.Consume(queue, "", true, false, false, false, nil)
	if err != nil {
		t.Fatalf("collector: %v", err)
	}
	c := &collector{byID: map[string]int{}, conn: conn, done: make(chan struct{})}
	go func() {
		defer close(c.done)
		for d := range ds {
			c.mu.Lock()
			c.got = append(c.got, d)
			c.byID[d.MessageId]++
			c.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = conn.Close()
		<-c.done
	})
	return c
}

// counts returns the number of deliveries, of distinct ids, and of ids
// delivered more than once.
func (c *collector) counts() (deliveries, distinct, duplicated int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range c.byID {
		if n > 1 {
			duplicated++
		}
	}
	return len(c.got), len(c.byID), duplicated
}

func (c *collector) times(id string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.byID[id]
}

func (c *collector) deliveries() []amqp.Delivery {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]amqp.Delivery(nil), c.got...)
}
