package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxlab/outboxlab/chaos/inproc"
	"github.com/outboxlab/outboxlab/outbox"
	"github.com/outboxlab/outboxlab/relay"
)

// settings is the relay process's configuration, read from the
// environment by parseEnv.
type settings struct {
	DatabaseURL     string
	AMQPURL         string
	Table           outbox.Table
	Exchange        string
	DeclareExchange bool
	ClockOffset     time.Duration
	FailpointSpec   string
	Failpoints      *inproc.Failpoints
	Relay           relay.Config
	Notify          bool
	Migrate         bool
	MetricsAddr     string
	LogLevel        slog.Level
	Types           *typeDecoder
}

// configError is a configuration problem, reported on stderr with the
// variable it is about; the process exits 2.
type configError struct {
	Var string
	Err error
}

func (e *configError) Error() string { return e.Var + ": " + e.Err.Error() }
func (e *configError) Unwrap() error { return e.Err }

// mutantEnv selects a relay-side mutant of package mutant (mutant.EnvVar,
// which only the binary built with the mutants tag may import; a test of
// that build checks the two agree).
const mutantEnv = "OUTBOX_MUTANT"

// exchangeRe is what RabbitMQ accepts as an exchange name.
var exchangeRe = regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,255}$`)

// parseEnv reads the relay's settings through getenv. Every problem is
// returned as a *configError naming its variable (several are joined).
// hostname supplies the default relay id.
func parseEnv(getenv func(string) string, hostname func() (string, error)) (settings, error) {
	var (
		s    settings
		errs []error
	)
	bad := func(name string, err error) { errs = append(errs, &configError{Var: name, Err: err}) }
	get := func(name string) string { return strings.TrimSpace(getenv(name)) }
	required := func(name string) string {
		v := get(name)
		if v == "" {
			bad(name, errors.New("is required"))
		}
		return v
	}
	duration := func(name string, dst *time.Duration) {
		v := get(name)
		if v == "" {
			return
		}
		d, err := time.ParseDuration(v)
		switch {
		case err != nil:
			bad(name, fmt.Errorf("not a duration: %q (want e.g. 500ms, 30s, 5m)", v))
		case d <= 0:
			bad(name, fmt.Errorf("must be positive, got %s", d))
		default:
			*dst = d
		}
	}
	integer := func(name string, dst *int) {
		v := get(name)
		if v == "" {
			return
		}
		n, err := strconv.Atoi(v)
		switch {
		case err != nil:
			bad(name, fmt.Errorf("not an integer: %q", v))
		case n <= 0:
			bad(name, fmt.Errorf("must be positive, got %d", n))
		default:
			*dst = n
		}
	}
	boolean := func(name string, dst *bool, def bool) {
		*dst = def
		v := get(name)
		if v == "" {
			return
		}
		b, err := strconv.ParseBool(v)
		if err != nil {
			bad(name, fmt.Errorf("not a boolean: %q (want true or false)", v))
			return
		}
		*dst = b
	}

	if s.DatabaseURL = required("OUTBOX_DATABASE_URL"); s.DatabaseURL != "" {
		if _, err := pgx.ParseConfig(s.DatabaseURL); err != nil {
			bad("OUTBOX_DATABASE_URL", fmt.Errorf("invalid connection string: %w", relay.RedactError(err, s.DatabaseURL)))
		}
	}
	if s.AMQPURL = required("OUTBOX_AMQP_URL"); s.AMQPURL != "" {
		if _, err := amqp.ParseURI(s.AMQPURL); err != nil {
			bad("OUTBOX_AMQP_URL", fmt.Errorf("invalid AMQP URI: %w", relay.RedactError(err, s.AMQPURL)))
		}
	}
	if v := required("OUTBOX_TABLE"); v != "" {
		t, err := outbox.ParseTable(v)
		if err != nil {
			bad("OUTBOX_TABLE", err)
		}
		s.Table = t
	}
	if s.Exchange = required("OUTBOX_EXCHANGE"); s.Exchange != "" && !exchangeRe.MatchString(s.Exchange) {
		bad("OUTBOX_EXCHANGE", fmt.Errorf("invalid exchange name %q: want 1 to 255 of A-Z a-z 0-9 _ . : -", s.Exchange))
	}
	boolean("OUTBOX_DECLARE_EXCHANGE", &s.DeclareExchange, false)

	s.Relay.RelayID = get("OUTBOX_RELAY_ID")
	if s.Relay.RelayID == "" {
		h, err := hostname()
		if err != nil || h == "" {
			bad("OUTBOX_RELAY_ID", fmt.Errorf("not set and the hostname is unknown: %v", err))
		}
		s.Relay.RelayID = h
	}
	if off, err := inproc.ParseClockOffset(get(inproc.ClockOffsetEnv)); err != nil {
		bad(inproc.ClockOffsetEnv, err)
	} else {
		s.ClockOffset = off
	}
	if s.FailpointSpec = get(inproc.FailpointsEnv); s.FailpointSpec != "" {
		fp, err := inproc.ParseFailpoints(s.FailpointSpec)
		if err != nil {
			bad(inproc.FailpointsEnv, err)
		}
		s.Failpoints = fp
	}

	duration("OUTBOX_POLL_INTERVAL", &s.Relay.PollInterval)
	integer("OUTBOX_BATCH_SIZE", &s.Relay.BatchSize)
	duration("OUTBOX_LEASE", &s.Relay.Lease)
	integer("OUTBOX_MAX_ATTEMPTS", &s.Relay.MaxAttempts)
	duration("OUTBOX_BACKOFF_BASE", &s.Relay.BackoffBase)
	duration("OUTBOX_BACKOFF_MAX", &s.Relay.BackoffMax)
	duration("OUTBOX_RETENTION", &s.Relay.Retention)
	integer("OUTBOX_SWEEP_BATCH", &s.Relay.SweepBatch)
	duration("OUTBOX_SWEEP_INTERVAL", &s.Relay.SweepInterval)
	duration("OUTBOX_PUBLISH_TIMEOUT", &s.Relay.PublishTimeout)
	duration("OUTBOX_STORE_TIMEOUT", &s.Relay.StoreTimeout)
	integer("OUTBOX_PUBLISH_WINDOW", &s.Relay.PublishWindow)
	boolean("OUTBOX_NOTIFY", &s.Notify, true)
	boolean("OUTBOX_MIGRATE", &s.Migrate, false)
	s.MetricsAddr = get("OUTBOX_METRICS_ADDR")

	if v := get("OUTBOX_LOG_LEVEL"); v != "" {
		if err := s.LogLevel.UnmarshalText([]byte(v)); err != nil {
			bad("OUTBOX_LOG_LEVEL", fmt.Errorf("want debug, info, warn or error, got %q", v))
		}
	}
	if v := get("OUTBOX_TYPES"); v != "" {
		d, err := parseTypes(v)
		if err != nil {
			bad("OUTBOX_TYPES", err)
		}
		s.Types = d
	}

	if len(errs) == 0 {
		offset := s.ClockOffset
		s.Relay.Now = func() time.Time { return time.Now().Add(offset) }
		s.Relay = s.Relay.WithDefaults()
		if err := s.Relay.Validate(); err != nil {
			bad("OUTBOX_*", fmt.Errorf("relay settings: %w", err))
		}
	}
	return s, errors.Join(errs...)
}

// osHostname is the default relay id's source.
var osHostname = os.Hostname
