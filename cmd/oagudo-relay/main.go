// Command oagudo-relay is one replica of github.com/oagudo/outbox's
// reader, run as the library's users run it and configured by the
// black-box contract's environment (docs/contract.md §3): the reader of
// the library, with its defaults unless a variable below says otherwise,
// publishing through a RabbitMQ publisher with confirms.
//
//   - OUTBOX_DATABASE_URL: the database; the connection's search path is
//     OUTBOX_TABLE's schema, since the library names its table without
//     one. OUTBOX_TABLE (schema.table): the library's table
//     (target/oagudo/oaoutbox).
//   - OUTBOX_AMQP_URL, OUTBOX_EXCHANGE: the broker (the first node of a
//     list) and the exchange. Each message is published to the exchange
//     with the event's type from the row's metadata as routing key,
//     message_id = the row's id, persistent, mandatory, and the publish
//     succeeds once the broker confirms it (a nack, a return or a lost
//     connection is an error, which the library counts as an attempt).
//   - OUTBOX_POLL_INTERVAL: the reader's interval (the library's default
//     is 10 s). OUTBOX_PUBLISH_TIMEOUT: its publish timeout (default 5 s).
//   - OAGUDO_MAX_ATTEMPTS: the library's attempt limit, after which it
//     discards (deletes) a row; unset, the library's default (no limit).
//   - OAGUDO_BACKOFF: the library's exponential delay between attempts,
//     BASE/MAX (default the library's 200ms/1h).
//
// OUTBOX_RELAY_ID names the replica in its logs; OUTBOX_CLOCK_OFFSET,
// OUTBOX_FAILPOINTS and OUTBOX_RECORDS are not read: the library reads
// the wall clock itself, and neither it nor this command records
// anything. SIGTERM stops the reader (waiting up to 8 s for the cycle in
// hand) and exits 0.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	oa "github.com/oagudo/outbox"

	"github.com/outboxlab/outboxlab/contract"
	"github.com/outboxlab/outboxlab/internal/relaycmd"
	"github.com/outboxlab/outboxlab/outbox"
	"github.com/outboxlab/outboxlab/relay"
	"github.com/outboxlab/outboxlab/target/oagudo/oaoutbox"
)

// Variables of this command beside the contract's.
const (
	EnvMaxAttempts = "OAGUDO_MAX_ATTEMPTS"
	EnvBackoff     = "OAGUDO_BACKOFF"
)

func main() { relaycmd.Main(configure, run) }

// config is what the environment says.
type config struct {
	db       *pgx.ConnConfig
	table    outbox.Table
	amqpURL  string
	exchange string
	name     string
	opts     []oa.ReaderOption
}

// configure reads the environment through get; every problem is reported
// at once.
func configure(get func(string) string) (config, error) {
	var c config
	var errs []error
	bad := func(name string, err error) { errs = append(errs, fmt.Errorf("%s: %w", name, err)) }
	table, err := outbox.ParseTable(get(contract.EnvTable))
	switch {
	case err != nil:
		bad(contract.EnvTable, err)
	case table.Schema() == "":
		bad(contract.EnvTable, errors.New("want schema.table: the library's table is found through the search path"))
	}
	c.table = table
	if c.db, err = pgx.ParseConfig(get(contract.EnvDatabaseURL)); err != nil {
		bad(contract.EnvDatabaseURL, relay.RedactError(err, get(contract.EnvDatabaseURL)))
	} else if table.Schema() != "" {
		c.db.RuntimeParams["search_path"] = pgx.Identifier{table.Schema()}.Sanitize()
	}
	c.amqpURL, _, _ = strings.Cut(get(contract.EnvAMQPURL), ",")
	if c.amqpURL == "" {
		bad(contract.EnvAMQPURL, errors.New("required"))
	}
	if c.exchange = get(contract.EnvExchange); c.exchange == "" {
		bad(contract.EnvExchange, errors.New("required"))
	}
	c.name = get(contract.EnvRelayID)
	duration := func(name string, set func(time.Duration)) { relaycmd.Duration(get, bad, name, set) }
	duration(contract.EnvPollInterval, func(d time.Duration) { c.opts = append(c.opts, oa.WithInterval(d)) })
	duration(contract.EnvPublishTimeout, func(d time.Duration) { c.opts = append(c.opts, oa.WithPublishTimeout(d)) })
	if v := get(EnvMaxAttempts); v != "" {
		n, err := strconv.ParseInt(v, 10, 32)
		if err != nil || n <= 0 {
			bad(EnvMaxAttempts, fmt.Errorf("want a positive integer, got %q", v))
		} else {
			c.opts = append(c.opts, oa.WithMaxAttempts(int32(n)))
		}
	}
	if v := get(EnvBackoff); v != "" {
		if b, err := contract.ParseBackoff(v); err != nil {
			bad(EnvBackoff, err)
		} else {
			c.opts = append(c.opts, oa.WithExponentialDelay(b.Base, b.Max))
		}
	}
	return c, errors.Join(errs...)
}

// run runs the reader until ctx ends.
func run(ctx context.Context, c config, log *slog.Logger) error {
	db := stdlib.OpenDB(*c.db)
	defer db.Close()
	pub, err := relay.NewAMQPPublisher(relay.AMQPConfig{URL: c.amqpURL, Exchange: c.exchange, Name: c.name, Logger: log})
	if err != nil {
		return err
	}
	defer pub.Close()
	r := oa.NewReader(oa.NewDBContext(db, oa.SQLDialectPostgres, oa.WithTableName(c.table.Name())),
		publisher{pub: pub}, c.opts...)
	r.Start()
	log.Info("reading", "table", c.table.String())
	go func() {
		for err := range r.Errors() {
			log.Warn("reader", "err", err)
		}
	}()
	go func() {
		for m := range r.DiscardedMessages() {
			log.Warn("discarded after the attempt limit", "id", m.ID, "attempts", m.TimesAttempted)
		}
	}()
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
	defer cancel()
	if err := r.Stop(sctx); err != nil {
		return fmt.Errorf("stopping the reader: %w", err)
	}
	log.Info("stopped")
	return nil
}

// publisher is the library's MessagePublisher over the broker: a publish
// succeeds once the broker confirms it, within the context the library
// bounds by its publish timeout.
type publisher struct {
	pub *relay.AMQPPublisher
}

func (p publisher) Publish(ctx context.Context, m *oa.Message) error {
	e, err := oaoutbox.Event(m)
	if err != nil {
		return err
	}
	conf, err := p.pub.Publish(ctx, relay.MessageOf(relay.Row{ID: e.ID, Type: e.Type, Payload: e.Payload, CorrelationID: e.CorrelationID}))
	if err != nil {
		return err
	}
	return conf.Wait(ctx)
}

var _ oa.MessagePublisher = publisher{}
