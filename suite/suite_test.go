package suite

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

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
		{"a failed verdict fails with its evidence, seed and replay", failed, nil, false, "error", []string{"SEED=42", "FAILED", "lost: 3 offending", base.Replay}},
		{"an inconclusive run is skipped, never passed", inconclusive, nil, false, "skip", []string{"INCONCLUSIVE", "could not bite", base.Replay}},
		{"a scenario the target cannot run is skipped", base, fmt.Errorf("%w: needs failpoints", scenarios.ErrNotApplicable), false, "skip", []string{"not applicable", "needs failpoints"}},
		{"a run that could not be carried out fails", base, errors.New("environment gone"), false, "fatal", []string{"could not run", "environment gone", base.Replay}},
		{"a pass is logged", passed, nil, false, "log", []string{"PASS"}},
		{"with RequireAll an inconclusive run fails", inconclusive, nil, true, "fatal", []string{"INCONCLUSIVE", "could not bite", base.Replay}},
		{"with RequireAll a scenario the target cannot run fails", base, fmt.Errorf("%w: needs failpoints", scenarios.ErrNotApplicable), true, "fatal", []string{"not applicable", "needs failpoints"}},
		{"with RequireAll a pass is still logged", passed, nil, true, "log", []string{"PASS"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var r record
			judge(&r, c.res, c.err, c.requireAll)
			if r.kind != c.kind {
				t.Fatalf("judge said %s %q, want %s", r.kind, r.text, c.kind)
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
