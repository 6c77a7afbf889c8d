package testenv

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// TestCluster starts an environment with a three-node RabbitMQ cluster
// and checks what the cluster tier relies on: all three nodes running; a
// broker link per node through toxiproxy, the link's name listing them
// all; a quorum queue that keeps its confirmed messages when a node is
// killed, read from another node; a node taken off the network is seen
// down by the others and back once healed.
func TestCluster(t *testing.T) {
	env := StartT(t, Options{BrokerNodes: 3})
	t.Logf("environment with 3 nodes up and formed in %s", env.ReadyAfter().Round(time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	cl := env.Cluster()
	if cl == nil || cl.Len() != 3 || env.RabbitMQ() != nil {
		t.Fatalf("cluster %v, single broker %v", cl, env.RabbitMQ())
	}
	urls := strings.Split(env.AMQPURL(LinkRelayBroker), ",")
	if len(urls) != 3 || urls[1] != env.AMQPURL(NodeLink(LinkRelayBroker, 2)) {
		t.Fatalf("relay-broker lists %v", urls)
	}
	for _, u := range urls {
		if err := pingRabbitMQ(ctx, u); err != nil {
			t.Fatalf("through %s: %v", u, err)
		}
	}
	var err error
	running, err := cl.Running(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(running) != "[rabbit@rabbitmq-1 rabbit@rabbitmq-2 rabbit@rabbitmq-3]" {
		t.Fatalf("running nodes %v", running)
	}

	// A quorum queue declared and filled through node 1.
	pub := newPublisher(ctx, t, urls[0])
	const queue = "testenv.quorum"
	if _, err := pub.ch.QueueDeclare(queue, true, false, false, false, amqp.Table{"x-queue-type": "quorum"}); err != nil {
		t.Fatalf("declaring a quorum queue: %v", err)
	}
	const n = 20
	for i := range n {
		if err := pub.publish(ctx, queue, fmt.Sprintf("m%d", i)); err != nil {
			t.Fatalf("publishing m%d: %v", i, err)
		}
	}
	if err := cl.Node(0).Kill(ctx); err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	// The queue elects a new leader first: until then a get fails and
	// closes its channel, so each try has a connection of its own.
	err = WaitUntil(ctx, 100*time.Millisecond, func(ctx context.Context) error {
		conn, err := DialAMQP(ctx, cl.AMQPURL(1))
		if err != nil {
			return err
		}
		defer conn.Close()
		ch, err := conn.Channel()
		if err != nil {
			return err
		}
		for len(got) < n {
			m, ok, err := ch.Get(queue, false)
			if err != nil {
				return err
			}
			if !ok {
				return fmt.Errorf("%d of %d messages read", len(got), n)
			}
			if err := m.Ack(false); err != nil {
				return err
			}
			got[string(m.Body)] = true
		}
		return nil
	})
	if err != nil {
		t.Fatalf("reading the quorum queue from node 2 with node 1 killed: %v", err)
	}
	if err := cl.Node(0).Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := cl.WaitRunning(ctx, 3); err != nil {
		t.Fatalf("after node 1 came back: %v", err)
	}

	// A partition of node 3: the others see two running, then three.
	if err := cl.Partition(ctx, 2); err != nil {
		t.Fatal(err)
	}
	healed := false
	t.Cleanup(func() {
		if !healed {
			_ = cl.Heal(context.Background(), 2)
		}
	})
	if err := cl.WaitRunning(ctx, 2); err != nil {
		t.Fatalf("node 3 cut off: %v", err)
	}
	if err := cl.Heal(ctx, 2); err != nil {
		t.Fatal(err)
	}
	healed = true
	if err := cl.WaitRunning(ctx, 3); err != nil {
		t.Fatalf("after the heal: %v", err)
	}
	// A node that comes back from pause_minority restarts its listener:
	// it takes connections again within a bound, not at once.
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := WaitUntil(wctx, 200*time.Millisecond, func(ctx context.Context) error { return pingRabbitMQ(ctx, cl.AMQPURL(2)) }); err != nil {
		t.Errorf("node 3's published port after the heal: %v", err)
	}
}
