package consumer_test

import (
	"context"
	"errors"
	"log"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/outboxlab/outboxlab/internal/testenv"
)

// infra is the shared infrastructure of the integration tests.
type infra struct {
	DatabaseURL string
	AMQPURL     string
}

var (
	envOnce sync.Once
	env     *testenv.Env
	envErr  error
)

// testEnv starts the package's one environment on first use (the tests
// of this package run one at a time and share it), or skips: under -short,
// and when no Docker engine answers unless OUTBOXLAB_REQUIRE_DOCKER is set.
func testEnv(t testing.TB) *testenv.Env {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test: needs Docker (skipped with -short)")
	}
	envOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		env, envErr = testenv.Start(ctx, testenv.Options{Logf: log.Printf})
	})
	if envErr != nil {
		if errors.Is(envErr, testenv.ErrDockerUnavailable) && os.Getenv("OUTBOXLAB_REQUIRE_DOCKER") == "" {
			t.Skipf("integration test: %v", envErr)
		}
		t.Fatalf("starting the test environment: %v", envErr)
	}
	return env
}

// closeEnv removes the environment, if one was started.
func closeEnv() error {
	if env == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	return env.Close(ctx)
}

// sharedEnv returns the URLs of the environment that bypass toxiproxy.
func sharedEnv(t testing.TB) infra {
	t.Helper()
	e := testEnv(t)
	return infra{DatabaseURL: e.DirectDatabaseURL(), AMQPURL: e.DirectAMQPURL()}
}
