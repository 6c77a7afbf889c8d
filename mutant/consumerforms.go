package mutant

import (
	"context"

	"github.com/outboxlab/outboxlab/consumer"
)

// EffectFunc applies a message's effect without recording or checking its
// id in the inbox: what a consumer without dedupe does. In the simulation
// it is sim.RawInbox.Effect; on PostgreSQL, the consumer's effect run in a
// transaction of its own.
type EffectFunc func(ctx context.Context, m consumer.Message) error

// consumerInbox shortens the catalogue's inbox decorators.
type consumerInbox = consumer.Inbox

// InboxForm is a consumer-side mutant as a decorator on the consumer's
// inbox, for both tiers.
type InboxForm func(in consumer.Inbox, effect EffectFunc) consumer.Inbox

// undeduplicated is consumer-no-dedupe: every delivery's effect is
// applied, redeliveries included.
type undeduplicated struct{ effect EffectFunc }

func (u undeduplicated) Apply(ctx context.Context, m consumer.Message) (bool, error) {
	return false, u.effect(ctx, m)
}

// ackedFirst is consumer-ack-before-commit: the consumer acknowledges a
// delivery as it arrives and applies it afterwards, so when applying
// fails (the database is unreachable, the transaction aborts) the message
// is already gone and its effect is lost. Consumer.Handle acks after
// Apply returns; reporting success for a failed apply is how the
// acknowledgement that went first shows through that seam.
type ackedFirst struct{ consumer.Inbox }

func (a ackedFirst) Apply(ctx context.Context, m consumer.Message) (bool, error) {
	dup, err := a.Inbox.Apply(ctx, m)
	if err != nil {
		return false, nil
	}
	return dup, nil
}
