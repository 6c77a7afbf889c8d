package chaos_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/outboxlab/outboxlab/chaos"
	"github.com/outboxlab/outboxlab/history"
	"github.com/outboxlab/outboxlab/relay"
)

func TestContainerFaultsOnPostgres(t *testing.T) {
	env := newFixture(t)
	ctx := context.Background()
	url := env.dbURL
	pg := env.postgres
	rec, n, kill, stop, pause, restart := containerFaults(t, pg, history.ClassDB)
	waitPG(t, ctx, url, 3*time.Minute)

	for _, f := range []*chaos.ContainerFault{kill, stop} {
		t.Run(f.Name(), func(t *testing.T) {
			conn, err := pgConnect(ctx, url)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(ctx)
			startStop(t, ctx, rec, n, f, func() {
				if _, _, err := timed(ctx, conn, "SELECT 'x'", 5*time.Second); err == nil {
					t.Errorf("query on an open connection succeeded after %s", f.Name())
				}
				if _, _, err := pgQuery(ctx, url, "SELECT 'x'", 5*time.Second); err == nil {
					t.Errorf("new connection succeeded after %s", f.Name())
				}
			})
			waitPG(t, ctx, url, 3*time.Minute)
		})
	}
	t.Run(pause.Name(), func(t *testing.T) {
		conn, err := pgConnect(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		startStop(t, ctx, rec, n, pause, func() {
			_, took, err := pgQuery(ctx, url, "SELECT 'x'", 2*time.Second)
			if err == nil {
				t.Error("a paused database answered")
			}
			if took < 1900*time.Millisecond {
				t.Errorf("query on a paused database failed after %s (%v), it should hang", took, err)
			}
		})
		// The connection opened before the pause lives on: a pause loses
		// no state.
		if v, _, err := timed(ctx, conn, "SELECT 'thawed'", 10*time.Second); err != nil || v != "thawed" {
			t.Fatalf("connection from before the pause: %q, %v", v, err)
		}
		waitPG(t, ctx, url, 30*time.Second)
	})
	t.Run(restart.Name(), func(t *testing.T) {
		conn, err := pgConnect(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		var before string
		if err := conn.QueryRow(ctx, "SELECT pg_postmaster_start_time()::text").Scan(&before); err != nil {
			t.Fatal(err)
		}
		startStop(t, ctx, rec, n, restart, func() {})
		if _, _, err := timed(ctx, conn, "SELECT 'x'", 5*time.Second); err == nil {
			t.Error("a connection from before the restart still answers")
		}
		waitPG(t, ctx, url, 3*time.Minute)
		after, _, err := pgQuery(ctx, url, "SELECT pg_postmaster_start_time()::text", 10*time.Second)
		if err != nil || after == before {
			t.Fatalf("postmaster start time %q -> %q (%v): the server did not restart", before, after, err)
		}
	})
	if err := n.RequireFired(); err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", n.Summary())
}

func TestContainerFaultsOnRabbitMQ(t *testing.T) {
	env := newFixture(t)
	ctx := context.Background()
	rmq := env.rabbitmq
	rec, n, kill, stop, pause, restart := containerFaults(t, rmq, history.ClassBroker)
	exchange := fmt.Sprintf("chaos.container.%d", time.Now().UnixNano())
	queue := exchange + ".q"
	// declare waits for the broker and (re)declares the topology; the
	// queue is durable, so it survives kills and restarts.
	declare := func(t *testing.T, within time.Duration) {
		t.Helper()
		wctx, cancel := context.WithTimeout(ctx, within)
		defer cancel()
		var last error
		if err := chaos.WaitFor(wctx, 250*time.Millisecond, func(ctx context.Context) (bool, error) {
			last = relay.DeclareTopology(ctx, env.amqpURL, exchange, queue, "#")
			return last == nil, nil
		}); err != nil {
			t.Fatalf("broker not back within %s: %v (last: %v)", within, err, last)
		}
	}
	declare(t, 3*time.Minute)
	t.Cleanup(func() {
		_ = relay.Topology{Exchange: exchange, Queue: queue}.Remove(context.Background(), env.amqpURL)
	})
	confirmed := 0
	// healed checks that a publish goes through again and that every
	// message confirmed so far, before the fault included, is in the
	// durable queue: persistent, confirmed messages survive a kill.
	healed := func(t *testing.T) {
		t.Helper()
		declare(t, 3*time.Minute)
		if err := publishOnce(ctx, env.amqpURL, exchange, fmt.Sprintf("after-%d", confirmed), 20*time.Second); err != nil {
			t.Fatalf("publish after heal: %v", err)
		}
		confirmed++
		got, err := queued(ctx, env.amqpURL, queue)
		if err != nil || got < confirmed {
			t.Fatalf("queue holds %d messages (%v), %d were confirmed", got, err, confirmed)
		}
	}
	for _, f := range []*chaos.ContainerFault{kill, stop, pause} {
		t.Run(f.Name(), func(t *testing.T) {
			pub := warmPublisher(t, ctx, env.amqpURL, exchange, 3*time.Second, "before-"+f.Kind())
			confirmed++
			startStop(t, ctx, rec, n, f, func() {
				publishFailsAsBroker(t, ctx, pub, "during-"+f.Kind(), "after "+f.Name())
			})
			healed(t)
		})
	}
	t.Run(restart.Name(), func(t *testing.T) {
		pub, err := relay.NewAMQPPublisher(relay.AMQPConfig{URL: env.amqpURL, Exchange: exchange, DialTimeout: 3 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer pub.Close()
		if err := publishWith(ctx, pub, "before-restart"); err != nil {
			t.Fatal(err)
		}
		confirmed++
		dials := pub.Dials()
		startStop(t, ctx, rec, n, restart, func() {})
		declare(t, 3*time.Minute)
		// The old connection died with the broker: the publisher has to
		// dial again.
		pctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		if err := chaos.WaitFor(pctx, 250*time.Millisecond, func(ctx context.Context) (bool, error) {
			return publishWith(ctx, pub, "after-restart") == nil, nil
		}); err != nil {
			t.Fatalf("publisher did not recover after restart: %v", err)
		}
		confirmed++
		if pub.Dials() == dials {
			t.Fatal("the publisher kept its connection across a broker restart")
		}
		healed(t)
	})
	if err := n.RequireFired(); err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", n.Summary())
}

// containerFaults registers a kill, a stop, a pause and a restart of c
// (faults of class) with a nemesis of a fresh recorder, and heals them
// all when the test ends.
func containerFaults(t *testing.T, c chaos.Container, class history.FaultClass) (rec *history.Recorder, n *chaos.Nemesis, kill, stop, pause, restart *chaos.ContainerFault) {
	t.Helper()
	rec = &history.Recorder{}
	kill = chaos.KillContainer(c, class)
	stop = chaos.StopContainer(c, class, 10*time.Second)
	pause = chaos.PauseContainer(c, class)
	restart = chaos.RestartContainer(c, class)
	n, err := chaos.NewNemesis(rec, kill, stop, pause, restart)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := n.HealAll(context.Background()); err != nil {
			t.Errorf("healing all: %v", err)
		}
	})
	return rec, n, kill, stop, pause, restart
}
