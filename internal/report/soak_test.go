package report

import (
	"strings"
	"testing"

	"github.com/outboxlab/outboxlab/internal/bench/result"
)

func soakRun() result.Soak {
	s := result.Soak{Contender: "relay", Events: 300, Published: 300, Seconds: 30, HoldFrom: 10, HoldTo: 20, Config: "one replica",
		ClaimStatement: "WITH ..."}
	for i := 1; i <= 6; i++ {
		ms := 1.0
		if i == 3 || i == 4 {
			ms = 4 // slower while vacuum is held back
		}
		s.Samples = append(s.Samples, result.SoakSample{At: float64(5 * i), Published: int64(50 * i), Rate: 10, ClaimCalls: 10, ClaimMs: ms,
			DeadTuples: int64(100 * i), TableBytes: 1 << 20, IndexBytes: 1 << 19, Holding: i == 3 || i == 4})
	}
	return s
}

// TestSoakReport: the claim's mean time is taken per period, weighted by
// calls; REPORT.md's soak section has a row with them and links the plots
// beside the bundle's soak.json; each plot is an SVG with a line.
func TestSoakReport(t *testing.T) {
	s := soakRun()
	if got := s.ClaimMean(s.HoldFrom, s.HoldTo); got != 4 {
		t.Errorf("claim while vacuum held back: %v ms, want 4", got)
	}
	if got := s.ClaimMean(0, s.HoldFrom); got != 1 {
		t.Errorf("claim before: %v ms, want 1", got)
	}
	f := &SoakFile{Meta: Meta{Date: "d"}, Soak: s, Plots: []string{"soak-claim.svg"}, dir: "results/soak-ours"}
	var b strings.Builder
	writeSoaks(&b, []*SoakFile{f}, Meta{Date: "d"})
	md := b.String()
	for _, want := range []string{
		"| ours | 300 of 300 | 30s | 10 | 1.00 | 4.00 | 1.00 | 600 | 1.5 MiB |",
		"![soak-claim](results/soak-ours/soak-claim.svg)",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("the soak section lacks %q:\n%s", want, md)
		}
	}
	svg := soakPlotSVG(s, soakPlots[0])
	if !strings.HasPrefix(svg, "<svg") || !strings.Contains(svg, "<polyline") || !strings.Contains(svg, "vacuum held back") {
		t.Errorf("the claim plot:\n%s", svg)
	}
	if sum := strings.Join(SoakSummary(s), "\n"); !strings.Contains(sum, "300 of 300 events published in 30s") || !strings.Contains(sum, "while vacuum held back:") {
		t.Errorf("summary:\n%s", sum)
	}
}
