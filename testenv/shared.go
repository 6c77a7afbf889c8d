package testenv

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// Shared is one environment that the tests of a package start on first use
// and share, for packages whose tests run one at a time and leave the
// environment as they found it. Its zero value starts an Env with default
// Options; TestMain calls Main, or Close after the tests ran.
type Shared struct {
	// Options configures the environment; Logf defaults to log.Printf.
	Options Options

	once sync.Once
	env  *Env
	err  error
}

// Get returns the shared environment, starting it on the first call. It
// skips the test under -short, and when no Docker engine answers unless
// RequireDockerEnv is set; any other failure to start fails it.
func (s *Shared) Get(tb testing.TB) *Env {
	tb.Helper()
	if testing.Short() {
		tb.Skip("integration test: needs Docker (skipped with -short)")
	}
	s.once.Do(func() {
		opts := s.Options
		if opts.Logf == nil {
			opts.Logf = log.Printf
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		s.env, s.err = Start(ctx, opts)
	})
	if s.err != nil {
		if errors.Is(s.err, ErrDockerUnavailable) && os.Getenv(RequireDockerEnv) == "" {
			tb.Skipf("integration test: %v", s.err)
		}
		tb.Fatalf("starting the test environment: %v", s.err)
	}
	return s.env
}

// Close removes the environment, if one was started.
func (s *Shared) Close() error {
	if s.env == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	return s.env.Close(ctx)
}

// Main runs the package's tests, removes the environment if one was
// started, and fails the package when the tests left a goroutine behind;
// TestMain passes what it returns to os.Exit. The HTTP clients of toxiproxy
// and Docker keep idle keep-alive connections after the tests that opened
// them: those are not leaks.
func (s *Shared) Main(m *testing.M) int {
	code := m.Run()
	if err := s.Close(); err != nil {
		fmt.Fprintf(os.Stderr, "removing the test environment: %v\n", err)
		code = 1
	}
	if code != 0 {
		return code
	}
	if err := goleak.Find(
		goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"),
	); err != nil {
		fmt.Fprintf(os.Stderr, "goroutines left behind: %v\n", err)
		return 1
	}
	return 0
}
