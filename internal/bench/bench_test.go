package bench

import (
	"bytes"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/outboxlab/outboxlab/internal/bench/result"
	"github.com/outboxlab/outboxlab/outbox"
	"github.com/outboxlab/outboxlab/relay"
)

func TestPercentiles(t *testing.T) {
	var ds []time.Duration
	for i := 100; i >= 1; i-- { // out of order on purpose
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	got := percentiles(ds)
	want := result.Percentiles{P50: 50, P99: 99, Max: 100}
	if got != want {
		t.Errorf("percentiles(1..100 ms) = %+v, want %+v", got, want)
	}
	if ds[0] != 100*time.Millisecond {
		t.Error("percentiles sorted its argument in place")
	}
	if got := percentiles([]time.Duration{7 * time.Millisecond}); got != (result.Percentiles{P50: 7, P99: 7, Max: 7}) {
		t.Errorf("percentiles of one value = %+v", got)
	}
	if got := percentiles(nil); got != (result.Percentiles{}) {
		t.Errorf("percentiles(nil) = %+v, want zero", got)
	}
}

func TestWorkloadIsDeterministicAndDecodable(t *testing.T) {
	base := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	a, err := newWorkload(2500, 256, 42, base)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := newWorkload(2500, 256, 42, base)
	c, _ := newWorkload(2500, 256, 43, base)
	if !slices.Equal(a.idStr, b.idStr) {
		t.Error("same seed, different ids")
	}
	for i := range a.payloads {
		if !bytes.Equal(a.payloads[i], b.payloads[i]) {
			t.Fatalf("same seed, payload %d differs", i)
		}
	}
	if slices.Equal(a.idStr, c.idStr) {
		t.Error("different seeds, same ids")
	}
	reg := outbox.NewRegistry()
	reg.Register(MessageType, OrderPlaced{})
	seen := map[string]bool{}
	for i := range a.len() {
		id := a.ids[i]
		if id.Version() != 7 || id.Variant().String() != "RFC4122" {
			t.Fatalf("id %d %s: version %d variant %s, want a v7 RFC 4122 id", i, id, id.Version(), id.Variant())
		}
		if seen[a.idStr[i]] {
			t.Fatalf("id %s repeats", id)
		}
		seen[a.idStr[i]] = true
		if i > 0 && a.idStr[i-1] >= a.idStr[i] {
			t.Fatalf("ids %d and %d out of staging order: %s, %s", i-1, i, a.idStr[i-1], a.idStr[i])
		}
		if a.index[a.idStr[i]] != i {
			t.Fatalf("index of %s = %d, want %d", id, a.index[a.idStr[i]], i)
		}
		if n := len(a.payloads[i]); n < 256 || n > 260 {
			t.Fatalf("payload %d is %d bytes, want about 256", i, n)
		}
		v, err := reg.Decode(MessageType, a.payloads[i])
		if err != nil {
			t.Fatalf("payload %d does not decode: %v", i, err)
		}
		if v.(*OrderPlaced).Seq != int64(i) {
			t.Fatalf("payload %d has seq %d", i, v.(*OrderPlaced).Seq)
		}
	}
	s := a.slice(10)
	if s.len() != 10 || s.index[a.idStr[9]] != 9 || len(s.index) != 10 {
		t.Errorf("slice(10): len %d, index %v", s.len(), s.index)
	}
}

// spin burns CPU in a function of its own, for the profile test.
//
//go:noinline
func spin(d time.Duration) uint64 {
	x := uint64(1)
	for end := time.Now().Add(d); time.Now().Before(end); {
		for range 10_000 {
			x = x*6364136223846793005 + 1442695040888963407
		}
	}
	return x
}

func TestSummarizeProfileFindsTheBusyFunction(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cpu.pprof")
	p, err := startCPUProfile(path)
	if err != nil {
		t.Fatal(err)
	}
	sink := spin(400 * time.Millisecond)
	// The profile is not seen half written: it is in place only once it
	// stopped, with nothing beside it.
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s is there while the profile records (%v)", path, err)
	}
	prof, err := p.stop(5)
	if err != nil {
		t.Fatal(err)
	}
	_ = sink
	if entries, err := os.ReadDir(filepath.Dir(path)); err != nil || len(entries) != 1 {
		t.Errorf("the profile's directory holds %v (%v), want the profile alone", entries, err)
	}
	if prof.Path != path || prof.SampledSeconds <= 0 || len(prof.TopFlat) == 0 {
		t.Fatalf("profile summary = %+v", prof)
	}
	// On a loaded machine the few samples taken may land on the runtime's
	// preemption stub inside spin, so the busy function is asserted by its
	// cumulative share rather than by being first in the flat list.
	const want = "github.com/outboxlab/outboxlab/internal/bench.spin"
	found := false
	for _, e := range prof.TopCum {
		if e.Func == want {
			found = true
			if e.CumShare < 0.5 {
				t.Errorf("%s holds %.2f of the samples, want most of them (top: %+v)", want, e.CumShare, prof.TopCum)
			}
		}
	}
	if !found {
		t.Errorf("%s not in the cumulative top: %+v", want, prof.TopCum)
	}
	for _, e := range prof.TopCum {
		if e.Func == "runtime.goexit" || strings.HasPrefix(e.Func, "testing.") {
			t.Errorf("cumulative top lists the entry point %s", e.Func)
		}
		if e.CumShare < e.FlatShare || e.CumShare > 1 {
			t.Errorf("%s: cum share %.2f, flat share %.2f", e.Func, e.CumShare, e.FlatShare)
		}
	}
	if _, err := summarizeProfile(filepath.Join(t.TempDir(), "missing"), 5); err == nil {
		t.Error("summarizing a missing profile succeeded")
	}
}

func TestOptionsValidate(t *testing.T) {
	if err := (Options{}).Validate(); err != nil {
		t.Errorf("zero options: %v", err)
	}
	for _, tc := range []struct {
		name string
		o    Options
	}{
		{"negative events", Options{Events: -1}},
		{"negative producers", Options{Producers: -2}},
		{"negative latency rate", Options{LatencyRate: -1}},
		{"negative warm-up", Options{LatencyWarmup: -time.Second}},
		{"latency rate not a number", Options{LatencyRate: math.NaN()}},
		{"negative drain timeout", Options{DrainTimeout: -time.Second}},
		{"bad relay config", Options{Relay: relayConfigWithLease(time.Second)}},
		{"bad schema", Options{Schema: "no; drop"}},
	} {
		if err := tc.o.Validate(); err == nil {
			t.Errorf("%s: Validate accepted %+v", tc.name, tc.o)
		}
	}
}

func TestContainerCPUOfMissingContainer(t *testing.T) {
	if _, ok := containerCPU("no-such-container"); ok {
		t.Error("containerCPU found a container that does not exist")
	}
	if processCPU() <= 0 {
		t.Error("processCPU read no CPU time for this process")
	}
}

func TestRunRejectsBadOptions(t *testing.T) {
	_, err := Run(t.Context(), URLs{}, Options{Events: -5})
	if err == nil || !strings.Contains(err.Error(), "Events") {
		t.Errorf("Run with bad options: err = %v", err)
	}
}

func relayConfigWithLease(d time.Duration) (c relay.Config) {
	c.Lease = d
	return c
}

func TestResourcesOfAPhase(t *testing.T) {
	a := cpuSample{machine: 10 * time.Second, disk: diskSample{busy: map[string]time.Duration{"vda": time.Second, "vdb": 0}, flushes: 5},
		sched: schedSample{self: threadTimes{1: {wait: time.Second}}, rabbitmq: threadTimes{7: {wait: time.Second}, 8: {}}}}
	b := cpuSample{machine: 13 * time.Second, disk: diskSample{busy: map[string]time.Duration{"vda": 1500 * time.Millisecond, "vdb": 900 * time.Millisecond}, flushes: 205},
		sched: schedSample{self: threadTimes{1: {wait: 1200 * time.Millisecond}, 2: {wait: 200 * time.Millisecond}},
			postgres: threadTimes{3: {wait: 100 * time.Millisecond}}, rabbitmq: threadTimes{7: {wait: 1500 * time.Millisecond}, 8: {wait: 500 * time.Millisecond}}}}
	c := cpuBetween(a, b)
	c.ProcessSeconds, c.PostgresSeconds, c.RabbitMQSeconds = 0.5, 0.5, 1
	r := resourcesOf(c, 2*time.Second)
	if r == nil {
		t.Fatal("no resources")
	}
	// 3 CPU seconds in 2 s: 1.5 cores busy, 0.25 of them the process's,
	// 0.25 PostgreSQL's, 0.5 RabbitMQ's, 0.5 other work's.
	if r.Process != 0.25 || r.Postgres != 0.25 || r.RabbitMQ != 0.5 || r.Other != 0.5 || r.Idle != float64(r.Cores)-1.5 {
		t.Errorf("resources %+v", r)
	}
	// The busiest disk (vdb, 0.9 s of 2 s) and 200 flushes in 2 s.
	if r.DiskBusy != 0.45 || r.FlushesPerSec != 100 {
		t.Errorf("disk busy %.2f, %.0f flushes/s; want 0.45 and 100", r.DiskBusy, r.FlushesPerSec)
	}
	// Run-queue waits over the 2 s: this process 0.4 s (a thread new
	// since the start counts from zero), PostgreSQL 0.1 s, RabbitMQ 1 s.
	if !near(r.ProcessWaiting, 0.2) || !near(r.PostgresWaiting, 0.05) || !near(r.RabbitMQWaiting, 0.5) {
		t.Errorf("threads waiting for a core %.3f / %.3f / %.3f, want 0.2 / 0.05 / 0.5", r.ProcessWaiting, r.PostgresWaiting, r.RabbitMQWaiting)
	}
	if resourcesOf(result.CPU{}, time.Second) != nil {
		t.Error("resources without the machine's CPU time")
	}
	if d := machineDisk(); len(d.busy) == 0 {
		t.Log("no disk in /proc/diskstats")
	}
}

// near reports whether a and b agree to within a part in a million.
func near(a, b float64) bool { return math.Abs(a-b) <= 1e-6*math.Max(1, math.Abs(b)) }
