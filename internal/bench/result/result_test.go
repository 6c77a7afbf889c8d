package result

import (
	"bytes"
	"encoding/json"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/outboxlab/outboxlab/internal/bench/goal"
)

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
	if want := 120/goal.RatioToRaw - 100; math.Abs(l.CPUBudgetRelayPlusDB-want) > 1e-9 {
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

func TestWriteSchedShowsEachRunsGroups(t *testing.T) {
	var buf strings.Builder
	runs := []Latency{
		{Mode: "notify", BusyCores: 1.9, RelayStatements: 120, RelayStatementMeanMs: 2.5, RelayStatementCPUWaitMs: 1.75,
			Sched: []SchedGroup{{Name: "relay sessions", Threads: 2, OnCPUMs: 40, RunQueueMs: 210}, {Name: "this process", Threads: 9, OnCPUMs: 900, RunQueueMs: 300}}},
		{Mode: "broker"},
	}
	if err := writeSched(&buf, runs); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"relay sessions 40 / 210", "this process 900 / 300", "1.90 cores busy", "120 claims and marks: 2.50 ms mean, of which 1.75 ms"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("lacks %q:\n%s", want, buf.String())
		}
	}
	if strings.Contains(buf.String(), "broker") {
		t.Errorf("a run with no figures is shown:\n%s", buf.String())
	}
	buf.Reset()
	if err := writeSched(&buf, []Latency{{Mode: "poll"}}); err != nil || buf.Len() != 0 {
		t.Errorf("no figures: %q, %v", buf.String(), err)
	}
}
