// Command relay runs the outbox relay as a process configured by its
// environment, as the harness's black-box contract describes: it drains
// OUTBOX_TABLE in OUTBOX_DATABASE_URL to OUTBOX_EXCHANGE at OUTBOX_AMQP_URL
// until SIGTERM or SIGINT, then stops claiming at once, finishes or
// abandons what it has in flight within OUTBOX_PUBLISH_TIMEOUT, closes its
// connections within 1.5 s more, whatever its database and broker do
// (abandoning those that hang), and exits 0; a second SIGTERM or SIGINT
// ends it at once.
// A configuration it cannot use (missing variable, malformed URL, bad table
// name, duration or metrics address, a value out of bounds, settings that
// contradict each other) is reported on stderr naming the variables, with
// exit code 2; so is an outbox table that does not exist when
// OUTBOX_MIGRATE is off (PostgreSQL's undefined_table, found by a check at
// startup), with how to create it, an outbox table that lacks columns the
// relay reads or writes, naming them, and a metrics address it cannot
// listen on. An unreachable database or broker is not a configuration error: the
// relay logs and retries until they come back.
//
// Variables: OUTBOX_DATABASE_URL, OUTBOX_AMQP_URL, OUTBOX_TABLE
// (optionally schema.table) and OUTBOX_EXCHANGE are required.
// OUTBOX_RELAY_ID defaults to the hostname. OUTBOX_CLOCK_OFFSET skews the
// process clock (logs and sleeps only; leases follow the database clock).
// OUTBOX_FAILPOINTS programs failpoints (see inproc.ParseFailpoints).
// OUTBOX_POLL_INTERVAL, OUTBOX_BATCH_SIZE, OUTBOX_LEASE,
// OUTBOX_MAX_ATTEMPTS, OUTBOX_BACKOFF_BASE, OUTBOX_BACKOFF_MAX,
// OUTBOX_RETENTION, OUTBOX_SWEEP_BATCH, OUTBOX_SWEEP_INTERVAL,
// OUTBOX_PUBLISH_TIMEOUT, OUTBOX_STORE_TIMEOUT and OUTBOX_PUBLISH_WINDOW
// set the relay.Config fields of the same names; OUTBOX_BATCH_SIZE and
// OUTBOX_PUBLISH_WINDOW are at most 10000 and OUTBOX_PUBLISH_TIMEOUT from
// 100ms to 10m. OUTBOX_NOTIFY (default
// true) wakes the relay by LISTEN/NOTIFY; OUTBOX_MIGRATE (default false)
// creates the table first; OUTBOX_DECLARE_EXCHANGE (default false) declares
// the exchange; OUTBOX_METRICS_ADDR (host:port, e.g. :9090) serves
// Prometheus metrics on /metrics;
// OUTBOX_RECORDS names a file the relay appends its own operations to
// (claims with their lease on the database clock, publishes and their
// confirms, marks, retries, parks, sweeps, failpoints reached and its
// clean stop), as JSON Lines of package history, the record format, one
// lifetime after another, each starting with the header history.Header
// (history.ReadRecords reads them back); a file it cannot open
// is a configuration error. OUTBOX_LOG_LEVEL is debug, info, warn or error; OUTBOX_TYPES lists the
// known message types (see typeDecoder), every type being accepted when it
// is unset. OUTBOX_MUTANT runs a relay-side mutant of package mutant, a
// relay broken on purpose for the harness's kill matrix, but only in a
// binary built with `-tags mutants` (the image outboxlab/relay-mutants:dev);
// the relay binary itself, and its image outboxlab/relay:dev, link no
// mutant, simulation or checker code (only package history, the format
// of its records) and reject the variable as a configuration error. Logs are JSON lines on stderr, passwords redacted.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/outboxlab/outboxlab/contract"
	"github.com/outboxlab/outboxlab/history"
	"github.com/outboxlab/outboxlab/outbox"
	"github.com/outboxlab/outboxlab/relay"
)

// Exit codes.
const (
	exitOK     = 0
	exitFailed = 1
	exitConfig = 2
)

func main() {
	os.Exit(run(signalContext(), os.Getenv, os.Stderr))
}

// signalContext returns a context that ends at the first SIGTERM or
// SIGINT. Before it ends, the signals' default handling is back, so that
// a second SIGTERM or SIGINT ends the process at once, shutdown or not.
func signalContext() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-sig
		signal.Stop(sig)
		cancel()
	}()
	return ctx
}

// run is the whole process but for signals and os.Exit.
func run(ctx context.Context, getenv func(string) string, stderr io.Writer) int {
	s, err := parseEnv(getenv, osHostname)
	if err != nil {
		fmt.Fprintf(stderr, "relay: bad configuration:\n")
		var joined interface{ Unwrap() []error }
		if errors.As(err, &joined) {
			for _, e := range joined.Unwrap() {
				fmt.Fprintf(stderr, "  %v\n", e)
			}
		} else {
			fmt.Fprintf(stderr, "  %v\n", err)
		}
		return exitConfig
	}
	mut, err := mutantFromEnv(getenv)
	if err != nil {
		fmt.Fprintf(stderr, "relay: bad configuration:\n  %v\n", err)
		return exitConfig
	}
	log := newLogger(stderr, s)
	log.Info("relay starting",
		"table", s.Table.String(), "exchange", s.Exchange,
		"database", relay.RedactURL(s.DatabaseURL), "broker", relay.RedactURL(s.AMQPURL),
		"clock_offset", s.ClockOffset.String(), "notify", s.Notify, "failpoints", s.FailpointSpec,
		"poll_interval", s.Relay.PollInterval.String(), "batch_size", s.Relay.BatchSize,
		"lease", s.Relay.Lease.String(), "publish_timeout", s.Relay.PublishTimeout.String())
	if err := serve(ctx, s, log, mut); err != nil {
		var ce *configError
		if errors.As(err, &ce) {
			// A setting the environment cannot serve: a missing table
			// without OUTBOX_MIGRATE, a metrics address taken.
			log.Error("relay cannot run with this configuration", "err", err)
			fmt.Fprintf(stderr, "relay: bad configuration:\n  %v\n", ce)
			return exitConfig
		}
		log.Error("relay failed", "err", err)
		return exitFailed
	}
	return exitOK
}

// newLogger writes JSON lines to w, stamped by the process clock (which
// OUTBOX_CLOCK_OFFSET may skew).
func newLogger(w io.Writer, s settings) *slog.Logger {
	now := s.Relay.Now
	h := slog.NewJSONHandler(w, &slog.HandlerOptions{
		Level: s.LogLevel,
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) == 0 && a.Key == slog.TimeKey {
				return slog.Time(slog.TimeKey, now())
			}
			return a
		},
	})
	return slog.New(h).With("relay_id", s.Relay.RelayID)
}

// closeGrace is how long, beyond the publish timeout, the relay allows
// itself to close its connections once it is told to stop: the process
// exits within the publish timeout plus closeGrace of SIGTERM or SIGINT
// whatever its database and broker do (a hanging database held it for
// 15 s per connection, pgconn waiting for the answer to a cancel request).
const closeGrace = 1500 * time.Millisecond

// shutdown is the deadline by which serve closes what it opened:
// closeGrace after its first close, and no later than the publish timeout
// plus closeGrace after ctx ends (the relay finishes what it has in
// flight within the publish timeout first). A close that has not finished
// by then is abandoned, logged, and ended with the process, which closes
// every socket it leaves.
type shutdown struct {
	grace, afterStop time.Duration
	log              *slog.Logger

	mu       sync.Mutex
	deadline time.Time
}

// newShutdown returns the shutdown of a relay whose context is ctx and
// whose publish timeout is publishTimeout.
func newShutdown(ctx context.Context, publishTimeout time.Duration, log *slog.Logger) *shutdown {
	sd := &shutdown{grace: closeGrace, afterStop: publishTimeout + closeGrace, log: log}
	context.AfterFunc(ctx, func() { sd.bound(time.Now().Add(sd.afterStop)) })
	return sd
}

// bound moves the deadline to t if that is earlier.
func (sd *shutdown) bound(t time.Time) {
	sd.mu.Lock()
	defer sd.mu.Unlock()
	if sd.deadline.IsZero() || t.Before(sd.deadline) {
		sd.deadline = t
	}
}

// by returns the deadline of a close that starts now.
func (sd *shutdown) by() time.Time {
	sd.bound(time.Now().Add(sd.grace))
	sd.mu.Lock()
	defer sd.mu.Unlock()
	return sd.deadline
}

// close runs fn, which closes what, and waits for it until the deadline
// at most.
func (sd *shutdown) close(what string, fn func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	t := time.NewTimer(time.Until(sd.by()))
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		sd.log.Warn("shutdown: "+what+" did not finish in time, abandoned", "deadline", sd.by().Format(time.RFC3339Nano))
	}
}

// serve wires the relay and runs it until ctx ends.
func serve(ctx context.Context, s settings, log *slog.Logger, mut relayMutant) (err error) {
	sd := newShutdown(ctx, s.Relay.PublishTimeout, log)
	// The records file opens first, so that every lifetime has one, even
	// one stopped while the database is still out of reach; relay.Run
	// records the stop, and a lifetime that ends before it runs records
	// its stop here.
	var (
		rec *relay.FileRecords
		ran bool
	)
	if s.RecordsPath != "" {
		if rec, err = relay.OpenFileRecords(s.RecordsPath, s.Relay.RelayID); err != nil {
			return &configError{Var: recordsEnv, Err: err}
		}
		defer func() {
			if !ran {
				op := history.Op{Type: history.OK, F: history.Stop}
				if err != nil {
					op.Error = err.Error()
				}
				rec.Record(op)
			}
			if cerr := rec.Close(); cerr != nil {
				log.Error("writing records", "path", s.RecordsPath, "err", cerr)
			}
		}()
		log.Info("recording operations", "path", s.RecordsPath)
	}
	pcfg, err := pgxpool.ParseConfig(s.DatabaseURL)
	if err != nil {
		return fmt.Errorf("database config: %w", relay.RedactError(err, s.DatabaseURL))
	}
	pcfg.ConnConfig.RuntimeParams["application_name"] = "outbox-relay " + s.Relay.RelayID
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return fmt.Errorf("database pool: %w", relay.RedactError(err, s.DatabaseURL))
	}
	defer sd.close("closing the database connections", pool.Close)

	var unusable error
	if s.Migrate {
		if !retry(ctx, log, "migrating outbox table", func(ctx context.Context) error {
			err := outbox.Migrate(ctx, pool, s.Table)
			if permanentSQLError(err) {
				// No retry mends it: a table of the name with other
				// columns, a right the relay's role lacks. The check
				// below says what is wrong with the table, if that is it.
				unusable = &configError{Var: contract.EnvMigrate, Err: err}
				return nil
			}
			return err
		}) {
			return nil // stopped while the database was unreachable
		}
	}
	// Also after a migration: CREATE TABLE IF NOT EXISTS leaves a table
	// of the name with other columns as it is.
	if !retry(ctx, log, "checking outbox table", func(ctx context.Context) error {
		err := checkTable(ctx, pool, s.Table)
		if errors.Is(err, errTableMissing) || errors.Is(err, errTableColumns) {
			unusable = err // no retry can create it
			return nil
		}
		return err
	}) {
		return nil
	}
	if unusable != nil {
		return unusable
	}

	pub, err := relay.NewAMQPPublisher(relay.AMQPConfig{
		URL:             s.AMQPURL,
		Exchange:        s.Exchange,
		DeclareExchange: s.DeclareExchange,
		Name:            "outbox-relay " + s.Relay.RelayID,
		Logger:          log,
		Options:         mut.publishOptions(),
	})
	if err != nil {
		return err
	}
	defer sd.close("closing the broker connection", func() { _ = pub.Close() })

	opts := relay.Options{Logger: log}
	if rec != nil {
		opts.Records = rec
	}
	if s.Failpoints != nil {
		opts.Failpoints = s.Failpoints
	}
	if s.Types != nil {
		opts.Decoder = s.Types
		log.Info("message types", "known", s.Types.Names())
	}
	var srv *http.Server
	if s.MetricsAddr != "" {
		reg := prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		opts.Metrics = relay.NewMetrics(reg, s.Table.String())
		srv, err = serveMetrics(s.MetricsAddr, reg, log)
		if err != nil {
			return err
		}
		defer sd.close("stopping the metrics server", func() {
			sctx, cancel := context.WithDeadline(context.Background(), sd.by())
			defer cancel()
			_ = srv.Shutdown(sctx)
		})
	}

	store, rpub := mut.wire(pool, s.Table, pub, s.Relay.Now, log)
	r, err := relay.New(mut.config(s.Relay), store, rpub, opts)
	if err != nil {
		return err
	}
	var wake <-chan struct{}
	if s.Notify {
		wake, err = relay.Listen(ctx, s.DatabaseURL, s.Table, relay.ListenConfig{Logger: log})
		if err != nil {
			return err
		}
	}

	done := make(chan struct{})
	tctx, stopTotals := context.WithCancel(ctx)
	go func() {
		defer close(done)
		t := time.NewTicker(10 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-tctx.Done():
				return
			case <-t.C:
				logTotals(log, "relay totals", r.Totals())
			}
		}
	}()
	ran = true
	err = r.Run(ctx, wake)
	stopTotals()
	<-done
	logTotals(log, "relay stopped", r.Totals())
	return err
}

// logTotals logs the relay's running counts, each once under its own
// name: published counts the rows confirmed by the broker and marked
// processed.
func logTotals(log *slog.Logger, msg string, t *relay.Totals) {
	log.Info(msg,
		"ticks", t.Ticks.Load(), "claimed", t.Claimed.Load(), "published", t.Published.Load(),
		"lost_leases", t.LostLeases.Load(), "attempts", t.Attempts.Load(),
		"parked", t.Parked.Load(), "swept", t.Swept.Load(), "broker_failures", t.BrokerFailures.Load())
}

// retry runs fn until it succeeds (true) or ctx ends (false), logging each
// failure and backing off up to 5 s.
func retry(ctx context.Context, log *slog.Logger, what string, fn func(context.Context) error) bool {
	backoff := 100 * time.Millisecond
	for {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := fn(cctx)
		cancel()
		if err == nil {
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		log.Warn(what+" failed, retrying", "err", err, "retry_in", backoff.String())
		select {
		case <-ctx.Done():
			return false
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// serveMetrics serves /metrics on addr in the background.
func serveMetrics(addr string, reg *prometheus.Registry, log *slog.Logger) (*http.Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, &configError{Var: contract.EnvMetricsAddr, Err: fmt.Errorf("cannot listen on %s: %w", addr, err)}
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server", "err", err)
		}
	}()
	log.Info("serving metrics", "addr", ln.Addr().String())
	return srv, nil
}
