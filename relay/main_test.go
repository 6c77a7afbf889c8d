package relay_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if a test leaves a goroutine behind: the
// publisher, the listener and the relay loop all start some.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
