package relay_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if a test leaves a goroutine behind: the
// publisher, the listener and the relay loop all start some.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// The toxiproxy client uses http.DefaultClient, whose idle
		// keep-alive connections outlive the tests that opened them.
		goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"),
	)
}
