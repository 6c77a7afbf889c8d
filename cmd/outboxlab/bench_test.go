package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/outboxlab/outboxlab/bench"
	"github.com/outboxlab/outboxlab/report"
)

// fakeBench returns d with a benchmark that returns r or err after
// checking the options the command passed.
func fakeBench(d deps, r bench.Result, err error, check func(bench.Options)) deps {
	d.bench = func(ctx context.Context, opts bench.Options, status func(string)) (bench.Result, error) {
		check(opts)
		return r, err
	}
	return d
}

func benchResult() bench.Result {
	return bench.Result{
		Events: 1000, RawMsgsPerSec: 10000, RelayMsgsPerSec: 8000, RatioToRaw: 0.8,
		Phases: []bench.Phase{
			{Name: "raw", Events: 1000, Complete: true, Seconds: 0.1, MsgsPerSec: 10000},
			{Name: "relay-1", Events: 1000, Complete: true, Seconds: 0.125, MsgsPerSec: 8000},
		},
		Latency:            []bench.Latency{{Mode: "notify", Rate: 4000, Confirm: bench.Percentiles{P50: 1.5, P99: 9.25, Max: 12}}},
		LatencyNotifyP99Ms: 9.25, LatencyBrokerP99Ms: 5, NotifyOverBrokerP99: 1.85,
		Config: bench.RunConfig{Events: 1000, BatchSize: 100, PublishWindow: 64, PayloadBytes: 256, LatencyEvents: 500, LatencyRate: 4000},
		Notes:  []string{"watermill skipped"},
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
	var full map[string]any
	if err := json.Unmarshal(b.Bench.Result, &full); err != nil || full["relay_msgs_per_sec"] != 8000.0 {
		t.Errorf("full result %s: %v", b.Bench.Result, err)
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
	var sum bench.Summary
	if code != exitOK || json.Unmarshal([]byte(out), &sum) != nil || sum.RelayMsgsPerSec != 8000 {
		t.Errorf("--json: exit %d, %q", code, out)
	}
	d = fakeBench(d, bench.Result{}, errors.New("relay-1 delivered 999 of 1000 messages"), func(bench.Options) {})
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
	r.RatioToRaw = 0.66
	r.Phases[1].Breakdown = &bench.Breakdown{
		Claim:       bench.CallTime{ShareOfWall: 0.35, MeanMs: 8.7},
		Mark:        bench.CallTime{ShareOfWall: 0.29, MeanMs: 7.1},
		Publish:     bench.CallTime{ShareOfWall: 0.18},
		ConfirmWait: bench.CallTime{ShareOfWall: 0.72},
	}
	r.Profile = &bench.Profile{SampledSeconds: 5, TopFlat: []bench.ProfileEntry{{Func: "syscall.Syscall6", FlatShare: 0.13, CumShare: 0.13}}}
	r.Hygiene = []bench.TableStats{{Moment: "after drain", LiveTuples: 1000, Updates: 2000, HOTUpdates: 1000}}
	f, err := benchFile(report.Meta{}, r)
	if err != nil {
		t.Fatal(err)
	}
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
