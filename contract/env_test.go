package contract

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The variables of each group, as the docs list them.
var (
	harnessSets = []string{EnvDatabaseURL, EnvAMQPURL, EnvTable, EnvExchange, EnvRelayID, EnvClockOffset, EnvRecords, EnvFailpoints}
	settings    = []string{EnvPollInterval, EnvLease, EnvPublishTimeout, EnvStoreTimeout, EnvBackoffBase, EnvBackoffMax,
		EnvMaxAttempts, EnvBatchSize, EnvTypes, EnvLogLevel, EnvRetention, EnvSweepInterval}
	ourOwn = []string{EnvNotify, EnvMetricsAddr, EnvMigrate, EnvDeclareExchange, EnvPublishWindow, EnvSweepBatch, EnvMutant}
)

var variable = regexp.MustCompile(`OUTBOX_[A-Z_]*[A-Z]`)

// section returns the text of the docs file from the heading that starts
// with from up to the next heading of its level or above.
func section(t *testing.T, file, from string) string {
	t.Helper()
	data, err := os.ReadFile("../docs/" + file)
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	i := strings.Index(text, "\n"+from)
	if i < 0 {
		t.Fatalf("docs/%s has no heading %q", file, from)
	}
	level := strings.Index(from, " ")
	rest := text[i+1+len(from):]
	for _, line := range strings.SplitAfter(rest, "\n") {
		if h := strings.Index(line, " "); strings.HasPrefix(line, "#") && h > 0 && h <= level {
			return text[i : i+1+len(from)+strings.Index(rest, line)]
		}
	}
	return text[i:]
}

// TestVariablesAreTheDocumentedOnes checks the constants against the
// contract's text: §3.2 names exactly the variables the harness sets and
// the settings it passes, and our relay's own settings are in
// docs/relay.md.
func TestVariablesAreTheDocumentedOnes(t *testing.T) {
	documented := variable.FindAllString(section(t, "contract.md", "### 3.2 "), -1)
	slices.Sort(documented)
	documented = slices.Compact(documented)
	want := slices.Sorted(slices.Values(append(slices.Clone(harnessSets), settings...)))
	if !slices.Equal(documented, want) {
		t.Errorf("docs/contract.md §3.2 names %v,\nthe constants are %v", documented, want)
	}
	relayDoc, err := os.ReadFile("../docs/relay.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range slices.Concat(harnessSets, settings, ourOwn) {
		if !strings.Contains(string(relayDoc), v) {
			t.Errorf("docs/relay.md does not name %s", v)
		}
	}
}
