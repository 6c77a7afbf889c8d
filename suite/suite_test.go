package suite

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxlab/outboxlab/outbox"
	"github.com/outboxlab/outboxlab/scenarios"
)

// record is a reporter that keeps what judge said, and how.
type record struct{ kind, text string }

func (r *record) Helper()                           {}
func (r *record) Logf(format string, args ...any)   { r.set("log", format, args) }
func (r *record) Errorf(format string, args ...any) { r.set("error", format, args) }
func (r *record) Fatalf(format string, args ...any) { r.set("fatal", format, args) }
func (r *record) Skipf(format string, args ...any)  { r.set("skip", format, args) }
func (r *record) set(kind, format string, args []any) {
	if r.kind == "" {
		r.kind, r.text = kind, fmt.Sprintf(format, args...)
	}
}

func TestJudge(t *testing.T) {
	base := scenarios.Result{Scenario: "broker-down", Relay: "r", Seed: 42, Replay: "go run ./cmd/outboxlab run --scenario broker-down --seed 42"}
	replay := "go test ./mine -run '^TestOutbox$/^broker-down$' -count=1 -args -outboxlab.seed=42"
	failed, inconclusive, passed := base, base, base
	failed.Problems = []string{"lost: 3 offending"}
	inconclusive.Inconclusive = []string{"relay-a pause holding claims could not bite: no claim held"}
	passed.Valid = true
	for _, c := range []struct {
		name       string
		res        scenarios.Result
		err        error
		requireAll bool
		kind       string
		has        []string
	}{
		{"a failed verdict fails with its evidence, seed and replay", failed, nil, false, "error", []string{"SEED=42", "FAILED", "lost: 3 offending", replay}},
		{"an inconclusive run is skipped, never passed", inconclusive, nil, false, "skip", []string{"INCONCLUSIVE", "could not bite", replay}},
		{"a scenario the target cannot run is skipped", base, fmt.Errorf("%w: needs failpoints", scenarios.ErrNotApplicable), false, "skip", []string{"not applicable", "needs failpoints"}},
		{"a run that could not be carried out fails", base, errors.New("environment gone"), false, "fatal", []string{"could not run", "environment gone", replay}},
		{"a pass is logged", passed, nil, false, "log", []string{"PASS"}},
		{"with RequireAll an inconclusive run fails", inconclusive, nil, true, "fatal", []string{"INCONCLUSIVE", "could not bite", replay}},
		{"with RequireAll a scenario the target cannot run fails", base, fmt.Errorf("%w: needs failpoints", scenarios.ErrNotApplicable), true, "fatal", []string{"not applicable", "needs failpoints"}},
		{"with RequireAll a pass is still logged", passed, nil, true, "log", []string{"PASS"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var r record
			judge(&r, c.res, c.err, c.requireAll, replay)
			if r.kind != c.kind {
				t.Fatalf("judge said %s %q, want %s", r.kind, r.text, c.kind)
			}
			if strings.Contains(r.text, base.Replay) {
				t.Errorf("%s %q gives the run verb's replay, which works only from outboxlab's checkout", r.kind, r.text)
			}
			for _, h := range c.has {
				if !strings.Contains(r.text, h) {
					t.Errorf("%s %q lacks %q", r.kind, r.text, h)
				}
			}
		})
	}
}

func TestFirstSeed(t *testing.T) {
	now := time.Unix(0, 1_234_567_890_123)
	if s, err := firstSeed(7, now); err != nil || s != 7 {
		t.Errorf("firstSeed(7) = %d, %v", s, err)
	}
	t.Setenv("OUTBOXLAB_SEED", "99")
	if s, err := firstSeed(0, now); err != nil || s != 99 {
		t.Errorf("firstSeed from OUTBOXLAB_SEED = %d, %v", s, err)
	}
	t.Setenv("OUTBOXLAB_SEED", "soon")
	if _, err := firstSeed(0, now); err == nil {
		t.Error("a seed that is no number was accepted")
	}
	t.Setenv("OUTBOXLAB_SEED", "")
	if s, err := firstSeed(0, now); err != nil || s != uint64(now.UnixNano())%1_000_000_000 {
		t.Errorf("firstSeed from the clock = %d, %v", s, err)
	}
}

func TestTestReplay(t *testing.T) {
	for _, c := range []struct {
		name        string
		seed, first uint64
		fixed, long bool
		env         string
		want        string
	}{
		{"TestOutbox/broker-down", 42, 40, false, false, "", "go test ./suite -run '^TestOutbox$/^broker-down$' -count=1 -args -outboxlab.seed=42"},
		{"TestOutbox/broker-down", 1, 1, true, false, "", "go test ./suite -run '^TestOutbox$/^broker-down$' -count=1"},
		{"TestOutbox/broker-down", 3, 1, true, false, "", "go test ./suite -run '^TestOutbox$/^broker-down$' -count=1 # Options.Seed starts it at seed 1, and seed 3 is its run 3"},
		{"TestOutbox/poison", 7, 7, false, false, "1", "OUTBOXLAB_LONG=1 go test ./suite -run '^TestOutbox$/^poison$' -count=1 -args -outboxlab.seed=7"},
		{"TestOutbox/poison", 7, 7, false, true, "1", "go test ./suite -run '^TestOutbox$/^poison$' -count=1 -args -outboxlab.seed=7"},
		{"Test.Odd+Name/a", 7, 7, false, false, "", `go test ./suite -run '^Test\.Odd\+Name$/^a$' -count=1 -args -outboxlab.seed=7`},
	} {
		t.Setenv(scenarios.LongEnv, c.env)
		if got := testReplay(c.name, c.seed, c.first, c.fixed, c.long); got != c.want {
			t.Errorf("testReplay(%q, %d, %d, %v, %v) with %s=%q\n = %s\nwant %s", c.name, c.seed, c.first, c.fixed, c.long, scenarios.LongEnv, c.env, got, c.want)
		}
	}
}

// TestReplayOfAGoSchemaTarget fails a run of a relay that the run verb
// cannot name, a Go schema whose program was built into a temporary
// directory: the subtest prints the go test command that runs it again
// on its seed, and nothing it prints is a command that would run another
// relay, another outbox or a program that is gone.
func TestReplayOfAGoSchemaTarget(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "my-relay")
	relay := scenarios.RelayUnderTest{
		Name:    "my-outbox",
		Command: []string{bin, "--fast"},
		Outbox: outbox.Schema{
			Name:    "my-outbox",
			Migrate: func(context.Context, *pgxpool.Pool, outbox.Table) error { return nil },
			Stage:   func(context.Context, pgx.Tx, outbox.Table, outbox.Event) (string, error) { return "", nil },
			Rows:    func(t outbox.Table) string { return "SELECT * FROM " + t.Ident() },
		},
	}
	res := scenarios.Result{Scenario: "broker-down", Relay: relay.Name, Seed: 42, Problems: []string{"lost: 1 offending"},
		Replay: scenarios.ReplayCommand("broker-down", 42, relay, 0, 0)}
	if !strings.HasPrefix(res.Replay, "# ") || strings.Contains(res.Replay, "--relay") || !strings.Contains(res.Replay, "Go code") {
		t.Errorf("the run verb's replay of a Go schema is %q, want a comment saying why there is none", res.Replay)
	}
	var r record
	judge(&r, res, nil, false, testReplay("TestOutbox/broker-down", 42, 42, false, false))
	if r.kind != "error" {
		t.Fatalf("judge said %s %q, want an error", r.kind, r.text)
	}
	if want := "replay: go test ./suite -run '^TestOutbox$/^broker-down$' -count=1 -args -outboxlab.seed=42"; !strings.Contains(r.text, want) {
		t.Errorf("the failure\n%s\nlacks %q", r.text, want)
	}
	for _, bad := range []string{"go run ./cmd/outboxlab", bin} {
		if strings.Contains(r.text, bad) {
			t.Errorf("the failure\n%s\nnames %q", r.text, bad)
		}
	}
}

// TestSelected: no name and no custom scenario run the one-node
// catalogue; custom scenarios run instead of it, or after the named
// ones; a custom scenario without a name, or with one already selected,
// is refused, as is an unknown name.
func TestSelected(t *testing.T) {
	mine := scenarios.Scenario{Name: "relay-paused", Safety: time.Second}
	names := func(scs []scenarios.Scenario) string {
		var out []string
		for _, sc := range scs {
			out = append(out, sc.Name)
		}
		return strings.Join(out, ",")
	}
	for _, c := range []struct {
		name string
		opts Options
		want string // the names selected, or the error
	}{
		{"the catalogue", Options{}, strings.Join(scenarios.Names(), ",")},
		{"custom alone", Options{Custom: []scenarios.Scenario{mine}}, "relay-paused"},
		{"named then custom", Options{Scenarios: []string{scenarios.BrokerDown}, Custom: []scenarios.Scenario{mine}}, "broker-down,relay-paused"},
		{"a custom scenario without a name", Options{Custom: []scenarios.Scenario{{}}}, "Options.Custom[0] has no Name"},
		{"a name twice", Options{Scenarios: []string{scenarios.BrokerDown}, Custom: []scenarios.Scenario{{Name: scenarios.BrokerDown}}}, `scenario "broker-down" is selected twice`},
		{"an unknown name", Options{Scenarios: []string{"relay-paused"}}, `no scenario "relay-paused"`},
	} {
		scs, err := selected(c.opts)
		got, ok := names(scs), false
		if err != nil {
			got, ok = err.Error(), strings.HasPrefix(err.Error(), c.want)
		} else {
			ok = got == c.want
		}
		if !ok {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
	scs, _ := selected(Options{Custom: []scenarios.Scenario{mine}})
	if scs[0].Safety != time.Second {
		t.Errorf("the custom scenario was not run as given: %+v", scs[0])
	}
}
