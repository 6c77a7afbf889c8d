package testenv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// WaitUntil calls cond every interval until it returns nil, and returns
// ctx's error together with cond's last error when ctx ends first. It is
// the harness's only way to wait for a condition: no bare sleeps.
func WaitUntil(ctx context.Context, interval time.Duration, cond func(ctx context.Context) error) error {
	t := time.NewTimer(0)
	defer t.Stop()
	var last error
	for {
		select {
		case <-ctx.Done():
			if last == nil {
				return ctx.Err()
			}
			return fmt.Errorf("%w (last error: %v)", ctx.Err(), last)
		case <-t.C:
		}
		if last = cond(ctx); last == nil {
			return nil
		}
		t.Reset(interval)
	}
}

// probeTimeout bounds one readiness probe, so that a paused or half-open
// service cannot hold a wait past its deadline.
const probeTimeout = 3 * time.Second

// pingPostgres connects to url and runs a query.
func pingPostgres(ctx context.Context, url string) error {
	var one int
	return queryPostgres(ctx, url, "SELECT 1", &one)
}

// pingRabbitMQ connects to url and opens a channel.
func pingRabbitMQ(ctx context.Context, url string) error {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	conn, err := DialAMQP(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	return ch.Close()
}

// DialAMQP connects to RabbitMQ at url within ctx: the TCP connection and
// the AMQP handshake both end when ctx does (amqp091's own Dial has no
// context and its handshake can wait for a long time on a paused broker).
func DialAMQP(ctx context.Context, url string) (*amqp.Connection, error) {
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(30 * time.Second)
	}
	cfg := amqp.Config{
		Heartbeat: 10 * time.Second,
		Locale:    "en_US",
		Dial: func(network, addr string) (net.Conn, error) {
			d := net.Dialer{}
			conn, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			// The deadline covers the handshake; amqp091 clears it after.
			if err := conn.SetDeadline(deadline); err != nil {
				_ = conn.Close()
				return nil, err
			}
			return conn, nil
		},
	}
	conn, err := amqp.DialConfig(url, cfg)
	if err != nil {
		if ctx.Err() != nil {
			return nil, errors.Join(ctx.Err(), err)
		}
		return nil, err
	}
	return conn, nil
}
