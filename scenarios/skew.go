package scenarios

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/outboxlab/outboxlab/chaos"
	"github.com/outboxlab/outboxlab/history"
)

// skewUnit is the step of clock-skew's offsets: a minute, or the lease the
// relay declares when that is longer. Offsets are 2 to 10 units, so each is
// at least twice the lease: a relay that compared leases with its own
// clock would see every live lease of another replica as run out (the
// forward replica) or keep its own long after it ran out (the backward one).
func skewUnit(s stage) time.Duration {
	lease := s.Relay().Lease
	if lease <= 0 {
		lease = s.Lease()
	}
	return max(time.Minute, lease)
}

// skewBite judges whether clock-skew could bite: the lease the skewed
// replicas took (from their claim records, else from the rows) must be
// shorter than the smallest offset, and, where the relay records, each
// skewed replica must have claimed rows while its clock was off, so that
// the replicas contended for the rows with clocks apart. What it cannot
// establish makes the run inconclusive.
func skewBite(ctx context.Context, s stage, res *Result) {
	var skews []skewed
	for _, f := range s.Faults() {
		if c, ok := f.(*relayClock); ok && c.Hits() > 0 {
			skews = append(skews, skewed{process: c.slot.name, fault: c.Name(), offset: c.offset})
		}
	}
	if len(skews) == 0 {
		return // never fired: the fault check says so
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
	inc, unchecked := judgeSkew(skews, lease, from, res.Records.Known, res.History)
	res.Inconclusive = append(res.Inconclusive, inc...)
	res.Unchecked = append(res.Unchecked, unchecked...)
}

// skewed is one replica clock-skew ran with an offset clock: its history
// process, the fault's name and the offset.
type skewed struct {
	process, fault string
	offset         time.Duration
}

// judgeSkew decides what skewBite says of a run whose skewed replicas took
// leases of lease (0: unknown), told from, and whose history is h.
func judgeSkew(skews []skewed, lease time.Duration, from string, recordsKnown bool, h []history.Op) (inconclusive, unchecked []string) {
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
		return nil, []string{fmt.Sprintf("clock-skew: leases of %s (%s) against offsets of at least %s; whether the skewed replicas claimed rows while skewed is not known without records",
			lease.Round(time.Millisecond), from, smallest)}
	}
	for _, c := range skews {
		if claimedWhile(h, c.process, c.fault) == 0 {
			inconclusive = append(inconclusive, fmt.Sprintf("clock-skew could not bite: %s claimed no row while its clock was %s", c.process, chaos.FormatClockOffset(c.offset)))
		}
	}
	return inconclusive, nil
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
func rowLease(ctx context.Context, s stage) (time.Duration, error) {
	var secs *float64
	err := s.DB().QueryRow(ctx, `SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY EXTRACT(EPOCH FROM locked_until - locked_at))
		FROM `+s.Slot(0, 0).bc.rows+` WHERE locked_until > locked_at`).Scan(&secs)
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
	var from, to time.Time
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
