// Package consumer is hop B of the outbox: an idempotent consumer that
// applies an event's effect and records the event id in an inbox table in
// one transaction, commits, and only then acks. A redelivered duplicate hits
// the inbox's unique key and is acked with no second effect.
package consumer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
)

// Message is one delivered event.
type Message struct {
	// ID is the outbox event id (AMQP message_id); the dedupe key.
	ID            string
	Type          string
	CorrelationID string
	Payload       []byte
	// Redelivered is the broker's redelivery flag.
	Redelivered bool
	// Deliveries counts deliveries of this message so far, this one
	// included, when the broker tells (quorum queues' x-delivery-count + 1);
	// 0 when unknown.
	Deliveries int
	// DeliveryTag is the broker's delivery tag: it numbers the deliveries
	// of one channel from 1 and starts again on every new channel, so it
	// identifies a delivery, never an event.
	DeliveryTag uint64
}

// Inbox applies effects exactly once per message id.
type Inbox interface {
	// Apply runs the effect of m and records m.ID, atomically. It reports
	// duplicate (and runs no effect) when m.ID was recorded before.
	Apply(ctx context.Context, m Message) (duplicate bool, err error)
}

// Delivery is a message with its acknowledgement handles.
type Delivery interface {
	Message() Message
	Ack(ctx context.Context) error
	// Nack rejects the delivery; requeue=false dead-letters it.
	Nack(ctx context.Context, requeue bool) error
}

// ErrNoMessageID is returned for a delivery without a message id: it can
// not be deduplicated, so it is dead-lettered rather than applied.
var ErrNoMessageID = errors.New("delivery has no message id")

// Config configures a consumer.
type Config struct {
	// Name identifies the consumer in its inbox; two consumers of the same
	// events with different names each apply them once.
	Name string
	// MaxDeliveries dead-letters a message that failed this many times.
	// Default 5.
	MaxDeliveries int
}

// Consumer handles deliveries one at a time.
type Consumer struct {
	cfg   Config
	inbox Inbox
	log   *slog.Logger
}

// New builds a consumer; log may be nil.
func New(cfg Config, inbox Inbox, log *slog.Logger) (*Consumer, error) {
	if cfg.Name == "" {
		return nil, errors.New("consumer config: Name is required")
	}
	if cfg.MaxDeliveries == 0 {
		cfg.MaxDeliveries = 5
	}
	if cfg.MaxDeliveries < 0 {
		return nil, fmt.Errorf("consumer config: MaxDeliveries must be positive, got %d", cfg.MaxDeliveries)
	}
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return &Consumer{cfg: cfg, inbox: inbox, log: log.With("consumer", cfg.Name)}, nil
}

// Outcome is what Handle did with one delivery.
type Outcome int

const (
	// Applied: the effect ran and committed, then the delivery was acked.
	Applied Outcome = iota + 1
	// Duplicate: the inbox already had the id; acked with no effect.
	Duplicate
	// Requeued: applying failed; nacked for redelivery.
	Requeued
	// DeadLettered: failed too often (or undeduplicable); nacked without
	// requeue.
	DeadLettered
)

func (o Outcome) String() string {
	return [...]string{"", "applied", "duplicate", "requeued", "dead-lettered"}[o]
}

// Handle applies one delivery: effect and inbox row in one transaction,
// then the ack. The ack comes only after the commit, so a crash between the
// two leads to a redelivery that the inbox absorbs, never to a lost effect.
// An ack or nack that fails is returned: the broker redelivers.
func (c *Consumer) Handle(ctx context.Context, d Delivery) (Outcome, error) {
	m := d.Message()
	if m.ID == "" {
		c.log.Error("dead-lettering delivery without message id", "type", m.Type)
		return DeadLettered, errors.Join(ErrNoMessageID, d.Nack(ctx, false))
	}
	dup, err := c.inbox.Apply(ctx, m)
	if err != nil {
		if m.Deliveries >= c.cfg.MaxDeliveries {
			c.log.Error("dead-lettering after failed deliveries", "id", m.ID, "deliveries", m.Deliveries, "err", err)
			if nerr := d.Nack(ctx, false); nerr != nil {
				return DeadLettered, fmt.Errorf("dead-lettering %s: %w", m.ID, nerr)
			}
			return DeadLettered, nil
		}
		c.log.Warn("applying failed, requeueing", "id", m.ID, "err", err)
		if nerr := d.Nack(ctx, true); nerr != nil {
			return Requeued, fmt.Errorf("requeueing %s: %w", m.ID, errors.Join(err, nerr))
		}
		return Requeued, nil
	}
	if err := d.Ack(ctx); err != nil {
		return Applied, fmt.Errorf("acking %s: %w", m.ID, err)
	}
	if dup {
		return Duplicate, nil
	}
	return Applied, nil
}
