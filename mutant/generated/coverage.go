package generated

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

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

// measureCoverage runs, on the unmutated code, what a Go mutant meets: the
// worker command's fast tier over opts' seeds, and the unit tier's tests.
// Both tiers are deterministic on the code they run (the simulation is,
// by seed; the unit tests are in what they reach, short of timing), so a
// mutant whose position neither reaches behaves there as the original
// does and needs no build: Run reports it survived, unreached.
func measureCoverage(ctx context.Context, opts Options, dir string) (fast, unit Coverage, err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, nil, fmt.Errorf("coverage: %w", err)
	}
	run := func(name string, args ...string) error {
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Dir = opts.Root
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("coverage: %s %s: %v: %s", name, strings.Join(args, " "), err, lastLines(string(out), 8))
		}
		return nil
	}
	bin := filepath.Join(dir, "mutantworker.cover")
	if err := run("go", "build", "-cover", "-coverpkg="+coverPkgs(), "-o", bin, "./cmd/mutantworker"); err != nil {
		return nil, nil, err
	}
	srv, err := pgserver.Start(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("coverage: starting PostgreSQL: %w", err)
	}
	defer srv.Close()
	covDir := filepath.Join(dir, "fast")
	if err := os.MkdirAll(covDir, 0o755); err != nil {
		return nil, nil, fmt.Errorf("coverage: %w", err)
	}
	cmd := exec.CommandContext(ctx, bin, "-sim-seeds", strconv.Itoa(opts.SimSeeds), "-sql-seeds", strconv.Itoa(opts.SQLSeeds),
		"-seed", strconv.FormatUint(opts.FirstSeed, 10), "-pg-url", srv.AdminURL())
	cmd.Env = append(os.Environ(), "GOCOVERDIR="+covDir)
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, nil, fmt.Errorf("coverage: the fast tier on the unmutated code: %v: %s", err, lastLines(string(out), 8))
	}
	fastProf := filepath.Join(dir, "fast.txt")
	if err := run("go", "tool", "covdata", "textfmt", "-i="+covDir, "-o="+fastProf); err != nil {
		return nil, nil, err
	}
	unitProf := filepath.Join(dir, "unit.txt")
	args := []string{"test", "-short", "-count=1", "-skip", unitSkip, "-coverpkg=" + coverPkgs(), "-coverprofile=" + unitProf}
	for _, d := range GoPackages {
		args = append(args, "./"+d+"/")
	}
	args = append(args, "./relay/storetest/")
	ucmd := exec.CommandContext(ctx, "go", args...)
	ucmd.Dir = opts.Root
	ucmd.Env = append(os.Environ(), "OUTBOX_TEST_DATABASE_URL="+srv.AdminURL())
	if out, err := ucmd.CombinedOutput(); err != nil {
		return nil, nil, fmt.Errorf("coverage: the unit tier on the unmutated code: %v: %s", err, lastLines(string(out), 8))
	}
	if fast, err = parseProfile(fastProf); err != nil {
		return nil, nil, err
	}
	if unit, err = parseProfile(unitProf); err != nil {
		return nil, nil, err
	}
	return fast, unit, nil
}
