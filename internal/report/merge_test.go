package report

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outboxlab/outboxlab/checker"
	"github.com/outboxlab/outboxlab/history"
	"github.com/outboxlab/outboxlab/internal/bench/result"
	"github.com/outboxlab/outboxlab/internal/campaign"
	"github.com/outboxlab/outboxlab/internal/sim"
)

const testCampaign = "go run ./cmd/outboxlab run --scenario a --seeds 2 --seed 1"

// shardBundle writes a bundle holding shard k/3 of a chaos campaign (one
// run, with its history) and of a simulation, at commit, and reads it.
func shardBundle(t *testing.T, k int, commit string, runs ...ScenarioRun) Bundle {
	t.Helper()
	dir := t.TempDir()
	meta := Meta{Date: "2026-01-02T03:04:05Z", Commit: commit, Machine: Machine{Cores: 2, OS: "Debian", Go: "go1.26"}}
	shard := campaign.Shard{}
	if s, err := campaign.New(k, 3); err == nil {
		shard = s
	}
	for i := range runs {
		rel, err := WriteHistory(dir, "h.jsonl", []history.Op{{Index: 0, Process: "p", Type: history.Invoke, F: history.Commit}})
		if err != nil {
			t.Fatal(err)
		}
		runs[i].History = rel
	}
	sf := ScenarioFile{Meta: meta, Part: &Part{Shard: shard.String(), Campaign: testCampaign, Cells: len(runs)}, Runs: runs}
	if err := WriteFile(dir, FileScenarios, sf); err != nil {
		t.Fatal(err)
	}
	sum := sim.Summary{Seeds: 10, Failed: k - 1, Events: 100 * k, StepsPerSeed: float64(k), FirstFailureSeed: uint64(10*k + 5), HistorySHA256: "hash" + shard.String()}
	if err := WriteFile(dir, FileSim, SimFile{Meta: meta, First: uint64(10 * k), Summary: sum,
		Part: &Part{Shard: shard.String(), Campaign: "go run ./cmd/outboxlab sim --seeds 30 --seed 10", Cells: 10}}); err != nil {
		t.Fatal(err)
	}
	b, err := ReadBundle(dir)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestMergeJoinsShardsAndNamesTheMissingOne(t *testing.T) {
	b3 := shardBundle(t, 3, "abc", ScenarioRun{Scenario: "a", Seed: 2, Valid: true, Replay: "replay-a-2"})
	b1 := shardBundle(t, 1, "abc", ScenarioRun{Scenario: "a", Seed: 1, Valid: false, Problems: []string{"lost: 1 event"}, Replay: "replay-a-1"})
	b1.Scenarios.Unfinished = []campaign.Cell{{Scenario: "a", Seed: 9}}
	b1.Scenarios.Stopped = "interrupted by SIGINT"
	m, err := Merge([]Bundle{b3, b1}, MergeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Scenarios.Runs) != 2 || m.Scenarios.Runs[0].Seed != 1 || m.Scenarios.Runs[1].Seed != 2 {
		t.Fatalf("merged runs %+v, want seed 1 (shard 1/3) then seed 2 (shard 3/3)", m.Scenarios.Runs)
	}
	if s := m.Sim.Summary; s.Seeds != 20 || s.Failed != 2 || s.Events != 400 || s.FirstFailureSeed != 35 || s.StepsPerSeed != 2 {
		t.Errorf("merged simulation summary %+v", s)
	}
	var md bytes.Buffer
	if err := WriteMarkdown(&md, m); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"report --in " + b3.Dir + " --in " + b1.Dir + "`",
		"Shards 1/3, 3/3 of the campaign `" + testCampaign + "`. **Not in this report: shard 2/3**",
		"**1 cell did not finish** and has no verdict: `a/9`. The run stopped: shard 1/3: interrupted by SIGINT.",
		"| 10 (10..19) | 0 |", "| 10 (30..39) | 2 |", "| **20 in all** | 2 |", "`hash1/3`",
		// Two seeds of one scenario: a campaign, whose figure counts both
		// cells; the passing cell of the later seed leaves the detail.
		"| **all 2 cells** | | **1** | **1** | **0** | | |", "replay-a-1\n",
	} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("REPORT.md lacks %q:\n%s", want, md.String())
		}
	}
	// The page reads every history back from the bundle it is in.
	p, err := BundlePage(m)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Runs) != 2 || len(p.Runs[0].History) != 1 || len(p.Runs[1].History) != 1 {
		t.Errorf("page runs %+v", p.Runs)
	}
	if !strings.Contains(p.Intro, "Not in this report: shards 2/3.") || !strings.Contains(p.Intro, "a/9") {
		t.Errorf("page intro %q", p.Intro)
	}
}

func TestMergeRefusesMixedCommitsUnlessAllowed(t *testing.T) {
	a := shardBundle(t, 1, "aaa111", ScenarioRun{Scenario: "a", Seed: 1})
	b := shardBundle(t, 2, "bbb222", ScenarioRun{Scenario: "a", Seed: 2})
	_, err := Merge([]Bundle{a, b}, MergeOptions{})
	if !errors.Is(err, ErrMixedCommits) || !strings.Contains(err.Error(), "aaa111") || !strings.Contains(err.Error(), "bbb222") ||
		!strings.Contains(err.Error(), a.Dir) || !strings.Contains(err.Error(), b.Dir) {
		t.Errorf("mixed commits: %v; want ErrMixedCommits naming both commits and bundles", err)
	}
	if m, err := Merge([]Bundle{a, b}, MergeOptions{AllowMixedCommits: true}); err != nil || len(m.Scenarios.Runs) != 2 {
		t.Errorf("allowed: %v, %+v", err, m.Scenarios)
	}
}

func TestMergeRefusesWhatIsNotOneCampaign(t *testing.T) {
	a := shardBundle(t, 2, "c", ScenarioRun{Scenario: "a", Seed: 1})
	again := shardBundle(t, 2, "c", ScenarioRun{Scenario: "a", Seed: 1})
	other := shardBundle(t, 3, "c", ScenarioRun{Scenario: "a", Seed: 2})
	other.Scenarios.Part.Campaign = "go run ./cmd/outboxlab run --seeds 5"
	split := shardBundle(t, 3, "c")
	split.Scenarios.Part.Shard = "2/4"
	old := shardBundle(t, 3, "c")
	old.Scenarios.Part = nil
	for name, tc := range map[string]struct {
		b    Bundle
		want string
	}{
		"the same shard twice": {again, "both hold shard 2/3"},
		"another campaign":     {other, "is of the campaign"},
		"another split":        {split, "must split it the same way"},
		"no part":              {old, "does not say which campaign"},
	} {
		if _, err := Merge([]Bundle{a, tc.b}, MergeOptions{}); !errors.Is(err, ErrNotOneCampaign) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want ErrNotOneCampaign saying %q", name, err, tc.want)
		}
	}
	// The demo is not sharded: two bundles may not both hold one.
	d1, d2 := a, other
	d1.Demo, d2.Demo, d2.Scenarios, d2.Sim = &ScenarioFile{Meta: a.Scenarios.Meta}, &ScenarioFile{Meta: a.Scenarios.Meta}, nil, nil
	if _, err := Merge([]Bundle{d1, d2}, MergeOptions{}); !errors.Is(err, ErrNotOneCampaign) || !strings.Contains(err.Error(), FileDemo) {
		t.Errorf("two demos: %v", err)
	}
}

func TestWriteAtomicLeavesNoTemporaryFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "x.json")
	for _, body := range []string{"first", "second"} {
		if err := WriteAtomic(path, []byte(body)); err != nil {
			t.Fatal(err)
		}
		if got, _ := os.ReadFile(path); string(got) != body {
			t.Errorf("read %q, want %q", got, body)
		}
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("directory holds %v, want x.json alone", entries)
	}
	if err := WriteAtomic(filepath.Join(dir, "missing", "y"), nil); err == nil {
		t.Error("writing into a missing directory succeeded")
	}
}

// TestMergeKeepsOtherRelaysApart: a campaign against another relay is not
// a shard of ours; it gets its own table, per scenario, with the checkers
// that failed it and their first seed.
func TestMergeKeepsOtherRelaysApart(t *testing.T) {
	ours := shardBundle(t, 1, "abc", ScenarioRun{Scenario: "a", Relay: "ours", Seed: 1, Valid: true, Replay: "replay-ours"})
	other := shardBundle(t, 1, "abc",
		ScenarioRun{Scenario: "a", Relay: "cmd:./seqrelay", Seed: 1, Valid: true, Unchecked: []string{"retention: no sweep records"}},
		ScenarioRun{Scenario: "a", Relay: "cmd:./seqrelay", Seed: 2, Valid: false, Problems: []string{"lost: 1"},
			Checkers: []CheckerVerdict{{Name: "lost", Valid: false}, {Name: "phantom", Valid: true}}, Replay: "replay-seq-2"},
		ScenarioRun{Scenario: "b", Relay: "cmd:./seqrelay", Seed: 1, Inconclusive: []string{"no rows held"},
			Unchecked: []string{"retention: no sweep records", "fencing: judged on the 3 rows relay-a held when paused"}})
	other.Scenarios.Part.Campaign = "go run ./cmd/outboxlab run --relay cmd:./seqrelay --seeds 2"
	other.Sim = nil
	m, err := Merge([]Bundle{other, ours}, MergeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if relayOf(m.Scenarios) != "ours" || len(m.Scenarios.Runs) != 1 {
		t.Fatalf("main scenarios %+v, want ours alone", m.Scenarios)
	}
	if len(m.Relays) != 1 || len(m.Relays[0].Runs) != 3 {
		t.Fatalf("other relays %+v, want the seqrelay campaign", m.Relays)
	}
	var md bytes.Buffer
	if err := WriteMarkdown(&md, m); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"## Other relays under the catalogue", "### `cmd:./seqrelay`",
		"| a | 1..2 | 1 | 1 | 0 | lost (2) | `replay-seq-2` |",
		"| b | 1 | 0 | 0 | 1 | - | - |",
		"without records of its own:\n\n- retention: no sweep records\n- `b` (seed 1): fencing: judged on the 3 rows relay-a held when paused\n",
	} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("REPORT.md lacks %q:\n%s", want, md.String())
		}
	}
}

// TestMergeKeepsTheSQLTierApart: the SQL-faithful tier's batch is a
// campaign of its own, rendered in its own section beside the fakes'.
func TestMergeKeepsTheSQLTierApart(t *testing.T) {
	fakes := shardBundle(t, 1, "abc")
	dir := t.TempDir()
	meta := Meta{Date: "2026-01-02T03:04:05Z", Commit: "abc", Machine: Machine{Cores: 2, OS: "Debian", Go: "go1.26"}}
	sum := sim.Summary{Seeds: 200, SeedsPerSec: 4.8, HistorySHA256: "sqlhash"}
	if err := WriteFile(dir, FileSim, SimFile{Meta: meta, First: 1, Summary: sum, Tier: SimTierSQL, Replay: "go run ./cmd/outboxlab sim --sql --seeds 200 --seed 1",
		Part: &Part{Shard: "1/1", Campaign: "go run ./cmd/outboxlab sim --sql --seeds 200 --seed 1", Cells: 200}}); err != nil {
		t.Fatal(err)
	}
	sqlb, err := ReadBundle(dir)
	if err != nil {
		t.Fatal(err)
	}
	m, err := Merge([]Bundle{fakes, sqlb}, MergeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if m.Sim == nil || m.Sim.Tier != "" || m.SimSQL == nil || m.SimSQL.Summary.Seeds != 200 {
		t.Fatalf("merged simulation %+v, SQL tier %+v", m.Sim, m.SimSQL)
	}
	var md bytes.Buffer
	if err := WriteMarkdown(&md, m); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"## Simulation\n", "## SQL-faithful simulation\n", "`sqlhash`", "| 4.8 |"} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("REPORT.md lacks %q:\n%s", want, md.String())
		}
	}
}

// TestMergeKeepsClusterCampaignsApart: the broker cluster campaigns, one
// per queue type, merge beside ours on one node and render in their own
// section with the queue type and the confirm stall; the one-node table
// does not list them.
func TestMergeKeepsClusterCampaignsApart(t *testing.T) {
	ours := shardBundle(t, 1, "abc", ScenarioRun{Scenario: "a", Relay: "ours", Seed: 1, Valid: true, Replay: "replay-ours"})
	quorum := shardBundle(t, 1, "abc", ScenarioRun{Scenario: "cluster-leader-kill", Relay: "ours", Seed: 1, Queue: "quorum", Valid: true,
		ConfirmStall: 2500 * time.Millisecond, Replay: "replay-quorum"})
	quorum.Scenarios.Part.Campaign = "go run ./cmd/outboxlab run --scenario cluster-leader-kill --seed 1"
	classic := shardBundle(t, 1, "abc", ScenarioRun{Scenario: "cluster-leader-kill", Relay: "ours", Seed: 1, Queue: "classic",
		Counts: checker.Counts{Committed: 10, Delivered: 7, Lost: 3, Parked: 3}, Problems: []string{"lost: 3 offending"}, Replay: "replay-classic"})
	classic.Scenarios.Part.Campaign = "go run ./cmd/outboxlab run --scenario cluster-leader-kill --seed 1 --queue classic"
	quorum.Sim, classic.Sim = nil, nil
	m, err := Merge([]Bundle{classic, ours, quorum}, MergeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if relayOf(m.Scenarios) != "ours" || len(m.Scenarios.Runs) != 1 || len(m.Relays) != 0 || len(m.Cluster) != 2 {
		t.Fatalf("merged: scenarios %+v, relays %d, cluster %d; want ours on one node, no other relay, two cluster campaigns", m.Scenarios, len(m.Relays), len(m.Cluster))
	}
	out := markdownOf(t, m)
	wantAll(t, out,
		"## Broker cluster: three RabbitMQ nodes",
		"| cluster-leader-kill | quorum | ours | 1 | PASS |",
		"| 2.5s |",
		"| cluster-leader-kill | classic | ours | 1 | **FAIL** |",
		"`cluster-leader-kill` on classic queues (seed 1) failed:\n- lost: 3 offending",
	)
	one := out[strings.Index(out, "## Chaos scenarios"):strings.Index(out, "## Broker cluster")]
	if strings.Contains(one, "cluster-leader-kill") {
		t.Errorf("the one-node table lists a cluster run:\n%s", one)
	}
}

func TestArchiveKeepsTheFiguresAndTheEvidenceOfFailures(t *testing.T) {
	b := shardBundle(t, 1, "abc",
		ScenarioRun{Scenario: "a", Seed: 1, Valid: true, Replay: "replay-a-1"},
		ScenarioRun{Scenario: "a", Seed: 2, Valid: false, Problems: []string{"lost: 1 event"}, Replay: "replay-a-2"})
	b.Scenarios.HTML = "run.html"
	dir := filepath.Join(t.TempDir(), "archive")
	if err := b.Archive(dir); err != nil {
		t.Fatal(err)
	}
	a, err := ReadBundle(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Validate(); err != nil {
		t.Fatal(err)
	}
	runs := a.Scenarios.Runs
	if len(runs) != 2 || runs[0].History != "" || runs[1].History == "" || a.Scenarios.HTML != "" {
		t.Fatalf("archived runs %+v, html %q: want the passing run's history and the page left out, the failing one's kept", runs, a.Scenarios.HTML)
	}
	if h, err := ReadHistory(dir, runs[1].History); err != nil || len(h) != 1 {
		t.Errorf("the failing run's history in the archive: %v, %v", h, err)
	}
	if a.Sim == nil || a.Sim.Summary.HistorySHA256 != b.Sim.Summary.HistorySHA256 || a.Sim.Summary.Seeds != b.Sim.Summary.Seeds {
		t.Errorf("archived simulation %+v, want %+v", a.Sim, b.Sim)
	}
	var before, after bytes.Buffer
	b.Dirs, a.Dirs = []string{"x"}, []string{"x"}
	b.Scenarios.HTML = ""
	if err := WriteMarkdown(&before, b); err != nil {
		t.Fatal(err)
	}
	if err := WriteMarkdown(&after, a); err != nil {
		t.Fatal(err)
	}
	if before.String() != after.String() {
		t.Errorf("REPORT.md from the archive differs:\n%s\nfrom the bundle:\n%s", after.String(), before.String())
	}
	if _, err := BundlePage(a); err != nil {
		t.Errorf("the page of an archive: %v", err)
	}
}

// TestFindingsFollowTheirRuns: a bundle's findings.md is printed under
// its relay's table, once however many shards carry it, and an archive
// keeps it.
func TestFindingsFollowTheirRuns(t *testing.T) {
	ours := shardBundle(t, 1, "abc", ScenarioRun{Scenario: "a", Relay: "ours", Seed: 1, Valid: true})
	var theirs []Bundle
	for k := 1; k <= 2; k++ {
		b := shardBundle(t, k, "abc", ScenarioRun{Scenario: "a", Relay: "watermill", Seed: uint64(k), Valid: k == 1, Problems: []string{"lost: 1"}[:k-1]})
		b.Sim = nil
		for _, f := range []string{FileSim} {
			_ = os.Remove(filepath.Join(b.Dir, f))
		}
		if err := os.WriteFile(filepath.Join(b.Dir, FileFindings), []byte("Seed 2 lost one event: the forwarder acked it before the confirm.\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		var err error
		if b, err = ReadBundle(b.Dir); err != nil {
			t.Fatal(err)
		}
		theirs = append(theirs, b)
	}
	ours.Sim = nil
	m, err := Merge([]Bundle{ours, theirs[0], theirs[1]}, MergeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var md bytes.Buffer
	if err := WriteMarkdown(&md, m); err != nil {
		t.Fatal(err)
	}
	out := md.String()
	if n := strings.Count(out, "the forwarder acked it before the confirm"); n != 1 {
		t.Errorf("the findings appear %d times, want once:\n%s", n, out)
	}
	if i, j := strings.Index(out, "### `watermill`"), strings.Index(out, "#### Findings"); i < 0 || j < i {
		t.Errorf("the findings are not under watermill's table:\n%s", out)
	}
	dir := filepath.Join(t.TempDir(), "archive")
	if err := theirs[0].Archive(dir); err != nil {
		t.Fatal(err)
	}
	a, err := ReadBundle(dir)
	if err != nil {
		t.Fatal(err)
	}
	if a.Scenarios.Findings != theirs[0].Scenarios.Findings {
		t.Errorf("archived findings %q", a.Scenarios.Findings)
	}
}

// TestMergeKeepsEveryBenchRun merges three benchmark runs, two layouts:
// the report compares them all in one table, in the order given, and
// shows the first run of each layout in full.
func TestMergeKeepsEveryBenchRun(t *testing.T) {
	run := func(date, layout string, ratio float64) Bundle {
		// RabbitMQ: 0.95 cores busy in raw, 0.8 of that in relay-1, and
		// 0.89 of relay-1's CPU per message in raw.
		r := result.Result{
			Throughput: result.Throughput{RawMsgsPerSec: 9000, RelayMsgsPerSec: ratio * 9000, Relay2MsgsPerSec: 8100},
			LatencySummary: result.LatencySummary{LatencyBrokerP99Ms: 1, LatencyInlineP99Ms: 1.8, LatencyClaimCallP99Ms: 3.1, LatencyKeyedP99Ms: 2.4,
				NotifyRelayStatementMeanMs: 0.9, NotifyRelayStatementCPUWaitMs: 0.73, NotifyBusyCores: 1.62},
			Config:  result.RunConfig{Layout: layout, LatencyRate: 3500, Producers: 4},
			Latency: []result.Latency{{Mode: "poll", Rate: 3400}, {Mode: "notify", Rate: 1549.4}},
			Phases: []result.Phase{
				{Name: "raw", Events: 9000, MsgsPerSec: 9000, LoadAverage: 1.5, CPU: result.CPU{RabbitMQSeconds: 0.89}, Resources: &result.Resources{RabbitMQ: 0.95, Idle: 0.9}},
				{Name: "relay-1", Events: 9000, MsgsPerSec: 6400, LoadAverage: 2.5, CPU: result.CPU{RabbitMQSeconds: 1}, Resources: &result.Resources{RabbitMQ: 0.8 * 0.95, Idle: 0.4}},
			},
		}
		return Bundle{Dir: "b-" + date, Bench: &BenchFile{Meta: Meta{Date: date, Commit: "c"}, Result: &r,
			Tables: []Table{{Title: "Throughput in " + date, Columns: []string{"contender"}, Rows: [][]string{{"raw"}}}}}}
	}
	m, err := Merge([]Bundle{run("d1", "shared", 0.71), run("d2", "shared", 0.72), run("d3", "isolated", 0.93)}, MergeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Benches) != 3 || m.Bench != m.Benches[0] {
		t.Fatalf("merged %d bench runs, Bench %v", len(m.Benches), m.Bench)
	}
	var out bytes.Buffer
	if err := WriteMarkdown(&out, m); err != nil {
		t.Fatal(err)
	}
	md := out.String()
	for _, want := range []string{
		"| d1 | c | shared | 9000 | 0.71 | 0.80 x 0.89 | 0.90 | 3500, 1549; 4 producers | - | 1.80 | 2.40 | 3.10 | 0.73 / 0.90; 1.62 cores busy | - | - | 0.95, 0.90 | 2.5 |",
		"| d2 | c | shared | 9000 | 0.72 |",
		"| d3 | c | isolated | 9000 | 0.93 |",
		"### Layout shared\n\n_Run on d1", "Throughput in d1", "### Layout isolated\n\nThroughput in d3",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("the report lacks %q:\n%s", want, md)
		}
	}
	if strings.Contains(md, "Throughput in d2") {
		t.Error("the report shows a second run of one layout in full")
	}
	if strings.Index(md, "| d1 | c |") > strings.Index(md, "| d2 | c |") || strings.Index(md, "| d2 | c |") > strings.Index(md, "| d3 | c |") {
		t.Error("the runs are not in the order given")
	}
}

// TestConsumersRunsAreKeptApart: a campaign of the consumers' scenario
// against our relay is not merged with the relay's catalogue (they are
// two campaigns of the same relay); the report shows it in a section of
// its own, with the notes its runs give.
func TestConsumersRunsAreKeptApart(t *testing.T) {
	meta := Meta{Date: "2026-01-02T03:04:05Z", Commit: "abc", Machine: Machine{Cores: 2, OS: "Debian", Go: "go1.26"}}
	file := func(campaign string, runs ...ScenarioRun) Bundle {
		return Bundle{Dir: t.TempDir(), Scenarios: &ScenarioFile{Meta: meta, Part: &Part{Shard: "1/1", Campaign: campaign, Cells: len(runs)}, Runs: runs}}
	}
	relay := file("go run ./cmd/outboxlab run --scenario baseline", ScenarioRun{Scenario: "baseline", Relay: "ours", Seed: 1, Valid: true})
	consumers := file("go run ./cmd/outboxlab run --scenario concurrent-duplicates --seeds 2",
		ScenarioRun{Scenario: "concurrent-duplicates", Relay: "ours", Subject: "consumers", Seed: 1, Valid: true,
			Unchecked: []string{"concurrent-duplicates: 4 event(s) applied by two consumers at the same moment (e1)"}},
		ScenarioRun{Scenario: "concurrent-duplicates", Relay: "ours", Subject: "consumers", Seed: 2, Valid: true,
			Unchecked: []string{"concurrent-duplicates: 3 event(s) applied by two consumers at the same moment (e2)"}})
	consumers.Scenarios.Findings = "Every overlap was absorbed by the inbox."
	b, err := Merge([]Bundle{relay, consumers}, MergeOptions{})
	if err != nil {
		t.Fatalf("merging a relay's catalogue and its consumers' campaign: %v", err)
	}
	if len(b.Consumers) != 1 || len(b.Consumers[0].Runs) != 2 || b.Scenarios == nil || len(b.Scenarios.Runs) != 1 {
		t.Fatalf("consumers %v, scenarios %v: want the two apart", b.Consumers, b.Scenarios)
	}
	var md bytes.Buffer
	if err := WriteMarkdown(&md, b); err != nil {
		t.Fatal(err)
	}
	out := md.String()
	sec := strings.Index(out, "## The consumers under test")
	if sec < 0 {
		t.Fatalf("no consumers' section:\n%s", out)
	}
	if !strings.Contains(out[sec:], "| concurrent-duplicates | 1..2 | 2 | 0 | 0 |") || !strings.Contains(out[sec:], "4 event(s) applied by two consumers at the same moment") {
		t.Errorf("the consumers' section does not show the campaign and its notes:\n%s", out[sec:])
	}
	if !strings.Contains(out[sec:], "#### Findings") || !strings.Contains(out[sec:], "Every overlap was absorbed by the inbox.") {
		t.Errorf("the consumers' section does not show the campaign's findings:\n%s", out[sec:])
	}
	if strings.Contains(out[:sec], "concurrent-duplicates") {
		t.Errorf("the consumers' runs are in the relay's tables:\n%s", out[:sec])
	}
}
