// Command river-relay is one replica of a relay built on River
// (github.com/riverqueue/river v0.51.2 over its pgx v5 driver
// riverpgxv5) as an outbox: the business transaction inserts a River job
// that carries the event (target/river/rvoutbox), and this command runs
// River's client, whose workers publish each job's event to RabbitMQ with
// publisher confirms. It is configured by the black-box contract's
// environment (docs/contract.md §3), River's settings only through
// variables of its own, and River's defaults otherwise.
//
//   - OUTBOX_DATABASE_URL: the database, through a pgxpool.Pool with
//     pgx's defaults and a 5 s connect timeout unless the URL sets one.
//     OUTBOX_TABLE: schema.river_job; the schema is River's Config.Schema,
//     where rvoutbox.Migrate put River's tables. River's queries name it
//     themselves; the connection's search path is left alone.
//   - OUTBOX_RELAY_ID: River's client id (Config.ID), which River appends
//     to a job's attempted_by when this replica fetches it, so that the
//     rows view names the replica that holds a job; unset, River makes
//     one up from the host name and the time.
//   - OUTBOX_AMQP_URL, OUTBOX_EXCHANGE: the broker (the first node of a
//     comma-separated list) and the exchange. The worker publishes each
//     job's event through relay.AMQPPublisher: routing key and type = the
//     event's type, message_id = its id, correlation_id, persistent,
//     mandatory, content type application/json, the payload as body, and
//     the publish succeeds once the broker confirms it. A nack, a return,
//     a lost connection or the timeout is an error the worker returns to
//     River, which counts it as a failed attempt, retries the job by its
//     retry policy and discards it once the job's attempts reach its
//     limit. relay.AMQPPublisher is meant for one goroutine, and River
//     works up to RIVER_MAX_WORKERS jobs at once: each running job takes
//     a publisher of its own from a pool (one connection each, dialled on
//     first use and kept for the next job), so a replica opens as many
//     connections as it ran jobs at once, at most RIVER_MAX_WORKERS.
//   - OUTBOX_POLL_INTERVAL: River's FetchPollInterval (River's default
//     1 s), the fallback to the LISTEN/NOTIFY wake-up that the insert
//     sends; River refuses a poll interval below its fetch cooldown
//     (FetchCooldown, default 100 ms), so a shorter one lowers the
//     cooldown with it. OUTBOX_PUBLISH_TIMEOUT: the bound of one publish
//     and its confirm; unset, River's job timeout alone bounds them.
//   - RIVER_RESCUE_AFTER: River's RescueStuckJobsAfter, after which the
//     leader's rescuer makes a job still running retryable, or discards
//     it at its attempt limit; unset, River's default, 1 h, or
//     RIVER_JOB_TIMEOUT + 1 h when that is set. rvoutbox.Schema's rows
//     view assumes rvoutbox.RescueAfter, to which rvtarget sets it.
//     RIVER_JOB_TIMEOUT: River's JobTimeout, which ends a job's context
//     (River's default 1 min); River refuses a rescue-after shorter than
//     it.
//   - RIVER_MAX_WORKERS: the default queue's MaxWorkers, the jobs the
//     replica works at once (100 unless set, the value of River's own
//     examples: River has no default and requires one).
//   - RIVER_RETRY: BASE/MAX, a retry policy of River's ClientRetryPolicy
//     kind instead of River's default: a job that fails with n errors
//     recorded (this failure included) waits min(BASE × 2^(n-1), MAX),
//     contract.Backoff's shape, without jitter. Unset, River's default:
//     n⁴ seconds with up to 10 % jitter either way (1 s, 16 s, 81 s,
//     4 min 16 s, ...). River computes the next time on the failing
//     worker's clock; a wait within its scheduler's interval (5 s) makes
//     the job available at once with that time, a longer one waits for
//     the leader's scheduler, which moves due jobs every 5 s.
//
// Every other River setting is River's default: MaxAttempts is not the
// relay's to set, since River keeps each job's attempt limit in its row
// from the insert (rvoutbox.Options.MaxAttempts, River's default 25);
// leader election on, so one replica at a time runs River's maintenance
// (the rescuer every 30 s, the scheduler every 5 s, the job cleaner,
// which deletes completed jobs 24 h after they finished, cancelled ones
// after 24 h and discarded ones after 7 days, and the reindexer at
// midnight UTC, which fails for want of ownership of the indexes under
// the harness's role and only logs it); LISTEN/NOTIFY on.
//
// OUTBOX_CLOCK_OFFSET is not read: River reads the wall clock itself
// (its rescuer and cleaner call time.Now), past any clock a command could
// give it. OUTBOX_LEASE, OUTBOX_BACKOFF_BASE, OUTBOX_BACKOFF_MAX,
// OUTBOX_MAX_ATTEMPTS, OUTBOX_BATCH_SIZE, OUTBOX_STORE_TIMEOUT,
// OUTBOX_TYPES, OUTBOX_RETENTION and OUTBOX_SWEEP_INTERVAL are not read:
// River's equivalents are the RIVER_ variables above, the attempt limit
// is the stage's, and River knows no message types. OUTBOX_FAILPOINTS and
// OUTBOX_RECORDS are not read: neither River nor this command has
// failpoints or records. The replica tries to start River's client again
// every second while the database cannot be reached. SIGTERM stops it:
// River's graceful Stop (no more fetches, the running jobs finish and
// their outcome is written) for up to 6 s, then StopAndCancel, which
// cancels the jobs still running (River makes them available again
// without counting the attempt) for the rest of 8 s; it then exits 0.
package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"

	"github.com/outboxlab/outboxlab/contract"
	"github.com/outboxlab/outboxlab/internal/relaycmd"
	"github.com/outboxlab/outboxlab/outbox"
	"github.com/outboxlab/outboxlab/relay"
	"github.com/outboxlab/outboxlab/target/river/rvoutbox"
)

// Variables of this command beside the contract's.
const (
	EnvRescueAfter = "RIVER_RESCUE_AFTER"
	EnvJobTimeout  = "RIVER_JOB_TIMEOUT"
	EnvMaxWorkers  = "RIVER_MAX_WORKERS"
	EnvRetry       = "RIVER_RETRY"
)

// maxWorkersDefault is the default queue's MaxWorkers unless
// RIVER_MAX_WORKERS says otherwise: the value River's documentation
// configures (River requires one and has no default).
const maxWorkersDefault = 100

// Bounds of the stop on SIGTERM: the graceful stop, then the whole stop
// with the cancelling one after it.
const (
	softStopWithin = 6 * time.Second
	stopWithin     = 8 * time.Second
)

// startRetry is how often the replica tries to start River's client
// again while it cannot.
const startRetry = time.Second

func main() { relaycmd.Main(configure, run) }

// config is what the environment says.
type config struct {
	db       *pgxpool.Config
	table    outbox.Table
	amqpURL  string
	exchange string
	name     string
	// publishTimeout bounds a publish and its confirm; 0: the job's
	// timeout alone does.
	publishTimeout time.Duration
	maxWorkers     int
	// river is River's configuration without its workers, queues and
	// logger, which run adds.
	river river.Config
}

// configure reads the environment through get; every problem is reported
// at once.
func configure(get func(string) string) (config, error) {
	c := config{maxWorkers: maxWorkersDefault}
	var errs []error
	bad := func(name string, err error) { errs = append(errs, fmt.Errorf("%s: %w", name, err)) }
	table, err := outbox.ParseTable(get(contract.EnvTable))
	switch {
	case err != nil:
		bad(contract.EnvTable, err)
	case table.Schema() == "" || table.Name() != rvoutbox.TableName:
		bad(contract.EnvTable, fmt.Errorf("want schema.%s, River's job table in the schema River is configured with, got %q", rvoutbox.TableName, get(contract.EnvTable)))
	}
	c.table = table
	c.river.Schema = table.Schema()
	if url := get(contract.EnvDatabaseURL); url == "" {
		bad(contract.EnvDatabaseURL, errors.New("required"))
	} else if c.db, err = pgxpool.ParseConfig(url); err != nil {
		bad(contract.EnvDatabaseURL, relay.RedactError(err, url))
	} else if c.db.ConnConfig.ConnectTimeout == 0 {
		c.db.ConnConfig.ConnectTimeout = 5 * time.Second
	}
	c.amqpURL, _, _ = strings.Cut(get(contract.EnvAMQPURL), ",")
	if c.amqpURL == "" {
		bad(contract.EnvAMQPURL, errors.New("required"))
	} else if _, err := relay.SplitAMQPURLs(c.amqpURL); err != nil {
		bad(contract.EnvAMQPURL, err)
	}
	if c.exchange = get(contract.EnvExchange); c.exchange == "" {
		bad(contract.EnvExchange, errors.New("required"))
	}
	c.name = get(contract.EnvRelayID)
	if len(c.name) > 100 {
		bad(contract.EnvRelayID, fmt.Errorf("River's client id is at most 100 characters, got %d", len(c.name)))
	}
	c.river.ID = c.name
	duration := func(name string, set func(time.Duration)) { relaycmd.Duration(get, bad, name, set) }
	duration(contract.EnvPollInterval, func(d time.Duration) {
		c.river.FetchPollInterval = d
		if d < river.FetchCooldownDefault {
			c.river.FetchCooldown = d
		}
	})
	duration(contract.EnvPublishTimeout, func(d time.Duration) { c.publishTimeout = d })
	duration(EnvRescueAfter, func(d time.Duration) { c.river.RescueStuckJobsAfter = d })
	duration(EnvJobTimeout, func(d time.Duration) { c.river.JobTimeout = d })
	if rescue := c.river.RescueStuckJobsAfter; rescue > 0 {
		if timeout := cmp.Or(c.river.JobTimeout, river.JobTimeoutDefault); rescue < timeout {
			bad(EnvRescueAfter, fmt.Errorf("%s is shorter than the job timeout %s (%s, River's default %s), which River refuses", rescue, timeout, EnvJobTimeout, river.JobTimeoutDefault))
		}
	}
	if v := get(EnvMaxWorkers); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > river.QueueNumWorkersMax {
			bad(EnvMaxWorkers, fmt.Errorf("want a whole number from 1 to %d, got %q", river.QueueNumWorkersMax, v))
		} else {
			c.maxWorkers = n
		}
	}
	if v := get(EnvRetry); v != "" {
		if b, err := contract.ParseBackoff(v); err != nil {
			bad(EnvRetry, err)
		} else {
			c.river.RetryPolicy = cappedRetry{b}
		}
	}
	return c, errors.Join(errs...)
}

// run runs River's client until ctx ends, then stops it.
func run(ctx context.Context, c config, log *slog.Logger) error {
	pool, err := pgxpool.NewWithConfig(ctx, c.db)
	if err != nil {
		return fmt.Errorf("database pool: %w", err)
	}
	defer pool.Close()
	pubs := &publishers{cfg: relay.AMQPConfig{URL: c.amqpURL, Exchange: c.exchange, Name: c.name, Logger: log}, keep: c.maxWorkers}
	defer pubs.close()
	workers := river.NewWorkers()
	if err := river.AddWorkerSafely(workers, &publishWorker{pubs: pubs, timeout: c.publishTimeout}); err != nil {
		return fmt.Errorf("registering the publish worker: %w", err)
	}
	cfg := c.river
	cfg.Workers = workers
	cfg.Queues = map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: c.maxWorkers}}
	cfg.Logger = log
	client, err := river.NewClient(riverpgxv5.New(pool), &cfg)
	if err != nil {
		return fmt.Errorf("River's client: %w", err)
	}
	// The client's own context is never cancelled: cancelling it would
	// cancel the running jobs at once. SIGTERM stops it below instead.
	for {
		err := client.Start(context.WithoutCancel(ctx))
		if err == nil {
			break
		}
		log.Warn("cannot start River's client; trying again", "err", err, "in", startRetry)
		select {
		case <-ctx.Done():
			log.Info("stopped before River's client started")
			return nil
		case <-time.After(startRetry):
		}
	}
	log.Info("working", "table", c.table.String(), "max_workers", c.maxWorkers)
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), stopWithin)
	defer cancel()
	soft, cancelSoft := context.WithTimeout(sctx, softStopWithin)
	err = client.Stop(soft)
	cancelSoft()
	if err != nil {
		log.Warn("jobs still running; cancelling them", "err", err)
		if err := client.StopAndCancel(sctx); err != nil {
			return fmt.Errorf("stopping River's client: %w", err)
		}
	}
	log.Info("stopped")
	return nil
}

// publishWorker is River's worker of rvoutbox's jobs: it publishes the
// job's event with a publisher of its own for the job, and returns to
// River whatever kept the broker from confirming it.
type publishWorker struct {
	river.WorkerDefaults[rvoutbox.Args]
	pubs    *publishers
	timeout time.Duration
}

// Work publishes the job's event and waits for the broker's confirm,
// within the publish timeout if there is one and the job's context.
func (w *publishWorker) Work(ctx context.Context, job *river.Job[rvoutbox.Args]) error {
	a := job.Args
	if w.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, w.timeout)
		defer cancel()
	}
	pub, err := w.pubs.take()
	if err != nil {
		return fmt.Errorf("event %s (job %d): %w", a.EventID, job.ID, err)
	}
	defer w.pubs.put(pub)
	conf, err := pub.Publish(ctx, relay.Message{ID: a.EventID.String(), Type: a.Type, CorrelationID: a.CorrelationID, Payload: a.Payload})
	if err != nil {
		return fmt.Errorf("event %s (job %d): %w", a.EventID, job.ID, err)
	}
	if err := conf.Wait(ctx); err != nil {
		return fmt.Errorf("event %s (job %d): %w", a.EventID, job.ID, err)
	}
	return nil
}

// publishers lends each running job a publisher that no other job uses
// meanwhile: relay.AMQPPublisher is meant for one goroutine (the returns
// of one confirm-mode channel are matched to its publishes by a single
// waiter). An idle publisher keeps its connection for the next job; at
// most keep idle ones are kept, the others closed.
type publishers struct {
	cfg  relay.AMQPConfig
	keep int

	mu     sync.Mutex
	idle   []*relay.AMQPPublisher
	closed bool
}

var errPublishersClosed = errors.New("the replica is stopping: no more publishes")

// take returns an idle publisher, or a new one, which dials on its first
// publish.
func (p *publishers) take() (*relay.AMQPPublisher, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, errPublishersClosed
	}
	if n := len(p.idle); n > 0 {
		pub := p.idle[n-1]
		p.idle = p.idle[:n-1]
		return pub, nil
	}
	return relay.NewAMQPPublisher(p.cfg)
}

// put gives back a publisher that take lent.
func (p *publishers) put(pub *relay.AMQPPublisher) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || len(p.idle) >= p.keep {
		_ = pub.Close()
		return
	}
	p.idle = append(p.idle, pub)
}

// close closes the idle publishers, and those given back later.
func (p *publishers) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for _, pub := range p.idle {
		_ = pub.Close()
	}
	p.idle = nil
}

// cappedRetry is RIVER_RETRY's retry policy: a job that failed with n
// errors recorded, this failure included, is retried Backoff.Wait(n) =
// min(BASE × 2^(n-1), MAX) after the failure, on the failing worker's
// clock, without jitter.
type cappedRetry struct{ backoff contract.Backoff }

// NextRetry is when the failed job is next eligible. River passes the
// job as it was fetched: its errors do not include this failure yet.
func (p cappedRetry) NextRetry(job *rivertype.JobRow) time.Time {
	return time.Now().UTC().Add(p.backoff.Wait(len(job.Errors) + 1))
}

var _ river.ClientRetryPolicy = cappedRetry{}
