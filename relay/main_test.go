package relay_test

import (
	"os"
	"testing"
)

// TestMain runs the tests, removes the shared environment, and fails the
// package if a test left a goroutine behind: the publisher, the listener
// and the relay loop all start some.
func TestMain(m *testing.M) {
	os.Exit(shared.Main(m))
}
