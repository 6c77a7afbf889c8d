package main

import (
	"errors"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/riverqueue/river/rivertype"

	"github.com/outboxlab/outboxlab/contract"
	"github.com/outboxlab/outboxlab/relay"
	"github.com/outboxlab/outboxlab/scenarios"
	rvtarget "github.com/outboxlab/outboxlab/target/river"
)

// contractEnv is what the harness sets for every replica, but for the
// timings.
func contractEnv() map[string]string {
	return map[string]string{
		contract.EnvDatabaseURL: "postgres://u:p@127.0.0.1:5432/db?sslmode=disable",
		contract.EnvAMQPURL:     "amqp://u:p@127.0.0.1:5672/,amqp://u:p@127.0.0.1:5673/",
		contract.EnvTable:       "run_1.river_job",
		contract.EnvExchange:    "orders",
		contract.EnvRelayID:     "relay-a",
	}
}

// TestConfigure reads whole environments, and reports every bad variable
// of the others at once.
func TestConfigure(t *testing.T) {
	with := func(extra map[string]string) map[string]string {
		env := contractEnv()
		maps.Copy(env, extra)
		return env
	}
	for _, c := range []struct {
		name  string
		env   map[string]string
		check func(t *testing.T, c config)
		// bad names the variables the error must name; none: no error.
		bad []string
	}{
		{
			name: "River's defaults",
			env:  contractEnv(),
			check: func(t *testing.T, c config) {
				r := c.river
				if c.table.Name() != "river_job" || r.Schema != "run_1" || r.ID != "relay-a" || c.amqpURL != "amqp://u:p@127.0.0.1:5672/" ||
					c.exchange != "orders" || c.maxWorkers != 100 || c.publishTimeout != 0 || c.db.ConnConfig.ConnectTimeout != 5*time.Second {
					t.Errorf("config = table %s, schema %q, id %q, broker %s, exchange %s, %d workers, publish timeout %s, connect timeout %s",
						c.table, r.Schema, r.ID, c.amqpURL, c.exchange, c.maxWorkers, c.publishTimeout, c.db.ConnConfig.ConnectTimeout)
				}
				if r.FetchPollInterval != 0 || r.FetchCooldown != 0 || r.JobTimeout != 0 || r.RescueStuckJobsAfter != 0 || r.RetryPolicy != nil || r.MaxAttempts != 0 {
					t.Errorf("River settings beside its defaults: %+v", r)
				}
			},
		},
		{
			name: "every setting",
			env: with(map[string]string{
				contract.EnvPollInterval: "100ms", contract.EnvPublishTimeout: "2s",
				EnvRescueAfter: "4s", EnvJobTimeout: "3s", EnvMaxWorkers: "7", EnvRetry: "100ms/2s",
			}),
			check: func(t *testing.T, c config) {
				r := c.river
				if r.FetchPollInterval != 100*time.Millisecond || r.FetchCooldown != 0 || c.publishTimeout != 2*time.Second ||
					r.RescueStuckJobsAfter != 4*time.Second || r.JobTimeout != 3*time.Second || c.maxWorkers != 7 ||
					r.RetryPolicy != (cappedRetry{contract.Backoff{Base: 100 * time.Millisecond, Max: 2 * time.Second}}) {
					t.Errorf("config = poll %s, cooldown %s, publish timeout %s, rescue after %s, job timeout %s, %d workers, retry %v",
						r.FetchPollInterval, r.FetchCooldown, c.publishTimeout, r.RescueStuckJobsAfter, r.JobTimeout, c.maxWorkers, r.RetryPolicy)
				}
			},
		},
		{
			name: "a poll interval below River's fetch cooldown lowers the cooldown",
			env:  with(map[string]string{contract.EnvPollInterval: "20ms"}),
			check: func(t *testing.T, c config) {
				if c.river.FetchPollInterval != 20*time.Millisecond || c.river.FetchCooldown != 20*time.Millisecond {
					t.Errorf("poll %s, cooldown %s", c.river.FetchPollInterval, c.river.FetchCooldown)
				}
			},
		},
		{
			name: "a job timeout alone",
			env:  with(map[string]string{EnvJobTimeout: "2h"}),
			check: func(t *testing.T, c config) {
				if c.river.JobTimeout != 2*time.Hour || c.river.RescueStuckJobsAfter != 0 {
					t.Errorf("job timeout %s, rescue after %s", c.river.JobTimeout, c.river.RescueStuckJobsAfter)
				}
			},
		},
		{
			name: "everything wrong",
			env: map[string]string{
				contract.EnvDatabaseURL:    "",
				contract.EnvTable:          "river_job",
				contract.EnvRelayID:        strings.Repeat("r", 101),
				contract.EnvPollInterval:   "soon",
				contract.EnvPublishTimeout: "-1s",
				EnvMaxWorkers:              "0",
				EnvRetry:                   "2s/100ms",
				EnvJobTimeout:              "0s",
			},
			bad: []string{contract.EnvDatabaseURL, contract.EnvTable, contract.EnvAMQPURL, contract.EnvExchange, contract.EnvRelayID,
				contract.EnvPollInterval, contract.EnvPublishTimeout, EnvMaxWorkers, EnvRetry, EnvJobTimeout},
		},
		{
			name: "another table, a bad broker URL, a bad database URL",
			env: with(map[string]string{
				contract.EnvTable: "run_1.orders_outbox", contract.EnvAMQPURL: "http://u:secret@h/",
				contract.EnvDatabaseURL: "postgres://u:secret@h:port/db", EnvMaxWorkers: "lots",
			}),
			bad: []string{contract.EnvTable, contract.EnvAMQPURL, contract.EnvDatabaseURL, EnvMaxWorkers},
		},
		{
			name: "a rescue-after below River's default job timeout",
			env:  with(map[string]string{EnvRescueAfter: "4s"}),
			bad:  []string{EnvRescueAfter},
		},
		{
			name: "a rescue-after below the job timeout",
			env:  with(map[string]string{EnvRescueAfter: "4s", EnvJobTimeout: "5s"}),
			bad:  []string{EnvRescueAfter},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := configure(func(k string) string { return c.env[k] })
			if len(c.bad) == 0 {
				if err != nil {
					t.Fatal(err)
				}
				c.check(t, got)
				return
			}
			if err == nil {
				t.Fatal("a bad environment was accepted")
			}
			for _, name := range c.bad {
				if !strings.Contains(err.Error(), name+":") {
					t.Errorf("the error does not name %s: %v", name, err)
				}
			}
			if n := len(strings.Split(err.Error(), "\n")); n != len(c.bad) {
				t.Errorf("%d problems reported, want %d: %v", n, len(c.bad), err)
			}
			if strings.Contains(err.Error(), "secret") {
				t.Errorf("the error shows a password: %v", err)
			}
		})
	}
}

// TestTargetEnvironment configures the replica as the harness runs
// rvtarget's target, and checks that it runs with the rescue-after the
// target declares as its lease and with River's default retry policy,
// since the target declares no backoff.
func TestTargetEnvironment(t *testing.T) {
	u := rvtarget.Target("river-relay")
	env := contractEnv()
	maps.Copy(env, scenarios.TimingEnv())
	maps.Copy(env, u.Env)
	c, err := configure(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if c.river.RescueStuckJobsAfter != u.Promises.Lease || c.river.RetryPolicy != nil || u.Promises.Backoff.Declared() {
		t.Errorf("rescue after %s, retry policy %v; the target declares %s", c.river.RescueStuckJobsAfter, c.river.RetryPolicy, u.Promises)
	}
	if u.Promises.Attempts != 0 {
		t.Errorf("the target declares an attempt limit of %d: River counts a broker outage as an attempt, which a declared limit promises not to do", u.Promises.Attempts)
	}
	if c.publishTimeout != scenarios.PublishTimeout || c.river.FetchPollInterval != scenarios.PollInterval {
		t.Errorf("publish timeout %s, poll interval %s", c.publishTimeout, c.river.FetchPollInterval)
	}
}

// TestCappedRetry checks RIVER_RETRY's policy against contract.Backoff:
// after the n-th recorded error, min(BASE × 2^(n-1), MAX).
func TestCappedRetry(t *testing.T) {
	b := contract.Backoff{Base: 100 * time.Millisecond, Max: 2 * time.Second}
	p := cappedRetry{b}
	for errs, want := range []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond, 1600 * time.Millisecond, 2 * time.Second, 2 * time.Second} {
		job := &rivertype.JobRow{Errors: make([]rivertype.AttemptError, errs)}
		before := time.Now()
		at := p.NextRetry(job)
		after := time.Now()
		if at.Before(before.Add(want)) || at.After(after.Add(want)) || b.Wait(errs+1) != want {
			t.Errorf("a job with %d errors before this failure is retried %s later, want %s", errs, at.Sub(before), want)
		}
	}
}

// TestPublishers lends a publisher to one job at a time, keeps at most
// its bound of idle ones, and lends none once closed.
func TestPublishers(t *testing.T) {
	p := &publishers{cfg: relay.AMQPConfig{URL: "amqp://u:p@127.0.0.1:5672/", Exchange: "orders"}, keep: 1}
	a, err := p.take()
	if err != nil {
		t.Fatal(err)
	}
	b, err := p.take()
	if err != nil || a == b {
		t.Fatalf("two jobs at once share a publisher (%v)", err)
	}
	p.put(a)
	p.put(b)
	if len(p.idle) != 1 || p.idle[0] != a {
		t.Errorf("idle publishers %v, want only the first given back", p.idle)
	}
	if c, err := p.take(); err != nil || c != a {
		t.Errorf("take = %p, %v; want the idle publisher %p", c, err, a)
	}
	p.close()
	if _, err := p.take(); !errors.Is(err, errPublishersClosed) {
		t.Errorf("take after close = %v", err)
	}
}
