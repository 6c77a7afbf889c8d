package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxlab/outboxlab/internal/bench/result"
	"github.com/outboxlab/outboxlab/testenv"
)

// publishRaw publishes every event of w straight from memory with amqp091:
// one connection, one channel in confirm mode, at most window publishes
// awaiting their confirms, each message exactly as the relay sends it
// (persistent, mandatory, same properties). It is the broker's limit for
// this workload: what a relay would reach if reading and marking rows
// cost nothing. It stops publishing once bound has passed and returns how
// many messages were confirmed and when the last confirm came.
func publishRaw(ctx context.Context, in *infra, w *workload, window int, bound time.Duration) (int, time.Duration, error) {
	return publishRange(ctx, in, w, 0, w.len(), window, bound, "outboxlab-bench-raw")
}

// publishRawSplit is publishRaw over parts connections at once, each with
// a channel of its own and a window of window, each publishing its
// contiguous share of w: what the broker allows a relay of that many
// replicas, each publishing on a connection of its own as fast as raw. It
// returns the messages confirmed over every connection and when the last
// of them had its last confirm.
func publishRawSplit(ctx context.Context, in *infra, w *workload, parts, window int, bound time.Duration) (int, time.Duration, error) {
	type outcome struct {
		confirmed int
		elapsed   time.Duration
		err       error
	}
	out := make([]outcome, parts)
	var wg sync.WaitGroup
	n := w.len()
	for k := range parts {
		wg.Go(func() {
			from, to := k*n/parts, (k+1)*n/parts
			c, e, err := publishRange(ctx, in, w, from, to, window, bound, fmt.Sprintf("outboxlab-bench-raw-%d-%d", parts, k+1))
			out[k] = outcome{c, e, err}
		})
	}
	wg.Wait()
	var (
		confirmed int
		elapsed   time.Duration
		errs      []error
	)
	for _, o := range out {
		confirmed += o.confirmed
		elapsed = max(elapsed, o.elapsed)
		errs = append(errs, o.err)
	}
	return confirmed, elapsed, errors.Join(errs...)
}

// publishRange publishes the events [from, to) of w on a connection of
// its own named name, as publishRaw describes.
func publishRange(ctx context.Context, in *infra, w *workload, from, to, window int, bound time.Duration, name string) (int, time.Duration, error) {
	conn, err := dialAMQP(ctx, in.amqpURL, name)
	if err != nil {
		return 0, 0, err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return 0, 0, fmt.Errorf("raw: opening channel: %w", err)
	}
	if err := ch.Confirm(false); err != nil {
		return 0, 0, fmt.Errorf("raw: enabling confirms: %w", err)
	}
	returns := ch.NotifyReturn(make(chan amqp.Return, 1024))
	returned := 0
	pending := make([]*amqp.DeferredConfirmation, 0, window)
	settle := func() error {
		dc := pending[0]
		pending = pending[1:]
		ok, err := dc.WaitContext(ctx)
		if err != nil {
			return fmt.Errorf("raw: awaiting confirm %d: %w", dc.DeliveryTag, err)
		}
		if !ok {
			return fmt.Errorf("raw: confirm %d: nacked", dc.DeliveryTag)
		}
		return nil
	}
	start := time.Now()
	confirmed := 0
	for i := from; i < to; i++ {
		if time.Since(start) >= bound {
			break
		}
		select {
		case <-returns:
			returned++
		default:
		}
		if len(pending) == window {
			if err := settle(); err != nil {
				return 0, 0, err
			}
			confirmed++
		}
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, in.exchange, MessageType, true, false, w.publishing(i))
		if err != nil {
			return 0, 0, fmt.Errorf("raw: publishing %d: %w", i, err)
		}
		pending = append(pending, dc)
	}
	for len(pending) > 0 {
		if err := settle(); err != nil {
			return 0, 0, err
		}
		confirmed++
	}
	elapsed := time.Since(start)
	// A return comes before its confirm: every one is buffered by now.
	for {
		select {
		case <-returns:
			returned++
			continue
		default:
		}
		break
	}
	if returned > 0 {
		return 0, 0, fmt.Errorf("raw: %d messages returned unroutable", returned)
	}
	return confirmed, elapsed, nil
}

// measureBrokerLatency publishes the events of w straight from memory on
// the open-loop schedule of a latency run (rate events per second), each
// with a confirm, and returns COMMIT-free latencies: publish -> confirm
// and publish -> delivery to a consumer of the queue. No database is
// involved, so it is the broker's own share of the relay's latency at that
// rate on this machine: no relay can confirm faster than the broker does.
// The first warm events are the warm-up (result.Latency.WarmupEvents), left out
// of the figures.
func measureBrokerLatency(ctx context.Context, in *infra, w *workload, rate float64, warm int) (result.Latency, error) {
	res := result.Latency{Mode: "broker", TargetRate: rate, WarmupEvents: warm}
	if err := in.purge(ctx); err != nil {
		return res, err
	}
	n := w.len()
	sentAt := make([]atomic.Int64, n)
	deliverAt := make([]atomic.Int64, n)
	var delivered atomic.Int64
	cons, err := startConsumer(ctx, in, func(id string, at time.Time) {
		if i, ok := w.index[id]; ok && deliverAt[i].CompareAndSwap(0, at.UnixNano()) {
			delivered.Add(1)
		}
	})
	if err != nil {
		return res, err
	}
	defer cons.stop()
	conn, err := dialAMQP(ctx, in.amqpURL, "outboxlab-bench-broker-latency")
	if err != nil {
		return res, err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return res, fmt.Errorf("broker latency: opening channel: %w", err)
	}
	if err := ch.Confirm(false); err != nil {
		return res, fmt.Errorf("broker latency: enabling confirms: %w", err)
	}

	conf := make([]time.Duration, 0, n)
	confirms := takeConfirms(ctx, n, "broker latency", func(i int, at time.Time) {
		if i >= warm {
			conf = append(conf, time.Duration(at.UnixNano()-sentAt[i].Load()))
		}
	})

	interval := time.Duration(float64(time.Second) / rate)
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	t0 := time.Now()
	var perr error
	for i := range n {
		if wait := time.Until(t0.Add(time.Duration(i) * interval)); wait > 0 {
			timer.Reset(wait)
			<-timer.C
		}
		sentAt[i].Store(time.Now().UnixNano())
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, in.exchange, MessageType, true, false, w.publishing(i))
		if err != nil {
			perr = fmt.Errorf("broker latency: publishing %d: %w", i, err)
			break
		}
		confirms.add(i, dc)
	}
	if last := time.Since(t0) - time.Duration(warm)*interval; n-warm > 1 && last > 0 {
		res.Rate = float64(n-warm-1) / last.Seconds()
	}
	if err := errors.Join(perr, confirms.close()); err != nil {
		return res, err
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err = testenv.WaitUntil(wctx, 10*time.Millisecond, func(context.Context) error {
		if d := delivered.Load(); d < int64(n) {
			return fmt.Errorf("%d of %d delivered", d, n)
		}
		return nil
	})
	cancel()
	if err != nil {
		return res, fmt.Errorf("broker latency: %w", err)
	}
	cons.stop()
	del := make([]time.Duration, 0, n-warm)
	for i := warm; i < n; i++ {
		del = append(del, time.Duration(deliverAt[i].Load()-sentAt[i].Load()))
	}
	res.Events = n - warm
	res.Confirm = percentiles(conf)
	res.Delivery = percentiles(del)
	return res, in.purge(ctx)
}

// publishing is event i of w as the relay publishes it: persistent,
// JSON, its id as message id and its type.
func (w *workload) publishing(i int) amqp.Publishing {
	return amqp.Publishing{
		ContentType:  "application/json",
		DeliveryMode: amqp.Persistent,
		MessageId:    w.idStr[i],
		Type:         MessageType,
		Timestamp:    time.Now().UTC(),
		Body:         w.payloads[i],
	}
}

// confirmTaker takes the confirms of a channel's publishes in publishing
// order, on a goroutine of its own, as they come.
type confirmTaker struct {
	queue  chan sentMessage
	waited chan error
}

type sentMessage struct {
	i  int
	dc *amqp.DeferredConfirmation
}

// takeConfirms starts a taker for up to n publishes: each confirm is
// handed to onConfirm, on the taker's goroutine, with the publish's index
// and when the confirm was seen; a nack or a failed wait ends it with an
// error named after what.
func takeConfirms(ctx context.Context, n int, what string, onConfirm func(i int, at time.Time)) *confirmTaker {
	t := &confirmTaker{queue: make(chan sentMessage, n), waited: make(chan error, 1)}
	go func() {
		for s := range t.queue {
			ok, err := s.dc.WaitContext(ctx)
			if err != nil {
				t.waited <- fmt.Errorf("%s: awaiting confirm %d: %w", what, s.i, err)
				return
			}
			if !ok {
				t.waited <- fmt.Errorf("%s: confirm %d: nacked", what, s.i)
				return
			}
			onConfirm(s.i, time.Now())
		}
		t.waited <- nil
	}()
	return t
}

// add hands the taker publish i's confirmation; adds must come in
// publishing order.
func (t *confirmTaker) add(i int, dc *amqp.DeferredConfirmation) {
	t.queue <- sentMessage{i: i, dc: dc}
}

// close waits until every confirm added was taken and returns the first
// failure.
func (t *confirmTaker) close() error {
	close(t.queue)
	return <-t.waited
}
