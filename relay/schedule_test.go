package relay

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// value reads a counter's or a gauge's value.
func value(t *testing.T, m prometheus.Metric) float64 {
	t.Helper()
	var out dto.Metric
	if err := m.Write(&out); err != nil {
		t.Fatal(err)
	}
	if out.Gauge != nil {
		return out.Gauge.GetValue()
	}
	return out.Counter.GetValue()
}

// statsStore is a fakeStore whose Stats answers stats and counts the
// calls; fail, when set, makes Stats fail.
type statsStore struct {
	fakeStore
	mu    sync.Mutex
	calls int
	fail  bool
	stats Stats
}

func (s *statsStore) Stats(context.Context) (Stats, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	if s.fail {
		return Stats{}, errors.New("stats unavailable")
	}
	return s.stats, nil
}

// TestTickSchedule checks the tick's schedule on the process clock: the
// first tick sweeps, a tick within SweepInterval of the last sweep does
// not, one at SweepInterval does; a sweep that fails fails its tick and is
// tried again at the next; the sweep goes on while statements delete
// whole batches. The backlog report runs once per PollInterval, only with
// metrics, fails its tick when the statistics fail, and sets the gauges.
func TestTickSchedule(t *testing.T) {
	var (
		mu  sync.Mutex
		now = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	failSweep := false
	store := &statsStore{stats: Stats{Pending: 7, Faulted: 2, OldestEligibleAge: 90 * time.Second}}
	store.sweep = func(n int) (int, error) {
		if failSweep {
			return 0, errors.New("sweep failed")
		}
		if n == 1 {
			return 2, nil // a whole batch: sweep again at once
		}
		return 1, nil
	}
	m := NewMetrics(prometheus.NewRegistry(), "outbox")
	r, err := New(Config{RelayID: "r", SweepBatch: 2, SweepInterval: time.Minute, PollInterval: 10 * time.Second, Now: clock},
		store, &hookPublisher{}, Options{SerialStore: true, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	tick := func(what string, wantErr bool) TickResult {
		t.Helper()
		res, err := r.Tick(ctx)
		if (err != nil) != wantErr {
			t.Fatalf("%s: tick error %v, want error %v", what, err, wantErr)
		}
		return res
	}
	sweeps := func() int { store.fakeStore.mu.Lock(); defer store.fakeStore.mu.Unlock(); return store.sweeps }
	statsCalls := func() int { store.mu.Lock(); defer store.mu.Unlock(); return store.calls }

	if res := tick("first", false); res.Swept != 3 || sweeps() != 2 {
		t.Fatalf("first tick swept %d rows in %d statements, want 3 in 2 (a whole batch, then the rest)", res.Swept, sweeps())
	}
	if statsCalls() != 1 || value(t, m.Backlog) != 7 || value(t, m.Faulted) != 2 || value(t, m.OldestEligible) != 90 {
		t.Fatalf("first tick: %d stats calls, gauges %v %v %v; want 1 and 7, 2, 90", statsCalls(),
			value(t, m.Backlog), value(t, m.Faulted), value(t, m.OldestEligible))
	}
	if got := value(t, m.Swept); got != 3 {
		t.Errorf("swept counter %v, want 3", got)
	}
	advance(5 * time.Second)
	tick("within both intervals", false)
	if sweeps() != 2 || statsCalls() != 1 {
		t.Fatalf("a tick 5 s on: %d sweep statements, %d stats calls; want 2 and 1 (neither due)", sweeps(), statsCalls())
	}
	advance(5 * time.Second) // 10 s: the report is due, the sweep not
	tick("at the poll interval", false)
	if sweeps() != 2 || statsCalls() != 2 {
		t.Fatalf("a tick 10 s on: %d sweep statements, %d stats calls; want 2 and 2", sweeps(), statsCalls())
	}
	advance(50 * time.Second) // 60 s: the sweep is due
	failSweep = true
	tick("a failing sweep", true)
	if sweeps() != 3 {
		t.Fatalf("%d sweep statements, want 3", sweeps())
	}
	failSweep = false
	tick("after a failed sweep", false)
	if sweeps() != 4 {
		t.Fatalf("the sweep after a failed one did not run at the next tick: %d statements, want 4", sweeps())
	}
	advance(59 * time.Second)
	tick("59 s after the last sweep", false)
	if sweeps() != 4 {
		t.Fatalf("swept again 59 s after the last sweep: %d statements", sweeps())
	}
	advance(time.Second)
	tick("60 s after the last sweep", false)
	if sweeps() != 5 {
		t.Fatalf("no sweep 60 s after the last one: %d statements, want 5", sweeps())
	}
	store.mu.Lock()
	store.fail = true
	store.mu.Unlock()
	advance(10 * time.Second)
	tick("failing statistics", true)

	// Without metrics, no statistics are read.
	plain := &statsStore{}
	r2, err := New(Config{RelayID: "r", Now: clock}, plain, &hookPublisher{}, Options{SerialStore: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r2.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	if plain.calls != 0 {
		t.Errorf("a relay without metrics read the statistics %d times", plain.calls)
	}
}
