// Command watermill-relay runs one replica of watermill's forwarder under
// outboxlab's black-box contract (package wmrelay): it reads
// OUTBOX_DATABASE_URL, OUTBOX_AMQP_URL, OUTBOX_TABLE, OUTBOX_EXCHANGE,
// OUTBOX_RELAY_ID, OUTBOX_POLL_INTERVAL and OUTBOX_FAILPOINTS, forwards
// watermill-sql's messages to RabbitMQ until SIGTERM or SIGINT, and stops
// within 8 s.
// It exits 2 on a bad setting, 1 when it could not run or stop cleanly.
// Image outboxlab/watermill-relay:dev (`make images`).
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/ThreeDotsLabs/watermill"

	"github.com/outboxlab/outboxlab/target/watermill/wmrelay"
)

func main() {
	cfg, err := wmrelay.FromEnv(os.Getenv)
	if err != nil {
		fmt.Fprintf(os.Stderr, "watermill-relay: %v\n", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	logger := watermill.NewStdLoggerWithOut(os.Stderr, false, false).With(watermill.LogFields{"relay": cfg.RelayID})
	if err := wmrelay.Run(ctx, cfg, logger); err != nil {
		fmt.Fprintf(os.Stderr, "watermill-relay: %v\n", err)
		stop()
		os.Exit(1)
	}
}
