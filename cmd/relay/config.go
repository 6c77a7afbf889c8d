package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxlab/outboxlab/chaos/inproc"
	"github.com/outboxlab/outboxlab/contract"
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
	// RecordsPath is the records file (OUTBOX_RECORDS) the relay appends
	// its operations to; empty: no records.
	RecordsPath string
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
const mutantEnv = contract.EnvMutant

// recordsEnv names the records file, an optional variable of the
// black-box contract: the relay appends its operations there as history
// JSON Lines (see relay.FileRecords).
const recordsEnv = contract.EnvRecords

// exchangeRe is what RabbitMQ accepts as an exchange name.
var exchangeRe = regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,255}$`)

// hostRe is a host name (or an IPv4 address) in OUTBOX_METRICS_ADDR.
var hostRe = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9.-]{0,251}[A-Za-z0-9])?$`)

// Bounds of the settings whose extremes no relay should run with: a claim
// of more rows than maxBatchSize holds a transaction and its locks too
// long, a publish timeout below minPublishTimeout times out healthy
// confirms, one above maxPublishTimeout lets a hung broker stall the
// relay (and its shutdown) for longer than anyone waits, and a publish
// window above maxPublishWindow keeps more messages unconfirmed, each
// held in memory and its row leased, than a broker confirms within one
// publish timeout.
const (
	maxBatchSize      = 10000
	minPublishTimeout = 100 * time.Millisecond
	maxPublishTimeout = 10 * time.Minute
	maxPublishWindow  = 10000
)

// checkListenAddr reports what is wrong with addr as a host:port to
// listen on: the port a number from 0 to 65535, the host empty (every
// interface), an IP address or a host name.
func checkListenAddr(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("not host:port: %q (want e.g. :9090 or 127.0.0.1:9090)", addr)
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || fmt.Sprint(n) != port {
		return fmt.Errorf("port %q of %q is not a number from 0 to 65535", port, addr)
	}
	if host != "" && net.ParseIP(host) == nil && !hostRe.MatchString(host) {
		return fmt.Errorf("host %q of %q is neither an IP address nor a host name", host, addr)
	}
	return nil
}

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
	// fieldVar names the variable of each relay.Config field, for the
	// problems relay.Config.Validate finds.
	fieldVar := map[string]string{"RelayID": contract.EnvRelayID}
	// durationIn reads a duration from lo to hi (hi 0: no upper bound)
	// into the relay.Config field named field.
	durationIn := func(name, field string, dst *time.Duration, lo, hi time.Duration) {
		fieldVar[field] = name
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
		case d < lo || hi > 0 && d > hi:
			bad(name, fmt.Errorf("must be from %s to %s, got %s", lo, hi, d))
		default:
			*dst = d
		}
	}
	duration := func(name, field string, dst *time.Duration) { durationIn(name, field, dst, 0, 0) }
	// integerIn reads an integer from 1 to hi (hi 0: no upper bound).
	integerIn := func(name, field string, dst *int, hi int) {
		fieldVar[field] = name
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
		case hi > 0 && n > hi:
			bad(name, fmt.Errorf("must be from 1 to %d, got %d", hi, n))
		default:
			*dst = n
		}
	}
	integer := func(name, field string, dst *int) { integerIn(name, field, dst, 0) }
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

	if s.DatabaseURL = required(contract.EnvDatabaseURL); s.DatabaseURL != "" {
		if _, err := pgx.ParseConfig(s.DatabaseURL); err != nil {
			bad(contract.EnvDatabaseURL, fmt.Errorf("invalid connection string: %w", relay.RedactError(err, s.DatabaseURL)))
		}
	}
	if s.AMQPURL = required(contract.EnvAMQPURL); s.AMQPURL != "" {
		if _, err := relay.SplitAMQPURLs(s.AMQPURL); err != nil {
			bad(contract.EnvAMQPURL, fmt.Errorf("invalid AMQP URI: %w", err))
		}
	}
	if v := required(contract.EnvTable); v != "" {
		t, err := outbox.ParseTable(v)
		if err != nil {
			bad(contract.EnvTable, err)
		}
		s.Table = t
	}
	if s.Exchange = required(contract.EnvExchange); s.Exchange != "" && !exchangeRe.MatchString(s.Exchange) {
		bad(contract.EnvExchange, fmt.Errorf("invalid exchange name %q: want 1 to 255 of A-Z a-z 0-9 _ . : -", s.Exchange))
	}
	boolean(contract.EnvDeclareExchange, &s.DeclareExchange, false)

	s.Relay.RelayID = get(contract.EnvRelayID)
	if s.Relay.RelayID == "" {
		h, err := hostname()
		if err != nil || h == "" {
			bad(contract.EnvRelayID, fmt.Errorf("not set and the hostname is unknown: %v", err))
		}
		s.Relay.RelayID = h
	}
	if off, err := inproc.ParseClockOffset(get(contract.EnvClockOffset)); err != nil {
		bad(contract.EnvClockOffset, err)
	} else {
		s.ClockOffset = off
	}
	if s.FailpointSpec = get(contract.EnvFailpoints); s.FailpointSpec != "" {
		fp, err := inproc.ParseFailpoints(s.FailpointSpec)
		if err != nil {
			bad(contract.EnvFailpoints, err)
		}
		s.Failpoints = fp
	}

	duration(contract.EnvPollInterval, "PollInterval", &s.Relay.PollInterval)
	integerIn(contract.EnvBatchSize, "BatchSize", &s.Relay.BatchSize, maxBatchSize)
	duration(contract.EnvLease, "Lease", &s.Relay.Lease)
	integer(contract.EnvMaxAttempts, "MaxAttempts", &s.Relay.MaxAttempts)
	duration(contract.EnvBackoffBase, "BackoffBase", &s.Relay.BackoffBase)
	duration(contract.EnvBackoffMax, "BackoffMax", &s.Relay.BackoffMax)
	duration(contract.EnvRetention, "Retention", &s.Relay.Retention)
	integer(contract.EnvSweepBatch, "SweepBatch", &s.Relay.SweepBatch)
	duration(contract.EnvSweepInterval, "SweepInterval", &s.Relay.SweepInterval)
	durationIn(contract.EnvPublishTimeout, "PublishTimeout", &s.Relay.PublishTimeout, minPublishTimeout, maxPublishTimeout)
	duration(contract.EnvStoreTimeout, "StoreTimeout", &s.Relay.StoreTimeout)
	integerIn(contract.EnvPublishWindow, "PublishWindow", &s.Relay.PublishWindow, maxPublishWindow)
	boolean(contract.EnvNotify, &s.Notify, true)
	boolean(contract.EnvMigrate, &s.Migrate, false)
	if s.MetricsAddr = get(contract.EnvMetricsAddr); s.MetricsAddr != "" {
		if err := checkListenAddr(s.MetricsAddr); err != nil {
			bad(contract.EnvMetricsAddr, err)
		}
	}

	s.RecordsPath = get(recordsEnv)

	if v := get(contract.EnvLogLevel); v != "" {
		if err := s.LogLevel.UnmarshalText([]byte(v)); err != nil {
			bad(contract.EnvLogLevel, fmt.Errorf("want debug, info, warn or error, got %q", v))
		}
	}
	if v := get(contract.EnvTypes); v != "" {
		d, err := parseTypes(v)
		if err != nil {
			bad(contract.EnvTypes, err)
		}
		s.Types = d
	}

	if len(errs) == 0 {
		offset := s.ClockOffset
		s.Relay.Now = func() time.Time { return time.Now().Add(offset) }
		set := s.Relay
		s.Relay = s.Relay.WithDefaults()
		if err := s.Relay.Validate(); err != nil {
			errs = append(errs, settingErrors(err, set, s.Relay, fieldVar, get)...)
		}
	}
	return s, errors.Join(errs...)
}

// settingErrors turns the problems relay.Config.Validate found in c (set
// is c before its defaults) into configErrors naming the variables of the
// fields each is about, with the value each has: the one given, or the
// default when the variable is unset.
func settingErrors(err error, set, c relay.Config, fieldVar map[string]string, get func(string) string) []error {
	var out []error
	problems := []error{err}
	if joined, ok := err.(interface{ Unwrap() []error }); ok {
		problems = joined.Unwrap()
	}
	for _, p := range problems {
		var fe *relay.FieldError
		if !errors.As(p, &fe) {
			out = append(out, &configError{Var: "OUTBOX_*", Err: fmt.Errorf("relay settings: %w", p)})
			continue
		}
		var names, values []string
		for _, f := range fe.Fields {
			name, ok := fieldVar[f]
			if !ok {
				name = "OUTBOX_* (" + f + ")"
			}
			names = append(names, name)
			given := reflect.ValueOf(set).FieldByName(f)
			value := reflect.ValueOf(c).FieldByName(f)
			switch {
			case !ok || !value.IsValid():
			case get(name) != "" || !given.IsZero():
				values = append(values, fmt.Sprintf("%s=%v", name, value.Interface()))
			default:
				values = append(values, fmt.Sprintf("%s unset: default %v", name, value.Interface()))
			}
		}
		e := fe.Err
		if len(values) > 0 {
			e = fmt.Errorf("%w (%s)", fe.Err, strings.Join(values, ", "))
		}
		out = append(out, &configError{Var: strings.Join(names, " and "), Err: e})
	}
	return out
}

// osHostname is the default relay id's source.
var osHostname = os.Hostname
