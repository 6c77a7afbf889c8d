package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outboxlab/outboxlab/internal/bench"
	"github.com/outboxlab/outboxlab/internal/bench/result"
	"github.com/outboxlab/outboxlab/internal/report"
)

// TestSoakRefusesBadFlags: an unknown relay, no events and no time are
// refused before anything starts.
func TestSoakRefusesBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"soak", "--relay", "kafka"},
		{"soak", "--events", "0"},
		{"soak", "--timeout", "0s"},
	} {
		code, _, errOut := invoke(t, args...)
		if code != exitUsage || errOut == "" {
			t.Errorf("%v: exit %d (%q), want %d with a reason", args, code, errOut, exitUsage)
		}
	}
}

// TestSoakWritesItsBundle: the verb hands its options to the soak, prints
// its summary, and with --out writes soak.json, its plots and its page,
// which report reads back as a bundle with a soak section.
func TestSoakWritesItsBundle(t *testing.T) {
	d := testDeps()
	d.dockerAvailable = func(context.Context) error { return nil }
	var got bench.SoakOptions
	d.soak = func(_ context.Context, o bench.SoakOptions, _ func(string)) (result.Soak, error) {
		got = o
		return result.Soak{Contender: o.Contender, Events: o.Events, Published: int64(o.Events), Seconds: 12, HoldFrom: 4, HoldTo: 8,
			Samples: []result.SoakSample{{At: 5, Published: 50, ClaimCalls: 3, ClaimMs: 2}, {At: 10, Published: 100, ClaimCalls: 3, ClaimMs: 4}}}, nil
	}
	dir := filepath.Join(t.TempDir(), "soak-watermill")
	code, out, errOut := invokeWith(t, d, "soak", "--relay", "watermill", "--events", "100", "--timeout", "2m", "--out", dir)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if got.Contender != bench.SoakWatermill || got.Events != 100 || got.Timeout != 2*time.Minute {
		t.Errorf("soak options %+v", got)
	}
	if !strings.Contains(out, "soak of watermill: 100 of 100 events published in 12s") {
		t.Errorf("summary:\n%s", out)
	}
	for _, f := range []string{report.FileSoak, "soak.html", "soak-claim.svg", "soak-size.svg"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
	md := filepath.Join(t.TempDir(), "r.md")
	if code, _, errOut := invokeWith(t, d, "report", "--in", dir, "--md", md); code != exitOK {
		t.Fatalf("report: exit %d: %s", code, errOut)
	}
	data, err := os.ReadFile(md)
	if err != nil || !strings.Contains(string(data), "## Soak: the outbox as it ages") || !strings.Contains(string(data), "soak-claim.svg") {
		t.Errorf("the report of the soak bundle (%v):\n%s", err, data)
	}
}
