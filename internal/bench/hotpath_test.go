package bench

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxlab/outboxlab/relay"
)

// The benchmarks below measure the relay's hot paths on real PostgreSQL
// and RabbitMQ, one operation at a time, so that benchstat can compare a
// change with main:
//
//	go test -run '^$' -bench . -count 10 ./bench/ > new.txt
//	benchstat old.txt new.txt
//
// They report ns/row (or ns/msg) besides ns/op, so that batch sizes can be
// compared with each other.

// benchWorkload returns n events, or fails b.
func benchWorkload(tb testing.TB, n int) *workload {
	tb.Helper()
	w, err := newWorkload(n, DefaultPayloadBytes, 1, time.Now().Truncate(time.Millisecond))
	if err != nil {
		tb.Fatal(err)
	}
	return w
}

// BenchmarkClaim measures relay.PGStore.Claim of one batch from a backlog
// of b.N batches: the statement every relay batch starts with.
func BenchmarkClaim(b *testing.B) {
	for _, batch := range []int{100, 500} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			env := sharedEnv(b)
			ctx := context.Background()
			db := newTestDB(b, env, "outbox")
			if err := stageCopy(ctx, db.pool, db.table, benchWorkload(b, b.N*batch)); err != nil {
				b.Fatal(err)
			}
			store := relay.NewPGStore(db.pool, db.table)
			b.ResetTimer()
			for range b.N {
				rows, err := store.Claim(ctx, "bench", batch, relay.DefaultLease)
				if err != nil {
					b.Fatal(err)
				}
				if len(rows) != batch {
					b.Fatalf("claimed %d rows, want %d", len(rows), batch)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/row")
		})
	}
}

// BenchmarkMark measures relay.PGStore.Mark of one claimed batch: the
// statement every relay batch ends with.
func BenchmarkMark(b *testing.B) {
	for _, batch := range []int{100, 500} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			env := sharedEnv(b)
			ctx := context.Background()
			db := newTestDB(b, env, "outbox")
			if err := stageCopy(ctx, db.pool, db.table, benchWorkload(b, b.N*batch)); err != nil {
				b.Fatal(err)
			}
			store := relay.NewPGStore(db.pool, db.table)
			ids := make([]uuid.UUID, 0, batch)
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				rows, err := store.Claim(ctx, "bench", batch, relay.DefaultLease)
				if err != nil {
					b.Fatal(err)
				}
				ids = ids[:0]
				for _, r := range rows {
					ids = append(ids, r.ID)
				}
				b.StartTimer()
				marked, err := store.Mark(ctx, "bench", ids)
				if err != nil {
					b.Fatal(err)
				}
				if len(marked) != batch {
					b.Fatalf("marked %d rows, want %d", len(marked), batch)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/row")
		})
	}
}

// BenchmarkPublishWindow measures publishing one window of persistent,
// mandatory messages and awaiting every confirm, oldest first, as a relay
// batch does: through relay.AMQPPublisher (impl=relay) and straight
// through an amqp091 channel (impl=amqp091), so that the publisher's own
// cost per message shows as the difference.
func BenchmarkPublishWindow(b *testing.B) {
	for _, impl := range []string{"relay", "amqp091"} {
		for _, window := range []int{1, 10, 100, 500} {
			b.Run(fmt.Sprintf("impl=%s/window=%d", impl, window), func(b *testing.B) {
				env := sharedEnv(b)
				ctx := context.Background()
				in := newBenchBroker(b, env)
				w := benchWorkload(b, window)
				var publishWindow func() error
				switch impl {
				case "relay":
					pub, err := relay.NewAMQPPublisher(relay.AMQPConfig{URL: in.amqpURL, Exchange: in.exchange})
					if err != nil {
						b.Fatal(err)
					}
					defer pub.Close()
					confs := make([]relay.Confirmation, 0, window)
					publishWindow = func() error {
						confs = confs[:0]
						for i := range window {
							c, err := pub.Publish(ctx, relay.Message{ID: w.idStr[i], Type: MessageType, Payload: w.payloads[i]})
							if err != nil {
								return err
							}
							confs = append(confs, c)
						}
						for _, c := range confs {
							if err := c.Wait(ctx); err != nil {
								return err
							}
						}
						return nil
					}
				case "amqp091":
					conn, err := dialAMQP(ctx, in.amqpURL, "outboxlab-bench-test-raw")
					if err != nil {
						b.Fatal(err)
					}
					defer conn.Close()
					ch, err := conn.Channel()
					if err != nil {
						b.Fatal(err)
					}
					if err := ch.Confirm(false); err != nil {
						b.Fatal(err)
					}
					dcs := make([]*amqp.DeferredConfirmation, 0, window)
					publishWindow = func() error {
						dcs = dcs[:0]
						for i := range window {
							dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, in.exchange, MessageType, true, false, amqp.Publishing{
								ContentType: "application/json", DeliveryMode: amqp.Persistent,
								MessageId: w.idStr[i], Type: MessageType, Timestamp: time.Now().UTC(), Body: w.payloads[i],
							})
							if err != nil {
								return err
							}
							dcs = append(dcs, dc)
						}
						for _, dc := range dcs {
							ok, err := dc.WaitContext(ctx)
							if err != nil {
								return err
							}
							if !ok {
								return fmt.Errorf("confirm %d: nacked", dc.DeliveryTag)
							}
						}
						return nil
					}
				}
				b.ResetTimer()
				for range b.N {
					if err := publishWindow(); err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*window), "ns/msg")
				if err := in.purge(ctx); err != nil {
					b.Fatal(err)
				}
			})
		}
	}
}

// BenchmarkRelayBatch measures one whole relay batch through relay.Tick:
// claim, decode, publish with confirms, mark, on a table that holds
// exactly one batch each time.
func BenchmarkRelayBatch(b *testing.B) {
	env := sharedEnv(b)
	ctx := context.Background()
	db := newTestDB(b, env, "outbox")
	in := newBenchBroker(b, env)
	pub, err := relay.NewAMQPPublisher(relay.AMQPConfig{URL: in.amqpURL, Exchange: in.exchange})
	if err != nil {
		b.Fatal(err)
	}
	defer pub.Close()
	reg := newRegistry()
	r, err := relay.New(relay.Config{RelayID: "bench"}, relay.NewPGStore(db.pool, db.table), pub, relay.Options{Decoder: reg})
	if err != nil {
		b.Fatal(err)
	}
	batch := r.Config().BatchSize
	w := benchWorkload(b, b.N*batch)
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		part := &workload{
			ids: w.ids[i*batch : (i+1)*batch], idStr: w.idStr[i*batch : (i+1)*batch],
			payloads: w.payloads[i*batch : (i+1)*batch], base: w.base.Add(time.Duration(i*batch) * time.Microsecond),
		}
		if err := stageCopy(ctx, db.pool, db.table, part); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		res, err := r.Tick(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if res.Published != batch {
			b.Fatalf("tick published %d rows, want %d", res.Published, batch)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/row")
	if err := in.purge(ctx); err != nil {
		b.Fatal(err)
	}
}

// newBenchBroker declares an exchange and a queue of their own for tb and
// removes them when tb ends.
func newBenchBroker(tb testing.TB, env Env) *infra {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	name := fmt.Sprintf("outboxlab.bench.hot.%d", time.Now().UnixNano())
	if err := relay.DeclareTopology(ctx, env.DirectAMQPURL(), name, name, "#"); err != nil {
		tb.Fatal(err)
	}
	conn, err := dialAMQP(ctx, env.DirectAMQPURL(), "outboxlab-bench-test")
	if err != nil {
		tb.Fatal(err)
	}
	ch, err := conn.Channel()
	if err != nil {
		_ = conn.Close()
		tb.Fatal(err)
	}
	in := &infra{amqpURL: env.DirectAMQPURL(), amqpConn: conn, ch: ch, exchange: name, queue: name}
	tb.Cleanup(func() {
		for _, q := range []string{name, name + ".dead"} {
			if _, err := ch.QueueDelete(q, false, false, false); err != nil {
				tb.Errorf("deleting queue %s: %v", q, err)
			}
		}
		for _, x := range []string{name + ".dlx", name} {
			if err := ch.ExchangeDelete(x, false, false); err != nil {
				tb.Errorf("deleting exchange %s: %v", x, err)
			}
		}
		_ = conn.Close()
	})
	return in
}
