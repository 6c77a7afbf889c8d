package report

import (
	"bytes"
	"strings"
	"testing"

	"github.com/outboxlab/outboxlab/history"
	"github.com/outboxlab/outboxlab/internal/campaign"
)

// naWhy is why crash-between-publish-and-mark does not run against a
// relay that declares no failpoints, as scenarios says it.
const naWhy = "crash-between-publish-and-mark needs a relay that honours OUTBOX_FAILPOINTS (failpoints), and norelay does not declare it"

// naBundle writes and reads back a bundle of `run --out`: baseline and
// pipeline ran, crash-between-publish-and-mark, between them in the
// campaign, was not applicable to the relay.
func naBundle(t *testing.T, seeds int, why string) Bundle {
	t.Helper()
	dir := t.TempDir()
	meta := Meta{Date: "2026-01-02T03:04:05Z", Commit: "abc", Machine: Machine{Cores: 2, OS: "Debian", Go: "go1.26"}}
	names := []string{"baseline", "crash-between-publish-and-mark", "pipeline"}
	cells, err := campaign.Cells(names, 1, seeds)
	if err != nil {
		t.Fatal(err)
	}
	cmd := "go run ./cmd/outboxlab run --scenario baseline --scenario crash-between-publish-and-mark --scenario pipeline --seeds " +
		map[int]string{1: "1", 2: "2"}[seeds] + " --seed 1 --relay image:norelay"
	sf := ScenarioFile{Meta: meta, Part: &Part{Shard: "1/1", Campaign: cmd, Cells: len(cells)}}
	for _, c := range cells {
		if c.Scenario == "crash-between-publish-and-mark" {
			sf.NotApplicable = append(sf.NotApplicable, SkippedCell{Cell: c, Relay: "norelay", Why: why})
			continue
		}
		rel, err := WriteHistory(dir, c.Scenario+".jsonl", []history.Op{{Index: 0, Process: "p", Type: history.Invoke, F: history.Commit}})
		if err != nil {
			t.Fatal(err)
		}
		sf.Runs = append(sf.Runs, ScenarioRun{Scenario: c.Scenario, Relay: "norelay", Variant: "outbox", Seed: c.Seed, Valid: true,
			Replay: "replay-" + c.String(), History: rel})
	}
	if err := WriteFile(dir, FileScenarios, sf); err != nil {
		t.Fatal(err)
	}
	b, err := ReadBundle(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Validate(); err != nil {
		t.Fatal(err)
	}
	return b
}

// TestNotApplicableCellHasItsRowInTheReport: a bundle whose campaign
// holds a scenario that was not applicable to the relay renders it as a
// row of its own, N/A with its reason, where the campaign ran it: in
// REPORT.md's table of the runs and in the HTML page's table and
// sections. No paragraph apart stands for it, and no count of it is a
// zero.
func TestNotApplicableCellHasItsRowInTheReport(t *testing.T) {
	b := naBundle(t, 1, naWhy)
	if got := b.Scenarios.NotApplicable; len(got) != 1 || got[0].Relay != "norelay" || got[0].Reason() != naWhy {
		t.Fatalf("not_applicable read back as %+v", got)
	}
	var md bytes.Buffer
	if err := WriteMarkdown(&md, b); err != nil {
		t.Fatal(err)
	}
	row := "| crash-between-publish-and-mark | norelay | outbox | 1 | N/A | not applicable: " + naWhy + " | - | - | - | - | - | - | - | - | - |\n"
	out := md.String()
	base, na, pipe := strings.Index(out, "| baseline | norelay |"), strings.Index(out, row), strings.Index(out, "| pipeline | norelay |")
	if na < 0 || base < 0 || pipe < 0 || !(base < na && na < pipe) {
		t.Errorf("REPORT.md lacks the N/A row %q between baseline's and pipeline's:\n%s", row, out)
	}
	if strings.Contains(out, "Not applicable: `") {
		t.Errorf("REPORT.md still lists the N/A cell apart from its table:\n%s", out)
	}

	page, err := BundlePage(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Runs) != 3 || page.Runs[1].Verdict() != VerdictNotApplicable || page.Runs[1].NotApplicable != naWhy {
		t.Fatalf("the page's runs %+v, want the N/A one second", page.Runs)
	}
	var html bytes.Buffer
	if err := WriteHTML(&html, page); err != nil {
		t.Fatal(err)
	}
	h := html.String()
	for _, want := range []string{
		`<span class="badge NA">N/A</span>`, ".badge.NA {",
		"<td>not applicable, not run: " + naWhy + "</td>",
		`<a href="#run-2">crash-between-publish-and-mark (relay norelay), seed 1</a>`,
		"<p class=\"note\">Not applicable: " + naWhy + ". The scenario did not run against this relay, so nothing was judged.</p>",
	} {
		if !strings.Contains(h, want) {
			t.Errorf("the HTML page lacks %q", want)
		}
	}
	if i := strings.Index(h, `id="run-2"`); i < 0 || strings.Contains(h[i:strings.Index(h[i:], "</section>")+i], "Timeline") {
		t.Errorf("the N/A run's section is missing or draws a timeline of nothing")
	}
}

// TestNotApplicableCellHasItsRowOverSeeds: against another relay than
// ours, over several seeds, the campaign's table per scenario has the N/A
// scenario's row with its seeds and reason, no counts, and the reason of
// an older file (which repeats "scenario not applicable: ") without the
// repetition.
func TestNotApplicableCellHasItsRowOverSeeds(t *testing.T) {
	ours := naBundle(t, 1, naWhy)
	for i := range ours.Scenarios.Runs {
		ours.Scenarios.Runs[i].Relay = "ours"
	}
	ours.Scenarios.NotApplicable = nil
	ours.Scenarios.Part.Cells = len(ours.Scenarios.Runs)
	ours.Scenarios.Part.Campaign = "go run ./cmd/outboxlab run --scenario baseline --scenario pipeline --seeds 1 --seed 1"
	other := naBundle(t, 2, "scenario not applicable: "+naWhy)
	m, err := Merge([]Bundle{ours, other}, MergeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Relays) != 1 || len(m.Relays[0].NotApplicable) != 2 {
		t.Fatalf("other relays %+v, want norelay's campaign with its 2 N/A cells", m.Relays)
	}
	var md bytes.Buffer
	if err := WriteMarkdown(&md, m); err != nil {
		t.Fatal(err)
	}
	out := md.String()
	row := "| crash-between-publish-and-mark | 1..2 | - | - | - | **N/A**: " + naWhy + " | - | - | - | - | - | - | - |\n"
	base, na, pipe := strings.Index(out, "| baseline | 1..2 |"), strings.Index(out, row), strings.Index(out, "| pipeline | 1..2 |")
	if na < 0 || base < 0 || pipe < 0 || !(base < na && na < pipe) {
		t.Errorf("REPORT.md lacks the N/A row %q between baseline's and pipeline's:\n%s", row, out)
	}
	if strings.Contains(out, "scenario not applicable: ") {
		t.Errorf("REPORT.md repeats \"scenario not applicable: \":\n%s", out)
	}
}

// TestAFileOfNotApplicableCellsAloneKeepsItsRelay: a shard whose cells
// were all not applicable merges with its relay's other shards, not with
// ours, by the relay its cells name.
func TestAFileOfNotApplicableCellsAloneKeepsItsRelay(t *testing.T) {
	f := &ScenarioFile{NotApplicable: []SkippedCell{{Cell: campaign.Cell{Scenario: "x", Seed: 1}, Relay: "norelay", Why: "why"}}}
	if got := relayOf(f); got != "norelay" {
		t.Errorf("relayOf = %q, want norelay", got)
	}
	rows := f.Rows()
	if len(rows) != 1 || rows[0].Verdict() != VerdictNotApplicable || rows[0].Relay != "norelay" || rows[0].NotApplicable != "why" {
		t.Errorf("rows %+v", rows)
	}
}
