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

// Defaults of the settings the harness passes to every relay
// (docs/contract.md §3.2), for a run outside it; the harness sets them
// all, far shorter.
const (
	defaultPollInterval   = time.Second
	defaultBatchSize      = 100
	defaultPublishTimeout = 10 * time.Second
	defaultStoreTimeout   = 30 * time.Second
	defaultMaxAttempts    = 5
	defaultBackoffBase    = 30 * time.Second
	defaultBackoffMax     = time.Hour
)

// Bounds of the settings.
const (
	maxBatchSize      = 10000
	minPublishTimeout = 100 * time.Millisecond
	maxPublishTimeout = 10 * time.Minute
	maxMaxAttempts    = 100
	// maxIdentBytes is the longest identifier PostgreSQL keeps; a longer
	// one would be cut silently.
	maxIdentBytes = 63
	// maxShortString is AMQP's limit for an exchange name or a routing
	// key.
	maxShortString = 255
)

// Fixed timings of the relay itself.
const (
	// dialTimeout bounds opening a database or broker connection.
	dialTimeout = 3 * time.Second
	// confirmGrace is how long a confirm already on its way still counts
	// once its publish timeout has run out: a process thawed after
	// SIGSTOP finds its timers expired and its socket full.
	confirmGrace = 100 * time.Millisecond
	// stopBound bounds the whole stop after the first signal (the harness
	// sends SIGKILL 10s after SIGTERM).
	stopBound = 9 * time.Second
)

// config is what the relay reads from its environment.
type config struct {
	dbConfig *pgx.ConnConfig
	// amqpURLs are the broker's nodes, tried in turn.
	amqpURLs []string
	// table is OUTBOX_TABLE split into its parts; tableSQL is it quoted.
	table    pgx.Identifier
	tableSQL string
	exchange string
	relayID  string
	// clockOffset moves the process's own clock, which only stamps log
	// lines: every time the relay compares or computes is the database's
	// now().
	clockOffset    time.Duration
	pollInterval   time.Duration
	batchSize      int
	publishTimeout time.Duration
	storeTimeout   time.Duration
	maxAttempts    int
	backoffBase    time.Duration
	backoffMax     time.Duration
	// types is nil when OUTBOX_TYPES is not set: every type is known.
	types *typeSet
	bug   bug
}

// idleInTransaction is the server's bound on a session left idle inside
// a transaction: the relay is idle in its batch's transaction while it
// connects to the broker (at most dialTimeout and a second) and publishes
// (each write bounded by the publish timeout and a second, the confirms by
// the publish timeout and a second after the last write), and a frozen
// relay's row locks go when the server ends its session.
func (c config) idleInTransaction() time.Duration {
	return 2*c.publishTimeout + dialTimeout + c.storeTimeout + 5*time.Second
}

// backoff is how long a row waits after a failure that leaves it at n
// attempts: min(base × 2^(n-1), max), the shape docs/contract.md §3.3
// names for backoff=BASE/MAX.
func (c config) backoff(n int) time.Duration {
	d := c.backoffBase
	for i := 1; i < n; i++ {
		if d >= c.backoffMax {
			break
		}
		d *= 2
	}
	return min(d, c.backoffMax)
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

	if urls, err := parseAMQPURLs(get("OUTBOX_AMQP_URL")); err != nil {
		bad("OUTBOX_AMQP_URL", "%v", err)
	} else {
		cfg.amqpURLs = urls
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
		cfg.relayID = fmt.Sprintf("rowlock-%s-%d", host, pid)
	}

	duration := func(name string, def, low, high time.Duration) time.Duration {
		s := get(name)
		if s == "" {
			return def
		}
		d, err := time.ParseDuration(s)
		switch {
		case err != nil:
			bad(name, "%q is not a Go duration such as 300ms, 5s or 1m30s", s)
			return def
		case d < low || d > high:
			bad(name, "%s is out of range: want %s to %s", s, low, high)
			return def
		}
		return d
	}
	integer := func(name string, def, high int) int {
		s := get(name)
		if s == "" {
			return def
		}
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > high {
			bad(name, "%q is not a whole number from 1 to %d", s, high)
			return def
		}
		return n
	}
	const forever = 100 * 365 * 24 * time.Hour
	if s := get("OUTBOX_CLOCK_OFFSET"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			bad("OUTBOX_CLOCK_OFFSET", "%q is not a Go duration such as -5m or 30s", s)
		}
		cfg.clockOffset = d
	}
	cfg.pollInterval = duration("OUTBOX_POLL_INTERVAL", defaultPollInterval, time.Millisecond, time.Hour)
	cfg.batchSize = integer("OUTBOX_BATCH_SIZE", defaultBatchSize, maxBatchSize)
	cfg.publishTimeout = duration("OUTBOX_PUBLISH_TIMEOUT", defaultPublishTimeout, minPublishTimeout, maxPublishTimeout)
	cfg.storeTimeout = duration("OUTBOX_STORE_TIMEOUT", defaultStoreTimeout, 10*time.Millisecond, 10*time.Minute)
	cfg.maxAttempts = integer("OUTBOX_MAX_ATTEMPTS", defaultMaxAttempts, maxMaxAttempts)
	cfg.backoffBase = duration("OUTBOX_BACKOFF_BASE", defaultBackoffBase, time.Millisecond, forever)
	cfg.backoffMax = duration("OUTBOX_BACKOFF_MAX", defaultBackoffMax, time.Millisecond, forever)
	if cfg.backoffMax < cfg.backoffBase {
		bad("OUTBOX_BACKOFF_BASE and OUTBOX_BACKOFF_MAX", "the base (%s) is longer than the maximum (%s)", cfg.backoffBase, cfg.backoffMax)
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

// parseAMQPURLs reads OUTBOX_AMQP_URL: one AMQP URL, or the URLs of a
// cluster's nodes separated by commas (a comma inside a password is
// written %2C). Its errors name an entry by its place, never its text.
func parseAMQPURLs(s string) ([]string, error) {
	if s == "" {
		return nil, errors.New("not set (want an AMQP URL such as amqp://user:password@host:5672/, or several separated by commas)")
	}
	parts := strings.Split(s, ",")
	var (
		out  []string
		errs []string
	)
	for i, u := range parts {
		u = strings.TrimSpace(u)
		where := "the value"
		if len(parts) > 1 {
			where = fmt.Sprintf("entry %d of %d", i+1, len(parts))
		}
		if u == "" {
			errs = append(errs, where+" is empty")
			continue
		}
		if _, err := amqp.ParseURI(u); err != nil {
			errs = append(errs, fmt.Sprintf("%s is not an AMQP URL: %s", where, urlErrorText(err)))
			continue
		}
		out = append(out, u)
	}
	if len(errs) > 0 {
		return nil, errors.New(strings.Join(errs, "; "))
	}
	return out, nil
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
