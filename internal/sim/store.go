package sim

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/outboxlab/outboxlab/outbox"
	"github.com/outboxlab/outboxlab/relay"
)

// Epoch is the database clock's reading when a simulation starts.
var Epoch = time.Date(2030, time.January, 1, 0, 0, 0, 0, time.UTC)

// Clock is the simulated database clock, the one clock every lease,
// eligibility, backoff and retention is measured by. It only moves when
// told, in whole microseconds like PostgreSQL's timestamptz.
type Clock struct {
	now time.Time
}

// NewClock returns a clock reading Epoch.
func NewClock() *Clock { return &Clock{now: Epoch} }

// Now returns the database time.
func (c *Clock) Now() time.Time { return c.now }

// Advance moves the clock forward by d, truncated to microseconds; a
// negative d is ignored, the database clock never goes back.
func (c *Clock) Advance(d time.Duration) {
	if d <= 0 {
		return
	}
	c.now = c.now.Add(d.Truncate(time.Microsecond))
}

// AdvanceTo moves the clock to t when t is later.
func (c *Clock) AdvanceTo(t time.Time) {
	if t.After(c.now) {
		c.now = t.Truncate(time.Microsecond)
	}
}

// RowState is the full state of one outbox row, as the table holds it.
// Zero times stand for NULL, an empty LockedBy for NULL.
type RowState struct {
	ID            uuid.UUID
	Type          string
	Payload       []byte
	CorrelationID *uuid.UUID
	OccurredAt    time.Time
	ProcessedAt   time.Time
	Attempts      int
	FaultedAt     time.Time
	LastError     string
	LockedBy      string
	LockedAt      time.Time
	LockedUntil   time.Time
}

// Pending reports whether the row is neither processed nor faulted.
func (r *RowState) Pending() bool { return r.ProcessedAt.IsZero() && r.FaultedAt.IsZero() }

// eligible reports whether a claim at now may take the row.
func (r *RowState) eligible(now time.Time) bool {
	return r.Pending() && (r.LockedUntil.IsZero() || r.LockedUntil.Before(now))
}

// held reports whether owner holds the row under an unexpired lease: the
// fence of mark, retry and park.
func (r *RowState) held(owner string, now time.Time) bool {
	return r.LockedBy == owner && r.LockedUntil.After(now) && r.Pending()
}

type row struct {
	RowState
	idStr string
}

func (r *row) relayRow() relay.Row {
	return relay.Row{ID: r.ID, Type: r.Type, Payload: r.Payload, CorrelationID: r.CorrelationID,
		OccurredAt: r.OccurredAt, Attempts: r.Attempts, LockedAt: r.LockedAt, LockedUntil: r.LockedUntil}
}

// less orders rows like the claim's ORDER BY occurred_at, id (PostgreSQL
// compares uuids bytewise).
func less(a, b *row) int {
	if c := a.OccurredAt.Compare(b.OccurredAt); c != 0 {
		return c
	}
	return bytes.Compare(a.ID[:], b.ID[:])
}

// ErrDuplicateID is returned by Tx.Commit when an event id is already in
// the table (the primary key).
var ErrDuplicateID = errors.New("duplicate outbox id")

// Store is an in-memory outbox table with the semantics of relay.PGStore:
// every call is one atomic statement at the current reading of its Clock.
// Because calls are atomic, FOR UPDATE SKIP LOCKED is trivially honoured.
// A Store is not safe for concurrent use; the simulation runs one process
// at a time.
type Store struct {
	clock *Clock
	byID  map[uuid.UUID]*row
	// pending holds the pending rows ordered by (occurred_at, id).
	pending []*row
	// processed holds the processed rows in the order they were marked,
	// which is processed_at order.
	processed []*row
	// swept holds the rows deleted, in deletion order.
	swept []*row
}

var _ relay.Store = (*Store)(nil)

// NewStore returns an empty table on clock.
func NewStore(clock *Clock) *Store {
	return &Store{clock: clock, byID: make(map[uuid.UUID]*row)}
}

// Clock returns the database clock.
func (s *Store) Clock() *Clock { return s.clock }

// Tx is a simulated business transaction: staged rows are invisible until
// Commit and vanish on Rollback. Each row's occurred_at is the database
// time when it was staged, so a long transaction commits old rows.
type Tx struct {
	s    *Store
	rows []*row
	done bool
}

// Begin opens a transaction.
func (s *Store) Begin() *Tx { return &Tx{s: s} }

// Stage adds e to the transaction. A zero e.OccurredAt takes the database
// time now, like outbox.Stage.
func (tx *Tx) Stage(e outbox.Event) error {
	if tx.done {
		return errors.New("staging event: transaction is closed")
	}
	if e.ID == uuid.Nil || e.Type == "" || len(e.Payload) == 0 {
		return fmt.Errorf("staging event %s: id, type and payload are required", e.ID)
	}
	at := e.OccurredAt.Truncate(time.Microsecond)
	if at.IsZero() {
		at = tx.s.clock.Now()
	}
	tx.rows = append(tx.rows, &row{RowState: RowState{ID: e.ID, Type: e.Type, Payload: e.Payload,
		CorrelationID: e.CorrelationID, OccurredAt: at}, idStr: e.ID.String()})
	return nil
}

// Len returns how many rows the transaction staged.
func (tx *Tx) Len() int { return len(tx.rows) }

// Commit makes the staged rows visible, all or none.
func (tx *Tx) Commit() error {
	if tx.done {
		return errors.New("committing: transaction is closed")
	}
	tx.done = true
	for i, r := range tx.rows {
		if _, dup := tx.s.byID[r.ID]; dup || slices.ContainsFunc(tx.rows[:i], func(o *row) bool { return o.ID == r.ID }) {
			return fmt.Errorf("committing %s: %w", r.ID, ErrDuplicateID)
		}
	}
	for _, r := range tx.rows {
		tx.s.byID[r.ID] = r
		i, _ := slices.BinarySearchFunc(tx.s.pending, r, less)
		tx.s.pending = slices.Insert(tx.s.pending, i, r)
	}
	return nil
}

// Rollback discards the staged rows.
func (tx *Tx) Rollback() {
	tx.done = true
	tx.rows = nil
}

// Claim leases up to limit eligible rows to owner, oldest first.
func (s *Store) Claim(_ context.Context, owner string, limit int, lease time.Duration) ([]relay.Row, error) {
	claimed := s.claim(owner, limit, lease, nil)
	out := make([]relay.Row, len(claimed))
	for i, r := range claimed {
		out[i] = r.relayRow()
	}
	return out, nil
}

// claim is Claim returning the table's rows, appended to buf.
func (s *Store) claim(owner string, limit int, lease time.Duration, buf []*row) []*row {
	now := s.clock.Now()
	until := now.Add(lease.Truncate(time.Microsecond))
	for _, r := range s.pending {
		if len(buf) >= limit {
			break
		}
		if !r.eligible(now) {
			continue
		}
		r.LockedBy, r.LockedAt, r.LockedUntil = owner, now, until
		buf = append(buf, r)
	}
	return buf
}

// Mark sets processed_at on the rows of ids that owner holds under an
// unexpired lease and returns them, in the order of ids.
func (s *Store) Mark(_ context.Context, owner string, ids []uuid.UUID) ([]uuid.UUID, error) {
	var out []uuid.UUID
	for _, r := range s.mark(owner, ids, nil) {
		out = append(out, r.ID)
	}
	return out, nil
}

func (s *Store) mark(owner string, ids []uuid.UUID, buf []*row) []*row {
	now := s.clock.Now()
	for _, id := range ids {
		r := s.byID[id]
		if r == nil || !r.held(owner, now) {
			continue
		}
		r.ProcessedAt = now
		s.unpend(r)
		s.processed = append(s.processed, r)
		buf = append(buf, r)
	}
	return buf
}

// markAny marks the rows of ids processed whatever their lease, as an
// unfenced UPDATE would.
func (s *Store) markAny(ids []uuid.UUID, buf []*row) []*row {
	now := s.clock.Now()
	for _, id := range ids {
		r := s.byID[id]
		if r == nil || !r.Pending() {
			continue
		}
		r.ProcessedAt = now
		s.unpend(r)
		s.processed = append(s.processed, r)
		buf = append(buf, r)
	}
	return buf
}

func (s *Store) unpend(r *row) {
	if i, ok := slices.BinarySearchFunc(s.pending, r, less); ok {
		s.pending = slices.Delete(s.pending, i, i+1)
	}
}

// Retry records a row-level failure of a row owner holds: attempts + 1,
// the cause in last_error, locked_until = now + policy.Backoff(attempts
// before this failure), and faulted_at once attempts reach MaxAttempts.
// This is relay.PGStore's statement: in an UPDATE the right-hand sides read
// the row as it was.
func (s *Store) Retry(_ context.Context, owner string, id uuid.UUID, policy relay.RetryPolicy, cause string) (relay.RetryResult, error) {
	now := s.clock.Now()
	r := s.byID[id]
	if r == nil || !r.held(owner, now) {
		return relay.RetryResult{}, nil
	}
	old := r.Attempts
	r.Attempts = old + 1
	r.LastError = cause
	r.LockedUntil = now.Add(policy.Backoff(old).Truncate(time.Microsecond))
	if old+1 >= policy.MaxAttempts {
		r.FaultedAt = now
		s.unpend(r)
	}
	return relay.RetryResult{Applied: true, Attempts: r.Attempts, Parked: !r.FaultedAt.IsZero(), At: now, Until: r.LockedUntil}, nil
}

// Park faults a row owner holds at once.
func (s *Store) Park(_ context.Context, owner string, id uuid.UUID, cause string) (bool, error) {
	now := s.clock.Now()
	r := s.byID[id]
	if r == nil || !r.held(owner, now) {
		return false, nil
	}
	r.FaultedAt = now
	r.LastError = cause
	s.unpend(r)
	return true, nil
}

// Sweep deletes up to limit processed rows whose processed_at is older than
// retention, oldest first. Pending and faulted rows never match.
func (s *Store) Sweep(_ context.Context, retention time.Duration, limit int) (int, error) {
	return len(s.sweep(retention, limit, nil)), nil
}

func (s *Store) sweep(retention time.Duration, limit int, buf []*row) []*row {
	cut := s.clock.Now().Add(-retention.Truncate(time.Microsecond))
	n := 0
	for n < len(s.processed) && len(buf) < limit && s.processed[n].ProcessedAt.Before(cut) {
		buf = append(buf, s.processed[n])
		n++
	}
	for _, r := range s.processed[:n] {
		delete(s.byID, r.ID)
	}
	s.swept = append(s.swept, s.processed[:n]...)
	s.processed = slices.Delete(s.processed, 0, n)
	return buf
}

// deleteAny deletes the rows of ids whatever their state, as a broken sweep
// would; it returns the rows deleted.
func (s *Store) deleteAny(ids []uuid.UUID, buf []*row) []*row {
	for _, id := range ids {
		r := s.byID[id]
		if r == nil {
			continue
		}
		delete(s.byID, id)
		s.unpend(r)
		if i := slices.Index(s.processed, r); i >= 0 {
			s.processed = slices.Delete(s.processed, i, i+1)
		}
		s.swept = append(s.swept, r)
		buf = append(buf, r)
	}
	return buf
}

// Stats reports the backlog by the database clock.
func (s *Store) Stats(context.Context) (relay.Stats, error) {
	now := s.clock.Now()
	var st relay.Stats
	st.Pending = int64(len(s.pending))
	st.Processed = int64(len(s.processed))
	st.Faulted = int64(len(s.byID)) - st.Pending - st.Processed
	for _, r := range s.pending {
		if r.eligible(now) {
			if st.Eligible == 0 {
				st.OldestEligibleAge = now.Sub(r.OccurredAt)
			}
			st.Eligible++
		}
	}
	return st, nil
}

// NextEligible returns the earliest time after now at which a pending row
// that is leased or backing off becomes eligible, and false when no
// pending row waits on its lease.
func (s *Store) NextEligible() (time.Time, bool) {
	var next time.Time
	now := s.clock.Now()
	for _, r := range s.pending {
		if r.eligible(now) {
			return now, true
		}
		if next.IsZero() || r.LockedUntil.Before(next) {
			next = r.LockedUntil
		}
	}
	if next.IsZero() {
		return next, false
	}
	// locked_until < now() is strict: one microsecond past.
	return next.Add(time.Microsecond), true
}

// Rows returns the state of every row in the table, ordered by
// (occurred_at, id).
func (s *Store) Rows() []RowState {
	all := make([]*row, 0, len(s.byID))
	all = append(all, s.pending...)
	all = append(all, s.processed...)
	for _, r := range s.byID {
		if !r.FaultedAt.IsZero() {
			all = append(all, r)
		}
	}
	slices.SortFunc(all, less)
	out := make([]RowState, len(all))
	for i, r := range all {
		out[i] = r.RowState
	}
	return out
}

// Row returns the state of the row id.
func (s *Store) Row(id uuid.UUID) (RowState, bool) {
	r := s.byID[id]
	if r == nil {
		return RowState{}, false
	}
	return r.RowState, true
}

// Swept returns the ids of the rows deleted so far, in deletion order.
func (s *Store) Swept() []uuid.UUID {
	out := make([]uuid.UUID, len(s.swept))
	for i, r := range s.swept {
		out[i] = r.ID
	}
	return out
}
