// Package pyrelay_test puts the example relay in Python (relay.py, image
// outboxlab/pyrelay:dev) under outboxlab's chaos catalogue through the
// public suite, as a team whose relay is not written in Go would.
package pyrelay_test

import (
	"os"
	"testing"
	"time"

	"github.com/outboxlab/outboxlab/checker"
	"github.com/outboxlab/outboxlab/scenarios"
	"github.com/outboxlab/outboxlab/suite"
)

// Image is the Python relay's image, built by `make images` (make
// image-pyrelay) from docker/pyrelay with relay.py.
const Image = "outboxlab/pyrelay:dev"

// Relay is the Python relay as the catalogue runs it, with what it
// promises: it parks poison rows within the attempt limit (parks), marks,
// retries and parks only under its own live lease (fenced), and leases
// for OUTBOX_LEASE, which the harness sets to scenarios.Lease (4s), on
// the database clock. It has no sweep, failpoints or records.
func Relay() scenarios.RelayUnderTest {
	return scenarios.RelayUnderTest{
		Name:     Image,
		Image:    Image,
		Features: checker.Features{Parks: true, Fenced: true},
		Lease:    scenarios.Lease,
	}
}

// TestCatalogue runs broker-down (the relay's link to the broker goes down
// twice while producers commit: no attempt may be consumed, nothing lost)
// and poison (unknown types, undecodable payloads and an unroutable type:
// parked within the attempt limit, never published) on seed 1 against the
// image, in about 25 seconds. The whole catalogue is `outboxlab
// run --relay image:outboxlab/pyrelay:dev --capabilities
// parks,fenced,lease=4s`. It starts containers: skipped under -short, and
// without a Docker engine unless OUTBOXLAB_REQUIRE_DOCKER is set.
func TestCatalogue(t *testing.T) {
	suite.Run(t, suite.Target{Relay: Relay()}, suite.Options{
		Scenarios: []string{scenarios.BrokerDown, scenarios.Poison},
		Seed:      1,
		Timeout:   5 * time.Minute,
	})
}

// TestMain keeps Ryuk, testcontainers' reaper, off: it would pull an
// image, and outboxlab's environment removes its own containers.
func TestMain(m *testing.M) {
	if os.Getenv("TESTCONTAINERS_RYUK_DISABLED") == "" {
		_ = os.Setenv("TESTCONTAINERS_RYUK_DISABLED", "true")
	}
	os.Exit(m.Run())
}
