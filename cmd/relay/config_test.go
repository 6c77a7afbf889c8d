package main

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/outboxlab/outboxlab/contract"
	"github.com/outboxlab/outboxlab/outbox"
	"github.com/outboxlab/outboxlab/relay"
)

func env(overrides map[string]string) func(string) string {
	base := map[string]string{
		contract.EnvDatabaseURL: "postgres://relay:s3cret@db:5432/app",
		contract.EnvAMQPURL:     "amqp://relay:s3cret@broker:5672/",
		contract.EnvTable:       "chat.outbox",
		contract.EnvExchange:    "events",
	}
	for k, v := range overrides {
		base[k] = v
	}
	return func(k string) string { return base[k] }
}

func fixedHost() (string, error) { return "host-1", nil }

func TestParseEnvDefaults(t *testing.T) {
	s, err := parseEnv(env(nil), fixedHost)
	if err != nil {
		t.Fatalf("parseEnv: %v", err)
	}
	if s.Table != outbox.MustParseTable("chat.outbox") {
		t.Errorf("table = %v", s.Table)
	}
	if s.Relay.RelayID != "host-1" {
		t.Errorf("relay id = %q, want the hostname", s.Relay.RelayID)
	}
	if !s.Notify || s.Migrate || s.DeclareExchange {
		t.Errorf("notify=%v migrate=%v declare=%v, want true false false", s.Notify, s.Migrate, s.DeclareExchange)
	}
	if s.Relay.PollInterval != relay.DefaultPollInterval || s.Relay.Lease != relay.DefaultLease {
		t.Errorf("defaults not applied: %+v", s.Relay)
	}
	if s.Failpoints != nil || s.Types != nil {
		t.Errorf("failpoints and types should be off by default")
	}
	if d := time.Since(s.Relay.Now()); d < -time.Second || d > time.Second {
		t.Errorf("clock without offset is off by %s", d)
	}
}

func TestParseEnvEveryField(t *testing.T) {
	s, err := parseEnv(env(map[string]string{
		contract.EnvRelayID:         "relay-a",
		contract.EnvClockOffset:     "-5m",
		contract.EnvPollInterval:    "50ms",
		contract.EnvBatchSize:       "7",
		contract.EnvLease:           "2s",
		contract.EnvMaxAttempts:     "3",
		contract.EnvBackoffBase:     "50ms",
		contract.EnvBackoffMax:      "400ms",
		contract.EnvRetention:       "1s",
		contract.EnvSweepBatch:      "9",
		contract.EnvSweepInterval:   "100ms",
		contract.EnvPublishTimeout:  "500ms",
		contract.EnvStoreTimeout:    "3s",
		contract.EnvPublishWindow:   "4",
		contract.EnvNotify:          "false",
		contract.EnvMigrate:         "true",
		contract.EnvDeclareExchange: "1",
		contract.EnvMetricsAddr:     "127.0.0.1:0",
		contract.EnvLogLevel:        "debug",
		contract.EnvTypes:           "order.placed:order_id=string;amount=integer,order.paid",
		contract.EnvFailpoints:      "after-claim=2*off->error",
	}), fixedHost)
	if err != nil {
		t.Fatalf("parseEnv: %v", err)
	}
	c := s.Relay
	want := relay.Config{RelayID: "relay-a", PollInterval: 50 * time.Millisecond, BatchSize: 7, Lease: 2 * time.Second,
		MaxAttempts: 3, BackoffBase: 50 * time.Millisecond, BackoffMax: 400 * time.Millisecond, Retention: time.Second,
		SweepBatch: 9, SweepInterval: 100 * time.Millisecond, PublishTimeout: 500 * time.Millisecond,
		StoreTimeout: 3 * time.Second, PublishWindow: 4}
	c.Now = nil
	if !reflect.DeepEqual(c, want) {
		t.Errorf("relay config\n got %+v\nwant %+v", c, want)
	}
	if s.ClockOffset != -5*time.Minute {
		t.Errorf("clock offset = %s", s.ClockOffset)
	}
	if d := time.Since(s.Relay.Now()); d < 5*time.Minute-time.Second || d > 5*time.Minute+time.Second {
		t.Errorf("process clock should run 5m behind, runs %s behind", d)
	}
	if s.Notify || !s.Migrate || !s.DeclareExchange || s.MetricsAddr != "127.0.0.1:0" || s.LogLevel.String() != "DEBUG" {
		t.Errorf("flags: %+v", s)
	}
	if s.Failpoints == nil {
		t.Fatal("failpoints not parsed")
	}
	if got := s.Types.Names(); strings.Join(got, ",") != "order.paid,order.placed" {
		t.Errorf("types = %v", got)
	}
}

func TestParseEnvErrorsNameTheVariable(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		want string
	}{
		{"missing database", map[string]string{contract.EnvDatabaseURL: ""}, "OUTBOX_DATABASE_URL: is required"},
		{"missing broker", map[string]string{contract.EnvAMQPURL: ""}, "OUTBOX_AMQP_URL: is required"},
		{"missing table", map[string]string{contract.EnvTable: ""}, "OUTBOX_TABLE: is required"},
		{"missing exchange", map[string]string{contract.EnvExchange: ""}, "OUTBOX_EXCHANGE: is required"},
		{"bad database url", map[string]string{contract.EnvDatabaseURL: "postgres://relay:s3cret@db:port/app"}, "OUTBOX_DATABASE_URL: invalid connection string"},
		{"bad broker scheme", map[string]string{contract.EnvAMQPURL: "http://broker/"}, "OUTBOX_AMQP_URL: invalid AMQP URI"},
		{"bad broker port", map[string]string{contract.EnvAMQPURL: "amqp://relay:s3cret@broker:port/"}, "OUTBOX_AMQP_URL: invalid AMQP URI"},
		{"bad table", map[string]string{contract.EnvTable: "outbox; DROP TABLE x"}, "OUTBOX_TABLE: table"},
		{"three-part table", map[string]string{contract.EnvTable: "a.b.c"}, "OUTBOX_TABLE:"},
		{"bad exchange", map[string]string{contract.EnvExchange: "ev ents"}, "OUTBOX_EXCHANGE: invalid exchange name"},
		{"bad duration", map[string]string{contract.EnvLease: "2 minutes"}, "OUTBOX_LEASE: not a duration"},
		{"negative duration", map[string]string{contract.EnvPollInterval: "-1s"}, "OUTBOX_POLL_INTERVAL: must be positive"},
		{"bad integer", map[string]string{contract.EnvBatchSize: "many"}, "OUTBOX_BATCH_SIZE: not an integer"},
		{"zero integer", map[string]string{contract.EnvMaxAttempts: "0"}, "OUTBOX_MAX_ATTEMPTS: must be positive"},
		{"bad bool", map[string]string{contract.EnvNotify: "sometimes"}, "OUTBOX_NOTIFY: not a boolean"},
		{"bad offset", map[string]string{contract.EnvClockOffset: "five minutes"}, "OUTBOX_CLOCK_OFFSET:"},
		{"bad failpoints", map[string]string{contract.EnvFailpoints: "no-such-point=kill"}, "OUTBOX_FAILPOINTS:"},
		{"bad level", map[string]string{contract.EnvLogLevel: "loud"}, "OUTBOX_LOG_LEVEL:"},
		{"bad types", map[string]string{contract.EnvTypes: "order.placed:amount=money"}, "OUTBOX_TYPES:"},
		{"lease too short", map[string]string{contract.EnvLease: "1s", contract.EnvPublishTimeout: "1s"}, "Lease"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseEnv(env(tc.env), fixedHost)
			if err == nil {
				t.Fatal("parseEnv accepted a bad configuration")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not contain %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "s3cret") {
				t.Errorf("error leaks the password: %q", err)
			}
			var ce *configError
			if !errors.As(err, &ce) {
				t.Errorf("error %v is not a configError", err)
			}
		})
	}
}

func TestParseEnvReportsEveryProblem(t *testing.T) {
	_, err := parseEnv(env(map[string]string{contract.EnvTable: "", contract.EnvLease: "x"}), fixedHost)
	if err == nil || !strings.Contains(err.Error(), contract.EnvTable) || !strings.Contains(err.Error(), contract.EnvLease) {
		t.Fatalf("want both variables named, got %v", err)
	}
}

func TestParseEnvNoHostname(t *testing.T) {
	_, err := parseEnv(env(nil), func() (string, error) { return "", errors.New("no uts") })
	if err == nil || !strings.Contains(err.Error(), contract.EnvRelayID) {
		t.Fatalf("want OUTBOX_RELAY_ID named, got %v", err)
	}
}

func TestParseEnvBounds(t *testing.T) {
	for _, tc := range []struct {
		key, value string
		ok         bool
		want       string
	}{
		{contract.EnvBatchSize, "1", true, ""},
		{contract.EnvBatchSize, "10000", true, ""},
		{contract.EnvBatchSize, "10001", false, "OUTBOX_BATCH_SIZE: must be from 1 to 10000, got 10001"},
		{contract.EnvBatchSize, "0", false, "OUTBOX_BATCH_SIZE: must be positive"},
		{contract.EnvPublishTimeout, "100ms", true, ""},
		{contract.EnvPublishTimeout, "99ms", false, "OUTBOX_PUBLISH_TIMEOUT: must be from 100ms to 10m0s, got 99ms"},
		{contract.EnvPublishTimeout, "11m", false, "OUTBOX_PUBLISH_TIMEOUT: must be from 100ms to 10m0s, got 11m0s"},
		{contract.EnvPublishWindow, "1", true, ""},
		{contract.EnvPublishWindow, "10000", true, ""},
		{contract.EnvPublishWindow, "10001", false, "OUTBOX_PUBLISH_WINDOW: must be from 1 to 10000, got 10001"},
		{contract.EnvPublishWindow, "2147483648", false, "OUTBOX_PUBLISH_WINDOW: must be from 1 to 10000, got 2147483648"},
		{contract.EnvPublishWindow, "99999999999999999999", false, "OUTBOX_PUBLISH_WINDOW: not an integer"},
	} {
		vars := map[string]string{tc.key: tc.value}
		if tc.key == contract.EnvPublishTimeout {
			vars[contract.EnvLease] = "1h" // longer than twice any timeout in bounds
		}
		_, err := parseEnv(env(vars), fixedHost)
		if tc.ok != (err == nil) || !tc.ok && !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s=%s: %v, want ok=%v %q", tc.key, tc.value, err, tc.ok, tc.want)
		}
	}
}

func TestParseEnvMetricsAddr(t *testing.T) {
	for _, good := range []string{":9090", "127.0.0.1:9090", "[::1]:9090", "localhost:0", "metrics.internal:9102", "0.0.0.0:65535"} {
		if _, err := parseEnv(env(map[string]string{contract.EnvMetricsAddr: good}), fixedHost); err != nil {
			t.Errorf("OUTBOX_METRICS_ADDR=%s: %v", good, err)
		}
	}
	for _, bad := range []string{"9090", "localhost", ":http", ":65536", ":-1", "host name:9090", "a_b:9090", "1.2.3.4:", "::1:9090"} {
		_, err := parseEnv(env(map[string]string{contract.EnvMetricsAddr: bad}), fixedHost)
		var ce *configError
		if err == nil || !errors.As(err, &ce) || !strings.Contains(err.Error(), "OUTBOX_METRICS_ADDR: ") {
			t.Errorf("OUTBOX_METRICS_ADDR=%q: %v, want a configuration error naming the variable", bad, err)
		}
	}
}

func TestParseEnvCombinedErrorsNameTheVariables(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want []string
	}{
		{map[string]string{contract.EnvLease: "1s", contract.EnvPublishTimeout: "1s"},
			[]string{"OUTBOX_LEASE and OUTBOX_PUBLISH_TIMEOUT: ", "OUTBOX_LEASE=1s", "OUTBOX_PUBLISH_TIMEOUT=1s"}},
		// The lease is the default: the message says so.
		{map[string]string{contract.EnvPublishTimeout: "5m"},
			[]string{"OUTBOX_LEASE and OUTBOX_PUBLISH_TIMEOUT: ", "OUTBOX_LEASE unset: default 2m0s", "OUTBOX_PUBLISH_TIMEOUT=5m0s"}},
		{map[string]string{contract.EnvBackoffBase: "2h"},
			[]string{"OUTBOX_BACKOFF_MAX and OUTBOX_BACKOFF_BASE: ", "OUTBOX_BACKOFF_MAX unset: default 1h0m0s", "OUTBOX_BACKOFF_BASE=2h0m0s"}},
		{map[string]string{contract.EnvRelayID: strings.Repeat("r", 201)}, []string{"OUTBOX_RELAY_ID: RelayID is longer than 200 bytes"}},
	} {
		_, err := parseEnv(env(tc.env), fixedHost)
		if err == nil {
			t.Errorf("%v accepted", tc.env)
			continue
		}
		if strings.Contains(err.Error(), "OUTBOX_*") {
			t.Errorf("%v: %q does not name the variables", tc.env, err)
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%v: %q lacks %q", tc.env, err, w)
			}
		}
	}
}
