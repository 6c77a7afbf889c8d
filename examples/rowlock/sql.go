package main

import (
	"strconv"
	"time"
)

// The relay's table, which target.yaml's migrate creates (the names are
// the relay's own; the target's rows view maps them onto the contract's):
//
//	seq          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY  -- the event id
//	topic        text NOT NULL         -- the message type, the routing key
//	body         jsonb NOT NULL        -- the payload
//	correlation  uuid                  -- the correlation id
//	created_at   timestamptz NOT NULL  -- when the event occurred
//	published_at timestamptz           -- set once the broker confirmed it
//	failures     integer NOT NULL      -- row-level failures (attempts)
//	dead_at      timestamptz           -- parked
//	retry_after  timestamptz           -- not eligible before (backoff)
//
// No lease columns: a batch holds its rows by the row locks of its
// transaction.

// queries writes the relay's statements on its table. Every time they
// compare or compute is now() of the database: the transaction's start,
// the same for every statement of a batch.
type queries struct {
	table string // quoted
	bug   bug
}

// claim selects up to limit eligible rows and locks them for the batch's
// transaction: pending (neither published nor parked), past their
// backoff, oldest created_at first, rows another batch holds skipped.
// after is skip-late's high-water mark (ignored otherwise); no-lock takes
// no row lock. The rows come as seq, topic, body, correlation, failures.
func (q queries) claim(limit int, after int64) (string, []any) {
	args := []any{int64(limit)}
	where := "published_at IS NULL AND dead_at IS NULL AND (retry_after IS NULL OR retry_after <= now())"
	order := "created_at, seq"
	if q.bug == bugSkipLate {
		args = append(args, after)
		where += " AND seq > $2"
		order = "seq"
	}
	lock := "\nFOR UPDATE SKIP LOCKED"
	if q.bug == bugNoLock {
		lock = ""
	}
	return `SELECT seq, topic, body::text, correlation::text, failures
FROM ` + q.table + `
WHERE ` + where + `
ORDER BY ` + order + `
LIMIT $1` + lock, args
}

// lockTable is lock-table's lock of the whole table for the batch's
// transaction: SHARE ROW EXCLUSIVE conflicts with the ROW EXCLUSIVE lock
// every INSERT takes, so no producer stages until the batch ends.
func (q queries) lockTable() string {
	return `LOCK TABLE ` + q.table + ` IN SHARE ROW EXCLUSIVE MODE`
}

// mark sets published_at on the confirmed rows of the batch. The rows are
// locked by the batch, so they are still pending; the condition says so
// all the same.
func (q queries) mark(seqs []int64) (string, []any) {
	return `UPDATE ` + q.table + ` SET published_at = now()
WHERE seq = ANY($1::bigint[]) AND published_at IS NULL AND dead_at IS NULL`, []any{seqs}
}

// fail counts a failure of the row (the broker nacked or returned it):
// failures + 1, eligible again after wait on the database clock, parked
// once its failures reach maxAttempts. It returns the row's failures and
// whether it is now parked.
func (q queries) fail(seq int64, wait time.Duration, maxAttempts int) (string, []any) {
	return `UPDATE ` + q.table + ` SET failures = failures + 1,
	retry_after = now() + $2::bigint * interval '1 microsecond',
	dead_at = CASE WHEN failures + 1 >= $3 THEN now() END
WHERE seq = $1 AND published_at IS NULL AND dead_at IS NULL
RETURNING failures, dead_at IS NOT NULL`, []any{seq, wait.Microseconds(), int64(maxAttempts)}
}

// park parks a poison row at once, without an attempt; drop-poison
// deletes it instead.
func (q queries) park(seq int64) (string, []any) {
	if q.bug == bugDropPoison {
		return `DELETE FROM ` + q.table + ` WHERE seq = $1`, []any{seq}
	}
	return `UPDATE ` + q.table + ` SET dead_at = now()
WHERE seq = $1 AND published_at IS NULL AND dead_at IS NULL`, []any{seq}
}

// messageID is the text of a seq, which the relay publishes as the
// message_id: the harness reads the stage's RETURNING seq as seq::text,
// the same decimal text.
func messageID(seq int64) string { return strconv.FormatInt(seq, 10) }
