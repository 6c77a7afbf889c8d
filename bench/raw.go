package bench

import (
	"context"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// publishRaw publishes every event of w straight from memory with amqp091:
// one connection, one channel in confirm mode, at most window publishes
// awaiting their confirms, each message exactly as the relay sends it
// (persistent, mandatory, same properties). It is the broker's limit for
// this workload: what a relay would reach if reading and marking rows
// cost nothing. It stops publishing once bound has passed and returns how
// many messages were confirmed and when the last confirm came.
//
// With batched, it waits for every confirm of a full window before it
// publishes the next one, as a relay batch of window rows does: the
// difference from the sliding window is what that barrier costs.
func publishRaw(ctx context.Context, in *infra, w *workload, window int, batched bool, bound time.Duration) (int, time.Duration, error) {
	conn, err := dialAMQP(ctx, in.amqpURL, "outboxlab-bench-raw")
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
	for i := range w.len() {
		if time.Since(start) >= bound {
			break
		}
		select {
		case <-returns:
			returned++
		default:
		}
		if len(pending) == window {
			// Sliding: wait for the oldest. Batched: wait for them all.
			for first := true; first || batched && len(pending) > 0; first = false {
				if err := settle(); err != nil {
					return 0, 0, err
				}
				confirmed++
			}
		}
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, in.exchange, MessageType, true, false, amqp.Publishing{
			ContentType:  "application/json",
			DeliveryMode: amqp.Persistent,
			MessageId:    w.idStr[i],
			Type:         MessageType,
			Timestamp:    time.Now().UTC(),
			Body:         w.payloads[i],
		})
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
