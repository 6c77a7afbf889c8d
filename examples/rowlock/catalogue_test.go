// Package main_test puts the row-lock relay (rowlock-relay, this
// directory's command) under outboxlab's chaos catalogue through the
// public suite and its target file, as a team with a relay of its own
// would. It is no part of the relay, which imports nothing of outboxlab.
package main_test

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outboxlab/outboxlab/scenarios"
	"github.com/outboxlab/outboxlab/suite"
)

// Target is the relay with its own outbox table, as target.yaml describes
// it: the schema (a bigint identity key the stage returns), the staging
// statement, the rows view, how a delivery names its event (message_id)
// and what the relay promises: it parks poison rows within
// OUTBOX_MAX_ATTEMPTS (3 under the harness) with the backoff of
// OUTBOX_BACKOFF_BASE/_MAX (100ms/2s), and holds row locks while it
// publishes (locking=rowlock), no lease. Unless the tests are short, the
// relay is built from this directory's source.
func Target(t *testing.T) suite.Target {
	return suite.TargetFile(t, "target.yaml", ".")
}

// TestTargetFile: the target file loads (no Docker needed) and declares
// what the relay does.
func TestTargetFile(t *testing.T) {
	u, err := scenarios.LoadTarget("target.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := "parks,locking=rowlock,attempts=3,backoff=100ms/2s,producer-p99=3x,outage-cpu=0.5,outage-logs=20,outage-statements=100,outage-connects=10,resume=30s"
	if got := u.Promises.String(); got != want {
		t.Errorf("capabilities %s, want %s", got, want)
	}
	if !u.Outbox.ReturnsID {
		t.Error("the stage does not return the id the database gives the row")
	}
	if len(u.Command) != 1 || !strings.HasSuffix(u.Command[0], filepath.Join(".build", "bin", "rowlock-relay")) {
		t.Errorf("command %q, want the binary `make build` writes", u.Command)
	}
}

// TestCatalogue runs, on seed 1, the scenarios expected to catch most of
// the relay's bug modes (docs/examples.md): a broker outage, poison
// rows, commits that land out of order, and a replica frozen while it
// holds rows under the producers' load. `outboxlab run --target
// examples/rowlock/target.yaml` runs the whole catalogue after `make
// build`. It starts containers: skipped under -short, and without a
// Docker engine unless OUTBOXLAB_REQUIRE_DOCKER is set.
func TestCatalogue(t *testing.T) {
	suite.Run(t, Target(t), suite.Options{
		Scenarios: []string{scenarios.BrokerDown, scenarios.Poison, scenarios.CommitOrder, scenarios.StallUnderLoad},
		Seed:      1,
		Timeout:   5 * time.Minute,
	})
}
