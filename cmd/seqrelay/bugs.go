package main

import (
	"fmt"
	"strings"
)

// bugEnv selects a bug mode; empty is the correct relay.
const bugEnv = "SEQRELAY_BUG"

// bug is a bug mode's name; bugNone is the correct relay.
type bug string

// The bug modes. The package comment says what each breaks and what in
// the harness's catalogue should catch it; bugModes holds the same.
const (
	bugNone         bug = ""
	bugMarkFirst    bug = "mark-first"
	bugNoFence      bug = "no-fence"
	bugOwnClock     bug = "own-clock-lease"
	bugEatAttempts  bug = "eat-attempts"
	bugSkipLate     bug = "skip-late"
	bugTransient    bug = "transient"
	bugPoisonBlocks bug = "poison-blocks"
	bugXidMark      bug = "xid-mark"
	bugSinceStart   bug = "since-start"
	bugXidHighWater bug = "xid-high-water"
)

// bugMode describes one bug mode: the promise it breaks, numbered as in
// docs/contract.md §2 (§2.1 to §2.4), and the scenario of the harness's
// catalogue and the checker (or the scenario's own check) expected to fail
// it.
type bugMode struct {
	name     bug
	breaks   string
	scenario string
	checker  string
}

// bugModes lists every bug mode, each breaking a different promise.
var bugModes = []bugMode{
	{bugMarkFirst, "§2.3 mark processed only after the publisher confirm", "broker-down", "lost"},
	{bugNoFence, "§2.3 mark only while this relay still holds the lease", "lease-expiry", "fencing (the scenario's judgement of the held rows)"},
	{bugOwnClock, "§2.1 the database clock is the only clock for leases", "clock-skew", "duplicate-deliveries (and fencing's lease lengths)"},
	{bugEatAttempts, "§2.4 a broker outage consumes no attempt", "broker-down", "parking"},
	{bugSkipLate, "§2.1 claim every eligible pending row, oldest first", "commit-order-inversion", "lost"},
	{bugTransient, "§2.2 persistent delivery", "broker-killed", "lost"},
	{bugPoisonBlocks, "§2.2 an unknown type or undecodable payload is parked at once", "poison", "parking (and liveness)"},
	{bugXidMark, "§2.1 a row is eligible by its columns alone, whatever transaction wrote it", "restore", "lost (and liveness)"},
	{bugXidHighWater, "§2.1 after a failover, the relay's place in the outbox comes from the new primary, not from what it kept of the old one", "failover-async", "lost (and liveness)"},
	{bugSinceStart, "§2.1 claim every eligible pending row, also those staged before this relay started", "rolling-upgrade", "lost (and liveness)"},
}

// parseBug reads SEQRELAY_BUG.
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
