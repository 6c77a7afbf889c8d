// Package relaycmd holds what the thin mains of the third-party relays
// (cmd/oagudo-relay, cmd/river-relay) share: reading the black-box
// contract's environment, and running until SIGTERM with the exit codes
// the contract gives (docs/contract.md).
package relaycmd

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/outboxlab/outboxlab/contract"
)

// Main configures a relay from the process's environment with configure,
// then runs it with run until SIGTERM or SIGINT, logging as text to
// stderr under the replica's name (contract.EnvRelayID). A bad
// configuration exits 2, a run that fails exits 1, and a run that
// returns nil once stopped exits 0.
func Main[C any](configure func(get func(string) string) (C, error), run func(ctx context.Context, c C, log *slog.Logger) error) {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil)).With("relay", os.Getenv(contract.EnvRelayID))
	cfg, err := configure(os.Getenv)
	if err != nil {
		log.Error("bad configuration", "err", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := run(ctx, cfg, log); err != nil {
		log.Error("relay failed", "err", err)
		stop()
		os.Exit(1)
	}
}

// Duration reads the positive duration of the variable name through get:
// when it is set, Duration calls set with it, and reports through bad a
// value that is anything but a positive Go duration.
func Duration(get func(string) string, bad func(name string, err error), name string, set func(time.Duration)) {
	v := get(name)
	if v == "" {
		return
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		bad(name, fmt.Errorf("want a positive duration, got %q", v))
		return
	}
	set(d)
}
