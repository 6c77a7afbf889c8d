package relay_test

import (
	"os"
	"testing"

	"github.com/outboxlab/outboxlab/internal/mutant/generated"
)

// TestMain runs the tests, removes the shared environment, and fails the
// package if a test left a goroutine behind: the publisher, the listener
// and the relay loop all start some.
//
// Built for a generated Go mutant of the package, with
// generated.WorkerEnv set, the binary runs the fast tier on the mutated
// code instead (mutant/generated).
func TestMain(m *testing.M) {
	if code, ok := generated.WorkerMain(); ok {
		os.Exit(code)
	}
	os.Exit(shared.Main(m))
}
