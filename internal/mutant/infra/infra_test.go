package infra

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/outboxlab/outboxlab/workload"

	"github.com/outboxlab/outboxlab/checker"
	"github.com/outboxlab/outboxlab/internal/mutant"
	"github.com/outboxlab/outboxlab/scenarios"
	"github.com/outboxlab/outboxlab/testenv"
)

// shared is the environment the package's tests run in, one after
// another: starting the containers is the slow part.
var shared = testenv.Shared{Options: scenarios.EnvOptions()}

// TestMain runs the tests, removes the environment and fails the package if
// a goroutine was left behind.
func TestMain(m *testing.M) {
	os.Exit(shared.Main(m))
}

// sharedEnv returns the package's environment, starting it on first use.
// It skips under -short, and without Docker unless
// OUTBOXLAB_REQUIRE_DOCKER is set.
func sharedEnv(t *testing.T) *testenv.Env {
	t.Helper()
	return shared.Get(t)
}

// TestPlan: every scenario a mutant names exists and every variant
// parses, and the mutants whose fault needs real infrastructure have a
// run.
func TestPlan(t *testing.T) {
	per := Plan(mutant.All())
	for name, runs := range per {
		for _, r := range runs {
			if _, ok := scenarios.Lookup(r.Scenario); !ok {
				t.Errorf("%s: no scenario %q", name, r.Scenario)
			}
			if r.Variant != "" {
				if _, err := workload.ParseMode(r.Variant); err != nil {
					t.Errorf("%s: %v", name, err)
				}
			}
		}
	}
	for _, name := range []string{"non-persistent", "mark-before-publish", "publish-before-commit"} {
		if len(per[name]) == 0 {
			t.Errorf("%s has no infrastructure run", name)
		}
	}
	if !slices.ContainsFunc(per["non-persistent"], func(r mutant.InfraRun) bool { return r.Scenario == scenarios.BrokerKilled }) {
		t.Errorf("non-persistent does not run %s: %+v", scenarios.BrokerKilled, per["non-persistent"])
	}
}

// TestRelayRunsTheMutantsImage: a relay-side mutant runs from the image
// built with the mutants tag, OUTBOX_MUTANT naming it, and is reported and
// replayed under its own name.
func TestRelayRunsTheMutantsImage(t *testing.T) {
	u := Relay("no-lease")
	if !u.Mutants || u.Image != "" || len(u.Command) > 0 || u.Name != "no-lease" || u.Env[mutant.EnvVar] != "no-lease" {
		t.Errorf("Relay(no-lease) = %+v", u)
	}
}

// relayCommand builds ./cmd/relay from this tree with the mutants tag, so
// that the relay replicas run the code under test whatever image was
// built last.
func relayCommand(t *testing.T) []string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "relay")
	cmd := exec.Command("go", "build", "-tags", "mutants", "-o", bin, "github.com/outboxlab/outboxlab/cmd/relay")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the relay: %v\n%s", err, out)
	}
	return []string{bin}
}

// TestInfraMatrix runs the infrastructure tier for non-persistent (the
// broker is killed while it holds transient messages) and
// mark-before-publish (the relay's link to the broker goes down after its
// claim marked the rows): both are killed, and the reference survives
// every scenario and seed they ran.
func TestInfraMatrix(t *testing.T) {
	env := sharedEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	var ms []mutant.Mutant
	for _, name := range []string{"non-persistent", "mark-before-publish", "consumer-no-dedupe"} {
		m, _ := mutant.Lookup(name)
		ms = append(ms, m)
	}
	seed := uint64(time.Now().UnixNano()) % 1_000_000
	t.Logf("SEED=%d", seed)
	rows, err := Run(ctx, ms, Options{Env: env, Command: relayCommand(t)},
		mutant.Options{FirstSeed: seed, Log: func(s string) { t.Log(s) }})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 4 {
		t.Fatalf("%d rows, want the reference and 3 mutants: %+v", len(rows), rows)
	}
	logRows(t, rows)
	for _, r := range rows {
		if r.Err != nil {
			t.Errorf("%s: %v", r.Mutant, r.Err)
		}
	}
	if ref := rows[0]; ref.Mutant != mutant.Reference || ref.Killed {
		t.Errorf("the reference was killed: %+v (replay: %s)", ref, ref.Replay)
	}
	np := rows[1]
	if np.Mutant != "non-persistent" || !np.Killed || np.Scenario != scenarios.BrokerKilled {
		t.Errorf("non-persistent: %+v, want killed by the %s scenario", np, scenarios.BrokerKilled)
	} else if np.Checker != checker.NameLost {
		t.Errorf("non-persistent was killed by %s, want %s", np.Checker, checker.NameLost)
	}
	if ref := rows[0]; ref.Tried < rows[1].Tried+rows[2].Tried+rows[3].Tried {
		t.Errorf("the reference ran %d scenario runs, the mutants %d, %d and %d: it must run every one of theirs", ref.Tried, rows[1].Tried, rows[2].Tried, rows[3].Tried)
	}
	if mb := rows[2]; mb.Mutant != "mark-before-publish" || !mb.Killed {
		t.Errorf("mark-before-publish: %+v, want killed", mb)
	}
	// A consumer-side mutant runs in the consumers, through the runner's
	// consumer hook: only the effects table shows its bug.
	if nd := rows[3]; nd.Mutant != "consumer-no-dedupe" || !nd.Killed || nd.Checker != checker.NameDuplicateEffects {
		t.Errorf("consumer-no-dedupe: %+v, want killed by %s", nd, checker.NameDuplicateEffects)
	}
}

// TestConsumerMutantsOnContainers runs the consumer-side mutants that
// only a real broker shows, at seed 7: consumer-delivery-tag-key, whose
// two competing consumers number their deliveries from 1 each, and
// consumer-check-then-insert, whose check and insert race when the
// concurrent-duplicates scenario hands one event to both consumers at
// once. Both are killed, check-then-insert by duplicate effects, and
// the reference survives both runs, its concurrent-duplicates run with
// applies that met (an inconclusive run is not survival).
func TestConsumerMutantsOnContainers(t *testing.T) {
	env := sharedEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var ms []mutant.Mutant
	for _, name := range []string{"consumer-delivery-tag-key", "consumer-check-then-insert"} {
		m, ok := mutant.Lookup(name)
		if !ok {
			t.Fatalf("no mutant %s", name)
		}
		ms = append(ms, m)
	}
	rows, err := Run(ctx, ms, Options{Env: env, Command: relayCommand(t), Seeds: 1},
		mutant.Options{FirstSeed: 7, Log: func(s string) { t.Log(s) }})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 3 {
		t.Fatalf("%d rows, want the reference and 2 mutants: %+v", len(rows), rows)
	}
	logRows(t, rows)
	if ref := rows[0]; ref.Killed || ref.Err != nil {
		t.Errorf("the reference did not survive: %+v (replay: %s)", ref, ref.Replay)
	}
	if tag := rows[1]; tag.Mutant != "consumer-delivery-tag-key" || !tag.Killed {
		t.Errorf("consumer-delivery-tag-key: %+v, want killed", tag)
	}
	if cti := rows[2]; cti.Mutant != "consumer-check-then-insert" || !cti.Killed ||
		cti.Checker != checker.NameDuplicateEffects || cti.Scenario != scenarios.ConcurrentDuplicates {
		t.Errorf("consumer-check-then-insert: %+v, want killed by %s in %s", cti, checker.NameDuplicateEffects, scenarios.ConcurrentDuplicates)
	}
}

// logRows logs each row of a matrix, one a line.
func logRows(t *testing.T, rows []mutant.Row) {
	t.Helper()
	for _, r := range rows {
		t.Logf("%-26s killed=%-5v checker=%-20s scenario=%q seed=%d %.1fs %s %v", r.Mutant, r.Killed, r.Checker, r.Scenario, r.Seed, r.Seconds, r.Detail, r.Err)
	}
}
