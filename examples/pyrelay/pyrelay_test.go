// Package pyrelay_test puts the example relay in Python (relay.py, image
// outboxlab/pyrelay:dev) under outboxlab's chaos catalogue through the
// public suite, as a team whose relay is not written in Go would.
package pyrelay_test

import (
	"os"
	"strings"
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

// TestBigintKey runs the same relay on its outbox keyed by a bigint
// identity the database assigns instead of the event's uuid: the stage
// takes no :id and returns the key (RETURNING event_id), which the rows
// view shows as id and the relay publishes as message_id. The run names
// every row, delivery and queued message by the harness's event id
// through its map of the keys, so that lease-expiry judges it as it
// judges the uuid key, on seed 1: the backlog, the final state and the
// consumers' inbox, and the rows a paused replica holds, read by their
// events' ids. It starts containers, as TestCatalogue does.
func TestBigintKey(t *testing.T) {
	data, err := os.ReadFile("target.yaml")
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	for _, r := range [][2]string{
		{"event_id    uuid PRIMARY KEY,", "event_id    bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,"},
		{"INSERT INTO {table} (event_id, kind, body, trace_id, created_at)\n    VALUES (:id, :type, :payload, :correlation_id, :occurred_at)",
			"INSERT INTO {table} (kind, body, trace_id, created_at)\n    VALUES (:type, :payload, :correlation_id, :occurred_at)\n    RETURNING event_id"},
	} {
		if !strings.Contains(text, r[0]) {
			t.Fatalf("target.yaml changed: %q is not in it", r[0])
		}
		text = strings.Replace(text, r[0], r[1], 1)
	}
	u, err := scenarios.ParseTarget([]byte(text), ".")
	if err != nil {
		t.Fatal(err)
	}
	if !u.Outbox.ReturnsID {
		t.Fatal("the bigint key's stage does not return it")
	}
	u.Name = "pyrelay-bigint"
	suite.Run(t, suite.Target{Relay: u}, suite.Options{
		Scenarios: []string{scenarios.LeaseExpiry},
		Seed:      1,
		Timeout:   5 * time.Minute,
	})
}
