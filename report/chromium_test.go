package report

import (
	"context"
	"image"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// chromium returns the headless browser to render with: $OUTBOXLAB_CHROMIUM,
// or chromium on the PATH.
func chromium(t *testing.T) string {
	if p := os.Getenv("OUTBOXLAB_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("chromium is not installed (Debian: apt-get install chromium; or set OUTBOXLAB_CHROMIUM): the report is not checked in a browser")
	return ""
}

// artifactDir is where the screenshot is kept: $OUTBOXLAB_ARTIFACTS, or the
// test's artifact directory (kept with go test -artifacts).
func artifactDir(t *testing.T) string {
	if d := os.Getenv("OUTBOXLAB_ARTIFACTS"); d != "" {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	return t.ArtifactDir()
}

// TestReportRendersInHeadlessChromium renders a report with one failing
// simulation run, screenshots it in headless Chromium, and checks in the
// pixels that the timeline was drawn: marks in the timeline's colours on
// many distinct rows, and the offending row highlighted.
func TestReportRendersInHeadlessChromium(t *testing.T) {
	browser := chromium(t)
	dir := artifactDir(t)
	run := FromSim(phantomRun(t), "go run ./cmd/outboxlab sim --seeds 1")
	htmlPath := filepath.Join(dir, "report.html")
	if err := WriteHTMLFile(htmlPath, Page{Title: "outboxlab: headless check", Runs: []Run{run}}); err != nil {
		t.Fatal(err)
	}
	shot := filepath.Join(dir, "report.png")
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
		"--user-data-dir="+t.TempDir(), "--screenshot="+shot, "--window-size=1400,2600", "file://"+htmlPath)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", browser, err, out)
	}
	t.Logf("screenshot: %s", shot)
	f, err := os.Open(shot)
	if err != nil {
		t.Fatalf("no screenshot: %v", err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("decoding the screenshot: %v", err)
	}

	// Rows (y) on which each mark colour appears.
	rows := map[Mark]map[int]bool{}
	for m := range TimelineColours {
		rows[m] = map[int]bool{}
	}
	offending := 0
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			c := rgb(img, x, y)
			for m, want := range TimelineColours {
				if c == want {
					rows[m][y] = true
				}
			}
			if c == [3]uint8{0xfd, 0xe7, 0xe9} {
				offending++
			}
		}
	}
	tl := BuildTimeline(run.History, run.Report, 0)
	committedRows := 0
	for _, e := range tl.Events {
		if e.Outcome == MarkCommitted {
			committedRows++
		}
	}
	// A filled committed mark is 9 pixels across (a little less once the
	// page scales the SVG to its width) and rows are 14 apart, so n
	// committed events, some marks overlapping, cover well over 3n
	// distinct pixel rows.
	if got, want := len(rows[MarkCommitted]), 3*min(committedRows, 20); got < want {
		t.Errorf("committed marks cover %d pixel rows, want at least %d (%d committed events)", got, want, committedRows)
	}
	for _, m := range []Mark{MarkConfirmed, MarkDelivered, MarkApplied} {
		if len(rows[m]) < 10 {
			t.Errorf("%s marks cover %d pixel rows: not drawn", m, len(rows[m]))
		}
	}
	if offending < 1000 {
		t.Errorf("%d pixels of the offending-row highlight: the phantom event is not shown", offending)
	}
}

func rgb(img image.Image, x, y int) [3]uint8 {
	r, g, b, _ := img.At(x, y).RGBA()
	return [3]uint8{uint8(r >> 8), uint8(g >> 8), uint8(b >> 8)}
}
