package scenarios

import (
	"context"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/outboxlab/outboxlab/chaos"
	"github.com/outboxlab/outboxlab/contract"
	"github.com/outboxlab/outboxlab/history"
)

// TestEveryNamedScenarioIsCatalogued: whatever Lookup finds is the
// catalogue's scenario of its name, on every Lookup, so that its runs
// keep their run verb's and catalogue test's replays.
func TestEveryNamedScenarioIsCatalogued(t *testing.T) {
	all := append(append(Catalogue(), ClusterCatalogue()...), ConsumerCatalogue()...)
	for _, sc := range all {
		if !catalogued(sc) {
			t.Errorf("%s is not catalogued", sc.Name)
		}
	}
	if sc, _ := Lookup(DualWrite); !catalogued(sc) {
		t.Errorf("%s is not catalogued", sc.Name)
	}
	if catalogued(brokerDown()) {
		t.Error("a scenario the catalogue did not return is catalogued")
	}
}

// TestReplayOfACustomScenario: a scenario built outside the catalogue,
// or one of the catalogue's with another check or workload under its own
// name, gets no run command (it would run another scenario, or none) but
// a comment that says so, for both replays.
func TestReplayOfACustomScenario(t *testing.T) {
	pause := func(s Stage, rng *rand.Rand, safety time.Duration) ([]chaos.Step, error) {
		f := chaos.PauseContainer(s.Replica(0, 0), history.ClassProcess)
		return []chaos.Step{Step(f, time.Second, time.Second)}, s.AddFault(f, "")
	}
	own := Scenario{Name: "relay-paused", Workload: defaultWorkload(), Safety: 6 * time.Second, Faults: pause}
	otherCheck, _ := Lookup(BrokerDown)
	otherCheck.Check = func(context.Context, Stage, *Result) {}
	otherSize, _ := Lookup(BrokerDown)
	otherSize.Workload.Events = 10
	for _, sc := range []Scenario{own, otherCheck, otherSize} {
		cmd, test := newRun(nil, sc, Options{Seed: 5}).replay()
		want := "# outboxlab run cannot name scenario " + sc.Name + " (it is built in Go code"
		if cmd != test || !strings.HasPrefix(cmd, want) || !strings.HasSuffix(cmd, "on seed 5") {
			t.Errorf("%s: %q, %q: want a comment for both that begins %q", sc.Name, cmd, test, want)
		}
	}
	same, _ := Lookup(BrokerDown)
	if cmd, _ := newRun(nil, same, Options{Seed: 5}).replay(); !strings.HasPrefix(cmd, "go run ./cmd/outboxlab run --scenario broker-down") {
		t.Errorf("the catalogue's broker-down: %q", cmd)
	}
}

// TestRunRejectsAnIncompleteScenario: a scenario without a name, a
// safety phase or a workload is refused before the run touches the
// environment (nil here), with what it lacks.
func TestRunRejectsAnIncompleteScenario(t *testing.T) {
	full := Scenario{Name: "mine", Workload: defaultWorkload(), Safety: 5 * time.Second}
	noName, noSafety, noEvents := full, full, full
	noName.Name = ""
	noSafety.Safety = 0
	noEvents.Workload.Events = 0
	for _, c := range []struct {
		sc   Scenario
		want string
	}{
		{noName, "a scenario needs a Name"},
		{noSafety, "scenario mine has no safety phase"},
		{noEvents, "scenario mine has no workload"},
	} {
		_, err := Run(t.Context(), nil, c.sc, Options{})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Run: %v, want %q", err, c.want)
		}
	}
}

// TestReplicaBeforeItStarts: in Prepare a replica has no process, so its
// faults' actions fail with its name rather than panic, and Setenv sets
// what it will start with; Env returns a copy.
func TestReplicaBeforeItStarts(t *testing.T) {
	r := &Replica{name: "relay-a", base: map[string]string{"OUTBOX_LEASE": "4s"}}
	for name, act := range map[string]func(context.Context) error{
		"Kill": r.Kill, "Start": r.Start, "Pause": r.Pause, "Unpause": r.Unpause, "Restart": r.Restart,
		"Stop": func(ctx context.Context) error { return r.Stop(ctx, time.Second) },
	} {
		if err := act(t.Context()); err == nil || !strings.Contains(err.Error(), "relay-a has no process running") {
			t.Errorf("%s before the start: %v", name, err)
		}
	}
	r.Setenv(contract.EnvFailpoints, "after-claim=sleep(1s)")
	env := r.Env()
	if env["OUTBOX_LEASE"] != "4s" || env[contract.EnvFailpoints] != "after-claim=sleep(1s)" {
		t.Errorf("Env after Setenv: %v", env)
	}
	env["OUTBOX_LEASE"] = "1s"
	if r.Env()["OUTBOX_LEASE"] != "4s" {
		t.Error("Env returned the replica's own map")
	}
}
