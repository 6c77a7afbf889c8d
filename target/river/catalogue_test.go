package rvtarget_test

import (
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/outboxlab/outboxlab/scenarios"
	"github.com/outboxlab/outboxlab/suite"
	rvtarget "github.com/outboxlab/outboxlab/target/river"
)

// TestCatalogue runs baseline (no fault: every committed event delivered
// once, no duplicate at all) on seed 1 against River, with the relay
// built from ../../cmd/river-relay into the test's temporary directory,
// through the public suite. The whole catalogue is `outboxlab run --relay
// river`, which is expected to find what the package comment says. It
// starts containers: skipped under -short, and without a Docker engine
// unless OUTBOXLAB_REQUIRE_DOCKER is set.
func TestCatalogue(t *testing.T) {
	if testing.Short() {
		t.Skip("starts containers")
	}
	bin := filepath.Join(t.TempDir(), "river-relay")
	if out, err := exec.Command("go", "build", "-o", bin, "../../cmd/river-relay").CombinedOutput(); err != nil {
		t.Fatalf("building the relay: %v\n%s", err, out)
	}
	suite.Run(t, suite.Target{Relay: rvtarget.Target(bin)}, suite.Options{
		Scenarios: []string{scenarios.Baseline},
		Seed:      1,
		Timeout:   5 * time.Minute,
	})
}
