package report

import (
	"context"
	"fmt"
	"image"
	"image/png"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
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
// pixels what matters, whatever the fonts and the scaling: the offending
// rows are highlighted, one band across the timeline as tall as those
// rows; from the band's place and height, each event's row is found, and
// the solid marks (committed, confirmed, delivered, applied) are drawn,
// each kind on some event's row, on most of the rows of the events that
// have one, and on the offending rows themselves.
func TestReportRendersInHeadlessChromium(t *testing.T) {
	browser := chromium(t)
	dir := artifactDir(t)
	run := FromSim(phantomRun(t), "go run ./cmd/outboxlab sim --seeds 1")
	htmlPath := filepath.Join(dir, "report.html")
	if err := WriteHTMLFile(htmlPath, Page{Title: "outboxlab: headless check", Runs: []Run{run}}); err != nil {
		t.Fatal(err)
	}
	// Two windows and pixel densities: what is checked must not depend on
	// either.
	for _, r := range []struct {
		name, size, scale string
	}{{"1400 wide at 1x", "1400,4000", "1"}, {"1000 wide at 2x", "1000,3600", "2"}} {
		t.Run(r.name, func(t *testing.T) {
			shot := filepath.Join(dir, "report-"+strings.ReplaceAll(r.name, " ", "-")+".png")
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
				"--force-device-scale-factor="+r.scale, "--user-data-dir="+t.TempDir(), "--screenshot="+shot, "--window-size="+r.size, "file://"+htmlPath)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("%s: %v\n%s", browser, err, out)
			}
			t.Logf("screenshot: %s", shot)
			checkScreenshot(t, shot, run)
		})
	}
}

// checkScreenshot checks the screenshot shot of run's page.
func checkScreenshot(t *testing.T, shot string, run Run) {
	t.Helper()
	f, err := os.Open(shot)
	if err != nil {
		t.Fatalf("no screenshot: %v", err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("decoding the screenshot: %v", err)
	}

	tl := BuildTimeline(run.History, run.Report, 0)
	var offending []int
	for i, e := range tl.Events {
		if e.Offending() {
			offending = append(offending, i)
		}
	}
	if len(offending) == 0 || offending[len(offending)-1]-offending[0] != len(offending)-1 {
		t.Fatalf("the run's offending events are rows %v: the test wants one block of them", offending)
	}

	// The highlight: the pixel rows that it fills across a third of the
	// page or more, which must be one band.
	b := img.Bounds()
	highlight := [3]uint8{0xfd, 0xe7, 0xe9}
	var band []int
	for y := b.Min.Y; y < b.Max.Y; y++ {
		n := 0
		for x := b.Min.X; x < b.Max.X; x++ {
			if near(rgb(img, x, y), highlight, 6) {
				n++
			}
		}
		if 3*n >= b.Dx() {
			band = append(band, y)
		}
	}
	if len(band) == 0 {
		t.Fatal("no pixel row is highlighted: the offending events are not shown")
	}
	top, bottom := band[0], band[len(band)-1]+1
	if bottom-top != len(band) {
		t.Fatalf("the highlighted pixel rows %v are not one band", band)
	}
	pitch := float64(bottom-top) / float64(len(offending))
	if pitch < 6 || pitch > 40 {
		t.Fatalf("the highlight is %d pixels tall for %d rows: a row of %.1f pixels is no scale the page is drawn at", bottom-top, len(offending), pitch)
	}

	// Event i's row, from the band's rows, its edges left out.
	rowOf := func(i int) (lo, hi int) {
		y := float64(top) + float64(i-offending[0])*pitch
		return int(y + 1.5), int(y + pitch - 1.5)
	}
	if lo, _ := rowOf(0); lo < b.Min.Y {
		t.Fatalf("the first event's row would be above the page (y %d)", lo)
	}
	if _, hi := rowOf(len(tl.Events) - 1); hi > b.Max.Y {
		t.Fatalf("the last event's row would be below the page (y %d): the screenshot is too short", hi)
	}
	solid := slices.Sorted(maps.Keys(TimelineColours))
	solidHex := map[string]bool{} // the solid colours, as the marks name theirs
	for _, c := range TimelineColours {
		solidHex[fmt.Sprintf("#%02x%02x%02x", c[0], c[1], c[2])] = true
	}
	seen := map[Mark]int{}    // rows on which each solid colour is drawn
	marked, withSolid := 0, 0 // rows with a solid colour drawn; events with a mark of one
	for i, e := range tl.Events {
		has := false
		for _, p := range e.Points {
			if solidHex[markColour[p.Mark]] {
				has = true
			}
		}
		if has {
			withSolid++
		}
		lo, hi := rowOf(i)
		drawn := map[Mark]bool{}
		for y := lo; y < hi; y++ {
			for x := b.Min.X; x < b.Max.X; x++ {
				c := rgb(img, x, y)
				for _, m := range solid {
					if near(c, TimelineColours[m], 40) {
						drawn[m] = true
					}
				}
			}
		}
		for m := range drawn {
			seen[m]++
		}
		if len(drawn) > 0 {
			marked++
		}
		if e.Offending() && len(drawn) == 0 {
			t.Errorf("offending event #%d's highlighted row shows no solid mark", e.Ordinal)
		}
	}
	for _, m := range solid {
		if seen[m] == 0 {
			t.Errorf("no event's row shows a %s mark: not drawn", m)
		}
	}
	if 4*marked < 3*withSolid {
		t.Errorf("solid marks show on %d event rows, want most of the %d events that have one", marked, withSolid)
	}
	t.Logf("highlight %d pixels tall (rows of %.1f), solid marks on %d of %d rows: %v", bottom-top, pitch, marked, withSolid, seen)
}

// near reports whether colours a and b differ by at most tol in each
// channel: a mark's fill, whatever the rendering's anti-aliasing at its
// edges.
func near(a, b [3]uint8, tol int) bool {
	for i := range a {
		if d := int(a[i]) - int(b[i]); d > tol || d < -tol {
			return false
		}
	}
	return true
}

func rgb(img image.Image, x, y int) [3]uint8 {
	r, g, b, _ := img.At(x, y).RGBA()
	return [3]uint8{uint8(r >> 8), uint8(g >> 8), uint8(b >> 8)}
}
