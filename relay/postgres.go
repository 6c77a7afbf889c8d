package relay

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxlab/outboxlab/outbox"
)

// PGStore is the PostgreSQL implementation of Store over one outbox table.
// Every time it compares or computes comes from now() of the database; the
// process clock is never sent to it. Each call is one statement, bounded by
// the context the relay passes.
type PGStore struct {
	pool  *pgxpool.Pool
	table outbox.Table

	q PGStatements
}

// PGStatements is the text of every statement PGStore issues, with the
// parameters each method binds: Claim $1 = limit, $2 = owner, $3 = lease
// in microseconds; Mark $1 = ids, $2 = owner; Retry $1 = id, $2 = owner,
// $3 = cause, $4 = backoff base and $5 = backoff maximum in microseconds,
// $6 = maximum attempts; Park $1 = id, $2 = owner, $3 = cause; Sweep $1 =
// retention in microseconds, $2 = limit; Stats none.
//
// PGStatements is the seam of the generated SQL mutants (see
// mutant/generated): a harness reads a store's statements with
// Statements, changes one, and hands the set back with UseStatements
// before the store is used, so that the relay runs the production code
// path on the changed statement and no file is edited. In production
// nothing calls UseStatements: a store issues what NewPGStore built, and
// the statements are read from a field as before, at no cost.
type PGStatements struct {
	Claim, Mark, Retry, Park, Sweep, Stats string
}

// Names returns the statements' names, in the order of the struct's
// fields: claim, mark, retry, park, sweep, stats.
func (PGStatements) Names() []string {
	return []string{"claim", "mark", "retry", "park", "sweep", "stats"}
}

// Ref returns a pointer to the statement called name (one of Names), or
// nil for an unknown name.
func (q *PGStatements) Ref(name string) *string {
	switch name {
	case "claim":
		return &q.Claim
	case "mark":
		return &q.Mark
	case "retry":
		return &q.Retry
	case "park":
		return &q.Park
	case "sweep":
		return &q.Sweep
	case "stats":
		return &q.Stats
	}
	return nil
}

var (
	_ Store      = (*PGStore)(nil)
	_ TimedStore = (*PGStore)(nil)
)

// NewPGStore returns a store for table on pool. The table must have been
// created by outbox.Migrate.
func NewPGStore(pool *pgxpool.Pool, table outbox.Table) *PGStore {
	t := table.Ident()
	// pending is the predicate of the partial index Table.PendingIndex;
	// the claim repeats it word for word so the planner can use the index.
	const pending = `processed_at IS NULL AND faulted_at IS NULL`
	// fence holds a row only for the owner of an unexpired lease.
	const fence = `locked_by = $2 AND locked_until > now() AND ` + pending
	// The claim locks the oldest eligible rows (skipping those another
	// claim holds) and updates them by the ctid of the version it locked,
	// a TID scan, instead of looking each one up again by its primary key:
	// a third fewer buffers touched per claim. A row that another
	// transaction updated after this statement's snapshot is locked in its
	// newest version and re-checked, and its ctid is then that version's,
	// which the snapshot does not see: the update skips it, and the row,
	// locked but not leased, is free again at commit for the next claim.
	// The store's updates leave a row eligible only with a backoff that has
	// run out by then, so this costs at most, rarely, a shorter batch.
	return &PGStore{pool: pool, table: table, q: PGStatements{
		Claim: `WITH claimed AS (
	UPDATE ` + t + `
	SET locked_by = $2, locked_at = now(), locked_until = now() + $3::bigint * interval '1 microsecond'
	WHERE ctid = ANY (ARRAY(
		SELECT ctid FROM ` + t + `
		WHERE ` + pending + ` AND (locked_until IS NULL OR locked_until < now())
		ORDER BY occurred_at, id
		LIMIT $1
		FOR UPDATE SKIP LOCKED))
	RETURNING id, message_type, payload, correlation_id, occurred_at, attempts, locked_at, locked_until
)
SELECT id, message_type, payload, correlation_id, occurred_at, attempts, locked_at, locked_until
FROM claimed ORDER BY occurred_at, id`,
		Mark: `UPDATE ` + t + ` SET processed_at = now()
WHERE id = ANY($1) AND ` + fence + `
RETURNING id, processed_at`,
		Retry: `UPDATE ` + t + ` SET
	attempts = attempts + 1,
	last_error = $3,
	locked_until = now() + least(power(2, least(attempts, 62)::double precision) * $4::bigint, $5::bigint) * interval '1 microsecond',
	faulted_at = CASE WHEN attempts + 1 >= $6 THEN now() END
WHERE id = $1 AND ` + fence + `
RETURNING attempts, faulted_at IS NOT NULL, now(), locked_until`,
		Park: `UPDATE ` + t + ` SET faulted_at = now(), last_error = $3
WHERE id = $1 AND ` + fence,
		Sweep: `DELETE FROM ` + t + ` WHERE id IN (
	SELECT id FROM ` + t + `
	WHERE processed_at IS NOT NULL AND processed_at < now() - $1::bigint * interval '1 microsecond'
		AND faulted_at IS NULL
	ORDER BY processed_at
	LIMIT $2
	FOR UPDATE SKIP LOCKED)
RETURNING id, now()`,
		Stats: `SELECT
	count(*) FILTER (WHERE ` + pending + `),
	count(*) FILTER (WHERE ` + pending + ` AND (locked_until IS NULL OR locked_until < now())),
	count(*) FILTER (WHERE faulted_at IS NOT NULL),
	count(*) FILTER (WHERE processed_at IS NOT NULL),
	coalesce(extract(epoch FROM now() - min(occurred_at) FILTER (
		WHERE ` + pending + ` AND (locked_until IS NULL OR locked_until < now()))), 0)::double precision
FROM ` + t,
	}}
}

// Table returns the table the store works on.
func (s *PGStore) Table() outbox.Table { return s.table }

// ClaimSQL returns the claim statement, with parameters $1 = limit,
// $2 = owner, $3 = lease in microseconds; tests EXPLAIN it.
func (s *PGStore) ClaimSQL() string { return s.q.Claim }

// Statements returns the statements the store issues.
func (s *PGStore) Statements() PGStatements { return s.q }

// UseStatements makes the store issue q instead of its statements: the
// seam PGStatements describes. It must be called before the store is
// used, and fails when a statement of q is empty.
func (s *PGStore) UseStatements(q PGStatements) error {
	for _, name := range q.Names() {
		if *q.Ref(name) == "" {
			return fmt.Errorf("statements of %s: the %s statement is empty", s.table, name)
		}
	}
	s.q = q
	return nil
}

// Claim leases up to limit eligible rows to owner in one statement and
// returns them oldest occurred_at first. It commits without waiting for
// the WAL flush (see queryAsync).
func (s *PGStore) Claim(ctx context.Context, owner string, limit int, lease time.Duration) ([]Row, error) {
	var out []Row
	err := s.queryAsync(ctx, s.q.Claim, []any{limit, owner, lease.Microseconds()}, func(rows pgx.Rows) (err error) {
		out, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (Row, error) {
			var (
				row      Row
				id, corr pgtype.UUID
			)
			err := r.Scan(&id, &row.Type, &row.Payload, &corr, &row.OccurredAt, &row.Attempts, &row.LockedAt, &row.LockedUntil)
			row.ID = id.Bytes
			if corr.Valid {
				c := uuid.UUID(corr.Bytes)
				row.CorrelationID = &c
			}
			return row, err
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("claiming from %s: %w", s.table, err)
	}
	// The statement orders its result already; sorting again is cheap and
	// keeps the contract independent of the plan.
	sort.SliceStable(out, func(i, j int) bool {
		if !out[i].OccurredAt.Equal(out[j].OccurredAt) {
			return out[i].OccurredAt.Before(out[j].OccurredAt)
		}
		return bytes.Compare(out[i].ID[:], out[j].ID[:]) < 0
	})
	return out, nil
}

// Mark sets processed_at on the rows of ids that owner still holds under an
// unexpired lease and returns the ids it marked. It commits without
// waiting for the WAL flush (see queryAsync).
func (s *PGStore) Mark(ctx context.Context, owner string, ids []uuid.UUID) ([]uuid.UUID, error) {
	marked, _, err := s.MarkAt(ctx, owner, ids)
	return marked, err
}

// MarkAt is Mark, also returning the processed_at it set (now() of its
// transaction); zero when it marked nothing.
func (s *PGStore) MarkAt(ctx context.Context, owner string, ids []uuid.UUID) ([]uuid.UUID, time.Time, error) {
	if len(ids) == 0 {
		return nil, time.Time{}, nil
	}
	var (
		marked []uuid.UUID
		at     time.Time
	)
	// pgtype.UUID encodes straight to the wire; uuid.UUID would go through
	// its driver.Valuer, a string per id that the driver parses back.
	arg := make([]pgtype.UUID, len(ids))
	for i, id := range ids {
		arg[i] = pgtype.UUID{Bytes: id, Valid: true}
	}
	err := s.queryAsync(ctx, s.q.Mark, []any{arg, owner}, func(rows pgx.Rows) (err error) {
		marked, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (uuid.UUID, error) {
			var id pgtype.UUID
			err := r.Scan(&id, &at)
			return id.Bytes, err
		})
		return err
	})
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("marking %d rows in %s: %w", len(ids), s.table, err)
	}
	return marked, at, nil
}

// asyncCommitSQL turns synchronous_commit off until the end of the
// transaction it runs in, and sequential scans with it.
//
// Without sequential scans the claim updates the rows it locked by their
// ctid through a TID scan whatever the planner believes of the table.
// pgx prepares each statement once per connection, and after five runs
// PostgreSQL keeps one generic plan of it, planned with the table's
// statistics of that moment. A new outbox table has none until autovacuum
// first analyzes it: planned then, the claim's update read every row of
// the table with a filter on ctid, a cost that grew with the table (0.1 ms
// at a thousand rows, 1.5 ms at twenty thousand) until the next analyze
// replaced the plan. The claim's index scan and the mark's are index
// scans already; no statement of the relay wants a sequential scan.
const asyncCommitSQL = `SELECT set_config('synchronous_commit', 'off', true), set_config('enable_seqscan', 'off', true)`

// queryAsync runs sql in one round trip as the second statement of an
// implicit transaction whose first turns synchronous_commit and sequential
// scans off (asyncCommitSQL), and hands its rows to collect. The transaction commits when the rows are read,
// without waiting for its WAL record to reach the disk.
//
// Claims and marks commit this way. Neither carries the guarantee: the
// event is durable from the application's own COMMIT, which stays
// synchronous. A claim or mark that a database crash loses a moment after
// its commit is undone as a whole (asynchronous commit never tears a
// transaction): a lost claim frees its rows, whose mark then finds no lease
// and counts it lost; a lost mark leaves its row pending under its lease
// until the lease expires. Either way the row is published again, which is
// a duplicate that the crash explains and the consumer's inbox absorbs.
// Retry and Park stay synchronous: the attempt count is what parks a
// poison row within its limit.
//
// On a disk where a flush costs milliseconds, skipping it takes most of
// the time of a claim or mark off the relay's critical path.
func (s *PGStore) queryAsync(ctx context.Context, sql string, args []any, collect func(pgx.Rows) error) error {
	var b pgx.Batch
	b.Queue(asyncCommitSQL)
	b.Queue(sql, args...)
	br := s.pool.SendBatch(ctx, &b)
	if _, err := br.Exec(); err != nil {
		return errors.Join(err, br.Close())
	}
	rows, err := br.Query()
	if err != nil {
		return errors.Join(err, br.Close())
	}
	err = collect(rows)
	return errors.Join(err, br.Close())
}

// Retry records a row-level failure of a row owner still holds: one more
// attempt, the cause in last_error, eligibility again after
// min(2^attempts x BackoffBase, BackoffMax) by the database clock (attempts
// counted before this failure), and faulted_at once attempts reach
// MaxAttempts.
func (s *PGStore) Retry(ctx context.Context, owner string, id uuid.UUID, policy RetryPolicy, cause string) (RetryResult, error) {
	var res RetryResult
	err := s.pool.QueryRow(ctx, s.q.Retry, id, owner, cause,
		policy.BackoffBase.Microseconds(), policy.BackoffMax.Microseconds(), policy.MaxAttempts,
	).Scan(&res.Attempts, &res.Parked, &res.At, &res.Until)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return RetryResult{}, nil
	case err != nil:
		return RetryResult{}, fmt.Errorf("recording attempt of %s in %s: %w", id, s.table, err)
	}
	res.Applied = true
	return res, nil
}

// Park faults a row owner still holds at once, keeping the cause in
// last_error. It reports false when the lease was lost.
func (s *PGStore) Park(ctx context.Context, owner string, id uuid.UUID, cause string) (bool, error) {
	tag, err := s.pool.Exec(ctx, s.q.Park, id, owner, cause)
	if err != nil {
		return false, fmt.Errorf("parking %s in %s: %w", id, s.table, err)
	}
	return tag.RowsAffected() == 1, nil
}

// Sweep deletes up to limit processed rows whose processed_at is older than
// retention by the database clock. Pending and faulted rows never match.
func (s *PGStore) Sweep(ctx context.Context, retention time.Duration, limit int) (int, error) {
	ids, _, err := s.SweepIDs(ctx, retention, limit)
	return len(ids), err
}

// SweepIDs is Sweep, returning the ids it deleted and now() of its
// statement (zero when it deleted nothing).
func (s *PGStore) SweepIDs(ctx context.Context, retention time.Duration, limit int) ([]uuid.UUID, time.Time, error) {
	rows, err := s.pool.Query(ctx, s.q.Sweep, retention.Microseconds(), limit)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("sweeping %s: %w", s.table, err)
	}
	var (
		ids []uuid.UUID
		id  pgtype.UUID
		at  time.Time
	)
	_, err = pgx.ForEachRow(rows, []any{&id, &at}, func() error {
		ids = append(ids, id.Bytes)
		return nil
	})
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("sweeping %s: %w", s.table, err)
	}
	return ids, at, nil
}

// Stats reports the backlog: pending, eligible, faulted and processed
// counts and the age of the oldest eligible row by the database clock.
func (s *PGStore) Stats(ctx context.Context) (Stats, error) {
	var st Stats
	var ageSeconds float64
	err := s.pool.QueryRow(ctx, s.q.Stats).Scan(&st.Pending, &st.Eligible, &st.Faulted, &st.Processed, &ageSeconds)
	if err != nil {
		return Stats{}, fmt.Errorf("reading stats of %s: %w", s.table, err)
	}
	st.OldestEligibleAge = time.Duration(ageSeconds * float64(time.Second))
	return st, nil
}

// DBNow returns now() of the database, the clock every lease is measured
// by.
func (s *PGStore) DBNow(ctx context.Context) (time.Time, error) {
	var now time.Time
	if err := s.pool.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
		return time.Time{}, fmt.Errorf("reading database clock: %w", err)
	}
	return now, nil
}
