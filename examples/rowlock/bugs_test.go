package main

import (
	"os"
	"strings"
	"testing"
)

// catalogueScenarios are the names of the harness's catalogue
// (docs/scenarios.md), written out: the relay imports nothing of the
// harness. notApplicable are those that need what the relay does not
// declare: none, since the harness acts on the row locks it holds as on
// leases, and kills it at an observed publish without a failpoint.
var (
	catalogueScenarios = map[string]bool{
		"baseline": true, "broker-down": true, "broker-killed": true, "db-down": true,
		"crash-between-publish-and-mark": true, "lease-expiry": true, "stall-under-load": true, "clock-skew": true,
		"poison": true, "confirm-lost": true, "slow-network": true, "commit-order-inversion": true,
		"rolling-restart": true, "producer-crash": true, "pipeline": true,
	}
	notApplicable = map[string]bool{}
)

func TestBugModeTable(t *testing.T) {
	if len(bugModes) < 3 {
		t.Errorf("%d bug modes, want at least three", len(bugModes))
	}
	names, promises := map[bug]bool{}, map[string]bug{}
	for _, m := range bugModes {
		switch {
		case m.name == bugNone:
			t.Errorf("a bug mode without a name: %+v", m)
		case names[m.name]:
			t.Errorf("%s is listed twice", m.name)
		case m.does == "" || m.breaks == "" || m.checker == "":
			t.Errorf("%s does not say what it does, breaks and what catches it: %+v", m.name, m)
		case !strings.HasPrefix(m.breaks, "§2.") && !strings.HasPrefix(m.breaks, "§3.3.2 "):
			t.Errorf("%s: %q does not number its promise as docs/contract.md does (§2, or §3.3.2 for a budget)", m.name, m.breaks)
		case !catalogueScenarios[m.scenario]:
			t.Errorf("%s: %q is not a scenario of the catalogue", m.name, m.scenario)
		case notApplicable[m.scenario]:
			t.Errorf("%s: %s is not applicable to a relay that declares parks,locking=rowlock", m.name, m.scenario)
		}
		if other, dup := promises[m.breaks]; dup {
			t.Errorf("%s and %s break the same promise %q", other, m.name, m.breaks)
		}
		names[m.name], promises[m.breaks] = true, m.name
	}
}

func TestParseBug(t *testing.T) {
	if b, err := parseBug(""); err != nil || b != bugNone || b.String() != "none" {
		t.Errorf(`parseBug("") = %q, %v`, b, err)
	}
	for _, m := range bugModes {
		if b, err := parseBug(string(m.name)); err != nil || b != m.name || b.String() != string(m.name) {
			t.Errorf("parseBug(%q) = %q, %v", m.name, b, err)
		}
	}
	for _, bad := range []string{"none", "Commit-First", "commit-first,skip-late", "no-confirm", " skip-late"} {
		_, err := parseBug(bad)
		if err == nil {
			t.Errorf("parseBug(%q) accepted", bad)
			continue
		}
		if !strings.Contains(err.Error(), strings.Join(bugNames(), ", ")) {
			t.Errorf("parseBug(%q): %v does not list the modes", bad, err)
		}
	}
}

// oneLine joins a text's words with single spaces, comment slashes
// dropped.
func oneLine(s string) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "//", "")), " ")
}

// TestPackageCommentDocumentsEveryBugMode: the package comment has an
// entry for every mode, naming the scenario expected to catch it.
func TestPackageCommentDocumentsEveryBugMode(t *testing.T) {
	src, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	doc, _, _ := strings.Cut(string(src), "\npackage main")
	for _, m := range bugModes {
		i := strings.Index(doc, "//   - "+string(m.name)+":")
		if i < 0 {
			t.Errorf("the package comment has no entry for %s", m.name)
			continue
		}
		entry := doc[i:]
		if j := strings.Index(entry[1:], "//   - "); j >= 0 {
			entry = entry[:j+1]
		}
		if !strings.Contains(oneLine(entry), m.scenario) {
			t.Errorf("the package comment's entry for %s does not name %s:\n%s", m.name, m.scenario, entry)
		}
	}
}

// TestExamplesDocumentsEveryBugMode: docs/examples.md has a row for every
// mode, with the promise's number and the scenario expected to catch it.
func TestExamplesDocumentsEveryBugMode(t *testing.T) {
	data, err := os.ReadFile("../../docs/examples.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(data), "examples/rowlock)")
	if !ok {
		t.Fatal("docs/examples.md has no section on examples/rowlock")
	}
	for _, m := range bugModes {
		var line string
		for l := range strings.SplitSeq(section, "\n") {
			if strings.HasPrefix(l, "| `"+string(m.name)+"` |") {
				line = l
				break
			}
		}
		num, _, _ := strings.Cut(m.breaks, " ")
		switch {
		case line == "":
			t.Errorf("docs/examples.md has no row for %s", m.name)
		case !strings.Contains(line, strings.TrimPrefix(num, "§")+":"):
			t.Errorf("docs/examples.md's row for %s does not name promise %s: %s", m.name, num, line)
		case !strings.Contains(line, m.scenario):
			t.Errorf("docs/examples.md's row for %s does not name %s: %s", m.name, m.scenario, line)
		}
	}
}
