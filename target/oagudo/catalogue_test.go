package oatarget_test

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outboxlab/outboxlab/history"
	"github.com/outboxlab/outboxlab/scenarios"
	"github.com/outboxlab/outboxlab/suite"
	oatarget "github.com/outboxlab/outboxlab/target/oagudo"
)

// TestCatalogue runs a broker outage on seed 1 against the library with
// optimistic publishing, its readers built from ../../cmd/oagudo-relay
// into the test's temporary directory, through the public suite: no
// event lost, every duplicate explained. The scenario's own check also
// requires that the producers published optimistically: some of their
// publishes confirmed, so the run did not pass on the readers alone.
// The whole catalogue is `outboxlab run --relay oagudo-optimistic`. It
// starts containers: skipped under -short, and without a Docker engine
// unless OUTBOXLAB_REQUIRE_DOCKER is set.
func TestCatalogue(t *testing.T) {
	if testing.Short() {
		t.Skip("starts containers")
	}
	bin := filepath.Join(t.TempDir(), "oagudo-relay")
	if out, err := exec.Command("go", "build", "-o", bin, "../../cmd/oagudo-relay").CombinedOutput(); err != nil {
		t.Fatalf("building the relay: %v\n%s", err, out)
	}
	sc, ok := scenarios.Lookup(scenarios.BrokerDown)
	if !ok {
		t.Fatal("no scenario broker-down")
	}
	sc.Name = "broker-down-optimistic"
	check := sc.Check
	sc.Check = func(ctx context.Context, s scenarios.Stage, res *scenarios.Result) {
		if check != nil {
			check(ctx, s, res)
		}
		if producerPublishes(res.History) == 0 {
			res.Problems = append(res.Problems, "no producer publish was confirmed: the writer did not publish optimistically")
		}
	}
	suite.Run(t, suite.Target{Relay: oatarget.OptimisticTarget(bin)}, suite.Options{
		Custom:  []scenarios.Scenario{sc},
		Seed:    1,
		Timeout: 5 * time.Minute,
	})
}

// producerPublishes counts the publishes of producers the broker
// confirmed.
func producerPublishes(h []history.Op) int {
	n := 0
	for _, op := range h {
		if op.F == history.Publish && op.Type == history.OK && strings.HasPrefix(op.Process, "producer-") {
			n++
		}
	}
	return n
}
