package report

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// resultsDir is the directory of the bundles REPORT.md is made from.
const resultsDir = "../../results"

// TestReportOfRealBenchBundles renders two benchmark bundles that
// REPORT.md is made from, one of each layout, as `make report` reads
// them: the table of runs and the goals over them hold the figures and
// ratios each run measured, derived again from its bench.json's result.
func TestReportOfRealBenchBundles(t *testing.T) {
	var bundles []Bundle
	for _, dir := range []string{"bench-shared-1", "bench-d1204-isolated"} {
		b, err := ReadBundle(filepath.Join(resultsDir, dir))
		if err != nil {
			t.Fatal(err)
		}
		if b.Bench == nil || b.Bench.Result == nil {
			t.Fatalf("%s: no benchmark result", dir)
		}
		bundles = append(bundles, b)
	}
	if r := bundles[0].Bench.Result; r.Events != 100000 || r.RawMsgsPerSec != 8575.07046289965 || len(r.Phases) != 5 || r.Config.Layout != "shared" {
		t.Errorf("bench-shared-1 reads as %d events, raw %v msgs/s, %d phases, layout %q", r.Events, r.RawMsgsPerSec, len(r.Phases), r.Config.Layout)
	}
	m, err := Merge(bundles, MergeOptions{AllowMixedCommits: true})
	if err != nil {
		t.Fatal(err)
	}
	wantAll(t, markdownOf(t, m),
		// The table of runs: raw msgs/s, relay-1 / raw and its factors,
		// relay-2 / raw, the latency runs' rates, the latency floors, the
		// claims' wait, watermill, CPU, RabbitMQ's busy cores and load.
		"| 2026-12-03T16:29:55Z | 6317f285ba64 | shared | 8575 | 0.82 | 0.87 x 0.94 | 0.85 | 3533, 1363; 16 producers | 13.41 | 1.08 | - | 6.22 | 0.59 / 0.77; 1.77 cores busy | 6.34 (7.69) | 0.48 | 1.00, 0.77 | 2.8 |",
		"| 2026-12-04T15:47:18Z | 5e276ff592f9 | isolated | 7493 | 0.99 | 0.92 x 1.08 | 0.95 | 3698, 594; 16 producers | 9.03 | 1.04 | 1.51 | 5.32 | 1.03 / 1.03; 1.30 cores busy | 7.05 (7.14) | 0.39 | 0.95, 0.93 | 1.7 |",
		// The goals over the runs, judged from each run's result.
		"| relay-1 / raw, msgs/s >= 0.85 | shared | 0 of 1 | 0.82 | raw's slower phase / its faster (raw publishing itself): 0.90 (below 0.85, raw itself missed the goal, in 0 of 1 runs); RabbitMQ's busy cores, relay-1 / raw: 0.87; its CPU per message, raw / relay-1: 0.94 |",
		"| relay-1 / raw, msgs/s >= 0.85 | isolated | 1 of 1 | 0.99 |",
		"| relay-2 / raw, msgs/s >= 0.95 | isolated | 0 of 1 | 0.95 | raw's slower phase / its faster (raw publishing itself): 0.89 (below 0.95, raw itself missed the goal, in 1 of 1 runs); raw over two connections / raw (a two-replica relay as fast as raw): 1.09 (below 0.95, out of reach of any two-replica relay, in 0 of 1 runs);",
		"| NOTIFY p99 / broker-alone p99, commit -> confirm <= 2 | isolated | 0 of 1 | 9.03 | inline p99 / broker p99 (the same commits, no relay): 1.04 (above 2, out of reach of any relay, in 0 of 1 runs); keyed lease p99 / broker p99",
		"| relay-1 / watermill, msgs/s >= 10 | shared | 0 of 1 | 6.34 | raw / watermill (a relay as fast as raw): 7.69 (below 10, out of reach of any relay, in 1 of 1 runs) |",
		"| CPU per message, relay + PostgreSQL / RabbitMQ <= 0.5 | shared | 1 of 1 | 0.48 | - |",
		"| CPU per message, relay + PostgreSQL / RabbitMQ <= 0.5 | isolated | 1 of 1 | 0.39 | - |",
		// Each layout's first run in full, from its own tables.
		"### Layout shared", "| relay-1 | 7066 | 14.15 | 0.82 | yes | 2.3 / 3.7 / 12.4 |",
		"### Layout isolated",
	)
}

// TestBenchResultsReadBackAsWritten reads the result of every benchmark
// bundle results/report.list names and writes it again: every figure,
// ratio and limit the run wrote at the top of its result comes back the
// same, the ratios and limits derived again from the figures and phases
// rather than read.
func TestBenchResultsReadBackAsWritten(t *testing.T) {
	list, err := os.Open(filepath.Join(resultsDir, "report.list"))
	if err != nil {
		t.Fatal(err)
	}
	defer list.Close()
	read := 0
	sc := bufio.NewScanner(list)
	for sc.Scan() {
		dir := strings.TrimSpace(sc.Text())
		if dir == "" || strings.HasPrefix(dir, "#") {
			continue
		}
		data, err := os.ReadFile(filepath.Join(resultsDir, dir, FileBench))
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		var file struct{ Result map[string]any }
		if err := json.Unmarshal(data, &file); err != nil {
			t.Fatalf("%s: %v", dir, err)
		}
		b, err := ReadBundle(filepath.Join(resultsDir, dir))
		if err != nil {
			t.Fatal(err)
		}
		again, err := json.Marshal(b.Bench.Result)
		if err != nil {
			t.Fatalf("%s: %v", dir, err)
		}
		var written map[string]any
		if err := json.Unmarshal(again, &written); err != nil {
			t.Fatal(err)
		}
		for k, v := range file.Result {
			switch v.(type) {
			case float64, bool, string:
				if written[k] != v {
					t.Errorf("%s: %s read %v, written again %v", dir, k, v, written[k])
				}
			}
		}
		read++
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if read < 2 {
		t.Errorf("read %d benchmark results, want every one the list names", read)
	}
}
