package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/outboxlab/outboxlab/internal/bench"
	"github.com/outboxlab/outboxlab/internal/bench/result"
	"github.com/outboxlab/outboxlab/internal/report"
)

// fakeBench returns d with a benchmark that returns r or err after
// checking the options the command passed.
func fakeBench(d deps, r result.Result, err error, check func(bench.Options)) deps {
	d.bench = func(ctx context.Context, opts bench.Options, status func(string)) (result.Result, error) {
		check(opts)
		return r, err
	}
	return d
}

func benchResult() result.Result {
	return result.Result{
		Throughput: result.Throughput{Events: 1000, RawMsgsPerSec: 10000, RelayMsgsPerSec: 8000},
		Phases: []result.Phase{
			{Name: "raw", Events: 1000, Complete: true, Seconds: 0.1, MsgsPerSec: 10000},
			{Name: "relay-1", Events: 1000, Complete: true, Seconds: 0.125, MsgsPerSec: 8000},
		},
		Latency:        []result.Latency{{Mode: "notify", Rate: 4000, Confirm: result.Percentiles{P50: 1.5, P99: 9.25, Max: 12}}},
		LatencySummary: result.LatencySummary{LatencyNotifyP99Ms: 9.25, LatencyBrokerP99Ms: 5},
		Config:         result.RunConfig{Events: 1000, BatchSize: 100, PublishWindow: 64, PayloadBytes: 256, LatencyEvents: 500, LatencyRate: 4000},
		Notes:          []string{"watermill skipped"},
	}
}

func TestBenchWritesItsTablesAndBundle(t *testing.T) {
	d := fakeBench(withDocker(testDeps()), benchResult(), nil, func(o bench.Options) {
		if o.Events != 1000 || !o.SkipWatermill || o.Seed != 7 {
			t.Errorf("options %+v, want 1000 events, watermill skipped, seed 7", o)
		}
	})
	dir := t.TempDir()
	code, out, errOut := invokeWith(t, d, "bench", "--events", "1000", "--skip-watermill", "--seed", "7", "--out", dir)
	if code != exitOK {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
	if !strings.HasPrefix(out, "SEED=7 events=1000\n") || !strings.Contains(out, "relay-1") {
		t.Errorf("output:\n%s", out)
	}
	b, err := report.ReadBundle(dir)
	if err != nil || b.Bench == nil || len(b.Bench.Tables) != 3 {
		t.Fatalf("bench.json: %v %+v", err, b.Bench)
	}
	targets := b.Bench.Tables[2]
	if !strings.HasPrefix(targets.Title, "Targets") || len(targets.Rows) != 5 {
		t.Fatalf("targets table %+v", targets)
	}
	if got := targets.Rows[0]; got[1] != "0.80" || got[2] != ">= 0.85" || got[3] != "no" {
		t.Errorf("relay-1 / raw row %v", got)
	}
	if got := targets.Rows[1]; got[3] != "not run" {
		t.Errorf("relay-2 / raw row %v, no relay-2 figure", got)
	}
	if got := targets.Rows[2]; got[1] != "1.85" || got[2] != "<= 2" || got[3] != "yes" {
		t.Errorf("NOTIFY row %v", got)
	}
	if got := targets.Rows[3]; got[3] != "not run" {
		t.Errorf("watermill row %v, watermill was skipped", got)
	}
	if got := b.Bench.Tables[0].Rows[1]; got[0] != "relay-1" || got[1] != "8000" || got[3] != "0.80" {
		t.Errorf("throughput row %v", got)
	}
	if got := b.Bench.Tables[1].Rows[0]; got[0] != "notify" || got[3] != "9.2" && got[3] != "9.3" {
		t.Errorf("latency row %v", got)
	}
	if r := b.Bench.Result; r == nil || r.RelayMsgsPerSec != 8000 || r.RatioToRaw() != 0.8 || len(r.Phases) != 2 {
		t.Errorf("full result %+v", r)
	}
	// bench.json carries the ratios beside the figures, as it always has.
	var file struct{ Result map[string]any }
	if data, err := os.ReadFile(filepath.Join(dir, report.FileBench)); err != nil || json.Unmarshal(data, &file) != nil ||
		file.Result["relay_msgs_per_sec"] != 8000.0 || file.Result["ratio_to_raw"] != 0.8 || file.Result["notify_p99_over_broker_p99"] != 1.85 {
		t.Errorf("bench.json's result %v: %v", file.Result, err)
	}
	md := filepath.Join(t.TempDir(), "REPORT.md")
	if code, _, errOut := invokeWith(t, d, "report", "--in", dir, "--md", md); code != exitOK {
		t.Fatalf("report: %s", errOut)
	}
	data, _ := os.ReadFile(md)
	if !strings.Contains(string(data), "| relay-1 | 8000 | 0.12 | 0.80 | yes |") {
		t.Errorf("REPORT.md:\n%s", data)
	}
}

func TestBenchJSONAndFailure(t *testing.T) {
	d := fakeBench(withDocker(testDeps()), benchResult(), nil, func(bench.Options) {})
	code, out, _ := invokeWith(t, d, "bench", "--json")
	var sum result.Summary
	if code != exitOK || json.Unmarshal([]byte(out), &sum) != nil || sum.RelayMsgsPerSec != 8000 {
		t.Errorf("--json: exit %d, %q", code, out)
	}
	// Each latency flag reaches bench.Options, and a bad value is a usage
	// error that names the flag.
	for _, c := range []struct {
		flag, good, bad string
		got             func(bench.Options) float64
		want            float64
	}{
		{"--latency-rate", "750", "-3", func(o bench.Options) float64 { return o.LatencyRate }, 750},
		{"--producers", "4", "0", func(o bench.Options) float64 { return float64(o.Producers) }, 4},
	} {
		var got float64
		d = fakeBench(d, benchResult(), nil, func(o bench.Options) { got = c.got(o) })
		if code, _, errOut := invokeWith(t, d, "bench", c.flag, c.good); code != exitOK || got != c.want {
			t.Errorf("%s %s: exit %d, option %v, %s", c.flag, c.good, code, got, errOut)
		}
		if code, _, errOut := invokeWith(t, d, "bench", c.flag, c.bad); code != exitUsage || !strings.Contains(errOut, c.flag+" must be") {
			t.Errorf("%s %s: exit %d, %q", c.flag, c.bad, code, errOut)
		}
	}
	d = fakeBench(d, result.Result{}, errors.New("relay-1 delivered 999 of 1000 messages"), func(bench.Options) {})
	code, _, errOut := invokeWith(t, d, "bench")
	if code != exitFail || !strings.Contains(errOut, "999 of 1000") {
		t.Errorf("failing drain: exit %d, %q", code, errOut)
	}
}

// TestBenchFileShowsWhereTheTimeGoes checks that a result with a
// breakdown, a profile and hygiene figures carries them into bench.json,
// where REPORT.md takes them from, and that a missed target says so.
func TestBenchFileShowsWhereTheTimeGoes(t *testing.T) {
	r := benchResult()
	r.RelayMsgsPerSec = 6600
	r.Phases[1].Breakdown = &result.Breakdown{
		Claim:       result.CallTime{ShareOfWall: 0.35, MeanMs: 8.7},
		Mark:        result.CallTime{ShareOfWall: 0.29, MeanMs: 7.1},
		Publish:     result.CallTime{ShareOfWall: 0.18},
		ConfirmWait: result.CallTime{ShareOfWall: 0.72},
	}
	r.Profile = &result.Profile{SampledSeconds: 5, TopFlat: []result.ProfileEntry{{Func: "syscall.Syscall6", FlatShare: 0.13, CumShare: 0.13}}}
	r.Hygiene = []result.TableStats{{Moment: "after drain", LiveTuples: 1000, Updates: 2000, HOTUpdates: 1000}}
	f := benchFile(report.Meta{}, r)
	titles := map[string]report.Table{}
	for _, tb := range f.Tables {
		titles[strings.SplitN(tb.Title, " ", 2)[0]] = tb
	}
	if got := titles["Targets"].Rows[0]; got[1] != "0.66" || got[3] != "no" {
		t.Errorf("ratio_to_raw row %v, want 0.66 and not met", got)
	}
	if got := titles["Where"].Rows; len(got) != 1 || got[0][0] != "relay-1" || got[0][1] != "35.0%" || got[0][6] != "72.0%" {
		t.Errorf("breakdown rows %v", got)
	}
	if got := titles["CPU"].Rows; len(got) != 1 || got[0][0] != "syscall.Syscall6" || got[0][1] != "13.0%" {
		t.Errorf("profile rows %v", got)
	}
	if got := titles["Outbox"].Rows; len(got) != 1 || got[0][5] != "2000" || got[0][6] != "1000" {
		t.Errorf("hygiene rows %v", got)
	}
}

func TestBenchFileShowsWhoWaitedForACore(t *testing.T) {
	r := benchResult()
	r.Phases[1].Resources = &result.Resources{Cores: 2, RabbitMQ: 0.9, Idle: 0.6, ProcessWaiting: 0.05, PostgresWaiting: 0.125, RabbitMQWaiting: 0.25}
	r.Latency[0].BusyCores = 1.68
	r.Latency[0].Sched = []result.SchedGroup{{Name: "relay sessions", Threads: 2, OnCPUMs: 2367, RunQueueMs: 9688}, {Name: "this process", Threads: 9, OnCPUMs: 6300, RunQueueMs: 8267}}
	r.Latency[0].RelayStatements, r.Latency[0].RelayStatementMeanMs, r.Latency[0].RelayStatementCPUWaitMs = 13295, 0.9, 0.72
	r.NotifyRelayStatementMeanMs, r.NotifyRelayStatementCPUWaitMs, r.NotifyBusyCores = 0.9, 0.72, 1.68
	f := benchFile(report.Meta{}, r)
	var found struct{ cores, sched, target, title bool }
	for _, tb := range f.Tables {
		switch {
		case strings.HasPrefix(tb.Title, "Cores busy"):
			found.cores = len(tb.Rows) == 1 && tb.Rows[0][len(tb.Rows[0])-1] == "0.05 / 0.12 / 0.25"
		case strings.HasPrefix(tb.Title, "Latency runs: threads"):
			row := tb.Rows[0]
			found.sched = len(tb.Rows) == 1 && row[0] == "notify" && row[1] == "1.68" && row[2] == "2367 / 9688" && row[3] == "-" &&
				row[len(row)-2] == "6300 / 8267" && row[len(row)-1] == "13295, 0.90, 0.72"
		case strings.HasPrefix(tb.Title, "Targets"):
			for _, row := range tb.Rows {
				if strings.HasPrefix(row[0], "the notify run's claims and marks (0.90 ms mean)") && row[1] == "0.80" {
					found.target = true
				}
			}
		case strings.HasPrefix(tb.Title, "Latency at half capacity"):
			found.title = true
		}
	}
	if found != (struct{ cores, sched, target, title bool }{true, true, true, true}) {
		t.Errorf("tables found %+v:\n%+v", found, f.Tables)
	}
	r.Config.LatencyRate = 800
	f = benchFile(report.Meta{}, r)
	for _, tb := range f.Tables {
		if strings.HasPrefix(tb.Title, "Latency at") && !strings.HasPrefix(tb.Title, "Latency at a chosen rate (500 events at 800/s") {
			t.Errorf("a chosen rate's title: %s", tb.Title)
		}
	}
}
