package main

import (
	"fmt"
	"strings"
	"time"
)

// params numbers the arguments of one statement as they are added.
type params struct{ args []any }

// add appends v and returns its placeholder, "$n".
func (p *params) add(v any) string {
	p.args = append(p.args, v)
	return fmt.Sprintf("$%d", len(p.args))
}

// queries writes seqrelay's statements on its table. Every time a
// statement compares or computes is now() of the database, except in the
// own-clock-lease bug mode, where the lease's end, eligibility and fences
// come from the process's own clock as a parameter (locked_at stays now(),
// as a column default would); no-fence and skip-late change the
// statements too.
type queries struct {
	table string // quoted
	me    string // the relay's id, the lease owner
	bug   bug
	clock func() time.Time
}

// leaseNow is the "now" of lease times in a statement being built.
func (q queries) leaseNow(p *params) string {
	if q.bug == bugOwnClock {
		return p.add(q.clock()) + "::timestamptz"
	}
	return "now()"
}

// fence is the condition under which this relay may write a row it
// claimed: it still holds the row's unexpired lease and the row is still
// pending. now is the statement's leaseNow.
func (q queries) fence(p *params, now string) string {
	if q.bug == bugNoFence {
		return "TRUE"
	}
	return "locked_by = " + p.add(q.me) + " AND locked_until > " + now +
		" AND processed_at IS NULL AND faulted_at IS NULL"
}

// claim leases up to limit eligible rows: pending, with no lease or an
// expired one, oldest occurred_at first, rows locked by another claim
// skipped. after is skip-late's high-water mark, xidMark xid-mark's and
// since since-start's start (each ignored otherwise).
func (q queries) claim(limit int, after string, xidMark int64, since time.Time) (string, []any) {
	p := &params{}
	now := q.leaseNow(p)
	where := "processed_at IS NULL AND faulted_at IS NULL AND (locked_until IS NULL OR locked_until <= " + now + ")"
	order := "occurred_at, id"
	if q.bug == bugSkipLate {
		where += " AND id > " + p.add(after) + "::uuid"
		order = "id"
	}
	if q.bug == bugXidMark || q.bug == bugXidHighWater {
		// The row version's transaction id, widened as pg_snapshot_xmin
		// gives it (epoch 0 on a server that has not wrapped around).
		where += " AND xmin::text::bigint >= " + p.add(xidMark)
	}
	if q.bug == bugSinceStart {
		where += " AND occurred_at >= " + p.add(since) + "::timestamptz"
	}
	sql := `WITH picked AS (
	SELECT id FROM ` + q.table + `
	WHERE ` + where + `
	ORDER BY ` + order + `
	LIMIT ` + p.add(int64(limit)) + `
	FOR UPDATE SKIP LOCKED)
UPDATE ` + q.table + ` AS o
SET locked_by = ` + p.add(q.me) + `, locked_at = now(),
	locked_until = ` + now + ` + make_interval(secs => ` + p.add(lease.Seconds()) + `::float8)
FROM picked WHERE o.id = picked.id
RETURNING o.id::text, o.message_type, o.payload::text, o.correlation_id::text, o.attempts, o.occurred_at`
	return sql, p.args
}

// snapshotXmin reads the oldest transaction still running: every row
// version written by an older one is committed or gone (xid-mark only).
const snapshotXmin = `SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint`

// mark sets processed_at on a row under this relay's lease.
func (q queries) mark(id string) (string, []any) {
	p := &params{}
	where := "id = " + p.add(id) + "::uuid"
	now := q.leaseNow(p)
	where += " AND " + q.fence(p, now)
	return `UPDATE ` + q.table + ` SET processed_at = now() WHERE ` + trimTrue(where), p.args
}

// fail counts a row-level failure: attempts += 1, the row eligible again
// after backoff, and faulted at maxAttempts. It returns the row's new
// attempts and whether it is now parked.
func (q queries) fail(id string, backoff time.Duration, maxAttempts int) (string, []any) {
	p := &params{}
	where := "id = " + p.add(id) + "::uuid"
	now := q.leaseNow(p)
	where += " AND " + q.fence(p, now)
	sql := `UPDATE ` + q.table + ` SET attempts = attempts + 1,
	locked_until = ` + now + ` + make_interval(secs => ` + p.add(backoff.Seconds()) + `::float8),
	faulted_at = CASE WHEN attempts + 1 >= ` + p.add(int64(maxAttempts)) + ` THEN now() END
WHERE ` + trimTrue(where) + `
RETURNING attempts, faulted_at IS NOT NULL`
	return sql, p.args
}

// park faults a poison row at once, without an attempt.
func (q queries) park(id string) (string, []any) {
	p := &params{}
	where := "id = " + p.add(id) + "::uuid"
	now := q.leaseNow(p)
	where += " AND " + q.fence(p, now)
	return `UPDATE ` + q.table + ` SET faulted_at = now() WHERE ` + trimTrue(where), p.args
}

// trimTrue drops the " AND TRUE" an absent fence leaves.
func trimTrue(where string) string { return strings.TrimSuffix(where, " AND TRUE") }

// backoff is how long a row waits after its n-th failed attempt:
// 2^n × 200ms, at most 5s.
func backoff(n int) time.Duration {
	if n < 1 {
		n = 1
	}
	d := backoffBase
	for i := 0; i < n; i++ {
		d *= 2
		if d >= backoffCap {
			return backoffCap
		}
	}
	return d
}
