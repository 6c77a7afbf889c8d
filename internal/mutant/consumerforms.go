package mutant

import (
	"context"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5/pgxpool"

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

// KeyedInbox is what the consumer-side forms that key or check the inbox
// themselves are built from; sim.RawInbox implements it.
type KeyedInbox interface {
	consumer.Inbox
	// ApplyAs applies m with key in the inbox in place of m's id,
	// atomically; it reports a duplicate when key was recorded before.
	ApplyAs(ctx context.Context, key string, m consumer.Message) (bool, error)
	// Seen reads whether key is in the inbox.
	Seen(ctx context.Context, key string) (bool, error)
	// Record writes key into the inbox, ignoring a conflict, and applies
	// m, atomically, without looking at what the inbox held.
	Record(ctx context.Context, key string, m consumer.Message) error
}

// deliveryTagKey is consumer-delivery-tag-key: the inbox's key is the
// delivery's tag, not the event's id.
type deliveryTagKey struct{ in KeyedInbox }

func (d deliveryTagKey) Apply(ctx context.Context, m consumer.Message) (bool, error) {
	return d.in.ApplyAs(ctx, strconv.FormatUint(m.DeliveryTag, 10), m)
}

// checkThenInsert is consumer-check-then-insert: the dedupe check and
// the inbox write are two steps, with room for another consumer between
// them.
type checkThenInsert struct{ in KeyedInbox }

func (c checkThenInsert) Apply(ctx context.Context, m consumer.Message) (bool, error) {
	seen, err := c.in.Seen(ctx, m.ID)
	if err != nil {
		return false, fmt.Errorf("applying %s: %w", m.ID, err)
	}
	if seen {
		return true, nil
	}
	return false, c.in.Record(ctx, m.ID, m)
}

// WrapInbox returns in decorated by the mutant's consumer-side form, or
// in itself for a mutant that leaves the consumer alone. effect applies a
// message's effect without the inbox (see PGEffect for PostgreSQL).
func (m Mutant) WrapInbox(in consumer.Inbox, effect EffectFunc) consumer.Inbox {
	if m.Inbox == nil {
		return in
	}
	return m.Inbox(in, effect)
}

// PGEffect is the EffectFunc of a PostgreSQL consumer: effect run in a
// transaction of its own, with no inbox row, as a consumer without dedupe
// runs it.
func PGEffect(pool *pgxpool.Pool, effect consumer.Effect) EffectFunc {
	return func(ctx context.Context, m consumer.Message) error {
		tx, err := pool.Begin(ctx)
		if err != nil {
			return fmt.Errorf("applying %s: begin: %w", m.ID, err)
		}
		defer tx.Rollback(context.WithoutCancel(ctx))
		if err := effect(ctx, tx, m); err != nil {
			return fmt.Errorf("applying %s: %w", m.ID, err)
		}
		if err := tx.Commit(ctx); err != nil {
			return fmt.Errorf("applying %s: commit: %w", m.ID, err)
		}
		return nil
	}
}

// PGKeyed adapts the PostgreSQL inbox to KeyedInbox, so that the
// consumer-side forms run on containers on the production inbox's own
// statements (consumer.PGInbox.ApplyKeyed and Seen).
func PGKeyed(in *consumer.PGInbox) KeyedInbox { return pgKeyed{in} }

type pgKeyed struct{ *consumer.PGInbox }

func (k pgKeyed) ApplyAs(ctx context.Context, key string, m consumer.Message) (bool, error) {
	return k.ApplyKeyed(ctx, key, m, true)
}

func (k pgKeyed) Record(ctx context.Context, key string, m consumer.Message) error {
	_, err := k.ApplyKeyed(ctx, key, m, false)
	return err
}
