package main

import (
	"bytes"
	"errors"
	"os"
	"slices"
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
	}
}

// harnessEnv is goodEnv with the settings the harness passes to every
// relay (scenarios.TimingEnv, docs/contract.md §3.2), written out: the
// relay imports nothing of the harness.
func harnessEnv() env {
	e := goodEnv()
	for k, v := range map[string]string{
		"OUTBOX_POLL_INTERVAL":   "100ms",
		"OUTBOX_LEASE":           "4s",
		"OUTBOX_PUBLISH_TIMEOUT": "1s",
		"OUTBOX_STORE_TIMEOUT":   "2s",
		"OUTBOX_BACKOFF_BASE":    "100ms",
		"OUTBOX_BACKOFF_MAX":     "2s",
		"OUTBOX_MAX_ATTEMPTS":    "3",
		"OUTBOX_BATCH_SIZE":      "20",
		"OUTBOX_TYPES":           harnessTypes,
		"OUTBOX_LOG_LEVEL":       "info",
		"OUTBOX_CLOCK_OFFSET":    "-5m0s",
		"OUTBOX_RETENTION":       "1s",
		"OUTBOX_SWEEP_INTERVAL":  "250ms",
	} {
		e[k] = v
	}
	return e
}

func hostname() (string, error) { return "box", nil }

func TestParseConfigReadsTheHarnessSettings(t *testing.T) {
	cfg, err := parseConfig(harnessEnv().get, hostname, 42)
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case cfg.dbConfig == nil || cfg.dbConfig.Host != "db.example" || cfg.dbConfig.Database != "app":
		t.Errorf("database config %+v", cfg.dbConfig)
	case cfg.dbConfig.ConnectTimeout != dialTimeout:
		t.Errorf("connect timeout %s, want %s", cfg.dbConfig.ConnectTimeout, dialTimeout)
	case !slices.Equal(cfg.amqpURLs, []string{"amqp://app:s3cret@mq.example:5672/"}):
		t.Errorf("amqp urls %q", cfg.amqpURLs)
	case cfg.tableSQL != `"orders"."outbox"`:
		t.Errorf("table %s", cfg.tableSQL)
	case cfg.exchange != "orders.events" || cfg.relayID != "relay-a":
		t.Errorf("exchange %q, relay id %q", cfg.exchange, cfg.relayID)
	case cfg.clockOffset != -5*time.Minute:
		t.Errorf("clock offset %s", cfg.clockOffset)
	case cfg.pollInterval != 100*time.Millisecond || cfg.batchSize != 20:
		t.Errorf("poll %s, batch %d", cfg.pollInterval, cfg.batchSize)
	case cfg.publishTimeout != time.Second || cfg.storeTimeout != 2*time.Second:
		t.Errorf("publish timeout %s, store timeout %s", cfg.publishTimeout, cfg.storeTimeout)
	case cfg.maxAttempts != 3 || cfg.backoffBase != 100*time.Millisecond || cfg.backoffMax != 2*time.Second:
		t.Errorf("max attempts %d, backoff %s/%s", cfg.maxAttempts, cfg.backoffBase, cfg.backoffMax)
	case strings.Join(cfg.types.names(), ",") != "audit.oversized,order.paid,order.placed":
		t.Errorf("types %v", cfg.types.names())
	case cfg.bug != bugNone:
		t.Errorf("bug %q", cfg.bug)
	}
	// The server's bound on an idle transaction outlasts the longest a
	// batch is idle: the broker's dial, a write the watchdog ends, the
	// last confirm's wait.
	if got, idle := cfg.idleInTransaction(), dialTimeout+time.Second+2*(cfg.publishTimeout+time.Second)+confirmGrace; got <= idle {
		t.Errorf("idle in transaction %s: not longer than a batch's idle time %s", got, idle)
	}
}

func TestParseConfigDefaults(t *testing.T) {
	cfg, err := parseConfig(goodEnv().get, hostname, 42)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.relayID != "relay-a" {
		t.Errorf("relay id %q", cfg.relayID)
	}
	type settings struct {
		poll, publish, store, base, max, offset time.Duration
		batch, attempts                         int
	}
	want := settings{defaultPollInterval, defaultPublishTimeout, defaultStoreTimeout, defaultBackoffBase, defaultBackoffMax, 0,
		defaultBatchSize, defaultMaxAttempts}
	got := settings{cfg.pollInterval, cfg.publishTimeout, cfg.storeTimeout, cfg.backoffBase, cfg.backoffMax, cfg.clockOffset,
		cfg.batchSize, cfg.maxAttempts}
	if got != want || cfg.types != nil || cfg.bug != bugNone {
		t.Errorf("defaults %+v, types %v, bug %q; want %+v", got, cfg.types, cfg.bug, want)
	}
	e := goodEnv()
	delete(e, "OUTBOX_RELAY_ID")
	if cfg, err := parseConfig(e.get, hostname, 42); err != nil || cfg.relayID != "rowlock-box-42" {
		t.Errorf("default relay id %q (%v), want rowlock-box-42", cfg.relayID, err)
	}
	if cfg, err := parseConfig(e.get, func() (string, error) { return "", errors.New("no") }, 7); err != nil || cfg.relayID != "rowlock-localhost-7" {
		t.Errorf("relay id without a host name %q (%v)", cfg.relayID, err)
	}
	// What it has none of is not read, whatever its value.
	e["OUTBOX_LEASE"], e["OUTBOX_RETENTION"], e["OUTBOX_FAILPOINTS"], e["OUTBOX_RECORDS"] = "soon", "never", "x=y", "/nowhere"
	if _, err := parseConfig(e.get, hostname, 42); err != nil {
		t.Errorf("the variables of what it does not have should be ignored: %v", err)
	}
}

func TestParseConfigClusterURLs(t *testing.T) {
	e := goodEnv()
	e["OUTBOX_AMQP_URL"] = "amqp://u:p%2Cq@n1:5672/, amqp://u:p%2Cq@n2:5672/,amqp://u:p%2Cq@n3:5672/"
	cfg, err := parseConfig(e.get, hostname, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.amqpURLs) != 3 || cfg.amqpURLs[1] != "amqp://u:p%2Cq@n2:5672/" {
		t.Errorf("urls %q", cfg.amqpURLs)
	}
}

// TestParseConfigRefuses: each bad value is refused naming its variable,
// and no URL's text (a password) is repeated.
func TestParseConfigRefuses(t *testing.T) {
	for _, c := range []struct{ name, value, want string }{
		{"OUTBOX_DATABASE_URL", "", "OUTBOX_DATABASE_URL: not set"},
		{"OUTBOX_DATABASE_URL", "postgres://app:s3cret@db.example:notaport/app", "OUTBOX_DATABASE_URL: not a PostgreSQL connection string"},
		{"OUTBOX_AMQP_URL", "", "OUTBOX_AMQP_URL: not set"},
		{"OUTBOX_AMQP_URL", "http://app:s3cret@mq.example/", "OUTBOX_AMQP_URL: the value is not an AMQP URL"},
		{"OUTBOX_AMQP_URL", "amqp://app:s3cret@n1/,,amqp://app:s3cret@n3/", "OUTBOX_AMQP_URL: entry 2 of 3 is empty"},
		{"OUTBOX_TABLE", "", "OUTBOX_TABLE: not set"},
		{"OUTBOX_TABLE", "a.b.c", "2 dots"},
		{"OUTBOX_TABLE", "a.", "an empty part"},
		{"OUTBOX_TABLE", strings.Repeat("x", 64), "PostgreSQL keeps at most 63"},
		{"OUTBOX_EXCHANGE", "", "OUTBOX_EXCHANGE: not set"},
		{"OUTBOX_EXCHANGE", "ex\nchange", "control character"},
		{"OUTBOX_EXCHANGE", strings.Repeat("x", 256), "AMQP allows at most 255"},
		{"OUTBOX_CLOCK_OFFSET", "five minutes", "OUTBOX_CLOCK_OFFSET: \"five minutes\" is not a Go duration"},
		{"OUTBOX_POLL_INTERVAL", "5", "OUTBOX_POLL_INTERVAL: \"5\" is not a Go duration"},
		{"OUTBOX_POLL_INTERVAL", "0s", "OUTBOX_POLL_INTERVAL: 0s is out of range"},
		{"OUTBOX_BATCH_SIZE", "0", "OUTBOX_BATCH_SIZE: \"0\" is not a whole number from 1 to 10000"},
		{"OUTBOX_BATCH_SIZE", "10001", "OUTBOX_BATCH_SIZE"},
		{"OUTBOX_PUBLISH_TIMEOUT", "50ms", "OUTBOX_PUBLISH_TIMEOUT: 50ms is out of range: want 100ms to 10m0s"},
		{"OUTBOX_STORE_TIMEOUT", "-1s", "OUTBOX_STORE_TIMEOUT: -1s is out of range"},
		{"OUTBOX_MAX_ATTEMPTS", "three", "OUTBOX_MAX_ATTEMPTS: \"three\" is not a whole number from 1 to 100"},
		{"OUTBOX_MAX_ATTEMPTS", "101", "OUTBOX_MAX_ATTEMPTS"},
		{"OUTBOX_BACKOFF_BASE", "2h", "OUTBOX_BACKOFF_BASE and OUTBOX_BACKOFF_MAX: the base (2h0m0s) is longer than the maximum (1h0m0s)"},
		{"OUTBOX_BACKOFF_MAX", "1s", "the base (30s) is longer than the maximum (1s)"},
		{"OUTBOX_TYPES", "order.placed:amount=money", `field "amount" has kind "money"`},
		{bugEnv, "Commit-First", `ROWLOCK_BUG: unknown bug mode "Commit-First"`},
	} {
		e := goodEnv()
		e[c.name] = c.value
		_, err := parseConfig(e.get, hostname, 1)
		if err == nil {
			t.Errorf("%s=%q accepted", c.name, c.value)
			continue
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s=%q: %v\nwant it to say %q", c.name, c.value, err, c.want)
		}
		if strings.Contains(err.Error(), "s3cret") {
			t.Errorf("%s=%q: the error repeats a password: %v", c.name, c.value, err)
		}
	}
}

// TestParseConfigReportsEveryProblem: one line per problem, all at once.
func TestParseConfigReportsEveryProblem(t *testing.T) {
	_, err := parseConfig(env{bugEnv: "nope"}.get, hostname, 1)
	if err == nil {
		t.Fatal("an empty environment accepted")
	}
	text := indent(err)
	for _, name := range []string{"OUTBOX_DATABASE_URL", "OUTBOX_AMQP_URL", "OUTBOX_TABLE", "OUTBOX_EXCHANGE", bugEnv} {
		if !strings.Contains(text, "\n  "+name+":") && !strings.HasPrefix(text, "  "+name+":") {
			t.Errorf("no line names %s:\n%s", name, text)
		}
	}
	if n := strings.Count(text, "\n") + 1; n != 5 {
		t.Errorf("%d lines, want 5:\n%s", n, text)
	}
}

// TestRunExitsTwoOnABadConfiguration: the process prints every problem
// and exits 2 before it connects to anything; an unknown bug mode is a
// bad configuration.
func TestRunExitsTwoOnABadConfiguration(t *testing.T) {
	for _, e := range []env{{}, func() env { e := goodEnv(); e[bugEnv] = "no-confirm"; return e }()} {
		var stderr bytes.Buffer
		sigs := make(chan os.Signal)
		if code := run(e.get, &stderr, sigs); code != exitConfig {
			t.Errorf("exit code %d, want %d; stderr:\n%s", code, exitConfig, stderr.String())
		}
		if !strings.HasPrefix(stderr.String(), "rowlock-relay: cannot start:\n  ") {
			t.Errorf("stderr:\n%s", stderr.String())
		}
	}
}

func TestBackoff(t *testing.T) {
	cfg, err := parseConfig(harnessEnv().get, hostname, 1)
	if err != nil {
		t.Fatal(err)
	}
	// docs/contract.md §3.3: after a failure that leaves the row at n
	// attempts, min(BASE × 2^(n-1), MAX).
	for n, want := range map[int]time.Duration{
		1: 100 * time.Millisecond, 2: 200 * time.Millisecond, 3: 400 * time.Millisecond,
		5: 1600 * time.Millisecond, 6: 2 * time.Second, 100: 2 * time.Second,
	} {
		if got := cfg.backoff(n); got != want {
			t.Errorf("backoff(%d) = %s, want %s", n, got, want)
		}
	}
	cfg.backoffBase, cfg.backoffMax = time.Hour, 100*365*24*time.Hour
	if got := cfg.backoff(100); got != cfg.backoffMax {
		t.Errorf("a long backoff overflowed: %s", got)
	}
}
