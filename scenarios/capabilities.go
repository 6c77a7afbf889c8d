package scenarios

import (
	"fmt"
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
	// CapFailpoints: the relay honours OUTBOX_FAILPOINTS (package
	// chaos/inproc's syntax), so the scenarios that kill or slow it at a
	// named point of its loop can run; without it they are not applicable.
	CapFailpoints = "failpoints"
	// CapRecords: the relay honours OUTBOX_RECORDS, appending its own
	// operations to the file it names in the records format of the README
	// (history JSON Lines); the runner merges them into the run's history,
	// so the checkers judge its claims, publishes, confirms, marks,
	// retries, parks and sweeps, and a duplicate is explained by what
	// happened to its own row.
	CapRecords = "records"
)

// Capabilities lists every capability, in the order Capabilities strings
// name them.
var Capabilities = []string{CapParks, CapFenced, CapSweeps, CapFailpoints, CapRecords, CapLease + "=DURATION"}

// WithCapabilities returns u declaring the capabilities of list, a comma
// separated list of Capabilities or "none". It replaces what u declared.
func (u RelayUnderTest) WithCapabilities(list string) (RelayUnderTest, error) {
	u.Features.Parks, u.Features.Fenced, u.Features.Sweeps, u.Failpoints, u.Records, u.Lease = false, false, false, false, false, 0
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
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, ",")
}
