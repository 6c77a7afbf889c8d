package outbox_test

import (
	"os"
	"testing"

	"github.com/outboxlab/outboxlab/testenv"
)

// shared is the package's one environment, started by the first
// container test (none runs under -short).
var shared = testenv.Shared{Options: testenv.Options{NoBroker: true}}

// TestMain runs the tests and removes the shared environment.
func TestMain(m *testing.M) {
	os.Exit(shared.Main(m))
}
