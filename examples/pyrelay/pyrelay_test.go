// Package pyrelay_test puts the example relay in Python (relay.py, image
// outboxlab/pyrelay:dev) under outboxlab's chaos catalogue through the
// public suite, as a team whose relay is not written in Go would.
package pyrelay_test

import (
	"testing"
	"time"

	"github.com/outboxlab/outboxlab/scenarios"
	"github.com/outboxlab/outboxlab/suite"
)

// Target is the Python relay with its own outbox table, as target.yaml
// describes it: the schema and staging statement, the image (built by
// `make images` from docker/pyrelay with relay.py), how a delivery names
// its event, and what the relay promises: it parks poison rows within the
// attempt limit (parks), marks, retries and parks only under its own live
// lease (fenced), and leases for OUTBOX_LEASE, which the harness sets to
// 4s, on the database clock. It has no sweep, failpoints or records.
func Target(t *testing.T) suite.Target {
	u, err := scenarios.LoadTarget("target.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return suite.Target{Relay: u}
}

// TestCatalogue runs broker-down (the relay's link to the broker goes down
// twice while producers commit: no attempt may be consumed, nothing lost),
// poison (unknown types, undecodable payloads and an unroutable type:
// parked within the attempt limit, never published) and lease-expiry (a
// replica paused past its lease: the rows it held, read through the
// target's rows view, are taken over and its late marks change nothing)
// on seed 1 against the image. The whole catalogue is `outboxlab run
// --target examples/pyrelay/target.yaml`. It starts containers: skipped
// under -short, and without a Docker engine unless
// OUTBOXLAB_REQUIRE_DOCKER is set.
func TestCatalogue(t *testing.T) {
	suite.Run(t, Target(t), suite.Options{
		Scenarios: []string{scenarios.BrokerDown, scenarios.Poison, scenarios.LeaseExpiry},
		Seed:      1,
		Timeout:   5 * time.Minute,
	})
}
