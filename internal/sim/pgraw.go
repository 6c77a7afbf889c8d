package sim

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxlab/outboxlab/outbox"
	"github.com/outboxlab/outboxlab/relay"
)

// PGRaw is relay.PGStore plus the statements a correct relay never
// issues, on PostgreSQL: it implements RawStore, so the relay process of
// cmd/relay runs the same mutant decorators as the simulation, and the
// SQL-faithful tier runs them against a real database. Each method is one
// statement; times compared or computed in SQL come from the database's
// now(), as in relay.PGStore, except where a caller passes a time in
// (Lease's until), which is what app-clock-lease gets wrong.
type PGRaw struct {
	*relay.PGStore
	pool  *pgxpool.Pool
	table outbox.Table

	scanPendingSQL, scanAllSQL, leaseSQL, markSQL, deleteSQL string
}

var _ RawStore = (*PGRaw)(nil)

// NewPGRaw returns the raw statements over table on pool, on top of
// relay.NewPGStore(pool, table). The table must have been created by
// outbox.Migrate.
func NewPGRaw(pool *pgxpool.Pool, table outbox.Table) *PGRaw {
	return newPGRawOn(relay.NewPGStore(pool, table), pool, table)
}

// newPGRawOn is NewPGRaw on top of store, a relay.PGStore of table on pool.
func newPGRawOn(store *relay.PGStore, pool *pgxpool.Pool, table outbox.Table) *PGRaw {
	t := table.Ident()
	const pending = `processed_at IS NULL AND faulted_at IS NULL`
	const cols = `id, message_type, payload, correlation_id, occurred_at, processed_at, attempts,
	faulted_at, last_error, locked_by, locked_at, locked_until`
	return &PGRaw{
		PGStore:        store,
		pool:           pool,
		table:          table,
		scanPendingSQL: `SELECT ` + cols + ` FROM ` + t + ` WHERE ` + pending + ` ORDER BY occurred_at, id LIMIT $1`,
		scanAllSQL:     `SELECT ` + cols + ` FROM ` + t + ` ORDER BY occurred_at, id LIMIT $1`,
		leaseSQL: `UPDATE ` + t + ` SET locked_by = $2, locked_at = now(), locked_until = $3
WHERE id = ANY($1) AND ` + pending + `
RETURNING id, message_type, payload, correlation_id, occurred_at, attempts`,
		markSQL:   `UPDATE ` + t + ` SET processed_at = now() WHERE id = ANY($1) AND ` + pending + ` RETURNING id`,
		deleteSQL: `DELETE FROM ` + t + ` WHERE id = ANY($1)`,
	}
}

// Now implements RawStore: SELECT now().
func (s *PGRaw) Now(ctx context.Context) (time.Time, error) { return s.DBNow(ctx) }

// Scan implements RawStore: up to limit rows in claim order, pending
// ones only unless all, without locking anything.
func (s *PGRaw) Scan(ctx context.Context, limit int, all bool) ([]RowState, error) {
	q := s.scanPendingSQL
	if all {
		q = s.scanAllSQL
	}
	rows, err := s.pool.Query(ctx, q, limit)
	if err != nil {
		return nil, fmt.Errorf("scanning %s: %w", s.table, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (RowState, error) {
		var (
			st                                        RowState
			processed, faulted, lockedAt, lockedUntil *time.Time
			lastError, lockedBy                       *string
		)
		err := r.Scan(&st.ID, &st.Type, &st.Payload, &st.CorrelationID, &st.OccurredAt, &processed, &st.Attempts,
			&faulted, &lastError, &lockedBy, &lockedAt, &lockedUntil)
		st.ProcessedAt, st.FaultedAt = deref(processed), deref(faulted)
		st.LockedAt, st.LockedUntil = deref(lockedAt), deref(lockedUntil)
		if lastError != nil {
			st.LastError = *lastError
		}
		if lockedBy != nil {
			st.LockedBy = *lockedBy
		}
		return st, err
	})
	if err != nil {
		return nil, fmt.Errorf("scanning %s: %w", s.table, err)
	}
	return out, nil
}

func deref(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return *t
}

// Lease implements RawStore: locked_by = owner, locked_at = now() and
// locked_until = until (NULL for a zero until) on the pending rows of ids,
// whatever their lease. The rows come back in the order of ids.
func (s *PGRaw) Lease(ctx context.Context, owner string, ids []uuid.UUID, until time.Time) ([]relay.Row, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	var u *time.Time
	if !until.IsZero() {
		u = &until
	}
	rows, err := s.pool.Query(ctx, s.leaseSQL, ids, owner, u)
	if err != nil {
		return nil, fmt.Errorf("leasing %d rows of %s: %w", len(ids), s.table, err)
	}
	got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (relay.Row, error) {
		var row relay.Row
		err := r.Scan(&row.ID, &row.Type, &row.Payload, &row.CorrelationID, &row.OccurredAt, &row.Attempts)
		return row, err
	})
	if err != nil {
		return nil, fmt.Errorf("leasing %d rows of %s: %w", len(ids), s.table, err)
	}
	byID := make(map[uuid.UUID]relay.Row, len(got))
	for _, r := range got {
		byID[r.ID] = r
	}
	out := make([]relay.Row, 0, len(got))
	for _, id := range ids {
		if r, ok := byID[id]; ok {
			out = append(out, r)
			delete(byID, id)
		}
	}
	return out, nil
}

// MarkUnfenced implements RawStore: processed_at = now() on the
// pending rows of ids, whoever holds them.
func (s *PGRaw) MarkUnfenced(ctx context.Context, ids []uuid.UUID) ([]uuid.UUID, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	rows, err := s.pool.Query(ctx, s.markSQL, ids)
	if err != nil {
		return nil, fmt.Errorf("marking %d rows of %s: %w", len(ids), s.table, err)
	}
	marked, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		return nil, fmt.Errorf("marking %d rows of %s: %w", len(ids), s.table, err)
	}
	return marked, nil
}

// Delete implements RawStore: the rows of ids are deleted whatever
// their state.
func (s *PGRaw) Delete(ctx context.Context, ids []uuid.UUID) (int, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	tag, err := s.pool.Exec(ctx, s.deleteSQL, ids)
	if err != nil {
		return 0, fmt.Errorf("deleting %d rows of %s: %w", len(ids), s.table, err)
	}
	return int(tag.RowsAffected()), nil
}
