package storetest_test

import (
	"testing"

	"github.com/outboxlab/outboxlab/testenv"
)

// sharedDatabaseURL starts the test environment for the test (removed
// when it ends) and returns its PostgreSQL, bypassing toxiproxy. It skips
// under -short and when no Docker engine answers, unless
// OUTBOXLAB_REQUIRE_DOCKER is set.
func sharedDatabaseURL(t *testing.T) string {
	t.Helper()
	return testenv.StartT(t, testenv.Options{}).DirectDatabaseURL()
}
