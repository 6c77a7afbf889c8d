package mutant

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/outboxlab/outboxlab/internal/sim"
	"github.com/outboxlab/outboxlab/relay"
)

// scanLimit bounds the rows a mutant's hand-written claim or sweep reads
// at once: a broken relay reads a page, not the whole table.
const scanLimit = 1000

// RelayForm is a relay-side mutant as decorators on the relay's seams.
// The same decorators build the mutant in the simulation (over the
// simulated store, which implements sim.RawStore) and in the relay process
// of cmd/relay (over sim.PGRaw, the PostgreSQL implementation of the same
// statements), so both tiers run one and the same bug.
type RelayForm struct {
	// Store decorates the relay's store. raw is the store itself, with the
	// statements a correct relay never issues; now is the relay process's
	// own clock (skewed by a clock fault, never the database's).
	Store func(raw sim.RawStore, now func() time.Time) relay.Store
	// Publisher decorates the relay's publisher; raw is the relay's store,
	// for mutants that touch the table around a publish.
	Publisher func(pub relay.Publisher, raw sim.RawStore) relay.Publisher
	// Config adjusts the relay's configuration.
	Config func(*relay.Config)
	// PublishOptions, when set, replaces the delivery properties of the
	// relay's publishes.
	PublishOptions *relay.PublishOptions
}

// Wrap returns the store and publisher of a relay that runs the mutant:
// store and pub decorated as the form says (each left as it is when the
// form has no decorator for it).
func (f RelayForm) Wrap(store sim.RawStore, pub relay.Publisher, now func() time.Time) (relay.Store, relay.Publisher) {
	var s relay.Store = store
	if f.Store != nil {
		s = f.Store(store, now)
	}
	if f.Publisher != nil {
		pub = f.Publisher(pub, store)
	}
	return s, pub
}

func idsOf(rows []relay.Row) []uuid.UUID {
	ids := make([]uuid.UUID, len(rows))
	for i, r := range rows {
		ids[i] = r.ID
	}
	return ids
}

// markOnClaim is mark-before-publish: the claim marks its rows processed
// before the relay publishes any of them, so a crash or an outage between
// the two loses them.
type markOnClaim struct{ sim.RawStore }

func (s markOnClaim) Claim(ctx context.Context, owner string, limit int, lease time.Duration) ([]relay.Row, error) {
	rows, err := s.RawStore.Claim(ctx, owner, limit, lease)
	if err != nil || len(rows) == 0 {
		return rows, err
	}
	if _, err := s.RawStore.Mark(ctx, owner, idsOf(rows)); err != nil {
		return nil, fmt.Errorf("marking claimed rows: %w", err)
	}
	return rows, nil
}

// leaselessClaim is no-lease: the claim takes the oldest pending rows
// whatever their lease (no lease predicate, no SKIP LOCKED), so replicas
// publish the same rows at once and backoffs are ignored.
type leaselessClaim struct{ sim.RawStore }

func (s leaselessClaim) Claim(ctx context.Context, owner string, limit int, lease time.Duration) ([]relay.Row, error) {
	now, err := s.Now(ctx)
	if err != nil {
		return nil, fmt.Errorf("claiming: %w", err)
	}
	rows, err := s.Scan(ctx, limit, false)
	if err != nil {
		return nil, fmt.Errorf("claiming: %w", err)
	}
	if len(rows) == 0 {
		return nil, nil
	}
	ids := make([]uuid.UUID, len(rows))
	for i, r := range rows {
		ids[i] = r.ID
	}
	return s.Lease(ctx, owner, ids, now.Add(lease))
}

// appClockClaim is app-clock-lease: eligibility is judged and the lease
// computed by the relay's own clock, so a relay whose clock runs ahead
// takes rows still leased or backing off, and one whose clock runs behind
// hands out leases that have already expired by the database's.
type appClockClaim struct {
	sim.RawStore
	now func() time.Time
}

func (s appClockClaim) Claim(ctx context.Context, owner string, limit int, lease time.Duration) ([]relay.Row, error) {
	rows, err := s.Scan(ctx, scanLimit, false)
	if err != nil {
		return nil, fmt.Errorf("claiming: %w", err)
	}
	now := s.now()
	var ids []uuid.UUID
	for _, r := range rows {
		if len(ids) == limit {
			break
		}
		if r.LockedUntil.IsZero() || r.LockedUntil.Before(now) {
			ids = append(ids, r.ID)
		}
	}
	if len(ids) == 0 {
		return nil, nil
	}
	return s.Lease(ctx, owner, ids, now.Add(lease))
}

// immediateRetry is no-backoff: a failed row's attempt is counted but its
// backoff is not, so it is eligible again at once: a poison row is retried
// every tick, at the head of its batch, until it is parked.
type immediateRetry struct{ sim.RawStore }

func (s immediateRetry) Retry(ctx context.Context, owner string, id uuid.UUID, policy relay.RetryPolicy, cause string) (relay.RetryResult, error) {
	policy.BackoffBase, policy.BackoffMax = 0, 0
	return s.RawStore.Retry(ctx, owner, id, policy, cause)
}

// sweepByAge is sweep-pending: retention deletes rows by their age alone
// (occurred_at), pending and faulted rows included.
type sweepByAge struct{ sim.RawStore }

func (s sweepByAge) Sweep(ctx context.Context, retention time.Duration, limit int) (int, error) {
	now, err := s.Now(ctx)
	if err != nil {
		return 0, fmt.Errorf("sweeping: %w", err)
	}
	rows, err := s.Scan(ctx, limit, true)
	if err != nil {
		return 0, fmt.Errorf("sweeping: %w", err)
	}
	cut := now.Add(-retention)
	var ids []uuid.UUID
	for _, r := range rows {
		if r.OccurredAt.Before(cut) {
			ids = append(ids, r.ID)
		}
	}
	if len(ids) == 0 {
		return 0, nil
	}
	return s.Delete(ctx, ids)
}

// unfencedMark is unfenced-mark: the mark does not check that this relay
// still holds the lease, so a relay that stalled past its lease marks rows
// another relay took over.
type unfencedMark struct{ sim.RawStore }

func (s unfencedMark) Mark(ctx context.Context, _ string, ids []uuid.UUID) ([]uuid.UUID, error) {
	return s.MarkUnfenced(ctx, ids)
}

// offsetClaim is offset-claim: the relay keeps a high-water mark by id and
// skips every row at or below it. Ids grow in staging order, so a
// transaction that commits after later ones (a long one) commits rows
// below the mark, which no relay ever publishes. A relay that starts
// loads the mark as the highest processed id, as a restarted offset-based
// relay does.
type offsetClaim struct {
	sim.RawStore
	loaded bool
	mark   uuid.UUID
}

func (s *offsetClaim) Claim(ctx context.Context, owner string, limit int, lease time.Duration) ([]relay.Row, error) {
	if !s.loaded {
		rows, err := s.Scan(ctx, 1<<30, true)
		if err != nil {
			return nil, fmt.Errorf("loading the claim offset: %w", err)
		}
		for _, r := range rows {
			if !r.ProcessedAt.IsZero() && uuidLess(s.mark, r.ID) {
				s.mark = r.ID
			}
		}
		s.loaded = true
	}
	rows, err := s.RawStore.Claim(ctx, owner, limit, lease)
	if err != nil {
		return nil, err
	}
	kept := rows[:0]
	for _, r := range rows {
		if uuidLess(s.mark, r.ID) {
			kept = append(kept, r)
		}
	}
	for _, r := range kept {
		if uuidLess(s.mark, r.ID) {
			s.mark = r.ID
		}
	}
	return kept, nil
}

func uuidLess(a, b uuid.UUID) bool { return slices.Compare(a[:], b[:]) < 0 }

// unconfirmed is no-confirm: a publish counts as done once its frame is
// written; whatever the broker answers (a nack, a lost confirm, a closed
// channel) is ignored.
type unconfirmed struct{ relay.Publisher }

func (p unconfirmed) Publish(ctx context.Context, m relay.Message) (relay.Confirmation, error) {
	c, err := p.Publisher.Publish(ctx, m)
	if err != nil {
		return nil, err
	}
	return confirmFunc(func(ctx context.Context) error {
		_ = c.Wait(ctx)
		return nil
	}), nil
}

// confirmFunc is a relay.Confirmation made of a function.
type confirmFunc func(ctx context.Context) error

func (f confirmFunc) Wait(ctx context.Context) error { return f(ctx) }

// returnsIgnored is ignore-return: a mandatory publish the broker returned
// as unroutable counts as published.
type returnsIgnored struct{ relay.Publisher }

func (p returnsIgnored) Publish(ctx context.Context, m relay.Message) (relay.Confirmation, error) {
	c, err := p.Publisher.Publish(ctx, m)
	if err != nil {
		return nil, err
	}
	return confirmFunc(func(ctx context.Context) error {
		if err := c.Wait(ctx); err != nil && !errors.Is(err, relay.ErrReturned) {
			return err
		}
		return nil
	}), nil
}

// outageCostsAttempts is broker-down-consumes-attempts: broker-level
// failures are reported as plain errors, losing their class, so an outage
// costs every row it hits an attempt and parks healthy rows.
type outageCostsAttempts struct{ relay.Publisher }

// declassify turns a broker-level failure into a row-level one, as a
// relay that formats errors with %v instead of wrapping them does.
func declassify(err error) error {
	if err != nil && relay.Classify(err) == relay.ClassBroker {
		return errors.New(err.Error())
	}
	return err
}

func (p outageCostsAttempts) Publish(ctx context.Context, m relay.Message) (relay.Confirmation, error) {
	c, err := p.Publisher.Publish(ctx, m)
	if err != nil {
		return nil, declassify(err)
	}
	return confirmFunc(func(ctx context.Context) error { return declassify(c.Wait(ctx)) }), nil
}

// deleteOnPublish is delete-before-confirm: the relay deletes a row as
// soon as its publish is written, before the confirm says the broker has
// it; a nack, a lost confirm or a crash then loses the event.
type deleteOnPublish struct {
	relay.Publisher
	raw sim.RawStore
}

func (p deleteOnPublish) Publish(ctx context.Context, m relay.Message) (relay.Confirmation, error) {
	c, err := p.Publisher.Publish(ctx, m)
	if err != nil {
		return nil, err
	}
	if id, perr := uuid.Parse(m.ID); perr == nil {
		// The row is gone either way once the delete ran; a failed
		// delete leaves it for the next claim.
		_, _ = p.raw.Delete(ctx, []uuid.UUID{id})
	}
	return c, nil
}

// dropPoison is drop-poison: the relay deletes each row it parks, at once,
// so a poison event leaves no row for an operator to find.
type dropPoison struct{ sim.RawStore }

func (d dropPoison) Park(ctx context.Context, owner string, id uuid.UUID, cause string) (bool, error) {
	ok, err := d.RawStore.Park(ctx, owner, id, cause)
	if err != nil || !ok {
		return ok, err
	}
	if _, err := d.Delete(ctx, []uuid.UUID{id}); err != nil {
		return true, fmt.Errorf("dropping poison row %s: %w", id, err)
	}
	return true, nil
}

func (d dropPoison) Retry(ctx context.Context, owner string, id uuid.UUID, policy relay.RetryPolicy, cause string) (relay.RetryResult, error) {
	r, err := d.RawStore.Retry(ctx, owner, id, policy, cause)
	if err != nil || !r.Parked {
		return r, err
	}
	if _, err := d.Delete(ctx, []uuid.UUID{id}); err != nil {
		return r, fmt.Errorf("dropping poison row %s: %w", id, err)
	}
	return r, nil
}
