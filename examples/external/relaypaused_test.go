package external_test

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/outboxlab/outboxlab/history"
	"github.com/outboxlab/outboxlab/scenarios"
	"github.com/outboxlab/outboxlab/suite"

	"example.com/outboxlab-external"
)

// TestRelayPaused runs this module's own scenario, RelayPaused (each
// relay replica frozen in turn for less than its lease; no event may
// reach a queue more than twice), against outboxlab's relay through the
// public suite, as the catalogue's scenarios run: one subtest, named for
// the scenario, judged by the checkers and by the scenario's own check.
// Seed 7 gives the same workload and pauses every time. Like TestOutbox
// it starts containers, skips under -short, and without a Docker engine
// unless OUTBOXLAB_REQUIRE_DOCKER is set.
func TestRelayPaused(t *testing.T) {
	suite.Run(t, suite.Target{}, suite.Options{
		Custom: []scenarios.Scenario{external.RelayPaused()},
		Seed:   7,
	})
}

// TestDeliveredMoreThan: the check finds an event that reached a queue
// three times, and only that one: two deliveries, a failed delivery, and
// deliveries of one event to two queues are within the bound.
func TestDeliveredMoreThan(t *testing.T) {
	deliver := func(queue string, typ history.Type, events ...string) history.Op {
		return history.Op{Process: "consumer-1", Type: typ, F: history.Deliver, Events: events, Meta: history.Meta{Queue: queue}}
	}
	h := []history.Op{
		deliver("orders", history.OK, "e1"),
		deliver("orders", history.OK, "e1", "e2"),
		deliver("orders", history.OK, "e1"), // e1's third: the defect
		deliver("orders", history.OK, "e2"),
		deliver("orders", history.Fail, "e2"),
		deliver("orders", history.OK, "e3"),
		deliver("audit", history.OK, "e3"),
		deliver("audit", history.OK, "e3"),
		{Process: "relay-a", Type: history.OK, F: history.Publish, Events: []string{"e2", "e2", "e2"}},
	}
	got := external.DeliveredMoreThan(h, external.MaxDeliveries)
	if len(got) != 1 || !strings.Contains(got[0], "event e1 delivered 3 times to queue orders, more than 2") {
		t.Errorf("DeliveredMoreThan = %q, want one problem: e1 delivered 3 times to queue orders", got)
	}
	if got := external.DeliveredMoreThan(h[:2], external.MaxDeliveries); len(got) != 0 {
		t.Errorf("two deliveries: %q, want no problem", got)
	}
	var many []history.Op
	for _, id := range []string{"a", "b", "c", "d", "e", "f", "g"} {
		for range 3 {
			many = append(many, deliver("", history.OK, id))
		}
	}
	if got := external.DeliveredMoreThan(many, external.MaxDeliveries); len(got) != 6 || !strings.Contains(got[5], "2 more event(s)") {
		t.Errorf("seven events over the bound: %q, want five listed and the count of the two others", got)
	}
}

// TestPausesFitTheSafetyPhase: on any seed, RelayPaused's two pauses are
// shorter than the lease the scenarios run our relay with, a lease
// apart, and over before its safety phase is; with a lease too long for
// that, the schedule fails rather than run past it.
func TestPausesFitTheSafetyPhase(t *testing.T) {
	safety := external.RelayPaused().Safety
	for seed := range uint64(500) {
		at, d, err := external.Pauses(rand.New(rand.NewPCG(seed, 1)), scenarios.Lease, safety)
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		if d[0] >= scenarios.Lease || d[1] >= scenarios.Lease || at[1] < at[0]+d[0]+scenarios.Lease || at[1]+d[1] > safety {
			t.Fatalf("seed %d: pauses at %v for %v, lease %s, safety %s", seed, at, d, scenarios.Lease, safety)
		}
	}
	if _, _, err := external.Pauses(rand.New(rand.NewPCG(1, 1)), 30*time.Second, safety); err == nil {
		t.Error("pauses a 30s lease apart fit a 13s safety phase")
	}
}
