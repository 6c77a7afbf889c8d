// Package wmrelay is a replica of watermill's forwarder configured by
// outboxlab's black-box contract: watermill-sql v4's Subscriber on the
// messages table OUTBOX_TABLE names, the forwarder of watermill's
// components/forwarder, and watermill-amqp v3's Publisher to the durable
// topic exchange OUTBOX_EXCHANGE names, with publisher confirms and
// mandatory publishing. It sets what the contract needs and keeps
// watermill's defaults for the rest; package wmtarget's comment lists the
// whole configuration. cmd/watermill-relay runs it.
package wmrelay

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wamqp "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/components/forwarder"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxlab/outboxlab/chaos/inproc"
	"github.com/outboxlab/outboxlab/contract"
	"github.com/outboxlab/outboxlab/outbox"
	"github.com/outboxlab/outboxlab/relay"
	"github.com/outboxlab/outboxlab/target/watermill/wmoutbox"
)

// Settings the replica gives watermill beyond the contract's.
const (
	// CloseTimeout is how long the forwarder's router waits for the
	// message in flight when the replica stops (watermill's default is
	// 30 s; the harness sends SIGKILL 10 s after SIGTERM).
	CloseTimeout = 5 * time.Second
	// StopWithin bounds the whole stop: the forwarder (router and
	// subscriber) gets CloseTimeout and a second, the AMQP publisher the
	// rest. A publish waiting for its confirm holds the AMQP publisher's
	// Close, and watermill-amqp waits for a confirm without a timeout.
	StopWithin = 8 * time.Second
	// RestartDelay is how long the replica waits before it dials again
	// when the broker cannot be reached at start, or starts the forwarder
	// again when it stopped on its own (its subscription failed).
	RestartDelay = time.Second
)

// Config is what a replica reads from its environment.
type Config struct {
	// DatabaseURL is OUTBOX_DATABASE_URL.
	DatabaseURL string
	// AMQPURL is the first URI of OUTBOX_AMQP_URL: watermill-amqp dials
	// one URI and reconnects to it, so on a broker cluster the replica
	// stays with the first node.
	AMQPURL string
	// Table is OUTBOX_TABLE, the messages table; the offsets table is
	// beside it (wmoutbox.For).
	Table outbox.Table
	// Exchange is OUTBOX_EXCHANGE, the durable topic exchange the
	// messages go to, with routing key = their destination topic.
	Exchange string
	// RelayID is OUTBOX_RELAY_ID, for the logs.
	RelayID string
	// PollInterval is OUTBOX_POLL_INTERVAL, the SQL subscriber's wait
	// between queries that found nothing; 0 keeps watermill's 1 s.
	PollInterval time.Duration
	// Failpoints is OUTBOX_FAILPOINTS, programmed (nil when unset): the
	// replica's one failpoint, relay.FailAfterConfirmBeforeMark, is
	// passed after the forwarder's publish of a message was confirmed
	// and before the subscriber acks its offset. It is the harness's
	// instrument in the replica, not part of watermill.
	Failpoints *inproc.Failpoints
}

// FailpointNames are the failpoints the replica passes through.
var FailpointNames = []string{relay.FailAfterConfirmBeforeMark}

// exchangeRe is what AMQP allows in an exchange name.
var exchangeRe = regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,255}$`)

// FromEnv reads the contract's variables through getenv. Every problem
// is reported, each naming its variable.
func FromEnv(getenv func(string) string) (Config, error) {
	var (
		c    Config
		errs []error
	)
	c.DatabaseURL = strings.TrimSpace(getenv(contract.EnvDatabaseURL))
	if c.DatabaseURL == "" {
		errs = append(errs, errors.New(contract.EnvDatabaseURL+" is not set"))
	}
	for _, u := range strings.Split(getenv(contract.EnvAMQPURL), ",") {
		if u = strings.TrimSpace(u); u != "" {
			c.AMQPURL = u
			break
		}
	}
	if c.AMQPURL == "" {
		errs = append(errs, errors.New(contract.EnvAMQPURL+" is not set"))
	}
	if s := strings.TrimSpace(getenv(contract.EnvTable)); s == "" {
		errs = append(errs, errors.New(contract.EnvTable+" is not set"))
	} else if t, err := outbox.ParseTable(s); err != nil {
		errs = append(errs, fmt.Errorf("%s: %w", contract.EnvTable, err))
	} else {
		c.Table = t
	}
	c.Exchange = strings.TrimSpace(getenv(contract.EnvExchange))
	if !exchangeRe.MatchString(c.Exchange) {
		errs = append(errs, fmt.Errorf("%s %q: want an exchange name of letters, digits, -, _, . and :", contract.EnvExchange, c.Exchange))
	}
	c.RelayID = strings.TrimSpace(getenv(contract.EnvRelayID))
	if s := strings.TrimSpace(getenv(contract.EnvPollInterval)); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			errs = append(errs, fmt.Errorf("%s %q: want a positive duration such as 1s", contract.EnvPollInterval, s))
		}
		c.PollInterval = d
	}
	if spec := strings.TrimSpace(getenv(contract.EnvFailpoints)); spec != "" {
		fp := inproc.NewFailpoints(FailpointNames...)
		if err := fp.SetSpec(spec); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", contract.EnvFailpoints, err))
		}
		c.Failpoints = fp
	}
	return c, errors.Join(errs...)
}

// AMQPConfig is the watermill-amqp configuration of the forwarder's
// publisher: NewDurableTopicConfig for exchange (routing key = the
// watermill topic, that is the destination topic of the envelope), with
// the exchange declared durable as the contract's exchange is (that
// config declares it non-durable, which RabbitMQ refuses for an existing
// durable exchange), publisher confirms on and mandatory publishing. The
// rest is watermill's: DefaultMarshaler (persistent delivery, the message
// UUID in the header "_watermill_message_uuid", metadata as headers, no
// message_id, type or content type), a new channel for every Publish
// (ChannelPoolSize 0), reconnection with DefaultReconnectConfig.
func AMQPConfig(url, exchange string) wamqp.Config {
	cfg := wamqp.NewDurableTopicConfig(url, exchange, "")
	cfg.Exchange.Durable = true
	cfg.Publish.ConfirmDelivery = true
	cfg.Publish.Mandatory = true
	return cfg
}

// SubscriberConfig is the watermill-sql configuration of the forwarder's
// subscriber on t: consumer group wmoutbox.ConsumerGroup, the default
// PostgreSQL schema and offsets adapters over t, pollInterval (0: 1 s),
// and watermill's defaults for the rest: ack deadline 30 s, resend
// interval 1 s, retry interval 1 s, the default backoff manager, no
// schema initialization (the tables exist).
func SubscriberConfig(t wmoutbox.Tables, pollInterval time.Duration) wsql.SubscriberConfig {
	return wsql.SubscriberConfig{
		ConsumerGroup:  wmoutbox.ConsumerGroup,
		SchemaAdapter:  t.SchemaAdapter(),
		OffsetsAdapter: t.OffsetsAdapter(),
		PollInterval:   pollInterval,
	}
}

// ForwarderConfig is the forwarder's configuration on t: the SQL topic
// of t, CloseTimeout, and watermill's defaults (a message that is not an
// envelope is nacked, not acked).
func ForwarderConfig(t wmoutbox.Tables) forwarder.Config {
	return forwarder.Config{ForwarderTopic: t.Topic(), CloseTimeout: CloseTimeout}
}

// ErrStopTimeout is returned by Run when the replica did not stop within
// StopWithin of ctx's end.
var ErrStopTimeout = errors.New("the forwarder did not stop in time")

// Run runs the replica until ctx ends: it connects to PostgreSQL and
// RabbitMQ (dialing again every RestartDelay while the broker cannot be
// reached), runs the forwarder (and runs it again when it stops on its
// own), and stops it within StopWithin once ctx ends.
func Run(ctx context.Context, cfg Config, logger watermill.LoggerAdapter) error {
	if logger == nil {
		logger = watermill.NopLogger{}
	}
	pcfg, err := pgxpool.ParseConfig(cfg.DatabaseURL)
	if err != nil {
		return errors.New(contract.EnvDatabaseURL + ": not a PostgreSQL URL")
	}
	pcfg.ConnConfig.ConnectTimeout = 5 * time.Second
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return fmt.Errorf("PostgreSQL pool: %w", err)
	}
	defer pool.Close()

	var pub *wamqp.Publisher
	for {
		if pub, err = wamqp.NewPublisher(AMQPConfig(cfg.AMQPURL, cfg.Exchange), logger); err == nil {
			break
		}
		logger.Error("Cannot connect to the broker, dialing again", err, nil)
		if !sleep(ctx, RestartDelay) {
			return nil
		}
	}
	tables := wmoutbox.For(cfg.Table)
	fcfg := ForwarderConfig(tables)
	if cfg.Failpoints != nil {
		fcfg.Middlewares = append(fcfg.Middlewares, afterConfirm(cfg.Failpoints))
	}
	for {
		err := forward(ctx, pool, pub, tables, cfg.PollInterval, fcfg, logger)
		if ctx.Err() != nil {
			return errors.Join(err, closeWithin(pub.Close, StopWithin-CloseTimeout-time.Second))
		}
		logger.Error("The forwarder stopped, starting it again", err, nil)
		if !sleep(ctx, RestartDelay) {
			return closeWithin(pub.Close, StopWithin)
		}
	}
}

// forward runs one forwarder until ctx ends or it stops on its own.
func forward(ctx context.Context, pool *pgxpool.Pool, pub *wamqp.Publisher, tables wmoutbox.Tables, poll time.Duration,
	fcfg forwarder.Config, logger watermill.LoggerAdapter) error {
	sub, err := wsql.NewSubscriber(wsql.BeginnerFromPgx(pool), SubscriberConfig(tables, poll), logger)
	if err != nil {
		return fmt.Errorf("watermill SQL subscriber: %w", err)
	}
	fwd, err := forwarder.NewForwarder(sub, pub, logger, fcfg)
	if err != nil {
		_ = sub.Close()
		return fmt.Errorf("watermill forwarder: %w", err)
	}
	done := make(chan error, 1)
	go func() { done <- fwd.Run(context.WithoutCancel(ctx)) }()
	select {
	case err := <-done:
		_ = sub.Close()
		if err == nil {
			err = errors.New("the forwarder's router closed")
		}
		return err
	case <-ctx.Done():
	}
	return closeWithin(func() error {
		err := fwd.Close()
		<-done
		return errors.Join(err, sub.Close())
	}, CloseTimeout+time.Second)
}

// afterConfirm passes fp's relay.FailAfterConfirmBeforeMark once the
// forwarder published a message and its confirm came: before the
// message is acked, so before the subscriber acks its offset.
func afterConfirm(fp *inproc.Failpoints) message.HandlerMiddleware {
	return func(h message.HandlerFunc) message.HandlerFunc {
		return func(m *message.Message) ([]*message.Message, error) {
			out, err := h(m)
			if err != nil {
				return out, err
			}
			if err := fp.Inject(m.Context(), relay.FailAfterConfirmBeforeMark); err != nil {
				return nil, err
			}
			return out, nil
		}
	}
}

// closeWithin runs stop and waits for it at most d.
func closeWithin(stop func() error, d time.Duration) error {
	done := make(chan error, 1)
	go func() { done <- stop() }()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C:
		return ErrStopTimeout
	}
}

// sleep waits d or until ctx ends, and reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
