package main

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"
)

// seqrelay's own settings. They are not read from the environment: a
// relay under the black-box contract brings its own, and these differ from
// the harness's relay on purpose. The lease stays in the range of the
// harness's (scenarios.Lease, 4s) so that lease-expiry takes a paused
// replica's rows over, and a broker outage's claimed rows drain, well
// within the liveness bound (60s).
const (
	batchSize      = 10
	lease          = 10 * time.Second
	pollEvery      = 200 * time.Millisecond
	publishTimeout = 2 * time.Second
	// confirmGrace is how long a confirm that is already on its way still
	// counts once publishTimeout has run out (a process thawed after a
	// pause finds its timers expired and its socket full).
	confirmGrace = 100 * time.Millisecond
	dbTimeout    = 3 * time.Second
	dialTimeout  = 3 * time.Second
	// leaseGuard: a batch stops publishing once this much time has gone by
	// since just before its claim (on the process's monotonic clock, which
	// no offset moves), so that it does not publish rows whose lease may
	// be gone.
	leaseGuard = lease / 2
	// failurePauseMax caps the pause after failed ticks in a row.
	failurePauseMax = time.Second
	// stopBound bounds the whole stop after the first signal.
	stopBound = 8 * time.Second

	backoffBase = 200 * time.Millisecond
	backoffCap  = 5 * time.Second

	defaultMaxAttempts = 5
	maxMaxAttempts     = 100

	// maxIdentBytes is the longest identifier PostgreSQL keeps; a longer
	// one would be cut silently.
	maxIdentBytes = 63
	// maxShortString is AMQP's limit for an exchange name or a routing key.
	maxShortString = 255
)

// config is what seqrelay reads from its environment.
type config struct {
	dbConfig *pgx.ConnConfig
	amqpURL  string
	// table is OUTBOX_TABLE split into its parts; tableSQL is it quoted.
	table    pgx.Identifier
	tableSQL string
	exchange string
	relayID  string
	// clockOffset moves the process's own clock (log lines, and leases in
	// the own-clock-lease bug mode).
	clockOffset time.Duration
	maxAttempts int
	// types is nil when OUTBOX_TYPES is not set: every type is known.
	types *typeSet
	bug   bug
}

// parseConfig reads the environment through getenv. It reports every
// problem at once, each naming its variable, joined with errors.Join.
// Values of URLs are never repeated: they may hold passwords.
func parseConfig(getenv func(string) string, hostname func() (string, error), pid int) (config, error) {
	var (
		cfg  config
		errs []error
	)
	bad := func(name, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", name, fmt.Sprintf(format, args...)))
	}
	get := func(name string) string { return strings.TrimSpace(getenv(name)) }

	if u := get("OUTBOX_DATABASE_URL"); u == "" {
		bad("OUTBOX_DATABASE_URL", "not set (want a PostgreSQL URL such as postgres://user:password@host:5432/db)")
	} else if c, err := pgx.ParseConfig(u); err != nil {
		bad("OUTBOX_DATABASE_URL", "not a PostgreSQL connection string")
	} else {
		c.ConnectTimeout = dialTimeout
		cfg.dbConfig = c
	}

	if u := get("OUTBOX_AMQP_URL"); u == "" {
		bad("OUTBOX_AMQP_URL", "not set (want an AMQP URL such as amqp://user:password@host:5672/)")
	} else if _, err := amqp.ParseURI(u); err != nil {
		bad("OUTBOX_AMQP_URL", "not an AMQP URL: %s", urlErrorText(err))
	} else {
		cfg.amqpURL = u
	}

	if t, err := parseTable(get("OUTBOX_TABLE")); err != nil {
		bad("OUTBOX_TABLE", "%v", err)
	} else {
		cfg.table, cfg.tableSQL = t, t.Sanitize()
	}

	if x, err := checkExchange(get("OUTBOX_EXCHANGE")); err != nil {
		bad("OUTBOX_EXCHANGE", "%v", err)
	} else {
		cfg.exchange = x
	}

	cfg.relayID = get("OUTBOX_RELAY_ID")
	if cfg.relayID == "" {
		host, err := hostname()
		if err != nil || host == "" {
			host = "localhost"
		}
		cfg.relayID = fmt.Sprintf("seqrelay-%s-%d", host, pid)
	}

	if s := get("OUTBOX_CLOCK_OFFSET"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			bad("OUTBOX_CLOCK_OFFSET", "%q is not a Go duration such as -5m or 30s", s)
		}
		cfg.clockOffset = d
	}

	cfg.maxAttempts = defaultMaxAttempts
	if s := get("OUTBOX_MAX_ATTEMPTS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > maxMaxAttempts {
			bad("OUTBOX_MAX_ATTEMPTS", "%q is not a whole number from 1 to %d", s, maxMaxAttempts)
		}
		cfg.maxAttempts = n
	}

	if s := get("OUTBOX_TYPES"); s != "" {
		ts, err := parseTypes(s)
		if err != nil {
			bad("OUTBOX_TYPES", "%v", err)
		}
		cfg.types = ts
	}

	b, err := parseBug(get(bugEnv))
	if err != nil {
		bad(bugEnv, "%v", err)
	}
	cfg.bug = b

	return cfg, errors.Join(errs...)
}

// parseTable splits an OUTBOX_TABLE value, "table" or "schema.table",
// into identifier parts. Each part is kept exactly as written (pgx quotes
// it, so "Outbox" and "outbox" are different tables); a part must be
// non-empty, at most 63 bytes and free of NUL bytes, and there is at most
// one dot.
func parseTable(s string) (pgx.Identifier, error) {
	if s == "" {
		return nil, errors.New("not set (want a table name or schema.table)")
	}
	parts := strings.Split(s, ".")
	if len(parts) > 2 {
		return nil, fmt.Errorf("%q has %d dots: want table or schema.table", s, len(parts)-1)
	}
	for _, p := range parts {
		switch {
		case p == "":
			return nil, fmt.Errorf("%q has an empty part: want table or schema.table", s)
		case strings.ContainsRune(p, 0):
			return nil, fmt.Errorf("%q holds a NUL byte", s)
		case len(p) > maxIdentBytes:
			return nil, fmt.Errorf("%q: %q is %d bytes, PostgreSQL keeps at most %d", s, p, len(p), maxIdentBytes)
		}
	}
	return pgx.Identifier(parts), nil
}

// checkExchange checks an OUTBOX_EXCHANGE value: a non-empty AMQP short
// string without control characters (the default exchange "" would route
// by queue name, not by message type).
func checkExchange(s string) (string, error) {
	switch {
	case s == "":
		return "", errors.New("not set (want the name of the durable topic exchange)")
	case len(s) > maxShortString:
		return "", fmt.Errorf("%d bytes, AMQP allows at most %d", len(s), maxShortString)
	case strings.IndexFunc(s, unicode.IsControl) >= 0:
		return "", fmt.Errorf("%q holds a control character", s)
	}
	return s, nil
}

// urlErrorText is the text of an error about a URL without the URL
// itself: net/url's errors quote the whole URL, password included.
func urlErrorText(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err.Error()
	}
	return err.Error()
}

// indent renders an error, one line per joined error, each indented.
func indent(err error) string {
	var lines []string
	var joined interface{ Unwrap() []error }
	if errors.As(err, &joined) {
		for _, e := range joined.Unwrap() {
			lines = append(lines, "  "+e.Error())
		}
	} else {
		lines = append(lines, "  "+err.Error())
	}
	return strings.Join(lines, "\n")
}
