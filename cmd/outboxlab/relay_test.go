package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/outboxlab/outboxlab/internal/argv"
	"github.com/outboxlab/outboxlab/scenarios"
	"github.com/outboxlab/outboxlab/testenv"
)

func TestSplitArgs(t *testing.T) {
	for in, want := range map[string][]string{
		`./relay --fast`:                  {"./relay", "--fast"},
		"  ./relay\t--fast \n":            {"./relay", "--fast"},
		`./relay --name "a b" 'c d' e\ f`: {"./relay", "--name", "a b", "c d", "e f"},
		`"it's"`:                          {"it's"},
		`'say "hi"'`:                      {`say "hi"`},
		`a "" b ''`:                       {"a", "", "b", ""},
		`"a\"b" "c\\d" "e\nf" "\$x"`:      {`a"b`, `c\d`, `e\nf`, "$x"},
		`'a\b'`:                           {`a\b`},
		`$HOME * ~ a;b`:                   {"$HOME", "*", "~", "a;b"},
		`pre'mid dle'post`:                {"premid dlepost"},
		`'it'\''s'`:                       {"it's"},
		"":                                nil,
		"line\\\ncontinued":               {"linecontinued"},
	} {
		got, err := argv.SplitCommand(in)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("argv.SplitCommand(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{`'open`, `"open`, `trailing\`, `a "b\"`} {
		if _, err := argv.SplitCommand(in); !errors.Is(err, argv.ErrBadQuoting) {
			t.Errorf("argv.SplitCommand(%q) error %v, want argv.ErrBadQuoting", in, err)
		}
	}
}

// awkwardArgv is a relay command whose arguments hold blanks, both
// quotes, a backslash, a dollar and an empty one.
var awkwardArgv = []string{"./my relay", "--name", `it's "quoted"`, "--empty", "", `a\b`, "$HOME", "plain"}

func TestQuoteArgIsWhatAShellSplits(t *testing.T) {
	got, err := argv.SplitCommand(argv.JoinCommand(awkwardArgv))
	if err != nil || !slices.Equal(got, awkwardArgv) {
		t.Fatalf("argv.SplitCommand(argv.JoinCommand(%q)) = %q, %v", awkwardArgv, got, err)
	}
	if argv.QuoteArg("plain") != "plain" || argv.QuoteArg("") != "''" || argv.QuoteArg("a b") != "'a b'" {
		t.Errorf("quoteArg quotes what needs none, or not what does")
	}
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh to compare with")
	}
	// A real shell splits the quoted line into the same words.
	out, err := exec.Command(sh, "-c", `for a in `+argv.JoinCommand(awkwardArgv)+`; do printf '[%s]' "$a"; done`).Output()
	if err != nil {
		t.Fatal(err)
	}
	want := ""
	for _, a := range awkwardArgv {
		want += "[" + a + "]"
	}
	if string(out) != want {
		t.Errorf("sh splits %s into %s, want %s", argv.JoinCommand(awkwardArgv), out, want)
	}
}

// capturingRunner returns d with a runner that records the specs it is
// given and passes each, with the replay the scenario runner prints.
func capturingRunner(d deps, specs *[]runSpec) deps {
	d = withDocker(d)
	d.lookPath = func(file string) (string, error) { return file, nil }
	d.scenarioNames = func() []string { return []string{"broker-down"} }
	d.runScenarios = func(ctx context.Context, ss []runSpec, _ func(int, scenarios.Progress), _ func(string), _ func(int, runOutcome) error) ([]runOutcome, error) {
		*specs = append(*specs, ss...)
		out := make([]runOutcome, len(ss))
		for i, s := range ss {
			out[i] = runOutcome{Result: scenarios.Result{Scenario: s.Scenario, Seed: s.Seed, Valid: true,
				Replay: scenarios.ReplayCommand(s.Scenario, s.Seed, s.Relay, s.Events, s.Duration)}}
		}
		return out, nil
	}
	return d
}

// TestRelayCommandReplayRoundTrips runs a command relay whose arguments
// need quoting, takes the replay command the run prints, splits it as a
// shell would and runs it again: the same command reaches the runner.
func TestRelayCommandReplayRoundTrips(t *testing.T) {
	var specs []runSpec
	d := capturingRunner(testDeps(), &specs)
	code, out, errOut := invokeWith(t, d, "run", "--scenario", "broker-down", "--seed", "7", "--events", "5", "--json",
		"--relay", "cmd:"+argv.JoinCommand(awkwardArgv))
	if code != exitOK || len(specs) != 1 {
		t.Fatalf("exit %d, %d specs\n%s%s", code, len(specs), out, errOut)
	}
	if !slices.Equal(specs[0].Relay.Command, awkwardArgv) {
		t.Fatalf("the runner got the command %q, want %q", specs[0].Relay.Command, awkwardArgv)
	}
	var results []scenarios.Result
	if err := json.Unmarshal([]byte(out), &results); err != nil || len(results) != 1 {
		t.Fatalf("results: %v\n%s", err, out)
	}
	replay := results[0].Replay
	words, err := argv.SplitCommand(replay)
	if err != nil {
		t.Fatalf("the replay %q does not split: %v", replay, err)
	}
	if !slices.Equal(words[:3], strings.Fields(replayPrefix)) {
		t.Fatalf("replay %q does not start with %s", replay, replayPrefix)
	}
	if code, out, errOut := invokeWith(t, d, words[3:]...); code != exitOK || len(specs) != 2 {
		t.Fatalf("the replay %q: exit %d\n%s%s", replay, code, out, errOut)
	}
	if got := specs[1]; !slices.Equal(got.Relay.Command, awkwardArgv) || got.Seed != 7 || got.Events != 5 || got.Scenario != "broker-down" {
		t.Errorf("the replay %q ran %+v, want the same command, seed 7, 5 events", replay, got)
	}
}

func TestParseRelayQuotedCommand(t *testing.T) {
	u, err := parseRelay(`cmd:./relay --name "a b" 'c "d"'`)
	if err != nil || !slices.Equal(u.Command, []string{"./relay", "--name", "a b", `c "d"`}) {
		t.Fatalf("parseRelay = %+v, %v", u, err)
	}
	if u.Name != `./relay --name 'a b' 'c "d"'` {
		t.Errorf("name %q", u.Name)
	}
	for _, bad := range []string{`cmd:./relay "open`, `cmd:''`, `cmd:'' --x`} {
		if _, err := parseRelay(bad); err == nil {
			t.Errorf("parseRelay(%q) accepted", bad)
		}
	}
}

// noImages returns d with a Docker engine that holds none of the images
// named in missing, and a runner that fails the test if it is started.
func noImages(t *testing.T, d deps, missing ...string) deps {
	d = withDocker(d)
	d.scenarioNames = func() []string { return []string{demoScenario, "broker-down"} }
	d.imageExists = func(_ context.Context, ref string) (bool, error) { return !slices.Contains(missing, ref), nil }
	d.runScenarios = func(context.Context, []runSpec, func(int, scenarios.Progress), func(string), func(int, runOutcome) error) ([]runOutcome, error) {
		t.Error("containers were started for a relay that cannot run")
		return nil, errors.New("must not run")
	}
	return d
}

func TestRunChecksTheRelayBeforeStartingContainers(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "relay")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	notExe := filepath.Join(dir, "not-executable")
	if err := os.WriteFile(notExe, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args    []string
		missing []string
		want    []string
	}{
		{[]string{"run"}, []string{testenv.ImageRelay}, []string{testenv.ImageRelay, "`make images`"}},
		{[]string{"run", "--relay", "no-lease"}, []string{testenv.ImageRelayMutants}, []string{testenv.ImageRelayMutants, "`make images`"}},
		{[]string{"run", "--relay", "watermill"}, []string{testenv.ImageWatermillRelay}, []string{testenv.ImageWatermillRelay, "`make images`"}},
		{[]string{"run", "--relay", "watermill", "--capabilities", "parks"}, nil, []string{"watermill declares its own"}},
		{[]string{"run", "--relay", "image:acme/relay:1.2"}, []string{"acme/relay:1.2"}, []string{"acme/relay:1.2", "docker load", "nothing is pulled"}},
		{[]string{"run", "--relay", "cmd:" + filepath.Join(dir, "missing") + " --fast"}, nil, []string{"missing", "give the path of an executable file"}},
		{[]string{"run", "--relay", "cmd:" + notExe}, nil, []string{"not-executable", "give the path of an executable file"}},
		{[]string{"run", "--relay", "cmd:no-such-relay-on-path-xyz --fast"}, nil, []string{"no-such-relay-on-path-xyz", "is not on PATH", "give its path"}},
		{[]string{"demo", "--out", t.TempDir()}, []string{testenv.ImageRelay}, []string{testenv.ImageRelay, "`make images`"}},
		{[]string{"mutants", "--tier", "infra"}, []string{testenv.ImageRelayMutants}, []string{testenv.ImageRelayMutants, "`make images`"}},
	} {
		code, out, errOut := invokeWith(t, noImages(t, testDeps(), tc.missing...), tc.args...)
		if code != exitUsage {
			t.Errorf("%q: exit %d, want 2\n%s%s", tc.args, code, out, errOut)
		}
		for _, w := range tc.want {
			if !strings.Contains(errOut, w) {
				t.Errorf("%q: message lacks %q:\n%s", tc.args, w, errOut)
			}
		}
	}
	// A command that resolves, and images that are there, reach the runner.
	var specs []runSpec
	d := capturingRunner(testDeps(), &specs)
	d.lookPath = exec.LookPath
	if code, out, errOut := invokeWith(t, d, "run", "--relay", "cmd:"+exe+" --fast"); code != exitOK || len(specs) != 1 {
		t.Errorf("an executable relay command: exit %d\n%s%s", code, out, errOut)
	}
	// An engine that cannot be asked is an environment error too.
	d = noImages(t, testDeps())
	d.imageExists = func(context.Context, string) (bool, error) { return false, errors.New("engine hung up") }
	if code, _, errOut := invokeWith(t, d, "run"); code != exitUsage || !strings.Contains(errOut, "engine hung up") {
		t.Errorf("inspect error: exit %d, %s", code, errOut)
	}
}

// TestRunTargetRelayCommandNotFound: a target file whose relay program
// cannot be found is refused before any container starts, and the
// message says to fix the target's relay.command, not to give --relay.
func TestRunTargetRelayCommandNotFound(t *testing.T) {
	dir := t.TempDir()
	for name, command := range map[string]string{
		"path.yaml":    "./bin/no-such-relay --fast",
		"on-path.yaml": "no-such-relay-on-path-xyz --fast",
	} {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(`relay:
  command: `+command+`
outbox:
  migrate: CREATE TABLE {table} (id uuid PRIMARY KEY)
  stage: INSERT INTO {table} (id) VALUES (:id)
  rows: SELECT id FROM {table}
`), 0o644); err != nil {
			t.Fatal(err)
		}
		d := noImages(t, testDeps())
		d.lookPath = exec.LookPath
		code, out, errOut := invokeWith(t, d, "run", "--scenario", "broker-down", "--seed", "1", "--target", path)
		if code != exitUsage {
			t.Errorf("%s: exit %d, want 2\n%s%s", name, code, out, errOut)
		}
		for _, want := range []string{path, "relay.command", "fix the target's relay.command"} {
			if !strings.Contains(errOut, want) {
				t.Errorf("%s: the message lacks %q:\n%s", name, want, errOut)
			}
		}
		if strings.Contains(errOut, "--relay") {
			t.Errorf("%s: the message suggests --relay for a target file's relay:\n%s", name, errOut)
		}
	}
}

// TestRunTargetFile: --target reads a target file whose outbox has other
// column names than ours, and its relay, identity and capabilities reach
// the runner; the replay names the file again. --target with --relay or
// --capabilities, and a file that cannot be read, are usage errors.
func TestRunTargetFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "orders.yaml")
	if err := os.WriteFile(path, []byte(`name: orders
relay:
  command: /bin/true --flag
capabilities: parks,lease=5s
outbox:
  migrate: CREATE TABLE {table} (event_id uuid PRIMARY KEY, kind text NOT NULL, body jsonb NOT NULL, sent_at timestamptz)
  stage: INSERT INTO {table} (event_id, kind, body) VALUES (:id, :type, :payload)
  rows: SELECT event_id AS id, kind AS message_type, sent_at AS processed_at FROM {table}
delivery:
  id: body:event_id
`), 0o644); err != nil {
		t.Fatal(err)
	}
	var specs []runSpec
	d := capturingRunner(testDeps(), &specs)
	code, out, errOut := invokeWith(t, d, "run", "--scenario", "broker-down", "--seed", "3", "--json", "--target", path)
	if code != exitOK || len(specs) != 1 {
		t.Fatalf("exit %d, %d specs\n%s%s", code, len(specs), out, errOut)
	}
	u := specs[0].Relay
	if u.Name != "orders" || !u.Outbox.Own() || u.Identity.BodyField != "event_id" || !u.Parks || u.Lease != 5*time.Second ||
		strings.Join(u.Command, " ") != "/bin/true --flag" {
		t.Errorf("the runner got %+v", u)
	}
	if !strings.Contains(out, "--target "+argv.QuoteArg(path)) {
		t.Errorf("the replay does not name the target file:\n%s", out)
	}
	for _, args := range [][]string{
		{"run", "--target", path, "--relay", "ours2"},
		{"run", "--target", path, "--relay", "image:x"},
		{"run", "--target", path, "--capabilities", "parks"},
		{"run", "--target", filepath.Join(dir, "missing.yaml")},
	} {
		if code, _, errOut := invokeWith(t, d, args...); code != exitUsage {
			t.Errorf("%q: exit %d, want 2\n%s", args, code, errOut)
		}
	}
	// The results bundle never overwrites the target file it reads.
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	inOut := filepath.Join(dir, "scenarios.json")
	if err := os.WriteFile(inOut, data, 0o644); err != nil {
		t.Fatal(err)
	}
	n := len(specs)
	if code, _, errOut := invokeWith(t, d, "run", "--scenario", "broker-down", "--seed", "3", "--target", inOut, "--out", dir); code != exitUsage || !strings.Contains(errOut, "would overwrite") {
		t.Errorf("--out over the target file: exit %d, want 2\n%s", code, errOut)
	}
	if got, err := os.ReadFile(inOut); err != nil || string(got) != string(data) || len(specs) != n {
		t.Errorf("the target file was overwritten (%v) or the run ran", err)
	}
}
