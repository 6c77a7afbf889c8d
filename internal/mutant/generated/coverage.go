package generated

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/outboxlab/outboxlab/testenv/pgserver"
)

// module is the import path the coverage profiles name files by.
const module = "github.com/outboxlab/outboxlab"

// block is one basic block of a coverage profile.
type block struct {
	startLine, startCol, endLine, endCol int
	count                                int
}

// Coverage is which blocks of the mutated packages' files a tier ran on
// the unmutated code, by file relative to the module root.
type Coverage map[string][]block

// Reached reports whether the tier ran the code at line:col of file. A
// position in no block of the file (a package-level declaration, which
// runs when the package is initialised) counts as reached; so does any
// position when c is nil (no profile).
func (c Coverage) Reached(file string, line, col int) bool {
	if c == nil {
		return true
	}
	in := false
	for _, b := range c[file] {
		if (line > b.startLine || line == b.startLine && col >= b.startCol) &&
			(line < b.endLine || line == b.endLine && col <= b.endCol) {
			if b.count > 0 {
				return true
			}
			in = true
		}
	}
	return !in
}

// parseProfile reads a Go coverage profile in text format.
func parseProfile(path string) (Coverage, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	c := Coverage{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "mode:") || line == "" {
			continue
		}
		// name.go:12.34,15.2 3 1
		colon := strings.LastIndexByte(line, ':')
		if colon < 0 {
			return nil, fmt.Errorf("coverage profile %s: %q", path, line)
		}
		name, rest := line[:colon], line[colon+1:]
		var b block
		var stmts int
		if _, err := fmt.Sscanf(rest, "%d.%d,%d.%d %d %d", &b.startLine, &b.startCol, &b.endLine, &b.endCol, &stmts, &b.count); err != nil {
			return nil, fmt.Errorf("coverage profile %s: %q: %w", path, line, err)
		}
		rel, ok := strings.CutPrefix(name, module+"/")
		if !ok {
			continue
		}
		c[rel] = append(c[rel], b)
	}
	return c, sc.Err()
}

// coverPkgs are the packages whose Go files are mutated.
func coverPkgs() string {
	var ps []string
	for _, d := range GoPackages {
		ps = append(ps, module+"/"+d)
	}
	return strings.Join(ps, ",")
}

// coverage is what each tier reaches of the unmutated code; unit is by
// test, of the packages unitPackages lists.
type coverage struct {
	fakes, sql Coverage
	unit       []testCoverage
	// fakesSeconds and sqlSeconds are what the simulation on each
	// backend took on the unmutated code.
	fakesSeconds, sqlSeconds float64
	// buildSeconds is what building each unit package's test binary
	// took: another package's tests meet a mutant through a build.
	buildSeconds map[string]float64
}

// testCoverage is what one test of a package reaches, and how long it
// ran on the unmutated code.
type testCoverage struct {
	pkg, test string
	cov       Coverage
	seconds   float64
}

// unitPackages are the packages whose tests meet Go mutants: the mutated
// packages' own, and the store's behaviour suite.
func unitPackages() []string { return append(slices.Clone(GoPackages), "relay/storetest") }

// testsReaching returns, for each package, the tests that reach
// line:col of file; nil when no test does.
func testsReaching(tcs []testCoverage, file string, line, col int) map[string][]string {
	var out map[string][]string
	for _, tc := range tcs {
		if tc.cov.Reached(file, line, col) {
			if out == nil {
				out = map[string][]string{}
			}
			out[tc.pkg] = append(out[tc.pkg], tc.test)
		}
	}
	return out
}

// measureCoverage runs, on the unmutated code, what a Go mutant meets: the
// fast tier over opts' seeds, on the fakes and on SQL apart, and the unit
// tier's tests. The simulation is deterministic by seed, and the unit
// tests are in what they reach, short of timing, so a tier that does not
// reach a mutant's position runs it as it runs the original: Run leaves
// that tier out for the mutant, and a mutant no tier reaches survives,
// unreached, after a build that tells whether it compiles.
func measureCoverage(ctx context.Context, opts Options, dir string) (coverage, error) {
	var cov coverage
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return cov, fmt.Errorf("coverage: %w", err)
	}
	run := func(env []string, name string, args ...string) error {
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Dir = opts.Root
		cmd.Env = append(os.Environ(), env...)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("coverage: %s %s: %v: %s", name, strings.Join(args, " "), err, lastLines(string(out), 8))
		}
		return nil
	}
	bin := filepath.Join(dir, "mutantworker.cover")
	if err := run(nil, "go", "build", "-cover", "-coverpkg="+coverPkgs(), "-o", bin, "./cmd/mutantworker"); err != nil {
		return cov, err
	}
	srv, err := pgserver.Start(ctx)
	if err != nil {
		return cov, fmt.Errorf("coverage: starting PostgreSQL: %w", err)
	}
	defer srv.Close()
	for _, t := range []struct {
		name     string
		sim, sql int
		into     *Coverage
		secs     *float64
	}{{"fakes", opts.SimSeeds, 0, &cov.fakes, &cov.fakesSeconds}, {"sql", 0, opts.SQLSeeds, &cov.sql, &cov.sqlSeconds}} {
		covDir := filepath.Join(dir, t.name)
		if err := os.MkdirAll(covDir, 0o755); err != nil {
			return cov, fmt.Errorf("coverage: %w", err)
		}
		began := time.Now()
		if err := run([]string{"GOCOVERDIR=" + covDir}, bin, "-sim-seeds", strconv.Itoa(t.sim), "-sql-seeds", strconv.Itoa(t.sql),
			"-seed", strconv.FormatUint(opts.FirstSeed, 10), "-pg-url", srv.AdminURL()); err != nil {
			return cov, err
		}
		*t.secs = time.Since(began).Seconds()
		prof := covDir + ".txt"
		if err := run(nil, "go", "tool", "covdata", "textfmt", "-i="+covDir, "-o="+prof); err != nil {
			return cov, err
		}
		if *t.into, err = parseProfile(prof); err != nil {
			return cov, err
		}
	}
	// The unit tier, test by test: each test's reach decides which tests
	// a mutant meets.
	for _, pkg := range unitPackages() {
		tbin := filepath.Join(dir, strings.ReplaceAll(pkg, "/", "_")+".cover.test")
		// The build of the plain test binary is what a mutant pays; the
		// instrumented one below is built from its cache.
		began := time.Now()
		if err := run(nil, "go", append([]string{"test", "-c", "-o", filepath.Join(dir, "plain.test")}, append(testFlags, "./"+pkg+"/")...)...); err != nil {
			return cov, err
		}
		if cov.buildSeconds == nil {
			cov.buildSeconds = map[string]float64{}
		}
		cov.buildSeconds[pkg] = time.Since(began).Seconds()
		if err := run(nil, "go", "test", "-c", "-cover", "-coverpkg="+coverPkgs(), "-o", tbin, "./"+pkg+"/"); err != nil {
			return cov, err
		}
		cmd := exec.CommandContext(ctx, tbin, "-test.list", ".")
		cmd.Dir = filepath.Join(opts.Root, pkg)
		out, err := cmd.Output()
		if err != nil {
			return cov, fmt.Errorf("coverage: listing the tests of %s: %w", pkg, err)
		}
		for i, name := range strings.Fields(string(out)) {
			if !strings.HasPrefix(name, "Test") || "^"+name+"$" == unitSkip {
				continue
			}
			prof := filepath.Join(dir, fmt.Sprintf("%s.%d.txt", strings.ReplaceAll(pkg, "/", "_"), i))
			cmd := exec.CommandContext(ctx, tbin, "-test.short", "-test.count=1", "-test.run", "^"+name+"$", "-test.coverprofile="+prof)
			cmd.Dir = filepath.Join(opts.Root, pkg)
			cmd.Env = append(os.Environ(), "OUTBOX_TEST_DATABASE_URL="+srv.AdminURL())
			began := time.Now()
			if out, err := cmd.CombinedOutput(); err != nil {
				return cov, fmt.Errorf("coverage: %s %s on the unmutated code: %v: %s", pkg, name, err, lastLines(string(out), 8))
			}
			secs := time.Since(began).Seconds()
			c, err := parseProfile(prof)
			if err != nil {
				return cov, err
			}
			cov.unit = append(cov.unit, testCoverage{pkg: pkg, test: name, cov: c, seconds: secs})
		}
	}
	return cov, nil
}

// unitFirst reports whether the unit tier is expected to cost a Go
// mutant of package pkg less than the simulation: tests, by package, are
// the tests that reach its line, onFakes and onSQL the simulation's
// backends that do. The costs are the unmutated code's, measured with
// the coverage; with none measured (c nil), the simulation goes first.
func (c *coverage) unitFirst(pkg string, tests map[string][]string, onFakes, onSQL bool) bool {
	if c == nil || len(tests) == 0 {
		return false
	}
	if !onFakes && !onSQL {
		return true
	}
	var simCost float64
	if onFakes {
		simCost += c.fakesSeconds
	}
	if onSQL {
		simCost += c.sqlSeconds
	}
	var unitCost float64
	for p, names := range tests {
		if p != pkg {
			unitCost += c.buildSeconds[p]
		}
		for _, tc := range c.unit {
			if tc.pkg == p && slices.Contains(names, tc.test) {
				unitCost += tc.seconds
			}
		}
	}
	return unitCost < simCost
}

// bounded is timeoutFactor times secs plus timeoutSlack, at most max.
func bounded(secs float64, max time.Duration) time.Duration {
	return min(time.Duration(secs*timeoutFactor*float64(time.Second))+timeoutSlack, max)
}

// unitTimeout bounds the run of pkg's tests names for a mutant: from what
// they took on the unmutated code (with coverage, which only slows them),
// or unitTimeout when nothing was measured.
func (c *coverage) unitTimeout(pkg string, names []string) time.Duration {
	if c == nil {
		return unitTimeout
	}
	var secs float64
	for _, tc := range c.unit {
		if tc.pkg == pkg && (len(names) == 0 || slices.Contains(names, tc.test)) {
			secs += tc.seconds
		}
	}
	return bounded(secs, unitTimeout)
}

// fastTimeout bounds a mutant's run of the fast tier a: from what the
// same seeds took on the unmutated code, or fastTimeout when nothing was
// measured.
func (c *coverage) fastTimeout(a WorkerArgs) time.Duration {
	if c == nil {
		return fastTimeout
	}
	var secs float64
	if a.SimSeeds > 0 {
		secs += c.fakesSeconds
	}
	if a.SQLSeeds > 0 {
		secs += c.sqlSeconds
	}
	return bounded(secs, fastTimeout)
}
