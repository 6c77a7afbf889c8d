package main

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"
)

// env is a fake environment for parseConfig and run.
type env map[string]string

func (e env) get(k string) string { return e[k] }

// goodEnv is a complete, valid environment; tests change one variable.
func goodEnv() env {
	return env{
		"OUTBOX_DATABASE_URL": "postgres://app:s3cret@db.example:5432/app",
		"OUTBOX_AMQP_URL":     "amqp://app:s3cret@mq.example:5672/",
		"OUTBOX_TABLE":        "orders.outbox",
		"OUTBOX_EXCHANGE":     "orders.events",
		"OUTBOX_RELAY_ID":     "relay-a",
		"OUTBOX_CLOCK_OFFSET": "-5m",
	}
}

func hostname() (string, error) { return "box", nil }

func TestParseConfigReadsEveryVariable(t *testing.T) {
	e := goodEnv()
	e["OUTBOX_MAX_ATTEMPTS"] = "3"
	e["OUTBOX_TYPES"] = "order.placed:order_id=string;amount=integer,order.paid"
	e[bugEnv] = "skip-late"
	cfg, err := parseConfig(e.get, hostname, 42)
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case cfg.dbConfig == nil || cfg.dbConfig.Host != "db.example" || cfg.dbConfig.Database != "app":
		t.Errorf("database config %+v", cfg.dbConfig)
	case cfg.dbConfig.ConnectTimeout != dialTimeout:
		t.Errorf("connect timeout %s, want %s", cfg.dbConfig.ConnectTimeout, dialTimeout)
	case cfg.amqpURL != e["OUTBOX_AMQP_URL"]:
		t.Errorf("amqp url %q", cfg.amqpURL)
	case cfg.tableSQL != `"orders"."outbox"`:
		t.Errorf("table %s", cfg.tableSQL)
	case cfg.exchange != "orders.events" || cfg.relayID != "relay-a":
		t.Errorf("exchange %q, relay id %q", cfg.exchange, cfg.relayID)
	case cfg.clockOffset != -5*time.Minute:
		t.Errorf("clock offset %s", cfg.clockOffset)
	case cfg.maxAttempts != 3:
		t.Errorf("max attempts %d", cfg.maxAttempts)
	case strings.Join(cfg.types.names(), ",") != "order.paid,order.placed":
		t.Errorf("types %v", cfg.types.names())
	case cfg.bug != bugSkipLate:
		t.Errorf("bug %q", cfg.bug)
	}
}

func TestParseConfigDefaults(t *testing.T) {
	e := goodEnv()
	delete(e, "OUTBOX_RELAY_ID")
	delete(e, "OUTBOX_CLOCK_OFFSET")
	cfg, err := parseConfig(e.get, hostname, 42)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.relayID != "seqrelay-box-42" {
		t.Errorf("default relay id %q, want seqrelay-box-42", cfg.relayID)
	}
	if cfg.clockOffset != 0 || cfg.maxAttempts != defaultMaxAttempts || cfg.types != nil || cfg.bug != bugNone {
		t.Errorf("defaults: offset %s, max attempts %d, types %v, bug %q", cfg.clockOffset, cfg.maxAttempts, cfg.types, cfg.bug)
	}
	// The harness's own variables for our relay are not seqrelay's.
	e["OUTBOX_LEASE"], e["OUTBOX_BATCH_SIZE"], e["OUTBOX_POLL_INTERVAL"] = "nonsense", "-1", "soon"
	if _, err := parseConfig(e.get, hostname, 42); err != nil {
		t.Errorf("seqrelay should ignore the OUTBOX_* settings it does not use: %v", err)
	}
}

func TestParseConfigReportsEveryProblemByName(t *testing.T) {
	_, err := parseConfig(env{}.get, hostname, 1)
	if err == nil {
		t.Fatal("an empty environment was accepted")
	}
	for _, name := range []string{"OUTBOX_DATABASE_URL", "OUTBOX_AMQP_URL", "OUTBOX_TABLE", "OUTBOX_EXCHANGE"} {
		if !strings.Contains(err.Error(), name+": not set") {
			t.Errorf("no word on %s in:\n%v", name, err)
		}
	}
	var joined interface{ Unwrap() []error }
	if !errors.As(err, &joined) || len(joined.Unwrap()) != 4 {
		t.Errorf("want 4 joined problems, got %v", err)
	}
}

func TestParseConfigBadValues(t *testing.T) {
	for _, c := range []struct {
		name, value, want string
	}{
		{"OUTBOX_DATABASE_URL", "postgres://app:s3cret@db.example:notaport/app", "OUTBOX_DATABASE_URL: not a PostgreSQL connection string"},
		{"OUTBOX_AMQP_URL", "http://app:s3cret@mq.example/", "OUTBOX_AMQP_URL: not an AMQP URL"},
		{"OUTBOX_AMQP_URL", "amqp://app:s3cret@mq.example:%zz/", "OUTBOX_AMQP_URL: not an AMQP URL"},
		{"OUTBOX_TABLE", "a.b.c", "OUTBOX_TABLE: \"a.b.c\" has 2 dots"},
		{"OUTBOX_EXCHANGE", "bad\x01name", "OUTBOX_EXCHANGE: \"bad\\x01name\" holds a control character"},
		{"OUTBOX_CLOCK_OFFSET", "five minutes", "OUTBOX_CLOCK_OFFSET: \"five minutes\" is not a Go duration"},
		{"OUTBOX_MAX_ATTEMPTS", "0", "OUTBOX_MAX_ATTEMPTS: \"0\" is not a whole number from 1 to 100"},
		{"OUTBOX_MAX_ATTEMPTS", "many", "OUTBOX_MAX_ATTEMPTS: \"many\" is not a whole number"},
		{"OUTBOX_TYPES", "order.placed:amount=money", "OUTBOX_TYPES: type \"order.placed\": field \"amount\": kind \"money\""},
		{bugEnv, "typo", "SEQRELAY_BUG: unknown bug mode \"typo\" (want one of mark-first, "},
	} {
		e := goodEnv()
		e[c.name] = c.value
		_, err := parseConfig(e.get, hostname, 1)
		if err == nil {
			t.Errorf("%s=%q accepted", c.name, c.value)
			continue
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s=%q: got %q, want it to contain %q", c.name, c.value, err, c.want)
		}
		if strings.Contains(err.Error(), "s3cret") {
			t.Errorf("%s=%q: the error shows the password: %v", c.name, c.value, err)
		}
	}
}

func TestParseTableQuotesEachPart(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"outbox", `"outbox"`},
		{"orders.outbox", `"orders"."outbox"`},
		{"Orders.Outbox", `"Orders"."Outbox"`},
		{`we"ird.out box`, `"we""ird"."out box"`},
		{"s; DROP TABLE x;--.t", `"s; DROP TABLE x;--"."t"`},
		{strings.Repeat("x", 63), `"` + strings.Repeat("x", 63) + `"`},
	} {
		id, err := parseTable(c.in)
		if err != nil {
			t.Errorf("%q: %v", c.in, err)
			continue
		}
		if got := id.Sanitize(); got != c.want {
			t.Errorf("%q quoted as %s, want %s", c.in, got, c.want)
		}
	}
	for _, bad := range []string{"", ".outbox", "orders.", "a..b", "a.b.c", "out\x00box", strings.Repeat("x", 64), "s." + strings.Repeat("y", 64)} {
		if id, err := parseTable(bad); err == nil {
			t.Errorf("%q accepted as %s", bad, id.Sanitize())
		}
	}
}

func TestCheckExchange(t *testing.T) {
	for _, ok := range []string{"orders.events", "x", strings.Repeat("e", 255)} {
		if _, err := checkExchange(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", strings.Repeat("e", 256), "a\nb"} {
		if _, err := checkExchange(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// TestRunExitsTwoOnABadConfiguration: run refuses to start, before any
// connection, with exit code 2 and every problem on stderr.
func TestRunExitsTwoOnABadConfiguration(t *testing.T) {
	for _, c := range []struct {
		name string
		env  env
		want []string
	}{
		{"empty", env{}, []string{"seqrelay: cannot start:", "  OUTBOX_DATABASE_URL: not set", "  OUTBOX_EXCHANGE: not set"}},
		{"unknown bug", func() env { e := goodEnv(); e[bugEnv] = "sometimes"; return e }(), []string{`SEQRELAY_BUG: unknown bug mode "sometimes"`}},
	} {
		var stderr bytes.Buffer
		if code := run(c.env.get, &stderr, nil); code != exitConfig {
			t.Errorf("%s: exit %d, want %d", c.name, code, exitConfig)
		}
		for _, w := range c.want {
			if !strings.Contains(stderr.String(), w) {
				t.Errorf("%s: stderr %q lacks %q", c.name, stderr.String(), w)
			}
		}
	}
}

func TestLoggerUsesTheOffsetClock(t *testing.T) {
	var buf bytes.Buffer
	lg := newLogger(&buf, "relay-a", 24*time.Hour)
	lg.printf("hello %d", 7)
	line := buf.String()
	tomorrow := time.Now().UTC().Add(24 * time.Hour).Format("2006-01-02")
	if !strings.HasPrefix(line, tomorrow) || !strings.HasSuffix(line, " seqrelay relay-a: hello 7\n") {
		t.Errorf("log line %q, want one dated %s ending in the message", line, tomorrow)
	}
}
