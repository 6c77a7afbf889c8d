package main

import (
	"os/exec"
	"strings"
	"testing"
)

// harnessPackages are the packages of the harness that the relay binary
// must not link: the relay image carries the relay only. For the records
// it writes (OUTBOX_RECORDS) it links package history, the record format,
// which imports only the standard library.
var harnessPackages = []string{
	"github.com/outboxlab/outboxlab/internal/sim",
	"github.com/outboxlab/outboxlab/checker",
	"github.com/outboxlab/outboxlab/internal/mutant",
}

// listDeps returns what `go list -deps` prints for this package built
// with the given flags, or skips when the go tool is not on PATH.
func listDeps(t *testing.T, flags ...string) []string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("go list needs the go tool on PATH: %v", err)
	}
	args := append([]string{"list", "-deps"}, flags...)
	out, err := exec.Command(goBin, append(args, ".")...).CombinedOutput()
	if err != nil {
		t.Fatalf("go %s .: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.Fields(string(out))
}

// TestRelayBinaryLinksNoHarness: `go list -deps .` of the relay lists
// none of sim, checker and mutant. The build with the mutants
// tag lists mutant, so the check sees an import when there is one.
func TestRelayBinaryLinksNoHarness(t *testing.T) {
	deps := listDeps(t)
	for _, d := range deps {
		for _, h := range harnessPackages {
			if d == h || strings.HasPrefix(d, h+"/") {
				t.Errorf("the relay binary links %s (go list -deps ./cmd/relay); find the import with `go list -deps -f '{{.ImportPath}}: {{.Imports}}' ./cmd/relay`", d)
			}
		}
	}
	tagged := listDeps(t, "-tags", "mutants")
	if !strings.Contains(" "+strings.Join(tagged, " ")+" ", " github.com/outboxlab/outboxlab/internal/mutant ") {
		t.Errorf("the build with -tags mutants does not list package mutant: %v", tagged)
	}
}
