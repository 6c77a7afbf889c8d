package result

import (
	"fmt"
	"time"
)

// Soak is one soak run: a long stream of events through one relay's
// outbox, sampled over time, to show whether the relay's claim stays fast
// as its table ages (dead tuples, bloat, a transaction that holds back
// vacuum for part of the run, sweeps).
type Soak struct {
	// Contender is "relay" (this repository's relay, one replica, its
	// sweep on) or "watermill" (watermill's SQL forwarder, which deletes
	// nothing).
	Contender string `json:"contender"`
	// Config says how the run was set up, in words, for the report.
	Config string `json:"config"`
	// Events is how many events the run set out to push through;
	// Published how many the relay published.
	Events    int   `json:"events"`
	Published int64 `json:"published"`
	// Seconds is how long the run took, from the first staged event to
	// the last published one (or to the timeout).
	Seconds float64 `json:"seconds"`
	// TimedOut says the run stopped at its timeout before every event
	// was published.
	TimedOut bool `json:"timed_out,omitempty"`
	// HoldFrom and HoldTo are when a transaction held back vacuum, in
	// seconds from the start: a REPEATABLE READ transaction kept open
	// from a third of the events published to two thirds.
	HoldFrom float64 `json:"hold_from_s"`
	HoldTo   float64 `json:"hold_to_s"`
	// ClaimStatement is the statement the claim figures are of, as
	// pg_stat_statements keeps it.
	ClaimStatement string `json:"claim_statement"`
	// Samples are the figures over time.
	Samples []SoakSample `json:"samples"`
	// Notes say what the run could not measure, or what to keep in mind.
	Notes []string `json:"notes,omitempty"`
}

// SoakSample is the figures of one interval of a soak run; rates and
// means are over the interval since the sample before.
type SoakSample struct {
	// At is the end of the interval, in seconds from the start.
	At float64 `json:"at_s"`
	// Staged and Published are totals so far; Rate is the events
	// published a second over the interval.
	Staged    int64   `json:"staged"`
	Published int64   `json:"published"`
	Rate      float64 `json:"rate"`
	// ClaimCalls is how many claim statements ran in the interval, and
	// ClaimMs their mean execution time, in milliseconds, on the
	// database (pg_stat_statements).
	ClaimCalls int64   `json:"claim_calls"`
	ClaimMs    float64 `json:"claim_ms"`
	// The outbox table's statistics at the end of the interval.
	LiveTuples  int64 `json:"live_tuples"`
	DeadTuples  int64 `json:"dead_tuples"`
	TableBytes  int64 `json:"table_bytes"`
	IndexBytes  int64 `json:"index_bytes"`
	Autovacuums int64 `json:"autovacuums"`
	// Sweep statements run in the interval, the rows they deleted and
	// the time they took (this repository's relay only).
	SweepCalls int64   `json:"sweep_calls,omitempty"`
	SweptRows  int64   `json:"swept_rows,omitempty"`
	SweepMs    float64 `json:"sweep_ms,omitempty"`
	// Holding says the vacuum-holding transaction was open at the end of
	// the interval.
	Holding bool `json:"holding,omitempty"`
}

// Duration is how long the run took.
func (s Soak) Duration() time.Duration { return time.Duration(s.Seconds * float64(time.Second)) }

// ClaimMean is the mean claim time, in milliseconds, over the samples
// whose end is in (from, to] seconds (the intervals that end in it),
// weighted by their calls; 0 when none ran.
func (s Soak) ClaimMean(from, to float64) float64 {
	var calls int64
	var total float64
	for _, x := range s.Samples {
		if x.At > from && x.At <= to {
			calls += x.ClaimCalls
			total += x.ClaimMs * float64(x.ClaimCalls)
		}
	}
	if calls == 0 {
		return 0
	}
	return total / float64(calls)
}

// Bytes renders n bytes in binary units, for people.
func Bytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
