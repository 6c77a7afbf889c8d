package external_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/outboxlab/outboxlab/scenarios"
	"github.com/outboxlab/outboxlab/testenv"
)

// seed is the run's seed: the same seed gives the same workload and fault
// schedule, so a failure is replayed with the command the test prints.
const seed = 7

// TestOurRelaySurvivesBrokerDown starts PostgreSQL, RabbitMQ and toxiproxy
// from outboxlab's images (`make images` in the outboxlab repository),
// runs the broker-down scenario (the relay's link to the broker goes down
// while producers commit, then heals) against outboxlab's own relay, and
// requires the verdict to pass: nothing lost, nothing invented, every
// duplicate explained by a fault. It skips under -short, and without a
// Docker engine unless OUTBOXLAB_REQUIRE_DOCKER is set.
func TestOurRelaySurvivesBrokerDown(t *testing.T) {
	if testing.Short() {
		t.Skip("starts containers (skipped with -short)")
	}
	env := testenv.StartT(t, scenarios.EnvOptions())
	sc, ok := scenarios.Lookup(scenarios.BrokerDown)
	if !ok {
		t.Fatalf("no scenario %s in the catalogue (%s)", scenarios.BrokerDown, strings.Join(scenarios.Names(), ", "))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	res, err := scenarios.Run(ctx, env, sc, scenarios.Options{
		Seed:  seed,
		Relay: scenarios.Ours(),
		Log:   func(line string) { t.Log(line) },
	})
	if err != nil {
		t.Fatalf("running %s: %v", sc.Name, err)
	}
	t.Logf("%s against %s: committed %d, delivered %d, lost %d, phantom %d, duplicate deliveries %d",
		res.Scenario, res.Relay, res.Counts.Committed, res.Counts.Delivered, res.Counts.Lost, res.Counts.Phantom, res.Counts.DuplicateDeliveries)
	if !res.Valid {
		t.Fatalf("verdict failed: %s\nreplay: %s", strings.Join(res.Problems, "; "), res.Replay)
	}
	if res.Counts.Committed == 0 {
		t.Fatal("the workload committed nothing: the run tested nothing")
	}
}

// TestMain keeps Ryuk, testcontainers' reaper, off: it would pull an
// image, and testenv removes its own containers.
func TestMain(m *testing.M) {
	if os.Getenv("TESTCONTAINERS_RYUK_DISABLED") == "" {
		_ = os.Setenv("TESTCONTAINERS_RYUK_DISABLED", "true")
	}
	os.Exit(m.Run())
}
