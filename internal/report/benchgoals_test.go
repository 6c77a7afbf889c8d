package report

import (
	"bytes"
	"strings"
	"testing"

	"github.com/outboxlab/outboxlab/internal/bench/result"
)

// TestBenchGoalsOverRuns merges three benchmark runs, two layouts, and
// checks the goals' table: per goal and layout, the runs that met it, the
// spread of its figure, raw's slower phase over its faster, the factors of each drain's ratio to raw read
// from its phases, and the runs in which no relay could meet a goal.
func TestBenchGoalsOverRuns(t *testing.T) {
	run := func(date, layout string, ratio, watermill, inline, keyed float64) Bundle {
		busy := func(rabbitmq float64) *result.Resources { return &result.Resources{RabbitMQ: rabbitmq} }
		r := result.Result{
			Throughput: result.Throughput{RawMsgsPerSec: 9000, RelayMsgsPerSec: ratio * 9000, Relay2MsgsPerSec: 7200, WatermillMsgsPerSec: watermill},
			LatencySummary: result.LatencySummary{LatencyNotifyP99Ms: 3, LatencyBrokerP99Ms: 1, LatencyClaimCallP99Ms: 2.2, LatencyInlineP99Ms: inline,
				LatencyKeyedP99Ms: keyed, NotifyRelayStatementMeanMs: 0.8, NotifyRelayStatementCPUWaitMs: 0.6},
			CPUCost: result.CPUCost{CPUMicrosPerMsgRelayPlusDB: 45, CPUMicrosPerMsgBroker: 100},
			Config:  result.RunConfig{Layout: layout},
			Phases: []result.Phase{
				{Name: "raw", Events: 9000, MsgsPerSec: 9000, CPU: result.CPU{RabbitMQSeconds: 1}, Resources: busy(1)},
				{Name: "raw-after", Events: 9000, MsgsPerSec: 8100, CPU: result.CPU{RabbitMQSeconds: 1.11}, Resources: busy(1)},
				{Name: "relay-2", Events: 9000, MsgsPerSec: 7200, CPU: result.CPU{RabbitMQSeconds: 1.125}, Resources: busy(0.9)},
				{Name: "raw-2", Events: 9000, MsgsPerSec: 8370},
			},
		}
		return Bundle{Dir: "b-" + date, Bench: &BenchFile{Meta: Meta{Date: date, Commit: "c"}, Result: &r}}
	}
	// The keyed lease bounds the NOTIFY goal in the first shared run
	// (above 2, the relay's p99 not below it) and not in the second,
	// where the relay beat it: the lease queued, no floor there.
	m, err := Merge([]Bundle{run("d1", "shared", 0.71, 1200, 2.5, 2.4), run("d2", "shared", 0.9, 800, 1.5, 4), run("d3", "isolated", 0.93, 1000, 1, 4)}, MergeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	md := markdownOf(t, m)
	wantAll(t, md,
		"| relay-1 / raw, msgs/s >= 0.85 | shared | 1 of 2 | 0.71 / 0.80 / 0.90 | raw's slower phase / its faster (raw publishing itself): 0.90 / 0.90 / 0.90 (below 0.85, raw itself missed the goal, in 0 of 2 runs) |",
		"| relay-1 / raw, msgs/s >= 0.85 | isolated | 1 of 1 | 0.93 | raw's slower phase / its faster (raw publishing itself): 0.90 (below 0.85, raw itself missed the goal, in 0 of 1 runs) |",
		"| relay-2 / raw, msgs/s >= 0.95 | shared | 0 of 2 | 0.80 / 0.80 / 0.80 | raw's slower phase / its faster (raw publishing itself): 0.90 / 0.90 / 0.90 (below 0.95, raw itself missed the goal, in 2 of 2 runs); raw over two connections / raw (a two-replica relay as fast as raw): 0.93 / 0.93 / 0.93 (below 0.95, out of reach of any two-replica relay, in 2 of 2 runs); RabbitMQ's busy cores, relay-2 / raw: 0.90 / 0.90 / 0.90; its CPU per message, raw / relay-2: 0.89 / 0.89 / 0.89 |",
		"| NOTIFY p99 / broker-alone p99, commit -> confirm <= 2 | shared | 0 of 2 | 3.00 / 3.00 / 3.00 | inline p99 / broker p99 (the same commits, no relay): 1.50 / 2.00 / 2.50 (above 2, out of reach of any relay, in 1 of 2 runs); keyed lease p99 / broker p99 (the same commits, each row leased by its key after its NOTIFY, then published: the three hops and nothing else): 2.40 / 3.20 / 4.00 (above 2, the relay's p99 not below it, out of reach of a relay that leases after the NOTIFY, in 1 of 2 runs); NOTIFY p99 / keyed lease p99 (how far the relay is from that floor): 0.75 / 1.00 / 1.25; claim statement p99 / broker p99 (every event's commit -> confirm holds the claim that leased its row): 2.20 / 2.20 / 2.20 (above 2, beyond a relay whose claims take as long, in 2 of 2 runs); share of the notify run's claims and marks spent waiting for a core: 0.75 / 0.75 / 0.75 |",
		"| relay-1 / watermill, msgs/s >= 10 | shared | 1 of 2 | 5.33 / 7.72 / 10.12 | raw / watermill (a relay as fast as raw): 7.50 / 9.38 / 11.25 (below 10, out of reach of any relay, in 1 of 2 runs) |",
		"| CPU per message, relay + PostgreSQL / RabbitMQ <= 0.5 | isolated | 1 of 1 | 0.45 | - |",
		"| 5.33 (7.50) |",
	)
	if strings.Index(md, "| relay-1 / raw, msgs/s >= 0.85 | shared") > strings.Index(md, "| relay-1 / raw, msgs/s >= 0.85 | isolated") {
		t.Error("the layouts are not in the order their runs came")
	}
}

// markdownOf renders b as REPORT.md.
func markdownOf(t *testing.T, b Bundle) string {
	t.Helper()
	var md bytes.Buffer
	if err := WriteMarkdown(&md, b); err != nil {
		t.Fatal(err)
	}
	return md.String()
}

// wantAll fails t for each of wants that the report out lacks.
func wantAll(t *testing.T, out string, wants ...string) {
	t.Helper()
	for _, want := range wants {
		if !strings.Contains(out, want) {
			t.Errorf("REPORT.md lacks %q:\n%s", want, out)
		}
	}
}

// TestBenchGoalsAtTheNewestCommit follows the goals' table over every run
// with the same table over the runs at the newest run's commit, so that
// runs of replaced code neither hide nor flatter the relay as it stands;
// runs of one commit get one table.
func TestBenchGoalsAtTheNewestCommit(t *testing.T) {
	run := func(date, commit string, ratio float64) Bundle {
		r := result.Result{Throughput: result.Throughput{RawMsgsPerSec: 9000, RelayMsgsPerSec: ratio * 9000}, Config: result.RunConfig{Layout: "shared"}}
		return Bundle{Dir: "b-" + date, Bench: &BenchFile{Meta: Meta{Date: date, Commit: commit}, Result: &r}}
	}
	m, err := Merge([]Bundle{run("2026-12-01T10:00:00Z", "old", 0.8), run("2026-12-03T10:00:00Z", "new", 0.9),
		run("2026-12-02T10:00:00Z", "old", 0.7), run("2026-12-03T11:00:00Z", "new", 0.88)}, MergeOptions{AllowMixedCommits: true})
	if err != nil {
		t.Fatal(err)
	}
	md := markdownOf(t, m)
	all := strings.Index(md, "The goals over every run above")
	newest := strings.Index(md, "The same goals over the 2 runs at commit new, the newest run's")
	if all < 0 || newest < all {
		t.Fatalf("want the table over every run, then the one at the newest commit:\n%s", md)
	}
	wantAll(t, md[all:newest], "| relay-1 / raw, msgs/s >= 0.85 | shared | 2 of 4 | 0.70 / 0.84 / 0.90 |")
	wantAll(t, md[newest:], "| relay-1 / raw, msgs/s >= 0.85 | shared | 2 of 2 | 0.88 / 0.89 / 0.90 |")

	one, err := Merge([]Bundle{run("2026-12-03T10:00:00Z", "new", 0.9), run("2026-12-03T11:00:00Z", "new", 0.88)}, MergeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if md := markdownOf(t, one); strings.Contains(md, "The same goals over") {
		t.Errorf("runs of one commit got a second goals table:\n%s", md)
	}
}
