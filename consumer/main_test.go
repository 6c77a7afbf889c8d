package consumer_test

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain runs the tests, removes the shared environment, and fails the
// package if a test left a goroutine behind: the AMQP source starts
// several.
func TestMain(m *testing.M) {
	code := m.Run()
	if err := closeEnv(); err != nil {
		fmt.Fprintf(os.Stderr, "removing the test environment: %v\n", err)
		code = 1
	}
	if code == 0 {
		err := goleak.Find(
			// HTTP clients (toxiproxy's, Docker's) keep idle keep-alive
			// connections after the tests that opened them.
			goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
			goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"),
		)
		if err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}
