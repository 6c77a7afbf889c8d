package scenarios

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Capabilities a relay under test may declare, beyond the core guarantee
// (no lost, no phantom events, duplicates only with a cause, no duplicate
// effects), which every relay is judged by whatever it declares.
const (
	// CapParks: the relay parks poison rows (unknown type, undecodable
	// payload, refused by the broker) within the attempt limit, never
	// publishes them and never parks healthy rows: the parking checker
	// judges it, and poison's scenario requires parked rows.
	CapParks = "parks"
	// CapFenced: the relay marks, retries and parks only under its own
	// unexpired lease: the fencing checker judges it, and lease-expiry
	// judges the rows a paused replica held.
	CapFenced = "fenced"
	// CapSweeps: the relay deletes processed rows after retention; without
	// it, no row may leave the outbox during a run.
	CapSweeps = "sweeps"
	// CapLease, as lease=DURATION: the lease the relay takes, which the
	// rows it leased must show on the database clock (with fenced).
	CapLease = "lease"
	// CapAttempts, as attempts=N: the relay's attempt limit; it parks a
	// failing row once its attempts reach N, never later. Without it no
	// attempt count is judged.
	CapAttempts = "attempts"
	// CapBackoff, as backoff=BASE/MAX: the relay's retry backoff, doubling
	// from BASE up to MAX on the database clock; with records, the spacing
	// of its retries is judged against it. Without it, it is not judged.
	CapBackoff = "backoff"
	// CapFailpoints: the relay honours OUTBOX_FAILPOINTS (package
	// chaos/inproc's syntax), so the scenarios that kill or slow it at a
	// named point of its loop can run; without it they are not applicable.
	CapFailpoints = "failpoints"
	// CapRecords: the relay honours OUTBOX_RECORDS, appending its own
	// operations to the file it names in the records format of
	// docs/contract.md (history JSON Lines); the runner merges them into
	// the run's history, so the checkers judge its claims, publishes,
	// confirms, marks, retries, parks and sweeps, and a duplicate is
	// explained by what happened to its own row.
	CapRecords = "records"
)

// Capabilities lists every capability, in the order Capabilities strings
// name them.
var Capabilities = []string{CapParks, CapFenced, CapSweeps, CapFailpoints, CapRecords, CapLease + "=DURATION", CapAttempts + "=N", CapBackoff + "=BASE/MAX"}

// WithCapabilities returns u declaring the capabilities of list, a comma
// separated list of Capabilities or "none". It replaces what u declared.
func (u RelayUnderTest) WithCapabilities(list string) (RelayUnderTest, error) {
	u.Features.Parks, u.Features.Fenced, u.Features.Sweeps, u.Failpoints, u.Records, u.Lease = false, false, false, false, false, 0
	u.Attempts, u.Backoff = 0, Backoff{}
	list = strings.TrimSpace(list)
	if list == "none" {
		return u, nil
	}
	for _, c := range strings.Split(list, ",") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(c), CapLease+"="); ok {
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				return u, fmt.Errorf("capabilities %q: lease=%s is not a positive duration such as 20s", list, v)
			}
			u.Lease = d
			continue
		}
		if v, ok := strings.CutPrefix(strings.TrimSpace(c), CapAttempts+"="); ok {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				return u, fmt.Errorf("capabilities %q: attempts=%s is not a whole number of at least 1", list, v)
			}
			u.Attempts = n
			continue
		}
		if v, ok := strings.CutPrefix(strings.TrimSpace(c), CapBackoff+"="); ok {
			b, err := parseBackoff(v)
			if err != nil {
				return u, fmt.Errorf("capabilities %q: %w", list, err)
			}
			u.Backoff = b
			continue
		}
		switch strings.TrimSpace(c) {
		case CapParks:
			u.Features.Parks = true
		case CapFenced:
			u.Features.Fenced = true
		case CapSweeps:
			u.Features.Sweeps = true
		case CapFailpoints:
			u.Failpoints = true
		case CapRecords:
			u.Records = true
		case "":
			return u, fmt.Errorf("capabilities %q: an empty name (want a comma-separated list of %s, or none)", list, strings.Join(Capabilities, ", "))
		default:
			return u, fmt.Errorf("capabilities %q: unknown capability %q (want a comma-separated list of %s, or none)", list, strings.TrimSpace(c), strings.Join(Capabilities, ", "))
		}
	}
	return u, nil
}

// CapabilitiesString returns what u declares, as WithCapabilities reads
// it: "none" when it declares nothing.
func (u RelayUnderTest) CapabilitiesString() string {
	var out []string
	for _, c := range []struct {
		name string
		on   bool
	}{{CapParks, u.Features.Parks}, {CapFenced, u.Features.Fenced}, {CapSweeps, u.Features.Sweeps}, {CapFailpoints, u.Failpoints}, {CapRecords, u.Records}} {
		if c.on {
			out = append(out, c.name)
		}
	}
	if u.Lease > 0 {
		out = append(out, CapLease+"="+u.Lease.String())
	}
	if u.Attempts > 0 {
		out = append(out, CapAttempts+"="+strconv.Itoa(u.Attempts))
	}
	if u.Backoff.Declared() {
		out = append(out, CapBackoff+"="+u.Backoff.Base.String()+"/"+u.Backoff.Max.String())
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, ",")
}

// parseBackoff reads backoff=BASE/MAX's value: two positive durations,
// BASE at most MAX.
func parseBackoff(v string) (Backoff, error) {
	base, max, ok := strings.Cut(v, "/")
	b, errB := time.ParseDuration(base)
	m, errM := time.ParseDuration(max)
	if !ok || errB != nil || errM != nil || b <= 0 || m < b {
		return Backoff{}, fmt.Errorf("backoff=%s is not BASE/MAX, two positive durations with BASE at most MAX, such as 100ms/2s", v)
	}
	return Backoff{Base: b, Max: m}, nil
}
