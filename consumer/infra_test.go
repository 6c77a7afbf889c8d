package consumer_test

import (
	"testing"

	"github.com/outboxlab/outboxlab/testenv"
)

// infra is the shared infrastructure of the integration tests.
type infra struct {
	DatabaseURL string
	AMQPURL     string
}

// shared is the package's one environment.
var shared testenv.Shared

// testEnv starts the package's one environment on first use (the tests
// of this package run one at a time and share it), or skips: under -short,
// and when no Docker engine answers unless OUTBOXLAB_REQUIRE_DOCKER is set.
func testEnv(t testing.TB) *testenv.Env {
	t.Helper()
	return shared.Get(t)
}

// sharedEnv returns the URLs of the environment that bypass toxiproxy.
func sharedEnv(t testing.TB) infra {
	t.Helper()
	e := testEnv(t)
	return infra{DatabaseURL: e.DirectDatabaseURL(), AMQPURL: e.DirectAMQPURL()}
}
