package main

import (
	"fmt"
	"strings"
)

// bugEnv selects a bug mode; empty is the correct relay.
const bugEnv = "ROWLOCK_BUG"

// bug is a bug mode's name; bugNone is the correct relay.
type bug string

// The bug modes. The package comment says what each breaks and what in
// the harness's catalogue should catch it; bugModes holds the same, and
// docs/examples.md has the table.
const (
	bugNone         bug = ""
	bugCommitFirst  bug = "commit-first"
	bugBurnAttempts bug = "outage-burns-attempts"
	bugSkipLate     bug = "skip-late"
	bugNoLock       bug = "no-lock"
	bugDropPoison   bug = "drop-poison"
	bugTransient    bug = "transient"
	bugLockTable    bug = "lock-table"
	bugNoBackoff    bug = "no-reconnect-backoff"
)

// bugMode describes one bug mode: what it does wrong, the promise it
// breaks (numbered as in docs/contract.md: §2, or a budget of §3.3.2),
// and the scenario of the
// harness's catalogue and the checker (or the scenario's own check)
// expected to fail it under the target's capabilities.
type bugMode struct {
	name     bug
	does     string
	breaks   string
	scenario string
	checker  string
}

// bugModes lists every bug mode, each breaking a different promise.
var bugModes = []bugMode{
	{bugCommitFirst,
		"marks the batch published and commits before publishing it",
		"§2.3 mark a row processed only after the broker confirmed it",
		"broker-down", "lost"},
	{bugBurnAttempts,
		"takes a broker outage for a failure of each unpublished row: an attempt, a backoff, parked at the limit",
		"§2.4 a broker outage consumes no attempt",
		"broker-down", "parking"},
	{bugSkipLate,
		"claims only rows whose seq is above the highest it has published",
		"§2.1 skip no eligible row: a transaction that commits late still has its rows published",
		"commit-order-inversion", "lost"},
	{bugNoLock,
		"claims with a plain SELECT, no FOR UPDATE SKIP LOCKED: replicas publish the same rows",
		"§2.1 skip the rows another claim holds",
		"baseline", "duplicate-deliveries"},
	{bugDropPoison,
		"deletes a row of an unknown type or undecodable payload instead of parking it",
		"§2.2 a row of an unknown type or undecodable payload is parked at once",
		"poison", "parking (and retention)"},
	{bugTransient,
		"publishes with transient delivery mode",
		"§2.2 persistent delivery",
		"broker-killed", "lost"},
	{bugLockTable,
		"locks the whole table for each batch, held while it publishes and waits for the confirms",
		"§3.3.2 the producers' transactions do not wait for the relay (producer-p99)",
		"stall-under-load", "the producer budget"},
	{bugNoBackoff,
		"starts the next batch at once after a failed one, without a pause",
		"§3.3.2 an outage does not make the relay spin (outage-cpu, outage-logs, outage-statements)",
		"broker-down", "the outage budget"},
}

// parseBug reads ROWLOCK_BUG.
func parseBug(s string) (bug, error) {
	if s == "" {
		return bugNone, nil
	}
	for _, m := range bugModes {
		if string(m.name) == s {
			return m.name, nil
		}
	}
	return bugNone, fmt.Errorf("unknown bug mode %q (want one of %s, or empty for the correct relay)", s, strings.Join(bugNames(), ", "))
}

// bugNames lists the bug modes' names in table order.
func bugNames() []string {
	out := make([]string, len(bugModes))
	for i, m := range bugModes {
		out[i] = string(m.name)
	}
	return out
}

// String is the mode's name, "none" for the correct relay.
func (b bug) String() string {
	if b == bugNone {
		return "none"
	}
	return string(b)
}
