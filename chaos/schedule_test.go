package chaos

import (
	"github.com/outboxlab/outboxlab/history"

	"context"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"
)

// fakeFaults returns no-op faults of several kinds on several targets.
func fakeFaults() []Fault {
	var fs []Fault
	for _, target := range []string{"relay->broker", "relay->db", "app->db"} {
		for _, kind := range []string{KindDown, KindLatency, KindTimeout, KindResetPeer} {
			fs = append(fs, NewFuncFault(target+" "+kind, history.ClassOther, kind, noop, noop))
		}
	}
	for c, class := range map[string]history.FaultClass{"rabbitmq": history.ClassBroker, "postgres": history.ClassDB, "relay-a": history.ClassProcess} {
		for _, kind := range []string{KindKill, KindPause} {
			fs = append(fs, NewFuncFault(c+" "+kind, class, kind, noop, noop))
		}
	}
	return fs
}

func noop(context.Context) error { return nil }

func TestGenerateIsDeterministic(t *testing.T) {
	cfg := ScheduleConfig{Span: time.Minute}
	for seed := uint64(0); seed < 50; seed++ {
		a, err := Generate(seed, fakeFaults(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		// The candidates' order must not matter.
		shuffled := fakeFaults()
		slices.Reverse(shuffled)
		b, err := Generate(seed, shuffled, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("seed %d: two schedules differ:\n%s\n%s", seed, a, b)
		}
		if len(a.Steps) == 0 {
			t.Fatalf("seed %d: empty schedule:\n%s", seed, a)
		}
	}
}

func TestGenerateSwarmVaries(t *testing.T) {
	cfg := ScheduleConfig{Span: time.Minute}
	mixes := map[string]bool{}
	schedules := map[string]bool{}
	for seed := uint64(0); seed < 50; seed++ {
		s, err := Generate(seed, fakeFaults(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		var kinds []string
		for _, kw := range s.Enabled {
			kinds = append(kinds, kw.Kind)
		}
		mixes[strings.Join(kinds, ",")] = true
		schedules[s.String()[strings.Index(s.String(), "\n"):]] = true
		if len(s.Enabled) == 6 && seed < 10 {
			t.Logf("seed %d enabled every kind", seed)
		}
	}
	if len(mixes) < 10 {
		t.Fatalf("50 seeds drew only %d kind mixes: swarm is not varying", len(mixes))
	}
	if len(schedules) < 45 {
		t.Fatalf("50 seeds drew only %d distinct schedules", len(schedules))
	}
}

func TestGenerateRespectsShape(t *testing.T) {
	for _, maxc := range []int{1, 3} {
		cfg := ScheduleConfig{Span: 30 * time.Second, MinGap: time.Second, MaxGap: 4 * time.Second,
			MinDuration: 500 * time.Millisecond, MaxDuration: 5 * time.Second, MaxConcurrent: maxc}
		for seed := uint64(100); seed < 200; seed++ {
			s, err := Generate(seed, fakeFaults(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			checkShape(t, s, cfg)
		}
	}
}

func checkShape(t *testing.T, s Schedule, cfg ScheduleConfig) {
	t.Helper()
	enabled := map[string]bool{}
	for _, kw := range s.Enabled {
		enabled[kw.Kind] = true
	}
	if !sort.SliceIsSorted(s.Steps, func(i, j int) bool { return s.Steps[i].At < s.Steps[j].At }) {
		t.Fatalf("seed %d: steps out of order:\n%s", s.Seed, s)
	}
	type edge struct {
		at    time.Duration
		delta int
	}
	var edges []edge
	for i, st := range s.Steps {
		if !enabled[st.Kind] {
			t.Fatalf("seed %d: step %d of kind %s, not enabled:\n%s", s.Seed, i, st.Kind, s)
		}
		if st.At < cfg.MinGap || st.End() > cfg.Span {
			t.Fatalf("seed %d: step %d outside the span:\n%s", s.Seed, i, s)
		}
		if st.Duration < cfg.MinDuration || st.Duration > cfg.MaxDuration {
			t.Fatalf("seed %d: step %d lasts %s:\n%s", s.Seed, i, st.Duration, s)
		}
		for _, other := range s.Steps[:i] {
			if other.Fault == st.Fault && other.End() > st.At {
				t.Fatalf("seed %d: %s overlaps itself:\n%s", s.Seed, st.Fault, s)
			}
		}
		if cfg.MaxConcurrent == 1 && i > 0 && st.At-s.Steps[i-1].End() < cfg.MinGap {
			t.Fatalf("seed %d: step %d starts %s after the previous heal:\n%s", s.Seed, i, st.At-s.Steps[i-1].End(), s)
		}
		edges = append(edges, edge{st.At, 1}, edge{st.End(), -1})
	}
	sort.Slice(edges, func(i, j int) bool {
		if edges[i].at != edges[j].at {
			return edges[i].at < edges[j].at
		}
		return edges[i].delta < edges[j].delta
	})
	n := 0
	for _, e := range edges {
		n += e.delta
		if n > cfg.MaxConcurrent {
			t.Fatalf("seed %d: %d faults at once at %s, max %d:\n%s", s.Seed, n, e.at, cfg.MaxConcurrent, s)
		}
	}
}

func TestGenerateRestrictedKinds(t *testing.T) {
	for seed := uint64(0); seed < 20; seed++ {
		s, err := Generate(seed, fakeFaults(), ScheduleConfig{Span: time.Minute, Kinds: []string{KindDown}})
		if err != nil {
			t.Fatal(err)
		}
		if len(s.Steps) == 0 {
			t.Fatalf("seed %d: no steps", seed)
		}
		for _, st := range s.Steps {
			if st.Kind != KindDown || !strings.HasSuffix(st.Fault, " down") {
				t.Fatalf("seed %d: step %+v is not a down fault", seed, st)
			}
		}
	}
	if _, err := Generate(1, fakeFaults(), ScheduleConfig{Span: time.Minute, Kinds: []string{"meteor"}}); err == nil {
		t.Fatal("no candidate faults, yet no error")
	}
	if _, err := Generate(1, fakeFaults(), ScheduleConfig{}); err == nil {
		t.Fatal("zero span accepted")
	}
}

func TestGenerateUniformEnablesEveryKind(t *testing.T) {
	s, err := Generate(7, fakeFaults(), ScheduleConfig{Span: time.Minute, Uniform: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Enabled) != 6 {
		t.Fatalf("uniform schedule enabled %v", s.Enabled)
	}
}

func TestGenerateZeroGapsTerminates(t *testing.T) {
	one := []Fault{NewFuncFault("x down", history.ClassOther, KindDown, noop, noop)}
	cfg := ScheduleConfig{Span: time.Second, MinGap: 0, MaxGap: time.Nanosecond, MinDuration: 100 * time.Millisecond,
		MaxDuration: 100 * time.Millisecond, MaxConcurrent: 4, Uniform: true}
	s, err := Generate(3, one, cfg)
	if err != nil {
		t.Fatal(err)
	}
	// One fault never overlaps itself, so its windows follow each other
	// back to back whatever MaxConcurrent allows.
	if len(s.Steps) < 9 {
		t.Fatalf("want at least 9 back-to-back windows of one fault, got:\n%s", s)
	}
	for i, st := range s.Steps {
		if d := st.At - time.Duration(i)*100*time.Millisecond; d < 0 || d > 20*time.Nanosecond {
			t.Fatalf("window %d starts at %s:\n%s", i, st.At, s)
		}
	}
}

func TestPeriodic(t *testing.T) {
	s := Periodic("relay->broker down", KindDown, 2*time.Second, 3*time.Second, time.Second, 15*time.Second)
	want := []time.Duration{2 * time.Second, 6 * time.Second, 10 * time.Second}
	if len(s.Steps) != len(want) {
		t.Fatalf("got:\n%s", s)
	}
	for i, st := range s.Steps {
		if st.At != want[i] || st.Duration != 3*time.Second || st.Fault != "relay->broker down" {
			t.Fatalf("step %d = %+v", i, st)
		}
	}
	if got := s.Faults(); !reflect.DeepEqual(got, []string{"relay->broker down"}) {
		t.Fatalf("Faults() = %v", got)
	}
}

func TestScheduleString(t *testing.T) {
	s, err := Generate(42, fakeFaults(), ScheduleConfig{Span: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	out := s.String()
	if !strings.HasPrefix(out, "fault schedule SEED=42 ") {
		t.Fatalf("String() does not start with the seed:\n%s", out)
	}
	for _, st := range s.Steps {
		if !strings.Contains(out, st.Fault) {
			t.Fatalf("String() misses %s:\n%s", st.Fault, out)
		}
	}
	if got := strings.Count(out, "\n"); got != len(s.Steps)+2 {
		t.Fatalf("String() has %d lines for %d steps:\n%s", got, len(s.Steps), out)
	}
	t.Logf("\n%s", out)
}
