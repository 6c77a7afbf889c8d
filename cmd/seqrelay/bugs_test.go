package main

import (
	"os"
	"strings"
	"testing"
)

// catalogueScenarios are the names of scenarios/catalogue.go, written out:
// seqrelay imports nothing of the harness.
var catalogueScenarios = map[string]bool{
	"baseline": true, "broker-down": true, "broker-killed": true, "db-down": true,
	"crash-between-publish-and-mark": true, "lease-expiry": true, "clock-skew": true,
	"poison": true, "confirm-lost": true, "slow-network": true, "commit-order-inversion": true,
	"rolling-restart": true, "producer-crash": true, "pipeline": true,
	// The database's scenarios, which run when named.
	"restore": true, "rolling-upgrade": true, "failover-async": true,
}

func TestBugModeTable(t *testing.T) {
	if len(bugModes) < 5 {
		t.Errorf("%d bug modes, want at least five", len(bugModes))
	}
	names, promises := map[bug]bool{}, map[string]bug{}
	for _, m := range bugModes {
		switch {
		case m.name == bugNone:
			t.Errorf("a bug mode without a name: %+v", m)
		case names[m.name]:
			t.Errorf("%s is listed twice", m.name)
		case m.breaks == "" || m.checker == "":
			t.Errorf("%s does not say what it breaks and what catches it: %+v", m.name, m)
		case !catalogueScenarios[m.scenario]:
			t.Errorf("%s: %q is not a scenario of the catalogue", m.name, m.scenario)
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
		if b, err := parseBug(string(m.name)); err != nil || b != m.name {
			t.Errorf("parseBug(%q) = %q, %v", m.name, b, err)
		}
	}
	for _, bad := range []string{"none", "Mark-First", "mark-first,no-fence", "no-confirm"} {
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
		if !strings.Contains(strings.Join(strings.Fields(strings.ReplaceAll(entry, "//", "")), " "), m.scenario) {
			t.Errorf("the package comment's entry for %s does not name %s:\n%s", m.name, m.scenario, entry)
		}
	}
}
