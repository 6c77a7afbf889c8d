package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wamqp "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/components/forwarder"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxlab/outboxlab/outbox"
	"github.com/outboxlab/outboxlab/target/watermill/wmoutbox"
	"github.com/outboxlab/outboxlab/target/watermill/wmrelay"
)

// watermillTable is the messages table of the forwarder's SQL topic, in
// the run's schema (its offsets table is beside it: wmoutbox.For).
const watermillTable = "watermill_outboxlab_bench_forwarder"

// watermillStageChunk is how many events one staging transaction inserts
// through watermill's SQL publisher (three parameters each; PostgreSQL
// takes at most 65,535 per statement). Staging is not timed.
const watermillStageChunk = 5000

// watermillPeer is watermill's outbox (package wmoutbox, the same tables,
// staging and forwarder configuration as the watermill target of the
// chaos catalogue): producers publish through the SQL publisher, wrapped
// in the forwarder's envelope, inside their own transaction; the
// forwarder subscribes with the SQL subscriber and publishes each message
// to RabbitMQ with watermill-amqp.
type watermillPeer struct {
	in     *infra
	pool   *pgxpool.Pool
	tables wmoutbox.Tables
	logger *errorLogger
}

func newWatermillPeer(ctx context.Context, in *infra) (*watermillPeer, error) {
	table, err := outbox.ParseTable(in.schema + "." + watermillTable)
	if err != nil {
		return nil, fmt.Errorf("watermill: %w", err)
	}
	pool, err := pgxpool.New(ctx, in.dbURL)
	if err != nil {
		return nil, fmt.Errorf("watermill: connecting to PostgreSQL: %w", err)
	}
	return &watermillPeer{in: in, pool: pool, tables: wmoutbox.For(table), logger: &errorLogger{}}, nil
}

// errorLogger is a watermill logger that keeps the first error it is
// given and counts the rest, so that a forwarder that makes no progress
// says why.
type errorLogger struct {
	watermill.NopLogger
	mu     sync.Mutex
	first  string
	errors int
}

func (l *errorLogger) Error(msg string, err error, _ watermill.LogFields) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.errors == 0 {
		l.first = fmt.Sprintf("%s: %v", msg, err)
	}
	l.errors++
}

func (l *errorLogger) With(watermill.LogFields) watermill.LoggerAdapter { return l }

// summary returns the number of errors and the first one.
func (l *errorLogger) summary() (int, string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.errors, l.first
}

func (p *watermillPeer) close() { p.pool.Close() }

func (p *watermillPeer) subscriber() (*wsql.Subscriber, error) {
	sub, err := wsql.NewSubscriber(wsql.BeginnerFromPgx(p.pool), wmrelay.SubscriberConfig(p.tables, 0), p.logger)
	if err != nil {
		return nil, fmt.Errorf("watermill: SQL subscriber: %w", err)
	}
	return sub, nil
}

// stage creates watermill's tables and stages every event of w, each
// chunk in one transaction through forwarder.Publisher over the SQL
// publisher: what a watermill producer does in its business transaction.
func (p *watermillPeer) stage(ctx context.Context, w *workload) error {
	if err := p.tables.Migrate(ctx, p.pool); err != nil {
		return fmt.Errorf("watermill: %w", err)
	}
	if err := p.stageEvents(ctx, w); err != nil {
		return err
	}
	if _, err := p.pool.Exec(ctx, `ANALYZE `+p.tables.Messages.Ident()); err != nil {
		return fmt.Errorf("watermill: analyzing: %w", err)
	}
	return nil
}

// stageEvents stages every event of w in watermill's tables, made
// before, each chunk in one transaction.
func (p *watermillPeer) stageEvents(ctx context.Context, w *workload) error {
	for start := 0; start < w.len(); start += watermillStageChunk {
		end := min(start+watermillStageChunk, w.len())
		err := pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
			msgs := make([]*message.Message, 0, end-start)
			for i := start; i < end; i++ {
				m := message.NewMessage(w.idStr[i], w.payloads[i])
				m.SetContext(ctx)
				msgs = append(msgs, m)
			}
			return p.tables.Stage(tx, MessageType, msgs...)
		})
		if err != nil {
			return fmt.Errorf("watermill: staging events %d-%d: %w", start, end, err)
		}
	}
	return nil
}

// watermillRun is a running forwarder.
type watermillRun struct {
	fwd       *forwarder.Forwarder
	pub       *wamqp.Publisher
	forwarded atomic.Int64
	done      chan error
}

// start runs the forwarder: SQL subscriber in, watermill-amqp publisher
// out, configured as the watermill target's replica (publisher confirms,
// mandatory, the durable exchange), but with a pooled channel (its
// default opens a channel for every publish) and the relay's message
// properties, for a like-for-like rate.
func (p *watermillPeer) start(ctx context.Context) (*watermillRun, error) {
	cfg := wmrelay.AMQPConfig(p.in.amqpURL, p.in.exchange)
	cfg.Publish.ChannelPoolSize = 1
	cfg.Marshaler = wamqp.DefaultMarshaler{
		PostprocessPublishing: func(pub amqp.Publishing) amqp.Publishing {
			// The same properties as the relay's messages.
			if id, ok := pub.Headers[wamqp.DefaultMessageUUIDHeaderKey].(string); ok {
				pub.MessageId = id
			}
			pub.Type = MessageType
			pub.ContentType = "application/json"
			pub.Timestamp = time.Now().UTC()
			return pub
		},
	}
	out, err := wamqp.NewPublisher(cfg, p.logger)
	if err != nil {
		return nil, fmt.Errorf("watermill: AMQP publisher: %w", err)
	}
	sub, err := p.subscriber()
	if err != nil {
		_ = out.Close()
		return nil, err
	}
	run := &watermillRun{pub: out, done: make(chan error, 1)}
	count := func(h message.HandlerFunc) message.HandlerFunc {
		return func(m *message.Message) ([]*message.Message, error) {
			res, err := h(m)
			if err == nil {
				run.forwarded.Add(1)
			}
			return res, err
		}
	}
	fcfg := wmrelay.ForwarderConfig(p.tables)
	fcfg.Middlewares = []message.HandlerMiddleware{count}
	fwd, err := forwarder.NewForwarder(sub, out, p.logger, fcfg)
	if err != nil {
		_ = out.Close()
		return nil, fmt.Errorf("watermill: forwarder: %w", err)
	}
	run.fwd = fwd
	go func() { run.done <- fwd.Run(context.WithoutCancel(ctx)) }()
	select {
	case <-fwd.Running():
	case err := <-run.done:
		_ = out.Close()
		return nil, fmt.Errorf("watermill: forwarder ended at start: %w", err)
	case <-ctx.Done():
		_ = run.stop()
		return nil, ctx.Err()
	}
	return run, nil
}

// stop closes the forwarder and its publisher.
func (r *watermillRun) stop() error {
	var errs []error
	if err := r.fwd.Close(); err != nil {
		errs = append(errs, fmt.Errorf("watermill: closing forwarder: %w", err))
	}
	select {
	case err := <-r.done:
		if err != nil {
			errs = append(errs, fmt.Errorf("watermill: forwarder: %w", err))
		}
	case <-time.After(time.Minute):
		errs = append(errs, errors.New("watermill: forwarder did not stop within a minute"))
	}
	if err := r.pub.Close(); err != nil {
		errs = append(errs, fmt.Errorf("watermill: closing AMQP publisher: %w", err))
	}
	return errors.Join(errs...)
}
