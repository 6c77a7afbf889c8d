package generated

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/outboxlab/outboxlab/consumer"
	"github.com/outboxlab/outboxlab/internal/sim"
	"github.com/outboxlab/outboxlab/relay"
	"github.com/outboxlab/outboxlab/testenv/pgserver"
)

// Statuses of an outcome.
const (
	StatusKilled   = "killed"
	StatusSurvived = "survived"
	// StatusInvalid is a mutant that does not compile, or whose statement
	// does not prepare: neither killed nor survived.
	StatusInvalid = "invalid"
)

// Outcome is what the fast tier did to one mutant.
type Outcome struct {
	Mutant
	Status string `json:"status"`
	Kill
	// Timing is where the mutant's seconds went.
	Timing Timing `json:"timing"`
	// Judgement is a survivor's: "equivalent: <reason>", "excluded:
	// <reason>" or "gap".
	Judgement string `json:"judgement,omitempty"`
}

// Timing is the seconds a mutant spent in each step: building the
// mutated package's test binary, the simulation (fakes and SQL), the
// store's behaviour suite, and the unit tier. A step that did not run
// took 0.
type Timing struct {
	Build float64 `json:"build"`
	Sim   float64 `json:"sim"`
	Store float64 `json:"store"`
	Unit  float64 `json:"unit"`
	// Containers is the container tier's, which only a fast-tier gap
	// meets.
	Containers float64 `json:"containers,omitempty"`
}

// Options configure Run.
type Options struct {
	// Root is the module's root directory.
	Root string
	// SimSeeds and SQLSeeds bound the seeds tried per mutant on the fakes
	// and on the SQL-faithful tier. Defaults 300 and 30.
	SimSeeds, SQLSeeds int
	// FirstSeed is the first seed of every mutant's runs. Default 1.
	FirstSeed uint64
	// Workers run mutants at once, each with its own PostgreSQL server;
	// at most 2. Default 1.
	Workers int
	// Log, when set, is told each outcome as it is known.
	Log func(Outcome)
	// Containers configures the container tier, which the fast tier's
	// gaps meet.
	Containers Containers

	// cov is what each tier reaches of the unmutated code, and what it
	// costs; nil when nothing was measured: then every tier runs every
	// Go mutant, the simulation first.
	cov *coverage
}

func (o Options) withDefaults() Options {
	if o.SimSeeds == 0 {
		o.SimSeeds = 300
	}
	if o.SQLSeeds == 0 {
		o.SQLSeeds = 30
	}
	if o.FirstSeed == 0 {
		o.FirstSeed = 1
	}
	o.Workers = min(max(o.Workers, 1), 2)
	return o
}

// Run runs every mutant of ms against the fast tier and judges the
// survivors with equivalent.txt. A SQL mutant runs on the SQL-faithful
// tier in this process, its statement put in place through the stores'
// statement seams; a Go mutant is built into cmd/mutantworker with its
// file replaced by an overlay, which runs the simulation on the fakes
// and on SQL, and then, if it survives, the mutated package's tests run
// with -short under the same overlay. Outcomes are in the order of ms.
func Run(ctx context.Context, ms []Mutant, opts Options) ([]Outcome, error) {
	opts = opts.withDefaults()
	eq, err := Equivalent()
	if err != nil {
		return nil, err
	}
	ex, err := Excluded()
	if err != nil {
		return nil, err
	}
	for id := range ex {
		if _, both := eq[id]; both {
			return nil, fmt.Errorf("mutant %s is judged both equivalent and excluded", id)
		}
	}
	tmp, err := os.MkdirTemp("", "outboxlab-genmut-")
	if err != nil {
		return nil, fmt.Errorf("generated mutants: %w", err)
	}
	defer os.RemoveAll(tmp)
	for _, m := range ms {
		if m.Kind == KindGo {
			cov, err := measureCoverage(ctx, opts, filepath.Join(tmp, "coverage"))
			if err != nil {
				return nil, err
			}
			opts.cov = &cov
			break
		}
	}
	out := make([]Outcome, len(ms))
	next := make(chan int)
	var (
		wg           sync.WaitGroup
		mu           sync.Mutex
		containersMu sync.Mutex
		first        error
	)
	fail := func(err error) {
		mu.Lock()
		if first == nil {
			first = err
		}
		mu.Unlock()
	}
	for w := range opts.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			wk := &worker{opts: opts, dir: filepath.Join(tmp, fmt.Sprint(w))}
			defer wk.close()
			for i := range next {
				o, err := wk.run(ctx, ms[i])
				if err != nil {
					fail(fmt.Errorf("mutant %s: %w", ms[i].ID, err))
					continue
				}
				// One container tier at a time: two would share two cores
				// with each other's containers.
				containersMu.Lock()
				o, err = wk.judge(ctx, ms[i], o, eq, ex)
				containersMu.Unlock()
				if err != nil {
					fail(fmt.Errorf("mutant %s: %w", ms[i].ID, err))
					continue
				}
				out[i] = o
				if opts.Log != nil {
					mu.Lock()
					opts.Log(o)
					mu.Unlock()
				}
			}
		}()
	}
feed:
	for i := range ms {
		mu.Lock()
		stop := first != nil
		mu.Unlock()
		if stop {
			break
		}
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if first == nil && ctx.Err() != nil {
		first = ctx.Err()
	}
	return out, first
}

// judge judges o, the fast tier's outcome on m: a survivor is equivalent
// or excluded when eq or ex give a reason, a gap otherwise; a gap meets
// the container tier when it is on, and is killed there or stays a gap,
// with what the container tier ran in its detail.
func (w *worker) judge(ctx context.Context, m Mutant, o Outcome, eq, ex map[string]string) (Outcome, error) {
	if o.Status != StatusSurvived {
		return o, nil
	}
	o.Judgement = "gap"
	if r, ok := eq[o.ID]; ok {
		o.Judgement = "equivalent: " + r
	} else if r, ok := ex[o.ID]; ok {
		o.Judgement = "excluded: " + r
	}
	if o.Judgement != "gap" || !w.opts.Containers.Run {
		return o, nil
	}
	step := time.Now()
	k, err := w.runContainers(ctx, m, w.opts.Containers)
	o.Timing.Containers = time.Since(step).Seconds()
	o.Seconds += o.Timing.Containers
	switch {
	case ctx.Err() != nil:
		return o, ctx.Err()
	case err != nil:
		// The container tier could not judge it (a test that fails on the
		// unmutated code too, a missing image): it stays a gap, saying
		// why, and the sweep goes on.
		o.Detail = "the container tier could not judge it: " + shorten(err.Error(), 300)
		return o, nil
	case k.Tier == "":
		o.Detail = k.Detail
		return o, nil
	}
	k.Seeds, k.Seconds = o.Seeds, o.Seconds
	o.Kill, o.Status, o.Judgement = k, StatusKilled, ""
	return o, nil
}

// worker runs mutants one at a time on a PostgreSQL server of its own.
type worker struct {
	opts Options
	dir  string
	srv  *pgserver.Server
	sql  *sim.SQL
	// storeSuite is the test binary of relay/storetest, built on first
	// use: the store's behaviour suite that a SQL mutant of the store
	// meets before the SQL tier; storeTimeout bounds it, from what it
	// took on the unmutated statements.
	storeSuite   string
	storeTimeout time.Duration
}

func (w *worker) close() {
	if w.sql != nil {
		_ = w.sql.Close()
	}
	if w.srv != nil {
		_ = w.srv.Close()
	}
}

// backend starts the worker's server and SQL tier on first use.
func (w *worker) backend(ctx context.Context) (*sim.SQL, error) {
	if w.sql != nil {
		return w.sql, nil
	}
	srv, err := pgserver.Start(ctx)
	if err != nil {
		return nil, fmt.Errorf("starting PostgreSQL for the SQL tier: %w", err)
	}
	w.srv = srv
	if w.sql, err = sim.NewSQL(ctx, srv.AdminURL()); err != nil {
		return nil, err
	}
	return w.sql, nil
}

func (w *worker) run(ctx context.Context, m Mutant) (Outcome, error) {
	if m.Kind == KindSQL {
		return w.runSQL(ctx, m)
	}
	return w.runGo(ctx, m)
}

// runSQL runs a SQL mutant on the store's behaviour suite (a statement
// of the store) and the SQL tier: the fakes do not issue the statements.
func (w *worker) runSQL(ctx context.Context, m Mutant) (Outcome, error) {
	o := Outcome{Mutant: m}
	// What a worker starts once is not a mutant's time.
	b, err := w.backend(ctx)
	if err != nil {
		return o, err
	}
	if m.File == StoreFile {
		if err := w.prepareStoreSuite(ctx); err != nil {
			return o, err
		}
	}
	start := time.Now()
	if err := b.Check(ctx, m.SQL); err != nil {
		var serr interface{ SQLState() string }
		if !errors.As(err, &serr) {
			return o, err
		}
		o.Status, o.Detail = StatusInvalid, shorten(err.Error(), 300)
		o.Seconds = time.Since(start).Seconds()
		return o, nil
	}
	var editErr error
	switch m.File {
	case StoreFile:
		b.EditStore = func(s *relay.PGStore) {
			q := s.Statements()
			*q.Ref(m.Stmt) = m.SQL
			if err := s.UseStatements(q); err != nil && editErr == nil {
				editErr = err
			}
		}
	case InboxFile:
		b.EditInbox = func(in *consumer.PGInbox) {
			if err := in.UseStatements(consumer.InboxStatements{Record: m.SQL}); err != nil && editErr == nil {
				editErr = err
			}
		}
	default:
		return o, fmt.Errorf("no statement seam for %s", m.File)
	}
	defer func() { b.EditStore, b.EditInbox = nil, nil }()
	// A statement of the store meets the store's behaviour suite between
	// the SQL tier's first seeds and the rest: the few first seeds kill
	// most of what the SQL tier kills, the suite, which runs every
	// statement on purpose in seconds, most of the rest (the backlog
	// statistics, which the simulation never reads); a mutant killed by
	// either is spared the other.
	sqlSeeds := func(from, n int) (Kill, error) {
		step := time.Now()
		k, err := fastTier(ctx, b, 0, n, w.opts.FirstSeed, from)
		if err == nil {
			err = editErr
		}
		o.Timing.Sim += time.Since(step).Seconds()
		return k, err
	}
	early := w.opts.SQLSeeds
	if m.File == StoreFile {
		early = min(early, earlySQLSeeds)
	}
	k, err := sqlSeeds(0, early)
	if err != nil {
		return o, err
	}
	if k.Tier == "" && m.File == StoreFile {
		q := relay.NewPGStore(nil, sim.SQLTable).Statements()
		*q.Ref(m.Stmt) = m.SQL
		step := time.Now()
		sk, err := w.runStoreSuite(ctx, q)
		if err != nil {
			return o, err
		}
		o.Timing.Store = time.Since(step).Seconds()
		if sk.Tier != "" {
			sk.Seeds = k.Seeds
			k = sk
		} else if rest := w.opts.SQLSeeds - early; rest > 0 {
			seeds := k.Seeds
			if k, err = sqlSeeds(early, rest); err != nil {
				return o, err
			}
			k.Seeds += seeds
		}
	}
	return finished(o, k, start), nil
}

// StoreSuiteTest is the test of relay/storetest that runs the store's
// behaviour suite on PostgreSQL under a simulated clock, with the
// statements a JSON file names (StoreSuiteStatementsEnv).
const (
	StoreSuiteTest          = "TestPGStoreSimulatedClock"
	StoreSuiteStatementsEnv = "OUTBOX_STORETEST_STATEMENTS"
)

// prepareStoreSuite builds the store's behaviour suite on first use and
// runs it on the unmutated statements, which it must pass: what it takes
// there bounds it on a mutant's.
func (w *worker) prepareStoreSuite(ctx context.Context) error {
	if w.storeSuite != "" {
		return nil
	}
	if _, err := w.backend(ctx); err != nil {
		return err
	}
	if err := os.MkdirAll(w.dir, 0o755); err != nil {
		return fmt.Errorf("preparing the store suite: %w", err)
	}
	bin := filepath.Join(w.dir, "storetest.test")
	if outp, err := w.goCmd(ctx, append([]string{"test", "-c", "-o", bin}, append(testFlags, "./relay/storetest/")...)...); err != nil {
		return fmt.Errorf("building the store suite: %v: %s", err, lastLines(string(outp), 8))
	}
	w.storeSuite = bin
	began := time.Now()
	k, err := w.runStoreSuite(ctx, relay.NewPGStore(nil, sim.SQLTable).Statements())
	switch {
	case err != nil:
		return err
	case k.Tier != "":
		return fmt.Errorf("the store suite fails on the unmutated statements: %s: %s", k.Checker, k.Detail)
	}
	w.storeTimeout = bounded(time.Since(began).Seconds(), storeTimeout)
	return nil
}

// runStoreSuite runs the store's behaviour suite with the statements q on
// the worker's server; a failing case kills the mutant.
func (w *worker) runStoreSuite(ctx context.Context, q relay.PGStatements) (Kill, error) {
	if err := w.prepareStoreSuite(ctx); err != nil {
		return Kill{}, err
	}
	b, _ := json.Marshal(q)
	f := filepath.Join(w.dir, "statements.json")
	if err := os.WriteFile(f, b, 0o644); err != nil {
		return Kill{}, fmt.Errorf("writing the statements: %w", err)
	}
	timeout := cmp.Or(w.storeTimeout, storeTimeout)
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(cctx, w.storeSuite, "-test.short", "-test.v", "-test.count=1", "-test.run", "^"+StoreSuiteTest+"$")
	cmd.Env = append(os.Environ(), "OUTBOX_TEST_DATABASE_URL="+w.srv.AdminURL(), StoreSuiteStatementsEnv+"="+f)
	outp, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		return Kill{}, ctx.Err()
	}
	if err == nil {
		if !bytes.Contains(outp, []byte("--- PASS: "+StoreSuiteTest+" (")) {
			return Kill{}, fmt.Errorf("the store suite did not run: %s", lastLines(string(outp), 8))
		}
		return Kill{}, nil
	}
	var failed []string
	for _, l := range strings.Split(string(outp), "\n") {
		l = strings.TrimSpace(l)
		if c, ok := strings.CutPrefix(l, "--- FAIL: "+StoreSuiteTest+"/"); ok {
			c, _, _ = strings.Cut(c, " ")
			failed = append(failed, c)
		}
	}
	checker := strings.Join(failed, ",")
	switch {
	case cctx.Err() != nil:
		checker = "storetest timeout " + timeout.String()
	case checker == "":
		checker = "storetest"
	}
	return Kill{Tier: TierStore, Checker: checker, Detail: shorten(lastLines(string(outp), 8), 300)}, nil
}

// runGo builds the worker command with the mutated file in an overlay,
// runs its fast tier, then the mutated package's tests.
func (w *worker) runGo(ctx context.Context, m Mutant) (Outcome, error) {
	o := Outcome{Mutant: m}
	start := time.Now()
	var fakeCov, sqlCov Coverage // nil: every line reached
	if c := w.opts.cov; c != nil {
		fakeCov, sqlCov = c.fakes, c.sql
	}
	onFakes := fakeCov.Reached(m.File, m.Line, m.Col)
	// The SQL tier runs the same relay loop as the fakes: it is worth
	// its seeds when the fakes never reach the line (a path only a
	// PostgreSQL store takes), or in a file of PostgreSQL code.
	onSQL := sqlCov.Reached(m.File, m.Line, m.Col) && (!onFakes || pgFiles[m.File])
	pkgDir := path.Dir(m.File)
	tests := map[string][]string{pkgDir: nil} // nil: every test
	if storeFiles[m.File] {
		tests["relay/storetest"] = nil
	}
	if c := w.opts.cov; c != nil {
		tests = testsReaching(c.unit, m.File, m.Line, m.Col)
	}
	unitReached := len(tests) > 0
	if err := os.MkdirAll(w.dir, 0o755); err != nil {
		return o, fmt.Errorf("preparing the overlay: %w", err)
	}
	mutated := filepath.Join(w.dir, path.Base(m.File))
	if err := os.WriteFile(mutated, m.Source, 0o644); err != nil {
		return o, fmt.Errorf("writing the overlay: %w", err)
	}
	root, err := filepath.Abs(w.opts.Root)
	if err != nil {
		return o, fmt.Errorf("locating the module: %w", err)
	}
	ov, _ := json.Marshal(map[string]map[string]string{"Replace": {filepath.Join(root, m.File): mutated}})
	overlay := filepath.Join(w.dir, "overlay.json")
	if err := os.WriteFile(overlay, ov, 0o644); err != nil {
		return o, fmt.Errorf("writing the overlay: %w", err)
	}
	// One build of the mutated package's test binary serves the fast
	// tier (its TestMain runs it, see WorkerMain) and the unit tier.
	bin := filepath.Join(w.dir, path.Base(pkgDir)+".test")
	step := time.Now()
	outp, err := w.goCmd(ctx, append([]string{"test", "-c", "-overlay", overlay, "-o", bin}, append(testFlags, "./"+pkgDir+"/")...)...)
	o.Timing.Build = time.Since(step).Seconds()
	if err != nil {
		if ctx.Err() != nil {
			return o, ctx.Err()
		}
		o.Status, o.Detail = StatusInvalid, shorten(string(outp), 300)
		o.Seconds = time.Since(start).Seconds()
		return o, nil
	}
	// The simulation and the unit tier each stop at their first kill;
	// the one the unmutated code's run says is cheaper for this line
	// goes first, so that a mutant both would kill costs the cheaper.
	var k Kill
	sim := func() error {
		if !onFakes && !onSQL {
			return nil
		}
		a := WorkerArgs{Seed: w.opts.FirstSeed}
		if onFakes {
			a.SimSeeds = w.opts.SimSeeds
		}
		if onSQL {
			a.SQLSeeds = w.opts.SQLSeeds
		}
		step := time.Now()
		defer func() { o.Timing.Sim = time.Since(step).Seconds() }()
		var err error
		k, err = w.runWorker(ctx, bin, filepath.Join(root, pkgDir), a)
		return err
	}
	unit := func() error {
		if !unitReached {
			return nil
		}
		step := time.Now()
		defer func() { o.Timing.Unit = time.Since(step).Seconds() }()
		var err error
		k, err = w.runUnit(ctx, bin, overlay, pkgDir, tests)
		return err
	}
	order := []func() error{sim, unit}
	if w.opts.cov.unitFirst(pkgDir, tests, onFakes, onSQL) {
		order = []func() error{unit, sim}
	}
	for _, run := range order {
		if err := run(); err != nil {
			return o, err
		}
		if k.Tier != "" {
			break
		}
	}
	if k.Tier == "" && !onFakes && !onSQL && !unitReached {
		k.Detail = "unreached: neither the simulation (fakes, SQL) nor the unit tests run this line of the unmutated code"
	}
	return finished(o, k, start), nil
}

// runUnit runs the unit tier of a Go mutant: the tests of each package
// that reach the mutated line, the mutated package's in bin (built with
// the overlay), another's (the store's suite) through a build of its
// own with the overlay. It stops at the first failing test.
func (w *worker) runUnit(ctx context.Context, bin, overlay, pkgDir string, tests map[string][]string) (Kill, error) {
	if _, err := w.backend(ctx); err != nil {
		return Kill{}, err
	}
	env := append(os.Environ(), "OUTBOX_TEST_DATABASE_URL="+w.srv.AdminURL())
	if names, ok := tests[pkgDir]; ok {
		timeout := w.opts.cov.unitTimeout(pkgDir, names)
		cmd := exec.CommandContext(ctx, bin, "-test.short", "-test.count=1", "-test.failfast", "-test.timeout="+timeout.String(), "-test.skip", unitSkip, "-test.run", runPattern(names))
		cmd.Dir = filepath.Join(w.opts.Root, pkgDir)
		cmd.Env = env
		outp, err := cmd.CombinedOutput()
		if ctx.Err() != nil {
			return Kill{}, ctx.Err()
		}
		if err != nil {
			return unitKill(pkgDir, outp, timeout), nil
		}
	}
	for pkg, names := range tests {
		if pkg == pkgDir {
			continue
		}
		timeout := w.opts.cov.unitTimeout(pkg, names)
		args := append([]string{"test", "-overlay", overlay, "-short", "-count=1", "-failfast", "-timeout", timeout.String(), "-run", runPattern(names)}, append(testFlags, "./"+pkg+"/")...)
		cmd := exec.CommandContext(ctx, "go", args...)
		cmd.Dir = w.opts.Root
		cmd.Env = env
		if outp, err := cmd.CombinedOutput(); err != nil {
			if ctx.Err() != nil {
				return Kill{}, ctx.Err()
			}
			return unitKill(pkg, outp, timeout), nil
		}
	}
	return Kill{}, nil
}

// pgFiles are the Go files of PostgreSQL code, whose mutants the SQL tier
// runs even where the fakes reach the line; storeFiles those of the store,
// whose mutants meet the store's behaviour suite too.
var (
	pgFiles    = map[string]bool{StoreFile: true, "relay/listen.go": true, InboxFile: true}
	storeFiles = map[string]bool{StoreFile: true, "relay/seam.go": true}
)

// runPattern is the -test.run pattern of names; every test when names is
// empty.
func runPattern(names []string) string {
	if len(names) == 0 {
		return "."
	}
	return "^(" + strings.Join(names, "|") + ")$"
}

// unitKill is the kill of a failed unit-tier run of pkg's tests, whose
// output is outp: named by its failing tests, or as a timeout when the
// run outlasted timeout (a mutant that hangs a test, or slows it past
// the bound, which the unmutated code's run sets).
func unitKill(pkg string, outp []byte, timeout time.Duration) Kill {
	checker := "go test ./" + pkg + "/ " + failedTests(outp)
	switch {
	case bytes.Contains(outp, []byte("panic: test timed out after")):
		checker = "go test ./" + pkg + "/ timeout " + timeout.String()
	case failedTests(outp) == "" && bytes.Contains(outp, []byte("panic: ")):
		checker = "go test ./" + pkg + "/ panic"
	}
	return Kill{Tier: TierUnit, Checker: checker, Detail: shorten(lastLines(string(outp), 8), 300)}
}

// failedTests names the failing top-level tests of a test binary's output.
func failedTests(outp []byte) string {
	var names []string
	for _, l := range strings.Split(string(outp), "\n") {
		if n, ok := strings.CutPrefix(l, "--- FAIL: "); ok {
			n, _, _ = strings.Cut(n, " ")
			names = append(names, n)
		}
	}
	return strings.Join(names, ",")
}

// runWorker runs the fast tier in bin, a mutant's test binary, on the
// worker's server and returns its verdict.
func (w *worker) runWorker(ctx context.Context, bin, dir string, a WorkerArgs) (Kill, error) {
	// The worker's server serves the mutant's SQL tier too: nothing else
	// runs on it meanwhile.
	if _, err := w.backend(ctx); err != nil {
		return Kill{}, err
	}
	a.PGURL = w.srv.AdminURL()
	env, _ := json.Marshal(a)
	cmd := exec.CommandContext(ctx, bin)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), WorkerEnv+"="+string(env))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	// A mutant may loop forever: the fast tier's bound is generous.
	timeout := w.opts.cov.fastTimeout(a)
	timer := time.AfterFunc(timeout, func() { _ = cmd.Process.Kill() })
	err := cmd.Run()
	timedOut := !timer.Stop()
	if ctx.Err() != nil {
		return Kill{}, ctx.Err()
	}
	var k Kill
	switch {
	case timedOut:
		k = Kill{Tier: TierSim, Checker: "timeout", Detail: "the fast tier did not finish within " + timeout.String()}
	case err != nil:
		// The mutated code broke the harness itself (a panic, a hang
		// the worker caught): the fast tier failed it.
		k = Kill{Tier: TierSim, Checker: "crash", Detail: shorten(stderr.String(), 300)}
	default:
		if err := json.Unmarshal(stdout.Bytes(), &k); err != nil {
			return Kill{}, fmt.Errorf("reading the worker's verdict %q: %w", stdout.String(), err)
		}
	}
	return k, nil
}

// fastTimeout and unitTimeout bound a mutant's fast tier and its unit
// tests when nothing was measured: on the unmutated code the fast tier
// takes some 10 s here and the slowest package's -short tests some 30 s,
// so a mutant past the bound hangs (a loop that no longer ends, a wait
// that never returns), which fails it: a timed-out test binary exits
// non-zero. With the unmutated code measured, each mutant's bound is
// timeoutFactor times what the same run took there, plus timeoutSlack
// (as mutation tools do: PIT's factor and constant), and never more
// than these.
const (
	fastTimeout  = 2 * time.Minute
	unitTimeout  = 90 * time.Second
	storeTimeout = 2 * time.Minute
	// earlySQLSeeds are the SQL tier's seeds a statement of the store
	// runs before the store's behaviour suite (see runSQL).
	earlySQLSeeds = 10
	timeoutFactor = 3
	timeoutSlack  = 15 * time.Second
)

// buildFlags are added to every build of mutated code, and testFlags
// to every `go test` of it: vet proves nothing about a mutant, and the
// debugging information is never read, so neither is paid for hundreds
// of times.
var (
	buildFlags = []string{"-ldflags=-w"}
	testFlags  = append([]string{"-vet=off"}, buildFlags...)
)

// unitSkip are the tests the unit tier leaves out of a Go mutant's
// packages: relay's test of the SQL tier's own sensitivity runs the SQL
// tier on edited statements, which the worker has just run on the mutated
// code.
const unitSkip = "^TestSQLTierSeesStatementRegressions$"

func (w *worker) goCmd(ctx context.Context, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = w.opts.Root
	return cmd.CombinedOutput()
}

func lastLines(s string, n int) string {
	lines := bytes.Split(bytes.TrimSpace([]byte(s)), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte(" | ")))
}

// finished sets o's kill, its time since start, and its status: killed
// when a tier killed it, survived otherwise.
func finished(o Outcome, k Kill, start time.Time) Outcome {
	k.Seconds = time.Since(start).Seconds()
	o.Kill = k
	o.Status = StatusSurvived
	if k.Tier != "" {
		o.Status = StatusKilled
	}
	return o
}
