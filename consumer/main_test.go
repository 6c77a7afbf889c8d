package consumer_test

import (
	"os"
	"testing"
)

// TestMain runs the tests, removes the shared environment, and fails the
// package if a test left a goroutine behind: the AMQP source starts
// several.
func TestMain(m *testing.M) {
	os.Exit(shared.Main(m))
}
