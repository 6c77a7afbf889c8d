package scenarios

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxlab/outboxlab/chaos"
	"github.com/outboxlab/outboxlab/contract"
	"github.com/outboxlab/outboxlab/history"
)

// skewUnit is the step of clock-skew's offsets: a minute, or the lease the
// relay declares when that is longer. Offsets are 2 to 10 units, so each is
// at least twice the lease: a relay that compared leases with its own
// clock would see every live lease of another replica as run out (the
// forward replica) or keep its own long after it ran out (the backward one).
func skewUnit(s Stage) time.Duration {
	lease := s.Relay().Promises.Locking.Lease
	if lease <= 0 {
		lease = s.Lease()
	}
	return max(time.Minute, lease)
}

// skewBite judges whether clock-skew could bite: the lease the skewed
// replicas took (from their claim records, else from the rows) must be
// shorter than the smallest offset, and each skewed replica must have
// claimed rows while its clock was off, so that the replicas contended
// for the rows with clocks apart: by its claim records, or, for a relay
// that records nothing, by the last lease each row shows, where one such
// claim must also have been taken while another replica held a live
// lease. What it cannot establish makes the run inconclusive.
func skewBite(ctx context.Context, s Stage, res *Result) {
	var skews []skewed
	for _, f := range s.Faults() {
		if c, ok := f.(*relayClock); ok && c.Hits() > 0 {
			skews = append(skews, skewed{process: c.slot.name, fault: c.Name(), offset: c.offset})
		}
	}
	if len(skews) == 0 {
		return // never fired: the fault check says so
	}
	if s.Relay().Promises.Locking.Style == contract.LockingRowLock {
		var watch *lockWatch
		for _, f := range s.Faults() {
			if w, ok := f.(*lockWatch); ok {
				watch = w
			}
		}
		inc, unchecked := judgeSkewByLocks(skews, res.History, watch)
		res.Inconclusive = append(res.Inconclusive, inc...)
		res.Unchecked = append(res.Unchecked, unchecked...)
		return
	}
	var lease time.Duration
	from := "by their claim records"
	if res.Records.Known {
		lease = claimLease(res.History, skews)
	} else {
		var err error
		if lease, err = rowLease(ctx, s); err != nil {
			res.Problems = append(res.Problems, fmt.Sprintf("clock-skew: reading the leases the relays took: %v", err))
			return
		}
		from = "median of locked_until - locked_at in the rows"
	}
	var seen []leaseSeen
	if !res.Records.Known {
		var err error
		if seen, err = rowLeases(ctx, s); err != nil {
			res.Problems = append(res.Problems, fmt.Sprintf("clock-skew: reading the leases in the rows: %v", err))
			return
		}
	}
	inc, unchecked := judgeSkew(skews, lease, from, res.Records.Known, res.History, seen)
	res.Inconclusive = append(res.Inconclusive, inc...)
	res.Unchecked = append(res.Unchecked, unchecked...)
}

// leaseSeen is the last lease a replica took on a row, as the row shows
// it: locked_by, locked_at and locked_until, on the database clock.
type leaseSeen struct {
	process   string
	at, until time.Time
}

// rowLeases reads the last lease of every row of the first context's
// table that shows one.
func rowLeases(ctx context.Context, s Stage) ([]leaseSeen, error) {
	rows, err := s.DB().Query(ctx, `SELECT locked_by::text, locked_at::timestamptz, locked_until::timestamptz FROM `+s.Rows(0)+`
		WHERE locked_by IS NOT NULL AND locked_at IS NOT NULL AND locked_until IS NOT NULL`)
	if err != nil {
		return nil, err
	}
	var out []leaseSeen
	var l leaseSeen
	_, err = pgx.ForEachRow(rows, []any{&l.process, &l.at, &l.until}, func() error {
		out = append(out, l)
		return nil
	})
	return out, err
}

// skewed is one replica clock-skew ran with an offset clock: its history
// process, the fault's name and the offset.
type skewed struct {
	process, fault string
	offset         time.Duration
}

// judgeSkew decides what skewBite says of a run whose skewed replicas took
// leases of lease (0: unknown), told from, whose history is h and whose
// rows show the leases seen (read when the relays record nothing).
func judgeSkew(skews []skewed, lease time.Duration, from string, recordsKnown bool, h []history.Op, seen []leaseSeen) (inconclusive, unchecked []string) {
	smallest := skews[0].offset.Abs()
	for _, c := range skews[1:] {
		smallest = min(smallest, c.offset.Abs())
	}
	switch {
	case lease <= 0:
		return []string{"clock-skew could not bite: no lease the relays took is known (no claim record and no row with locked_until after locked_at)"}, nil
	case lease >= smallest:
		return []string{fmt.Sprintf("clock-skew could not bite: the relays took leases of %s (%s), not shorter than the smallest offset %s",
			lease.Round(time.Millisecond), from, smallest)}, nil
	case !recordsKnown:
		return judgeSkewByRows(skews, h, seen), []string{fmt.Sprintf("clock-skew: leases of %s (%s) against offsets of at least %s; the skewed replicas' claims and their contention are judged from the last lease each row shows",
			lease.Round(time.Millisecond), from, smallest)}
	}
	for _, c := range skews {
		if claimedWhile(h, c.process, c.fault) == 0 {
			inconclusive = append(inconclusive, fmt.Sprintf("clock-skew could not bite: %s claimed no row while its clock was %s", c.process, chaos.FormatClockOffset(c.offset)))
		}
	}
	if len(inconclusive) == 0 && !contendedByRecords(h, skews) {
		inconclusive = append(inconclusive, "clock-skew could not bite: no skewed replica claimed a row while another replica held a live lease, by their claim records on the database clock, so no offset clock ever met another replica's live lease")
	}
	return inconclusive, nil
}

// contendedByRecords reports whether a skewed replica, while its clock
// was off, claimed a row at a database time at which another replica's
// claim record shows a live lease (its claim at or before that time, its
// lease ending after it).
func contendedByRecords(h []history.Op, skews []skewed) bool {
	var claims []history.Op
	for _, op := range h {
		if op.F == history.Claim && op.Type == history.OK && len(op.Events) > 0 && !op.DBTime.IsZero() && !op.Until.IsZero() {
			claims = append(claims, op)
		}
	}
	for _, c := range skews {
		from, to := faultWindow(h, c.fault)
		if from.IsZero() {
			continue
		}
		for _, mine := range claims {
			if mine.Process != c.process || mine.Time.Before(from) || (!to.IsZero() && mine.Time.After(to)) {
				continue
			}
			for _, other := range claims {
				if other.Process != c.process && !other.DBTime.After(mine.DBTime) && mine.DBTime.Before(other.Until) {
					return true
				}
			}
		}
	}
	return false
}

// claimLease returns the longest lease the skewed replicas took by their
// claim records: the lease end less the claim time, both on the database
// clock.
func claimLease(h []history.Op, skews []skewed) time.Duration {
	var longest time.Duration
	for _, op := range h {
		if op.F != history.Claim || op.Type != history.OK || len(op.Events) == 0 || op.Until.IsZero() || op.DBTime.IsZero() {
			continue
		}
		if slices.ContainsFunc(skews, func(c skewed) bool { return c.process == op.Process }) {
			longest = max(longest, op.Until.Sub(op.DBTime))
		}
	}
	return longest
}

// rowLease returns the median lease of the rows of the first context's
// table (locked_until - locked_at), 0 when no row has one.
func rowLease(ctx context.Context, s Stage) (time.Duration, error) {
	var secs *float64
	err := s.DB().QueryRow(ctx, `SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY EXTRACT(EPOCH FROM locked_until - locked_at))
		FROM `+s.Rows(0)+` WHERE locked_until > locked_at`).Scan(&secs)
	if err != nil || secs == nil {
		return 0, err
	}
	return time.Duration(*secs * float64(time.Second)), nil
}

// claimedWhile counts the rows process claimed between the start and the
// stop of fault, by the wall-clock times of the records (to the end of the
// history if it never stopped). The history is not in time order: the
// relays' records are merged after the harness's own.
func claimedWhile(h []history.Op, process, fault string) int {
	from, to := faultWindow(h, fault)
	if from.IsZero() {
		return 0
	}
	n := 0
	for _, op := range h {
		if op.Process == process && op.F == history.Claim && op.Type == history.OK &&
			!op.Time.Before(from) && (to.IsZero() || !op.Time.After(to)) {
			n += len(op.Events)
		}
	}
	return n
}

// judgeSkewByRows decides whether clock-skew bit a relay that records
// nothing, from the last lease each row shows: every skewed replica must
// show a row it claimed while its clock was off, and one of those claims
// must have been taken while another replica held a live lease on another
// row (the replicas contended with clocks apart). A later claim of a row
// hides an earlier one, so what the rows cannot show makes the run
// inconclusive, never a pass.
func judgeSkewByRows(skews []skewed, h []history.Op, seen []leaseSeen) []string {
	var inconclusive []string
	contended := false
	for _, c := range skews {
		from, to := faultWindow(h, c.fault)
		n := 0
		for _, l := range seen {
			if l.process != c.process || from.IsZero() || l.at.Before(from) || (!to.IsZero() && l.at.After(to)) {
				continue
			}
			n++
			for _, o := range seen {
				if o.process != c.process && !o.at.After(l.at) && l.at.Before(o.until) {
					contended = true
				}
			}
		}
		if n == 0 {
			inconclusive = append(inconclusive, fmt.Sprintf("clock-skew could not bite: no row shows a claim by %s while its clock was %s (the rows keep only their last lease)", c.process, chaos.FormatClockOffset(c.offset)))
		}
	}
	if len(inconclusive) == 0 && !contended {
		inconclusive = append(inconclusive, "clock-skew could not bite: no row shows a skewed replica's claim taken while another replica held a live lease (the rows keep only their last lease)")
	}
	return inconclusive
}

// faultWindow returns the wall-clock start and stop of fault (stop zero
// when it never stopped; both zero when it never started).
func faultWindow(h []history.Op, fault string) (from, to time.Time) {
	for _, op := range h {
		if op.Meta.Fault == nil || op.Meta.Fault.Name != fault || op.Type != history.OK {
			continue
		}
		switch op.F {
		case history.FaultStart:
			from = op.Time
		case history.FaultStop:
			to = op.Time
		}
	}
	return from, to
}

// judgeSkewByLocks decides whether clock-skew bit a relay that holds row
// locks, which keeps no lease to compare with a clock: each skewed
// replica must have held row locks while its clock was off, and at some
// such moment another replica must have held row locks too (they
// contended for the rows with clocks apart), by the samples of the lock
// table watch took. What the samples cannot show makes the run
// inconclusive, never a pass.
func judgeSkewByLocks(skews []skewed, h []history.Op, watch *lockWatch) (inconclusive, unchecked []string) {
	if watch == nil {
		return []string{"clock-skew could not bite: the lock table was not watched"}, nil
	}
	total := 0
	for _, c := range skews {
		from, to := faultWindow(h, c.fault)
		if from.IsZero() {
			continue
		}
		holding, contended := watch.contention(c.process, from, to)
		total += contended
		if holding == 0 {
			inconclusive = append(inconclusive, fmt.Sprintf("clock-skew could not bite: %s held no row lock in any sample of the lock table while its clock was %s", c.process, chaos.FormatClockOffset(c.offset)))
		}
	}
	if len(inconclusive) == 0 && total == 0 {
		inconclusive = append(inconclusive, "clock-skew could not bite: no sample of the lock table showed a skewed replica holding row locks while another replica held some")
	}
	if len(inconclusive) > 0 {
		return inconclusive, nil
	}
	return nil, []string{fmt.Sprintf("clock-skew: the relay holds row locks, with no lease to compare with a clock; in %d samples of the lock table (every %s) a skewed replica held row locks while another replica held some",
		total, lockSampleEvery)}
}
