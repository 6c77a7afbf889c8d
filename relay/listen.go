package relay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxlab/outboxlab/outbox"
)

// ListenConfig tunes Listen. The zero value is ready.
type ListenConfig struct {
	// Logger receives connection events; nil discards them.
	Logger *slog.Logger
	// MinBackoff and MaxBackoff bound the delay between reconnects, which
	// doubles after each failure. Defaults 100 ms and 5 s.
	MinBackoff, MaxBackoff time.Duration
	// HealthInterval is how long a quiet connection waits before it is
	// pinged, so that a silently dead link is noticed. Default 30 s.
	HealthInterval time.Duration
	// ConnectTimeout bounds each connect and LISTEN. Default 10 s.
	ConnectTimeout time.Duration
}

// Listen wakes a relay when a staging transaction of table commits with
// outbox.StageOptions.Notify. It holds one dedicated connection that
// LISTENs on table.Channel() and sends on the returned channel (buffered 1;
// wake-ups that find it full are coalesced), which Relay.Run takes as its
// wake channel. When the connection drops, Listen reconnects with backoff
// and sends one wake-up after each reconnect, since notifications sent
// meanwhile are lost. The channel is closed when ctx ends. Only a malformed
// connString is an error; an unreachable database is retried.
func Listen(ctx context.Context, connString string, table outbox.Table, cfg ListenConfig) (<-chan struct{}, error) {
	pcfg, err := pgx.ParseConfig(connString)
	if err != nil {
		return nil, fmt.Errorf("listening on %s: parsing connection string %s: %w", table.Channel(), RedactURL(connString), redactErr(err, connString))
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.MinBackoff <= 0 {
		cfg.MinBackoff = 100 * time.Millisecond
	}
	if cfg.MaxBackoff < cfg.MinBackoff {
		cfg.MaxBackoff = max(5*time.Second, cfg.MinBackoff)
	}
	if cfg.HealthInterval <= 0 {
		cfg.HealthInterval = 30 * time.Second
	}
	if cfg.ConnectTimeout <= 0 {
		cfg.ConnectTimeout = 10 * time.Second
	}
	wake := make(chan struct{}, 1)
	l := &listener{cfg: cfg, pcfg: pcfg, channel: table.Channel(), wake: wake}
	go l.run(ctx)
	return wake, nil
}

type listener struct {
	cfg     ListenConfig
	pcfg    *pgx.ConnConfig
	channel string
	wake    chan struct{}
}

func (l *listener) signal() {
	select {
	case l.wake <- struct{}{}:
	default: // a wake-up is pending already
	}
}

func (l *listener) run(ctx context.Context) {
	defer close(l.wake)
	backoff := l.cfg.MinBackoff
	for ctx.Err() == nil {
		conn, err := l.connect(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			l.cfg.Logger.Warn("listen: connecting failed", "channel", l.channel, "err", err, "retry_in", backoff)
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, l.cfg.MaxBackoff)
			continue
		}
		backoff = l.cfg.MinBackoff
		l.cfg.Logger.Info("listen: listening", "channel", l.channel)
		// Notifications sent while no connection listened are lost: drain
		// once now.
		l.signal()
		err = l.wait(ctx, conn)
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		_ = conn.Close(cctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		l.cfg.Logger.Warn("listen: connection lost", "channel", l.channel, "err", err)
	}
}

// connect opens a connection and LISTENs, within ConnectTimeout.
func (l *listener) connect(ctx context.Context) (*pgx.Conn, error) {
	cctx, cancel := context.WithTimeout(ctx, l.cfg.ConnectTimeout)
	defer cancel()
	conn, err := pgx.ConnectConfig(cctx, l.pcfg.Copy())
	if err != nil {
		return nil, fmt.Errorf("connecting: %w", redactErr(err, l.pcfg.ConnString()))
	}
	if _, err := conn.Exec(cctx, "LISTEN "+pgx.Identifier{l.channel}.Sanitize()); err != nil {
		_ = conn.Close(context.WithoutCancel(cctx))
		return nil, fmt.Errorf("LISTEN %s: %w", l.channel, err)
	}
	return conn, nil
}

// wait forwards notifications until the connection fails or ctx ends. A
// connection quiet for HealthInterval is pinged.
func (l *listener) wait(ctx context.Context, conn *pgx.Conn) error {
	for {
		wctx, cancel := context.WithTimeout(ctx, l.cfg.HealthInterval)
		_, err := conn.WaitForNotification(wctx)
		cancel()
		switch {
		case err == nil:
			l.signal()
			continue
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, context.DeadlineExceeded) || pgconnTimeout(err):
			pctx, pcancel := context.WithTimeout(ctx, l.cfg.ConnectTimeout)
			perr := conn.Ping(pctx)
			pcancel()
			if perr != nil {
				return fmt.Errorf("health check: %w", perr)
			}
		default:
			return err
		}
	}
}

// pgconnTimeout reports whether err is a timeout that left the connection
// usable.
func pgconnTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}
