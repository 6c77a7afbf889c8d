package main

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/outboxlab/outboxlab/contract"
	"github.com/outboxlab/outboxlab/internal/argv"
	"github.com/outboxlab/outboxlab/scenarios"
)

// TestRunDeclaresCapabilitiesOfAnOtherRelay gives a command relay its
// capabilities on the command line: the runner gets them, the replay the
// run prints carries them, and the replay runs with them again.
func TestRunDeclaresCapabilitiesOfAnOtherRelay(t *testing.T) {
	var specs []runSpec
	d := capturingRunner(testDeps(), &specs)
	code, out, errOut := invokeWith(t, d, "run", "--scenario", "broker-down", "--seed", "3", "--json",
		"--relay", "cmd:./my-relay", "--capabilities", "parks,fenced,lease=4s")
	if code != exitOK || len(specs) != 1 {
		t.Fatalf("exit %d, %d specs\n%s%s", code, len(specs), out, errOut)
	}
	if got, want := specs[0].Relay.Promises, (contract.Promises{Parks: true, Fenced: true, Locking: contract.Lease(4 * time.Second)}); got != want {
		t.Fatalf("the runner got %s, want %s", got, want)
	}
	var results []scenarios.Result
	if err := json.Unmarshal([]byte(out), &results); err != nil || len(results) != 1 {
		t.Fatalf("results: %v\n%s", err, out)
	}
	replay := results[0].Replay
	if !strings.Contains(replay, "--capabilities parks,fenced,lease=4s") {
		t.Fatalf("the replay %q does not declare the capabilities", replay)
	}
	words, err := argv.SplitCommand(replay)
	if err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := invokeWith(t, d, words[3:]...); code != exitOK || len(specs) != 2 {
		t.Fatalf("the replay: exit %d\n%s%s", code, out, errOut)
	}
	if specs[1].Relay.Promises != specs[0].Relay.Promises || !slices.Equal(specs[1].Relay.Command, specs[0].Relay.Command) {
		t.Errorf("the replay ran %s %v, want %s %v", specs[1].Relay.Promises, specs[1].Relay.Command, specs[0].Relay.Promises, specs[0].Relay.Command)
	}
}

func TestRunRefusesCapabilitiesItCannotUse(t *testing.T) {
	var specs []runSpec
	d := capturingRunner(testDeps(), &specs)
	for _, args := range [][]string{
		{"run", "--capabilities", "parks"},
		{"run", "--relay", "no-lease", "--capabilities", "parks"},
		{"run", "--relay", "cmd:./my-relay", "--capabilities", "parks,teleports"},
		// A key given twice has no meaning both values could have.
		{"run", "--relay", "cmd:./my-relay", "--capabilities", "lease=1ns,lease=2s"},
		{"run", "--relay", "cmd:./my-relay", "--capabilities", "parks,fenced,parks"},
		// Promises that contradict each other, and a bad locking style.
		{"run", "--relay", "cmd:./my-relay", "--capabilities", "parks,fenced"},
		{"run", "--relay", "cmd:./my-relay", "--capabilities", "fenced,locking=rowlock"},
		{"run", "--relay", "cmd:./my-relay", "--capabilities", "lease=4s,locking=rowlock"},
		{"run", "--relay", "cmd:./my-relay", "--capabilities", "locking=sometimes"},
	} {
		if code, _, errOut := invokeWith(t, d, args...); code != exitUsage || !strings.Contains(errOut, "capabilities") {
			t.Errorf("%v: exit %d, want %d with a word on --capabilities: %s", args, code, exitUsage, errOut)
		}
	}
	if len(specs) != 0 {
		t.Errorf("a refused run started the runner: %+v", specs)
	}
}

// TestRunRefusesARelayBesideATarget gives --relay with --target: the
// target file names its relay, so --relay, even with its default value,
// is refused rather than silently ignored.
func TestRunRefusesARelayBesideATarget(t *testing.T) {
	var specs []runSpec
	d := capturingRunner(testDeps(), &specs)
	for _, relay := range []string{"ours", "cmd:./my-relay", "watermill"} {
		code, out, errOut := invokeWith(t, d, "run", "--target", "mine.yaml", "--relay", relay, "--scenario", "broker-down", "--seed", "1")
		if code != exitUsage || !strings.Contains(errOut, "give --target or --relay, not both") {
			t.Errorf("--target with --relay %s: exit %d, want %d refusing both\n%s%s", relay, code, exitUsage, out, errOut)
		}
	}
	if len(specs) != 0 {
		t.Errorf("a refused run started the runner: %+v", specs)
	}
}

// TestRunEmptyShardGivesNoVerdict runs a shard that holds no cell: it
// exits 0 but prints no PASS, since nothing ran.
func TestRunEmptyShardGivesNoVerdict(t *testing.T) {
	var specs []runSpec
	d := capturingRunner(testDeps(), &specs)
	code, out, errOut := invokeWith(t, d, "run", "--seed", "1", "--shard", "2/3")
	if code != exitOK || !strings.Contains(out, "is empty") || !strings.Contains(out, "no verdict") {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
	if strings.Contains(out+errOut, "PASS") || len(specs) != 0 {
		t.Errorf("an empty shard ran %v or printed a verdict:\n%s%s", specs, out, errOut)
	}
}
