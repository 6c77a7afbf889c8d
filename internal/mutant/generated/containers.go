package generated

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/outboxlab/outboxlab/internal/sim"
	"github.com/outboxlab/outboxlab/scenarios"
)

// TierContainers is the container tiers: the mutated package's tests on
// real PostgreSQL, RabbitMQ and toxiproxy (its tests without -short), then
// the chaos catalogue with the relay and the harness both built from the
// mutated code.
const TierContainers = "containers"

// Containers configures the container tier, which a fast-tier survivor
// judged a gap meets (an equivalent or excluded survivor is judged with a
// reason why no test can see it, and is not run on containers).
type Containers struct {
	// Run turns the container tier on. It needs a Docker engine and the
	// images of `make images`.
	Run bool
	// Seed is the catalogue's seed. Default: Options.FirstSeed.
	Seed uint64
	// Scenarios are the catalogue's scenarios to run; nil runs all of
	// them (the cluster scenarios only when named, as `run` does).
	Scenarios []string
	// Tests is the -run pattern of the package's tests; "" runs them all.
	Tests string
	// Capabilities is what the mutated relay declares to the catalogue
	// (`run --capabilities`): everything ours declares.
	Capabilities string
}

// containerTimeout bounds each step of the container tier: the package's
// tests on containers take a few minutes on the unmutated code, the
// catalogue some three.
const containerTimeout = 20 * time.Minute

// runContainers runs the container tier on m: the tests of the mutated
// file's package without -short, then the catalogue. A test that fails is
// run again on the unmutated code, and kills the mutant only if it passes
// there: a container test that fails either way says nothing of the
// mutant, and is an error.
func (w *worker) runContainers(ctx context.Context, m Mutant, c Containers) (Kill, error) {
	start := time.Now()
	dir := filepath.Join(w.dir, "containers")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Kill{}, fmt.Errorf("container tier: %w", err)
	}
	overlay, err := w.overlayOf(m, dir)
	if err != nil {
		return Kill{}, err
	}
	pkg := path.Dir(m.File)
	env := append(os.Environ(), "OUTBOXLAB_REQUIRE_DOCKER=1", "TESTCONTAINERS_RYUK_DISABLED=true")
	test := func(overlay, pattern string) ([]byte, error) {
		cctx, cancel := context.WithTimeout(ctx, containerTimeout)
		defer cancel()
		args := []string{"test", "-count=1", "-failfast", "-timeout", containerTimeout.String()}
		if overlay != "" {
			args = append(args, "-overlay", overlay)
		}
		if pattern != "" {
			args = append(args, "-run", pattern)
		}
		cmd := exec.CommandContext(cctx, "go", append(args, append(testFlags, "./"+pkg+"/")...)...)
		cmd.Dir, cmd.Env = w.opts.Root, env
		return cmd.CombinedOutput()
	}
	outp, err := test(overlay, c.Tests)
	if ctx.Err() != nil {
		return Kill{}, ctx.Err()
	}
	if err != nil {
		failed := failedTests(outp)
		if failed == "" {
			return Kill{}, fmt.Errorf("container tier: go test ./%s/ failed without a failing test (a build or environment failure): %s", pkg, lastLines(string(outp), 8))
		}
		if base, err := test("", "^("+strings.ReplaceAll(failed, ",", "|")+")$"); err != nil {
			return Kill{}, fmt.Errorf("container tier: %s of ./%s/ fails on the unmutated code too: %s", failed, pkg, lastLines(string(base), 8))
		}
		return Kill{Tier: TierContainers, Checker: "go test ./" + pkg + "/ " + failed, Detail: shorten(lastLines(string(outp), 8), 300),
			Seconds: time.Since(start).Seconds()}, nil
	}
	k, err := w.runCatalogue(ctx, overlay, dir, c)
	k.Seconds = time.Since(start).Seconds()
	if k.Tier != "" {
		k.Replay = w.replayContainers(m, c)
	}
	return k, err
}

// replayContainers is the command that judges m again: the fast tier,
// then the container tier with the whole catalogue at c's seed (each
// failed scenario's own replay is in the kill's detail).
func (w *worker) replayContainers(m Mutant, c Containers) string {
	seed := c.Seed
	if seed == 0 {
		seed = w.opts.FirstSeed
	}
	return fmt.Sprintf("go run ./cmd/outboxlab mutants --generated --mutant %s --seed %d", m.ID, seed)
}

// runCatalogue builds the relay and the harness with overlay and runs the
// catalogue on containers: the mutated relay as a host process
// (`--relay cmd:`) with every capability ours declares, judged by a
// harness whose consumer is the mutated one too. A failed scenario kills
// the mutant; an inconclusive one does not.
func (w *worker) runCatalogue(ctx context.Context, overlay, dir string, c Containers) (Kill, error) {
	relayBin, harness := filepath.Join(dir, "relay"), filepath.Join(dir, "outboxlab")
	for bin, main := range map[string]string{relayBin: "./cmd/relay", harness: "./cmd/outboxlab"} {
		if outp, err := w.goCmd(ctx, append([]string{"build", "-overlay", overlay, "-o", bin}, append(buildFlags, main)...)...); err != nil {
			return Kill{}, fmt.Errorf("container tier: building %s with the mutant: %v: %s", main, err, lastLines(string(outp), 8))
		}
	}
	seed := c.Seed
	if seed == 0 {
		seed = w.opts.FirstSeed
	}
	args := []string{"run", "--relay", "cmd:" + relayBin, "--capabilities", c.Capabilities,
		"--seed", strconv.FormatUint(seed, 10), "--json"}
	for _, s := range c.Scenarios {
		args = append(args, "--scenario", s)
	}
	cctx, cancel := context.WithTimeout(ctx, containerTimeout)
	defer cancel()
	cmd := exec.CommandContext(cctx, harness, args...)
	cmd.Dir = w.opts.Root
	cmd.Env = append(os.Environ(), "TESTCONTAINERS_RYUK_DISABLED=true")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		return Kill{}, ctx.Err()
	}
	code := 0
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		code = exit.ExitCode()
	case err != nil:
		return Kill{}, fmt.Errorf("container tier: running the catalogue: %w", err)
	}
	// Exit codes of `outboxlab run`: 0 pass, 1 failed, 3 inconclusive;
	// anything else is the harness's or the environment's failure.
	if code != 0 && code != 1 && code != 3 {
		return Kill{}, fmt.Errorf("container tier: the catalogue exited %d: %s", code, lastLines(stderr.String(), 8))
	}
	var results []scenarios.Result
	if err := json.Unmarshal(stdout.Bytes(), &results); err != nil {
		return Kill{}, fmt.Errorf("container tier: reading the catalogue's results: %w: %s", err, lastLines(stdout.String(), 4))
	}
	return catalogueKill(results, code, seed, stderr.String())
}

// catalogueKill judges the catalogue's results on a mutant by each run's
// verdict: a FAIL kills it, with every failed scenario's broken promises
// and replay as the evidence; an INCONCLUSIVE run (its fault could not
// bite) or a scenario not applicable to it neither kills it nor counts as
// passed. code is the catalogue's exit code, which must agree with the
// verdicts.
func catalogueKill(results []scenarios.Result, code int, seed uint64, stderr string) (Kill, error) {
	var failed, evidence, passed, inconclusive, unjudged []string
	for _, r := range results {
		switch r.Verdict() {
		case scenarios.VerdictFail:
			failed = append(failed, r.Scenario)
			problems := r.Problems
			if len(problems) == 0 {
				problems = []string{"failed with no problem named"}
			}
			evidence = append(evidence, fmt.Sprintf("%s seed %d: %s (replay: %s)", r.Scenario, r.Seed, strings.Join(problems, "; "), r.Replay))
		case scenarios.VerdictInconclusive:
			inconclusive = append(inconclusive, r.Scenario)
			unjudged = append(unjudged, r.Scenario+" (inconclusive: "+strings.Join(r.Inconclusive, "; ")+")")
		case scenarios.VerdictNotApplicable:
			unjudged = append(unjudged, r.Scenario+" (not applicable: "+r.NotApplicable+")")
		default:
			passed = append(passed, r.Scenario)
		}
	}
	if code == 1 && len(failed) == 0 {
		return Kill{}, fmt.Errorf("container tier: the catalogue exited 1 and no scenario failed: %s", lastLines(stderr, 8))
	}
	if code == 0 && (len(failed) > 0 || len(inconclusive) > 0) {
		return Kill{}, fmt.Errorf("container tier: the catalogue exited 0 with %d failed and %d inconclusive scenarios", len(failed), len(inconclusive))
	}
	if len(failed) == 0 {
		k := Kill{Detail: fmt.Sprintf("the package's container tests and %d scenarios passed", len(passed))}
		if len(unjudged) > 0 {
			k.Detail += fmt.Sprintf("; %d inconclusive or not applicable, which judge nothing: %s", len(unjudged), shorten(strings.Join(unjudged, ", "), 300))
		}
		return k, nil
	}
	return Kill{Tier: TierContainers, Checker: "run " + strings.Join(failed, ","), Seed: seed, Detail: shorten(strings.Join(evidence, " | "), 1200)}, nil
}

// overlayOf writes the build overlay that puts m in the code, in dir, and
// returns its path. A Go mutant replaces its file. A SQL mutant, whose
// statement the SQL tier swaps in through a store's seam, reaches a
// binary by an overlay too: its file is replaced by a copy whose
// constructor (NewPGStore, NewPGInbox) is renamed, and an added file
// defines the constructor under its own name, calling the original and
// handing the statement, for the table the store is built for, to
// UseStatements.
func (w *worker) overlayOf(m Mutant, dir string) (string, error) {
	root, err := filepath.Abs(w.opts.Root)
	if err != nil {
		return "", fmt.Errorf("locating the module: %w", err)
	}
	replace := map[string]string{}
	write := func(rel string, src []byte) error {
		f := filepath.Join(dir, strings.ReplaceAll(rel, "/", "_"))
		if err := os.WriteFile(f, src, 0o644); err != nil {
			return fmt.Errorf("writing the overlay: %w", err)
		}
		replace[filepath.Join(root, rel)] = f
		return nil
	}
	switch m.Kind {
	case KindGo:
		if err := write(m.File, m.Source); err != nil {
			return "", err
		}
	case KindSQL:
		orig, wrapper, err := sqlOverlay(root, m)
		if err != nil {
			return "", err
		}
		if err := write(m.File, orig); err != nil {
			return "", err
		}
		if err := write(path.Join(path.Dir(m.File), "zz_generated_mutant.go"), wrapper); err != nil {
			return "", err
		}
	default:
		return "", fmt.Errorf("mutant %s: unknown kind %q", m.ID, m.Kind)
	}
	b, _ := json.Marshal(map[string]map[string]string{"Replace": replace})
	f := filepath.Join(dir, "overlay.json")
	if err := os.WriteFile(f, b, 0o644); err != nil {
		return "", fmt.Errorf("writing the overlay: %w", err)
	}
	return f, nil
}

// sqlOverlay returns, for the SQL mutant m, its file with the
// constructor renamed, and the added file that defines the constructor
// with the mutated statement.
func sqlOverlay(root string, m Mutant) (orig, wrapper []byte, err error) {
	src, err := os.ReadFile(filepath.Join(root, m.File))
	if err != nil {
		return nil, nil, fmt.Errorf("reading %s: %w", m.File, err)
	}
	var (
		decl, renamed, body string
	)
	switch m.File {
	case StoreFile:
		// The statement was generated on the SQL tier's table: the store
		// of another table gets it with that table's name instead.
		decl, renamed = "func NewPGStore(", "func newPGStoreUnmutated("
		field := strings.ToUpper(m.Stmt[:1]) + m.Stmt[1:]
		// An app-clock mutant reads the relay's own clock where the SQL
		// tier's app_now() stood: the database's plus the relay's
		// OUTBOX_CLOCK_OFFSET, the skew the catalogue gives it.
		body = fmt.Sprintf(`package relay

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxlab/outboxlab/outbox"
)

// NewPGStore is the mutant's: the store with its %s statement mutated.
func NewPGStore(pool *pgxpool.Pool, table outbox.Table) *PGStore {
	s := newPGStoreUnmutated(pool, table)
	q := s.Statements()
	offset, _ := time.ParseDuration(os.Getenv("OUTBOX_CLOCK_OFFSET"))
	appNow := fmt.Sprintf("(now() + %%d * interval '1 microsecond')", offset.Microseconds())
	q.%s = strings.ReplaceAll(strings.ReplaceAll(%q, %q, table.Ident()), %q, appNow)
	if err := s.UseStatements(q); err != nil {
		panic(err)
	}
	return s
}
`, m.Stmt, field, m.SQL, sim.SQLTable.Ident(), sim.AppNowSQL)
	case InboxFile:
		decl, renamed = "func NewPGInbox(", "func newPGInboxUnmutated("
		body = fmt.Sprintf(`package consumer

import "github.com/jackc/pgx/v5/pgxpool"

// NewPGInbox is the mutant's: the inbox with its record statement mutated.
func NewPGInbox(pool *pgxpool.Pool, consumer string, effect Effect) (*PGInbox, error) {
	in, err := newPGInboxUnmutated(pool, consumer, effect)
	if err != nil {
		return nil, err
	}
	if err := in.UseStatements(InboxStatements{Record: %q}); err != nil {
		return nil, err
	}
	return in, nil
}
`, m.SQL)
	default:
		return nil, nil, fmt.Errorf("mutant %s: no constructor to wrap in %s", m.ID, m.File)
	}
	if bytes.Count(src, []byte(decl)) != 1 {
		return nil, nil, fmt.Errorf("mutant %s: %s does not declare %s) once", m.ID, m.File, decl)
	}
	return bytes.Replace(src, []byte(decl), []byte(renamed), 1), []byte(body), nil
}
