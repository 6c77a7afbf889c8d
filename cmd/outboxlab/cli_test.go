package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/outboxlab/outboxlab/workload"

	"github.com/outboxlab/outboxlab/internal/mutant"
	"github.com/outboxlab/outboxlab/internal/report"
	"github.com/outboxlab/outboxlab/internal/sim"
	"github.com/outboxlab/outboxlab/scenarios"
	"github.com/outboxlab/outboxlab/testenv"
)

// testDeps returns the command's own dependencies with an empty
// environment: a test machine's OUTBOXLAB_SHARD or JOB_COMPLETION_INDEX
// must not shard the tests' runs.
func testDeps() deps {
	return withEnv(production(), nil)
}

// withEnv returns d with the environment env.
func withEnv(d deps, env map[string]string) deps {
	d.getenv = func(k string) string { return env[k] }
	return d
}

// invoke runs the command line with the command's own dependencies and
// returns its exit code and outputs.
func invoke(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	return invokeWith(t, testDeps(), args...)
}

// invokeWith runs the command line with the dependencies d.
func invokeWith(t *testing.T, d deps, args ...string) (int, string, string) {
	t.Helper()
	return invokeCtx(t, context.Background(), d, args...)
}

// invokeCtx runs the command line with the dependencies d under ctx.
func invokeCtx(t *testing.T, ctx context.Context, d deps, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(ctx, d, args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// helpFlags returns the flags the "Flags:" section of a help text lists.
func helpFlags(help string) []string {
	_, section, ok := strings.Cut(help, "\nFlags:\n")
	if !ok {
		return nil
	}
	var names []string
	for _, line := range strings.Split(section, "\n") {
		if m := regexp.MustCompile(`^  --([a-z-]+)`).FindStringSubmatch(line); m != nil {
			names = append(names, m[1])
		}
	}
	return names
}

func TestEveryVerbsHelpListsExactlyItsFlags(t *testing.T) {
	for _, v := range verbs() {
		t.Run(v.name, func(t *testing.T) {
			code, help, _ := invoke(t, "help", v.name)
			if code != exitOK {
				t.Fatalf("help %s exited %d", v.name, code)
			}
			code, help2, _ := invoke(t, v.name, "--help")
			if code != exitOK || help2 != help {
				t.Errorf("%s --help (exit %d) differs from help %s", v.name, code, v.name)
			}
			code, help3, _ := invoke(t, v.name, "-h")
			if code != exitOK || help3 != help {
				t.Errorf("%s -h (exit %d) differs from help %s", v.name, code, v.name)
			}

			fs, _ := v.newFlagSet(io.Discard)
			var defined []string
			fs.VisitAll(func(f *flag.Flag) { defined = append(defined, f.Name) })
			if listed := helpFlags(help); !slices.Equal(listed, defined) {
				t.Errorf("help lists flags %v, the verb accepts %v", listed, defined)
			}
			// The synopsis and the prose may mention only flags the verb
			// accepts.
			for _, m := range regexp.MustCompile(`--([a-z][a-z-]*)`).FindAllStringSubmatch(help, -1) {
				if m[1] != "help" && fs.Lookup(m[1]) == nil {
					t.Errorf("help mentions --%s, which %s does not accept", m[1], v.name)
				}
			}
			// Each flag the synopsis names is one the verb accepts, and
			// every flag shows up in the synopsis.
			synopsis := strings.SplitN(help, "\n", 2)[0]
			for _, name := range defined {
				if name != "list" && !strings.Contains(synopsis, "--"+name) {
					t.Errorf("the synopsis %q does not show --%s", synopsis, name)
				}
			}
		})
	}
}

func TestUsageErrorsExit2(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"frobnicate"},
		{"help", "frobnicate"},
		{"help", "sim", "extra"},
		{"sim", "--bogus"},
		{"sim", "--seeds", "0"},
		{"sim", "--seed", "-3"},
		{"sim", "--seed", "abc"},
		{"sim", "stray-argument"},
		{"run", "--events", "10", "--duration", "5s"},
		{"run", "--relay", "image:"},
		{"run", "--relay", "cmd:"},
		{"run", "--relay", "no-such-thing"},
		{"mutants", "--tier", "cloud"},
		{"bench", "--events", "-1"},
		{"report"},
		{"demo", "--events", "0"},
	} {
		code, out, errOut := invoke(t, args...)
		if code != exitUsage {
			t.Errorf("%q exited %d, want 2\nstdout: %s\nstderr: %s", args, code, out, errOut)
			continue
		}
		if strings.TrimSpace(errOut) == "" {
			t.Errorf("%q exited 2 without saying why", args)
		}
	}
}

func TestHelpWithoutVerbListsEveryVerb(t *testing.T) {
	code, out, _ := invoke(t, "help")
	if code != exitOK {
		t.Fatalf("help exited %d", code)
	}
	for _, v := range verbs() {
		if !strings.Contains(out, "\n  "+v.name+" ") {
			t.Errorf("help does not list %s", v.name)
		}
	}
}

// noDocker returns d with a Docker engine that does not answer.
func noDocker(d deps) deps {
	d.dockerAvailable = func(context.Context) error {
		return errors.New("docker engine unavailable: dial unix /var/run/docker.sock: connect: no such file")
	}
	return d
}

// withDocker returns d with a Docker engine that answers and holds every
// image.
func withDocker(d deps) deps {
	d.dockerAvailable = func(context.Context) error { return nil }
	d.imageExists = func(context.Context, string) (bool, error) { return true, nil }
	return d
}

func TestVerbsNeedingDockerSayWhatToDo(t *testing.T) {
	d := noDocker(testDeps())
	for _, args := range [][]string{{"run"}, {"demo"}, {"bench"}, {"mutants", "--tier", "infra"}} {
		code, _, errOut := invokeWith(t, d, args...)
		if code != exitUsage {
			t.Errorf("%q without Docker exited %d, want 2", args, code)
		}
		for _, want := range []string{"cannot reach the Docker engine", "start it", "outboxlab sim"} {
			if !strings.Contains(errOut, want) {
				t.Errorf("%q without Docker: message %q lacks %q", args, errOut, want)
			}
		}
	}
}

// TestRunWithoutDockerExits2 runs the built command with DOCKER_HOST
// pointing at nothing: the real engine check, and the real exit code.
func TestRunWithoutDockerExits2(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the command")
	}
	bin := filepath.Join(t.TempDir(), "outboxlab")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "run", "--scenario", "broker-down")
	cmd.Env = append(os.Environ(), "DOCKER_HOST=unix://"+filepath.Join(t.TempDir(), "no-docker.sock"))
	var errOut bytes.Buffer
	cmd.Stderr = &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != exitUsage {
		t.Fatalf("run without Docker: %v, want exit status 2\n%s", err, errOut.String())
	}
	if !strings.Contains(errOut.String(), "cannot reach the Docker engine") || !strings.Contains(errOut.String(), "outboxlab sim") {
		t.Errorf("message: %s", errOut.String())
	}
}

func TestSimJSONIsTheSummary(t *testing.T) {
	code, out, errOut := invoke(t, "sim", "--seeds", "30", "--seed", "5", "--json")
	if code != exitOK {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("stdout is not one JSON object: %v\n%s", err, out)
	}
	keys := slices.Sorted(func(yield func(string) bool) {
		for k := range got {
			if !yield(k) {
				return
			}
		}
	})
	want := []string{"events", "failed", "first_failure_seed", "first_seed", "history_sha256", "seeds", "seeds_per_sec", "shard", "steps_per_seed"}
	if !slices.Equal(keys, want) {
		t.Errorf("JSON keys %v, want %v", keys, want)
	}
	// Nothing failed: there is no first failing seed (0 would be a seed).
	if v, ok := got["first_failure_seed"]; !ok || v != nil {
		t.Errorf("first_failure_seed = %v, want null", v)
	}
	if got["first_seed"] != 5.0 || got["shard"] != "1/1" {
		t.Errorf("first_seed %v shard %v, want 5 and 1/1", got["first_seed"], got["shard"])
	}
	sum := sim.RunMany(context.Background(), 5, 30, sim.Options{})
	if got["seeds"] != 30.0 || got["failed"] != float64(sum.Failed) || got["history_sha256"] != sum.HistorySHA256 || got["events"] != float64(sum.Events) {
		t.Errorf("JSON %v does not match sim.RunMany's summary %+v", got, sum)
	}
}

func TestSimPrintsSeedFirst(t *testing.T) {
	code, out, _ := invoke(t, "sim", "--seeds", "3", "--seed", "11")
	if code != exitOK {
		t.Fatalf("exit %d\n%s", code, out)
	}
	first := strings.SplitN(out, "\n", 2)[0]
	if want := "SEED=11 " + sim.DrawSwarm(11).String(); first != want {
		t.Errorf("first line %q, want %q", first, want)
	}
	// Without --seed, a seed is drawn and printed, and replays the same.
	code, out, _ = invoke(t, "sim")
	m := regexp.MustCompile(`^SEED=(\d+) `).FindStringSubmatch(out)
	if code != exitOK || m == nil {
		t.Fatalf("exit %d, output %q", code, out)
	}
	_, again, _ := invoke(t, "sim", "--seed", m[1])
	if hash(out) != hash(again) {
		t.Errorf("replaying the printed seed gave another history:\n%s\n%s", out, again)
	}
}

// hash extracts the history hash a sim run printed.
func hash(out string) string {
	m := regexp.MustCompile(`history_sha256=([0-9a-f]+)`).FindStringSubmatch(out)
	if m == nil {
		return ""
	}
	return m[1]
}

// unsafeCatalogue returns d with a catalogue of the simulation's unsafe
// producers, as stand-ins for mutants.
func unsafeCatalogue(d deps) deps {
	variants := map[string]sim.Variant{
		"publish-then-commit": {Name: "publish-then-commit", Producer: workload.PublishThenCommit},
		"commit-then-publish": {Name: "commit-then-publish", Producer: workload.CommitThenPublish},
	}
	d.mutants = mutantCatalogue{
		names: func() []string { return []string{"commit-then-publish", "publish-then-commit"} },
		simVariant: func(name string) (sim.Variant, bool) {
			v, ok := variants[name]
			return v, ok
		},
	}
	return d
}

func TestSimFailurePrintsInvariantEventsSeedAndReplay(t *testing.T) {
	d := unsafeCatalogue(testDeps())
	dir := t.TempDir()
	code, out, errOut := invokeWith(t, d, "sim", "--seeds", "20", "--seed", "1", "--mutant", "publish-then-commit", "--out", dir)
	if code != exitFail {
		t.Fatalf("exit %d, want 1\n%s%s", code, out, errOut)
	}
	for _, want := range []string{"violated invariant phantom:", "  event ", "producer-", "SEED="} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	m := regexp.MustCompile(`replay: go run \./cmd/outboxlab (sim --seeds 1 --seed (\d+) --mutant publish-then-commit)\n`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no replay command in:\n%s", out)
	}
	// The replay command fails the same way on its own.
	code, again, _ := invokeWith(t, d, strings.Fields(m[1])...)
	if code != exitFail || !strings.Contains(again, "FAIL simulation seed "+m[2]) {
		t.Errorf("replay exited %d:\n%s", code, again)
	}
	b, err := report.ReadBundle(dir)
	if err != nil || b.Sim == nil {
		t.Fatalf("bundle: %v, %+v", err, b)
	}
	if b.Sim.Summary.Failed == 0 || len(b.Sim.Failures) == 0 || b.Sim.Mutant != "publish-then-commit" {
		t.Errorf("sim.json = %+v", b.Sim)
	}
	if _, err := report.ReadHistory(dir, b.Sim.Failures[0].History); err != nil {
		t.Errorf("failure history: %v", err)
	}
	if st, err := os.Stat(filepath.Join(dir, "sim.html")); err != nil || st.Size() == 0 {
		t.Errorf("sim.html: %v", err)
	}
}

func TestReportVerbWritesMarkdownFromABundle(t *testing.T) {
	dir := t.TempDir()
	if code, out, errOut := invoke(t, "sim", "--seeds", "10", "--seed", "3", "--out", dir); code != exitOK {
		t.Fatalf("sim exit %d\n%s%s", code, out, errOut)
	}
	md := filepath.Join(t.TempDir(), "REPORT.md")
	code, out, errOut := invoke(t, "report", "--in", dir, "--md", md)
	if code != exitOK {
		t.Fatalf("report exit %d\n%s%s", code, out, errOut)
	}
	data, err := os.ReadFile(md)
	if err != nil {
		t.Fatal(err)
	}
	sum := sim.RunMany(context.Background(), 3, 10, sim.Options{})
	for _, want := range []string{sum.HistorySHA256, "go run ./cmd/outboxlab sim --seeds 10 --seed 3", "## Chaos scenarios\n\nNot run"} {
		if !strings.Contains(string(data), want) {
			t.Errorf("REPORT.md lacks %q:\n%s", want, data)
		}
	}
	// An empty bundle is an error, not a page of invented figures.
	if code, _, errOut := invoke(t, "report", "--in", t.TempDir(), "--md", md); code != exitUsage || !strings.Contains(errOut, "holds no results") {
		t.Errorf("empty bundle: exit %d, %s", code, errOut)
	}
}

func TestParseRelay(t *testing.T) {
	for in, want := range map[string]scenarios.RelayUnderTest{
		"ours":                   {Name: "ours"},
		"image:acme/relay:1.2":   {Name: "acme/relay:1.2", Image: "acme/relay:1.2"},
		"cmd:./bin/relay --fast": {Name: "./bin/relay --fast", Command: []string{"./bin/relay", "--fast"}},
		"no-lease":               {Name: "no-lease"},
	} {
		got, err := parseRelay(in)
		if err != nil || got.Name != want.Name || got.Image != want.Image || !slices.Equal(got.Command, want.Command) {
			t.Errorf("parseRelay(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	// A relay-side mutant runs in the mutants image, selected by
	// OUTBOX_MUTANT; our relay keeps the relay image.
	if got, _ := parseRelay("no-lease"); got.Env[mutant.EnvVar] != "no-lease" || !got.Mutants {
		t.Errorf("mutant relay = %+v, want the mutants image with OUTBOX_MUTANT=no-lease", got)
	}
	if got, _ := parseRelay("ours"); got.Mutants || len(got.Env) > 0 {
		t.Errorf("ours = %+v, want the relay image without a mutant", got)
	}
	// watermill is its own target: its image, its outbox, its identity,
	// and it replays as itself.
	if got, err := parseRelay("watermill"); err != nil || got.Image != testenv.ImageWatermillRelay || !got.Outbox.Own() ||
		got.Identity.Header == "" || got.Replay != "--relay watermill" {
		t.Errorf("watermill = %+v, %v; want the watermill target", got, err)
	}
	for _, in := range []string{"image:", "cmd:  ", "image:a b", "nope", "consumer-no-dedupe"} {
		if _, err := parseRelay(in); err == nil {
			t.Errorf("parseRelay(%q) accepted", in)
		}
	}
}

func TestProgressLine(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	var buf bytes.Buffer
	p := newProgress(&stdio{err: &buf, now: clock}, false)
	p.Update("a")
	now = now.Add(progressEvery)
	p.Update("b")
	now = now.Add(time.Second)
	p.Update("c")
	if buf.String() != "b\n" {
		t.Errorf("non-terminal progress wrote %q, want one line after %s", buf.String(), progressEvery)
	}
	buf.Reset()
	p = newProgress(&stdio{err: &buf, now: clock, tty: true}, false)
	p.Update("a")
	p.Update("b")
	p.Clear()
	if buf.String() != "\r\033[Ka\r\033[Kb\r\033[K" {
		t.Errorf("terminal progress wrote %q", buf.String())
	}
	buf.Reset()
	newProgress(&stdio{err: &buf, now: clock, tty: true}, true).Update("x")
	if buf.Len() != 0 {
		t.Errorf("quiet progress wrote %q", buf.String())
	}
	line := scenarioLine("[1/3] broker-down", scenarios.Progress{Phase: "safety", Committed: 12, Delivered: 9, Faults: []string{"broker-down"}, Left: 14 * time.Second})
	if want := "[1/3] broker-down  safety   committed 12  delivered 9  faults: broker-down  left 14s"; line != want {
		t.Errorf("line = %q\nwant   %q", line, want)
	}
}

func TestMissingImagesSayMakeImages(t *testing.T) {
	var errOut bytes.Buffer
	std := &stdio{out: io.Discard, err: &errOut, now: time.Now}
	err := fmt.Errorf("starting the environment: %w: image outboxlab/postgres:15 is not in the local Docker engine", testenv.ErrImageNotFound)
	if code := environmentErr(std, "run", err); code != exitUsage || !strings.Contains(errOut.String(), "`make images`") {
		t.Errorf("exit %d, message %q", code, errOut.String())
	}
	if code := environmentErr(std, "run", errors.New("relay crashed")); code != 0 {
		t.Errorf("another error was taken for an environment problem (exit %d)", code)
	}
}

// TestProductionDepsAreComplete: the command's dependencies have every
// part set, since no verb checks for a missing one.
func TestProductionDepsAreComplete(t *testing.T) {
	d := production()
	v := reflect.ValueOf(d)
	for i := range v.NumField() {
		if f := v.Field(i); f.Kind() == reflect.Func && f.IsNil() {
			t.Errorf("production().%s is nil", v.Type().Field(i).Name)
		}
	}
	if d.mutants.names == nil || d.mutants.simVariant == nil || d.mutants.tune == nil {
		t.Errorf("production().mutants = %+v, want every part set", d.mutants)
	}
	if _, ok := d.mutants.simOptions("no-lease"); !ok {
		t.Error("the catalogue has no simulation of no-lease")
	}
}
