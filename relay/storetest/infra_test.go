package storetest_test

import "testing"

// sharedDatabaseURL returns the PostgreSQL of the shared test environment.
// Until the environment is wired in, the PostgreSQL backend runs only when
// OUTBOX_TEST_DATABASE_URL names a database.
func sharedDatabaseURL(t *testing.T) string {
	t.Helper()
	t.Skip("needs PostgreSQL: set OUTBOX_TEST_DATABASE_URL")
	return ""
}
