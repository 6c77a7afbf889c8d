package inproc

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain runs failpointChild instead of the tests when childSpecEnv is
// set (TestFailpointKillsProcess starts the test binary so), and checks
// that the tests leave no goroutine behind.
func TestMain(m *testing.M) {
	if spec := os.Getenv(childSpecEnv); spec != "" {
		os.Exit(failpointChild(spec))
	}
	goleak.VerifyTestMain(m)
}
