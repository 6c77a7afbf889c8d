package relay_test

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain runs the tests, removes the shared environment, and fails the
// package if a test left a goroutine behind: the publisher, the listener
// and the relay loop all start some.
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
