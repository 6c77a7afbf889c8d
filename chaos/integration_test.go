package chaos_test

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	seedpkg "github.com/outboxlab/outboxlab/seed"

	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxlab/outboxlab/chaos"
	"github.com/outboxlab/outboxlab/history"
	"github.com/outboxlab/outboxlab/relay"
)

// pgConnect opens one connection to url within 10 s.
func pgConnect(ctx context.Context, url string) (*pgx.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return pgx.Connect(ctx, url)
}

// pgQuery runs q returning one text value on a fresh connection to url,
// within timeout, and returns the value and how long it all took.
func pgQuery(ctx context.Context, url, q string, timeout time.Duration) (string, time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	start := time.Now()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return "", time.Since(start), fmt.Errorf("connecting: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var v string
	err = conn.QueryRow(ctx, q).Scan(&v)
	return v, time.Since(start), err
}

// timed runs q returning one text value on conn within timeout.
func timed(ctx context.Context, conn *pgx.Conn, q string, timeout time.Duration) (string, time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	start := time.Now()
	var v string
	err := conn.QueryRow(ctx, q).Scan(&v)
	return v, time.Since(start), err
}

// waitPG waits until a fresh connection to url answers, or fails the test.
func waitPG(t *testing.T, ctx context.Context, url string, within time.Duration) {
	t.Helper()
	wctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	var last error
	err := chaos.WaitFor(wctx, 200*time.Millisecond, func(ctx context.Context) (bool, error) {
		_, _, last = pgQuery(ctx, url, "SELECT 'up'", 5*time.Second)
		return last == nil, nil
	})
	if err != nil {
		t.Fatalf("PostgreSQL did not answer within %s: %v (last error: %v)", within, err, last)
	}
}

// startStop injects f through n, runs during, heals through n, checks the
// fault's window in the history and its hit count, and heals once more to
// show heals repeat safely.
func startStop(t *testing.T, ctx context.Context, rec *history.Recorder, n *chaos.Nemesis, f chaos.Fault, during func()) {
	t.Helper()
	before := f.Hits()
	from := rec.Len()
	if err := n.Start(ctx, f.Name()); err != nil {
		t.Fatalf("injecting %s: %v", f.Name(), err)
	}
	if got := f.Hits(); got != before+1 {
		t.Fatalf("%s: hits %d after injection, want %d", f.Name(), got, before+1)
	}
	func() {
		defer func() {
			if err := n.Stop(ctx, f.Name()); err != nil {
				t.Errorf("healing %s: %v", f.Name(), err)
			}
		}()
		during()
	}()
	if err := n.HealAll(ctx); err != nil {
		t.Fatalf("second heal of %s: %v", f.Name(), err)
	}
	var got []string
	for _, op := range rec.Ops()[from:] {
		if op.Process == chaos.NemesisProcess && op.Fault != nil && op.Fault.Name == f.Name() {
			got = append(got, string(op.Type)+" "+string(op.F))
		}
	}
	want := "invoke fault-start,ok fault-start,invoke fault-stop,ok fault-stop"
	if strings.Join(got, ",") != want {
		t.Fatalf("%s: history %v, want %s", f.Name(), got, want)
	}
	t.Logf("%-36s class=%-7s kind=%-10s hits=%d", f.Name(), f.Class(), f.Kind(), f.Hits())
}

func TestToxicsOnAppDB(t *testing.T) {
	env := newFixture(t)
	ctx := context.Background()
	link := env.appDB
	url := env.dbURL
	rec := &history.Recorder{}

	down := chaos.Down(link)
	timeout := chaos.Timeout(link, chaos.Downstream, 0)
	latency := chaos.Latency(link, chaos.Downstream, time.Second, 0)
	latencyUp := chaos.Latency(link, chaos.Upstream, time.Second, 0)
	reset := chaos.ResetPeer(link, chaos.Downstream, 0)
	bandwidth := chaos.Bandwidth(link, chaos.Downstream, 5)
	slicer := chaos.Slicer(link, chaos.Downstream, 100, 0, 20*time.Millisecond)
	n, err := chaos.NewNemesis(rec, down, timeout, latency, latencyUp, reset, bandwidth, slicer)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := n.HealAll(context.Background()); err != nil {
			t.Errorf("healing all: %v", err)
		}
	})
	if v, _, err := pgQuery(ctx, url, "SELECT 'up'", 10*time.Second); err != nil || v != "up" {
		t.Fatalf("PostgreSQL through %s before any fault: %q, %v", link.Name(), v, err)
	}
	// afterHeal checks that a fresh connection works again and that the
	// proxy has no toxic left (so nothing slows it any more).
	afterHeal := func(t *testing.T) {
		t.Helper()
		v, _, err := pgQuery(ctx, url, "SELECT 'healed'", 10*time.Second)
		if err != nil || v != "healed" {
			t.Fatalf("after heal: %q, %v", v, err)
		}
		proxy, err := env.env.Proxy(link.Name())
		if err != nil {
			t.Fatal(err)
		}
		if !proxy.Enabled {
			t.Fatal("proxy still disabled after heal")
		}
		toxics, err := link.Proxy().Toxics()
		if err != nil {
			t.Fatal(err)
		}
		if len(toxics) != 0 {
			t.Fatalf("toxics left after heal: %+v", toxics)
		}
	}

	t.Run("down", func(t *testing.T) {
		conn, err := pgConnect(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		startStop(t, ctx, rec, n, down, func() {
			if _, _, err := timed(ctx, conn, "SELECT 'x'", 5*time.Second); err == nil {
				t.Error("query on an open connection succeeded while the link was down")
			}
			if _, _, err := pgQuery(ctx, url, "SELECT 'x'", 5*time.Second); err == nil {
				t.Error("new connection succeeded while the link was down")
			}
		})
		afterHeal(t)
	})
	t.Run("timeout", func(t *testing.T) {
		conn, err := pgConnect(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		startStop(t, ctx, rec, n, timeout, func() {
			_, took, err := timed(ctx, conn, "SELECT 'x'", 2*time.Second)
			if err == nil {
				t.Error("query answered through a black hole")
			}
			if took < 1900*time.Millisecond {
				t.Errorf("query failed after %s (%v): it should hang until its deadline", took, err)
			}
		})
		afterHeal(t)
	})
	for _, f := range []*chaos.Toxic{latency, latencyUp} {
		t.Run(f.Name(), func(t *testing.T) {
			conn, err := pgConnect(ctx, url)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(ctx)
			startStop(t, ctx, rec, n, f, func() {
				v, took, err := timed(ctx, conn, "SELECT 'slow'", 10*time.Second)
				if err != nil || v != "slow" {
					t.Errorf("query under latency: %q, %v", v, err)
				}
				if took < time.Second {
					t.Errorf("query under 1s latency took %s", took)
				}
			})
			v, took, err := timed(ctx, conn, "SELECT 'fast'", 10*time.Second)
			if err != nil || v != "fast" || took >= time.Second {
				t.Fatalf("same connection after heal: %q in %s, %v", v, took, err)
			}
			afterHeal(t)
		})
	}
	t.Run("reset_peer", func(t *testing.T) {
		conn, err := pgConnect(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		startStop(t, ctx, rec, n, reset, func() {
			if _, _, err := timed(ctx, conn, "SELECT 'x'", 5*time.Second); err == nil {
				t.Error("query on an open connection survived reset_peer")
			}
			if _, _, err := pgQuery(ctx, url, "SELECT 'x'", 5*time.Second); err == nil {
				t.Error("new connection survived reset_peer")
			}
		})
		afterHeal(t)
	})
	t.Run("bandwidth", func(t *testing.T) {
		conn, err := pgConnect(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		startStop(t, ctx, rec, n, bandwidth, func() {
			// 10 kB at 5 kB/s: at least a second and a half.
			v, took, err := timed(ctx, conn, "SELECT repeat('x', 10000)", 30*time.Second)
			if err != nil || len(v) != 10000 {
				t.Errorf("query under bandwidth limit: %d bytes, %v", len(v), err)
			}
			if took < 1500*time.Millisecond {
				t.Errorf("10 kB at 5 kB/s took %s", took)
			}
		})
		afterHeal(t)
	})
	t.Run("slicer", func(t *testing.T) {
		conn, err := pgConnect(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		startStop(t, ctx, rec, n, slicer, func() {
			// 10 kB in 100-byte slices 20 ms apart: about two seconds,
			// with every byte intact.
			v, took, err := timed(ctx, conn, "SELECT repeat('y', 10000)", 30*time.Second)
			if err != nil || v != strings.Repeat("y", 10000) {
				t.Errorf("query under slicer: %d bytes, %v", len(v), err)
			}
			if took < time.Second {
				t.Errorf("10 kB sliced in 100-byte pieces 20 ms apart took %s", took)
			}
		})
		afterHeal(t)
	})
	if err := n.RequireFired(); err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", n.Summary())

	// A schedule drawn from the seed, run by the nemesis during a safety
	// phase under a query workload, then healed in the liveness phase.
	t.Run("schedule", func(t *testing.T) {
		steps := drawSchedule(*seed, n.Faults(), 8*time.Second)
		t.Logf("SEED=%d (replay: go test ./chaos -run 'TestToxicsOnAppDB/schedule' -chaos.seed=%d): %+v", *seed, *seed, steps)
		before := n.Hits()
		p := &chaos.Phases{Recorder: rec, Nemesis: n, Safety: 8 * time.Second, Steps: steps, DrainWithin: 30 * time.Second}
		var ok, failed int
		err = p.RunSafety(ctx, func(ctx context.Context) error {
			tick := time.NewTicker(20 * time.Millisecond)
			defer tick.Stop()
			for {
				if _, _, err := pgQuery(ctx, url, "SELECT 'w'", time.Second); err != nil {
					if ctx.Err() == nil {
						failed++
					}
				} else {
					ok++
				}
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-tick.C:
				}
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		took, err := p.RunLiveness(ctx, func(ctx context.Context) (bool, error) {
			_, _, err := pgQuery(ctx, url, "SELECT 'drained'", 2*time.Second)
			return err == nil, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		p.StartCheck()
		t.Logf("workload: %d queries answered, %d failed; liveness took %s", ok, failed, took.Round(time.Millisecond))
		for _, name := range scheduled(steps) {
			f, _ := n.Fault(name)
			if got := f.Hits() - before[name]; got < 1 {
				t.Errorf("%s was scheduled but fired %d times", name, got)
			} else {
				t.Logf("%-32s fired %d time(s) in the schedule", name, got)
			}
		}
		if len(n.Open()) != 0 {
			t.Fatalf("faults still open after liveness: %v", n.Open())
		}
		if toxics, err := link.Proxy().Toxics(); err != nil || len(toxics) != 0 {
			t.Fatalf("toxics left after liveness: %+v, %v", toxics, err)
		}
		if ok == 0 {
			t.Fatal("the workload never got an answer during the safety phase")
		}
	})
}

var seed = flag.Uint64("chaos.seed", 1, "seed of the fault schedule of TestToxicsOnAppDB/schedule")

// drawSchedule draws a schedule over faults within span from seed: each
// fault at least once, windows of 300 ms to 1.5 s, one fault at a time.
func drawSchedule(s uint64, faults []chaos.Fault, span time.Duration) []chaos.Step {
	rng := seedpkg.Rand(s, seedpkg.Faults)
	order := rng.Perm(len(faults))
	var steps []chaos.Step
	at := 200 * time.Millisecond
	for _, i := range order {
		d := 300*time.Millisecond + time.Duration(rng.Int64N(int64(1200*time.Millisecond)))
		if at+d > span {
			break
		}
		steps = append(steps, chaos.Step{At: at, Fault: faults[i].Name(), Kind: faults[i].Kind(), Duration: d})
		at += d + 200*time.Millisecond + time.Duration(rng.Int64N(int64(800*time.Millisecond)))
	}
	return steps
}

// scheduled lists the faults of steps.
func scheduled(steps []chaos.Step) []string {
	var out []string
	for _, s := range steps {
		if !slices.Contains(out, s.Fault) {
			out = append(out, s.Fault)
		}
	}
	return out
}

// publishOnce publishes one message through a fresh publisher on url and
// waits for its confirm, all within timeout.
func publishOnce(ctx context.Context, url, exchange, id string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	pub, err := relay.NewAMQPPublisher(relay.AMQPConfig{URL: url, Exchange: exchange, DialTimeout: timeout})
	if err != nil {
		return err
	}
	defer pub.Close()
	return publishWith(ctx, pub, id)
}

// warmPublisher connects a publisher to url that has had id confirmed,
// and closes it when the test ends.
func warmPublisher(t *testing.T, ctx context.Context, url, exchange string, dial time.Duration, id string) *relay.AMQPPublisher {
	t.Helper()
	pub, err := relay.NewAMQPPublisher(relay.AMQPConfig{URL: url, Exchange: exchange, DialTimeout: dial})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pub.Close() })
	if err := publishWith(ctx, pub, id); err != nil {
		t.Fatal(err)
	}
	return pub
}

// publishFailsAsBroker fails the test unless publishing id through pub,
// within 3 seconds, fails as a broker-level failure, as it must while a
// fault (what: "under down", "after kill") keeps the broker away.
func publishFailsAsBroker(t *testing.T, ctx context.Context, pub *relay.AMQPPublisher, id, what string) {
	t.Helper()
	pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	err := publishWith(pctx, pub, id)
	if err == nil {
		t.Errorf("publish confirmed %s", what)
	} else if relay.Classify(err) != relay.ClassBroker {
		t.Errorf("publish %s failed with %v, classified %s, want broker", what, err, relay.Classify(err))
	}
}

func publishWith(ctx context.Context, pub *relay.AMQPPublisher, id string) error {
	conf, err := pub.Publish(ctx, relay.Message{ID: id, Type: "chaos.probe", Payload: []byte(`{}`)})
	if err != nil {
		return err
	}
	return conf.Wait(ctx)
}

// queued returns how many messages queue holds, read on the direct URL.
func queued(ctx context.Context, url, queue string) (int, error) {
	var n int
	err := relay.WithChannel(ctx, url, func(ch *amqp.Channel) error {
		q, err := ch.QueueDeclarePassive(queue, true, false, false, false, relay.Topology{Queue: queue}.QueueArgs())
		n = q.Messages
		return err
	})
	return n, err
}

var seq atomic.Int64

func TestToxicsOnRelayBroker(t *testing.T) {
	env := newFixture(t)
	ctx := context.Background()
	link := env.relayBroker
	exchange := fmt.Sprintf("chaos.test.%d.%d", time.Now().UnixNano(), seq.Add(1))
	queue := exchange + ".q"
	if err := relay.DeclareTopology(ctx, env.amqpDirectURL, exchange, queue, "#"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = relay.Topology{Exchange: exchange, Queue: queue}.Remove(context.Background(), env.amqpDirectURL)
	})
	rec := &history.Recorder{}
	down := chaos.Down(link)
	timeout := chaos.Timeout(link, chaos.Downstream, 0)
	latency := chaos.Latency(link, chaos.Downstream, time.Second, 100*time.Millisecond)
	reset := chaos.ResetPeer(link, chaos.Upstream, 0)
	n, err := chaos.NewNemesis(rec, down, timeout, latency, reset)
	if err != nil {
		t.Fatal(err)
	}
	if down.Class() != history.ClassBroker {
		t.Fatalf("%s has class %s, want broker", down.Name(), down.Class())
	}
	t.Cleanup(func() {
		if err := n.HealAll(context.Background()); err != nil {
			t.Errorf("healing all: %v", err)
		}
	})
	published := 0
	publishOK := func(t *testing.T) {
		t.Helper()
		if err := publishOnce(ctx, env.amqpURL, exchange, fmt.Sprintf("ok-%d", published), 20*time.Second); err != nil {
			t.Fatalf("publish through %s: %v", link.Name(), err)
		}
		published++
		if got, err := queued(ctx, env.amqpDirectURL, queue); err != nil || got != published {
			t.Fatalf("queue holds %d messages (%v), want %d", got, err, published)
		}
	}
	publishOK(t)

	for _, f := range []chaos.Fault{down, timeout, reset} {
		t.Run(f.Name(), func(t *testing.T) {
			// A publisher connected before the fault: its next publish
			// must fail as a broker-level failure.
			pub := warmPublisher(t, ctx, env.amqpURL, exchange, 5*time.Second, "warm-"+f.Kind())
			published++
			startStop(t, ctx, rec, n, f, func() {
				publishFailsAsBroker(t, ctx, pub, "lost-"+f.Kind(), "under "+f.Name())
				if err := publishOnce(ctx, env.amqpURL, exchange, "new-"+f.Kind(), 3*time.Second); err == nil {
					t.Errorf("new publisher confirmed under %s", f.Name())
				}
			})
			// Messages that reached the broker before the cut (the timeout
			// toxic drops only what comes back) are counted, not lost.
			if got, err := queued(ctx, env.amqpDirectURL, queue); err == nil && got > published {
				t.Logf("%s: %d message(s) reached the broker although unconfirmed", f.Name(), got-published)
				published = got
			}
			publishOK(t)
		})
	}
	t.Run(latency.Name(), func(t *testing.T) {
		pub, err := relay.NewAMQPPublisher(relay.AMQPConfig{URL: env.amqpURL, Exchange: exchange, DialTimeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer pub.Close()
		if err := publishWith(ctx, pub, "warm-latency"); err != nil {
			t.Fatal(err)
		}
		published++
		startStop(t, ctx, rec, n, latency, func() {
			start := time.Now()
			pctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			if err := publishWith(pctx, pub, "slow"); err != nil {
				t.Errorf("publish under latency: %v", err)
			}
			published++
			if took := time.Since(start); took < 900*time.Millisecond {
				t.Errorf("confirm under 1s±100ms latency came after %s", took)
			}
		})
		publishOK(t)
	})
	if err := n.RequireFired(); err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", n.Summary())
}
