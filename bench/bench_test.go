package bench

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/outboxlab/outboxlab/outbox"
	"github.com/outboxlab/outboxlab/relay"
)

func TestPercentiles(t *testing.T) {
	var ds []time.Duration
	for i := 100; i >= 1; i-- { // out of order on purpose
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	got := percentiles(ds)
	want := Percentiles{P50: 50, P99: 99, Max: 100}
	if got != want {
		t.Errorf("percentiles(1..100 ms) = %+v, want %+v", got, want)
	}
	if ds[0] != 100*time.Millisecond {
		t.Error("percentiles sorted its argument in place")
	}
	if got := percentiles([]time.Duration{7 * time.Millisecond}); got != (Percentiles{7, 7, 7}) {
		t.Errorf("percentiles of one value = %+v", got)
	}
	if got := percentiles(nil); got != (Percentiles{}) {
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
	const want = "github.com/outboxlab/outboxlab/bench.spin"
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

func TestSummaryJSONHasExactlyTheSummaryFields(t *testing.T) {
	r := Result{Throughput: Throughput{Events: 10, RawMsgsPerSec: 5}, Phases: []Phase{{Name: "raw"}}, Notes: []string{"x"}}
	var buf bytes.Buffer
	if err := r.WriteJSON(&buf, false); err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(buf.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	want := []string{"events", "raw_msgs_per_sec", "relay_msgs_per_sec", "relay2_msgs_per_sec", "watermill_msgs_per_sec",
		"ratio_to_raw", "ratio_to_watermill", "latency_poll_p50_ms", "latency_poll_p99_ms", "latency_poll_max_ms",
		"latency_notify_p50_ms", "latency_notify_p99_ms", "latency_notify_max_ms", "relay2_ratio_to_raw",
		"latency_broker_p50_ms", "latency_broker_p99_ms", "notify_p99_over_broker_p99",
		"cpu_us_per_msg_raw_process", "cpu_us_per_msg_relay_plus_db", "cpu_us_per_msg_broker", "cpu_relay_plus_db_over_broker",
		"latency_inline_p99_ms", "notify_p99_over_inline_p99", "inline_p99_over_broker_p99", "cpu_ceiling_ratio_to_raw", "cpu_ceiling_relay2_ratio_to_raw",
		"cpu_budget_us_per_msg_relay_plus_db",
		"cores_bound", "broker_busy_raw", "broker_busy_ratio", "broker_cost_ratio", "latency_claim_call_p99_ms", "claim_call_p99_over_broker_p99",
		"notify_relay_statement_mean_ms", "notify_relay_statement_cpu_wait_ms", "notify_busy_cores",
		"raw_over_watermill", "broker2_busy_ratio", "broker2_cost_ratio", "raw_self_ratio",
		"latency_keyed_p99_ms", "keyed_p99_over_broker_p99", "notify_p99_over_keyed_p99", "raw2_ratio_to_raw"}
	var got []string
	for k := range m {
		got = append(got, k)
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("summary keys = %v, want %v", got, want)
	}
	if m["events"] != 10.0 || m["raw_msgs_per_sec"] != 5.0 {
		t.Errorf("summary = %v", m)
	}
	buf.Reset()
	if err := r.WriteJSON(&buf, true); err != nil {
		t.Fatal(err)
	}
	var full map[string]any
	if err := json.Unmarshal(buf.Bytes(), &full); err != nil {
		t.Fatal(err)
	}
	for _, k := range append(want, "phases", "notes", "config") {
		if _, ok := full[k]; !ok {
			t.Errorf("full result lacks %q", k)
		}
	}
}

// TestResultJSONRoundTrips writes a result and reads it back: the
// figures and details come back as they were, the ratios and limits the
// JSON carries are those the methods derive, a result as the runs before
// the nested types wrote it (ratios and limits among the figures) is
// read, and a key no result has is refused.
func TestResultJSONRoundTrips(t *testing.T) {
	busy := &Resources{Cores: 2, RabbitMQ: 0.9, Idle: 0.05}
	r := Result{
		Throughput:     Throughput{Events: 1000, RawMsgsPerSec: 10000, RelayMsgsPerSec: 8000, Relay2MsgsPerSec: 9000, WatermillMsgsPerSec: 500},
		LatencySummary: LatencySummary{LatencyNotifyP99Ms: 9, LatencyBrokerP99Ms: 3, LatencyInlineP99Ms: 4.5, LatencyKeyedP99Ms: 6},
		CPUCost:        CPUCost{CPUMicrosPerMsgRelayPlusDB: 60, CPUMicrosPerMsgBroker: 120, CPUMicrosPerMsgRawProcess: 20},
		Phases: []Phase{
			{Name: "raw", Events: 1000, MsgsPerSec: 10000, CPUMicrosPerMsg: 100, CPU: CPU{RabbitMQSeconds: 0.1}, Resources: busy},
			{Name: "relay-1", Events: 1000, MsgsPerSec: 8000, CPUMicrosPerMsg: 150, CPU: CPU{RabbitMQSeconds: 0.12}, Resources: busy},
		},
		Config: RunConfig{Events: 1000, Layout: LayoutShared},
		Notes:  []string{"a note"},
	}
	data, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var back Result
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatalf("reading %s: %v", data, err)
	}
	if !reflect.DeepEqual(back, r) {
		t.Errorf("read back\n%+v\nwant\n%+v", back, r)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	l := r.Limits()
	for key, want := range map[string]any{
		"ratio_to_raw": r.RatioToRaw(), "relay2_ratio_to_raw": r.Ratio2ToRaw(), "ratio_to_watermill": 16.0, "raw_over_watermill": 20.0,
		"notify_p99_over_broker_p99": 3.0, "notify_p99_over_inline_p99": 2.0, "inline_p99_over_broker_p99": 1.5,
		"keyed_p99_over_broker_p99": 2.0, "notify_p99_over_keyed_p99": 1.5, "cpu_relay_plus_db_over_broker": 0.5,
		"cpu_ceiling_ratio_to_raw": l.CPUCeilingRatioToRaw, "broker_busy_raw": 0.9, "cores_bound": false,
	} {
		if m[key] != want {
			t.Errorf("%s = %v, want %v", key, m[key], want)
		}
	}
	if r.RatioToRaw() != 0.8 || l.CPUCeilingRatioToRaw != 100.0/150 {
		t.Errorf("ratio to raw %g, CPU ceiling %g", r.RatioToRaw(), l.CPUCeilingRatioToRaw)
	}
	// The ratios and limits a result carries are derived again, not read.
	old := `{"events": 10, "raw_msgs_per_sec": 100, "relay_msgs_per_sec": 50, "ratio_to_raw": 0.9, "cores_bound": true, "raw_self_ratio": 0.7, "phases": [], "config": {}}`
	var o Result
	if err := json.Unmarshal([]byte(old), &o); err != nil {
		t.Fatalf("a result with its ratios among the figures: %v", err)
	}
	if o.RatioToRaw() != 0.5 || o.Limits().CoresBound || o.Limits().RawSelfRatio != 0 {
		t.Errorf("read %+v: ratio to raw %g, limits %+v", o, o.RatioToRaw(), o.Limits())
	}
	if err := json.Unmarshal([]byte(`{"events": 10, "colour": "red"}`), &o); err == nil || !strings.Contains(err.Error(), "colour") {
		t.Errorf("a result with an unknown key: %v", err)
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

func TestWriteTableShowsEveryPhase(t *testing.T) {
	r := Result{
		Throughput: Throughput{Events: 100, RawMsgsPerSec: 1000, RelayMsgsPerSec: 800},
		Phases: []Phase{
			{Name: "raw", Events: 100, MsgsPerSec: 1000},
			{Name: "relay-1", Events: 100, MsgsPerSec: 800, Breakdown: &Breakdown{}},
			{Name: "watermill", Events: 100, MsgsPerSec: 100},
		},
		Latency: []Latency{{Mode: "poll"}, {Mode: "notify"}},
		Hygiene: []TableStats{{Moment: "after drain"}},
		Notes:   []string{"a note"},
	}
	var buf bytes.Buffer
	if err := r.WriteTable(&buf); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"raw", "relay-1", "watermill", "0.80", "poll", "notify", "after drain", "a note", "Where relay-1"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, buf.String())
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
	if resourcesOf(CPU{}, time.Second) != nil {
		t.Error("resources without the machine's CPU time")
	}
	if d := machineDisk(); len(d.busy) == 0 {
		t.Log("no disk in /proc/diskstats")
	}
}

func TestCeilingsOfTheRatiosToRaw(t *testing.T) {
	busy := &Resources{Cores: 2, Idle: 0.05}
	phase := func(name string, rate, us, rabbitUs float64, res *Resources) Phase {
		const n = 1000
		return Phase{Name: name, Events: n, MsgsPerSec: rate, CPUMicrosPerMsg: us,
			CPU: CPU{RabbitMQSeconds: rabbitUs * n / 1e6}, Resources: res}
	}
	r := Result{Phases: []Phase{
		phase("raw", 9000, 130, 110, busy),
		phase("relay-1", 6000, 200, 100, busy),
		phase("relay-2", 7000, 160, 100, busy),
		// Two connections: not a raw phase, and not the broker's limit,
		// though faster than raw.
		phase("raw-2", 10500, 118, 104, &Resources{Cores: 2, Idle: 0.5}),
		phase("raw-after", 10000, 120, 105, busy), // the limit: the faster raw
		phase("watermill", 600, 2000, 100, &Resources{Cores: 2, Idle: 1.5}),
	}}
	l := r.Limits()
	if l.RawSelfRatio != 0.9 {
		t.Errorf("raw's slower phase over its faster: %g, want 9000/10000", l.RawSelfRatio)
	}
	if l.Raw2RatioToRaw != 1.05 {
		t.Errorf("raw over two connections / raw: %g, want 10500/10000", l.Raw2RatioToRaw)
	}
	if l.CPUCeilingRatioToRaw != 0.6 || l.CPUCeiling2RatioToRaw != 0.75 {
		t.Errorf("ceilings %.3f and %.3f, want 120/200 = 0.6 and 120/160 = 0.75", l.CPUCeilingRatioToRaw, l.CPUCeiling2RatioToRaw)
	}
	// 120 / 0.85 = 141.2 us per message for relay-1 in all, of which
	// RabbitMQ took 100.
	if want := 120/GoalRatioToRaw - 100; math.Abs(l.CPUBudgetRelayPlusDB-want) > 1e-9 {
		t.Errorf("budget %.2f us, want %.2f", l.CPUBudgetRelayPlusDB, want)
	}
	if !l.CoresBound {
		t.Error("every phase of the comparison kept the cores busy (watermill's idle cores do not count), yet not cores-bound")
	}

	r.Phases[1].Resources = &Resources{Cores: 2, Idle: 0.4}
	l = r.Limits()
	if l.CoresBound {
		t.Error("relay-1 left 0.4 cores idle, yet cores-bound")
	}
	r.Phases[1].Resources = nil
	l = r.Limits()
	if l.CoresBound {
		t.Error("relay-1's cores were not read, yet cores-bound")
	}
	short := Result{Phases: []Phase{phase("raw", 9000, 130, 110, busy), phase("relay-1", 6000, 200, 100, busy)}}
	sl := short.Limits()
	if sl.CoresBound || sl.CPUCeiling2RatioToRaw != 0 || sl.CPUCeilingRatioToRaw != 0.65 || sl.Raw2RatioToRaw != 0 {
		t.Errorf("without relay-2 and raw-after: cores-bound %v, ceilings %.2f / %.2f", sl.CoresBound, sl.CPUCeilingRatioToRaw, sl.CPUCeiling2RatioToRaw)
	}
}

func TestRatioToRawAsTheBrokersBusyCoresAndCost(t *testing.T) {
	// raw: 10000 msgs in 1 s, RabbitMQ 0.95 s of CPU (95 us each);
	// relay-1: 10000 msgs in 1.25 s, RabbitMQ 1.0 s (100 us each).
	raw := Phase{Name: "raw", Events: 10000, Seconds: 1, MsgsPerSec: 10000, CPU: CPU{RabbitMQSeconds: 0.95},
		Resources: &Resources{Cores: 2, RabbitMQ: 0.95, Idle: 0.9}}
	one := Phase{Name: "relay-1", Events: 10000, Seconds: 1.25, MsgsPerSec: 8000, CPU: CPU{RabbitMQSeconds: 1},
		Resources: &Resources{Cores: 2, RabbitMQ: 0.8, Idle: 0.7}}
	// relay-2: 10000 msgs in 1.1 s, RabbitMQ 0.99 s (99 us each).
	two := Phase{Name: "relay-2", Events: 10000, Seconds: 1.1, MsgsPerSec: 10000 / 1.1, CPU: CPU{RabbitMQSeconds: 0.99},
		Resources: &Resources{Cores: 2, RabbitMQ: 0.9, Idle: 0.6}}
	r := Result{Phases: []Phase{raw, one, two}, Throughput: Throughput{RawMsgsPerSec: 10000, RelayMsgsPerSec: 8000, Relay2MsgsPerSec: 10000 / 1.1}}
	l := r.Limits()
	if got := l.Broker2BusyRatio * l.Broker2CostRatio; math.Abs(l.Broker2BusyRatio-0.9/0.95) > 1e-9 || math.Abs(got-r.Ratio2ToRaw()) > 1e-9 {
		t.Errorf("relay-2: busy ratio %.4f (want %.4f), busy ratio x cost ratio %.4f, ratio to raw %.4f", l.Broker2BusyRatio, 0.9/0.95, got, r.Ratio2ToRaw())
	}
	if l.BrokerBusyRaw != 0.95 || math.Abs(l.BrokerBusyRatio-0.8/0.95) > 1e-9 || math.Abs(l.BrokerCostRatio-0.95) > 1e-9 {
		t.Errorf("broker busy %.2f, busy ratio %.4f (want %.4f), cost ratio %.4f (want 0.95)", l.BrokerBusyRaw, l.BrokerBusyRatio, 0.8/0.95, l.BrokerCostRatio)
	}
	if got := l.BrokerBusyRatio * l.BrokerCostRatio; math.Abs(got-r.RatioToRaw()) > 1e-9 {
		t.Errorf("busy ratio x cost ratio = %.4f, ratio to raw %.4f", got, r.RatioToRaw())
	}
	if l.CoresBound {
		t.Error("idle cores in both phases, yet cores-bound")
	}
	r.Phases[1].Resources = nil
	l = r.Limits()
	if l.BrokerBusyRatio != 0 || l.BrokerCostRatio != 0 {
		t.Error("relay-1's busy cores were not read, yet a broker decomposition")
	}
}

// near reports whether a and b agree to within a part in a million.
func near(a, b float64) bool { return math.Abs(a-b) <= 1e-6*math.Max(1, math.Abs(b)) }

// TestKeyedLeaseIsAFloorOnlyWhereTheRelayDidNotBeatIt checks that the
// summary calls the keyed lease no floor where the relay's NOTIFY p99 was
// below it (the lease queued behind saturated cores), and only there.
func TestKeyedLeaseIsAFloorOnlyWhereTheRelayDidNotBeatIt(t *testing.T) {
	for _, c := range []struct {
		notifyOverKeyed float64
		noFloor         bool
	}{{0.8, true}, {1, false}, {1.3, false}, {0, false}} {
		r := Result{LatencySummary: LatencySummary{LatencyNotifyP99Ms: c.notifyOverKeyed, LatencyKeyedP99Ms: 1}}
		if got := r.keyedNoFloor() != ""; got != c.noFloor {
			t.Errorf("relay / keyed %.1f: no floor %v, want %v", c.notifyOverKeyed, got, c.noFloor)
		}
	}
}
