package main

import (
	"strings"
	"testing"

	"github.com/outboxlab/outboxlab/contract"
)

// TestConfigure reads a whole environment, and reports every bad
// variable of another at once.
func TestConfigure(t *testing.T) {
	env := map[string]string{
		contract.EnvDatabaseURL:    "postgres://u:p@127.0.0.1:5432/db?sslmode=disable",
		contract.EnvAMQPURL:        "amqp://u:p@127.0.0.1:5672/,amqp://u:p@127.0.0.1:5673/",
		contract.EnvTable:          "run_1.orders_outbox",
		contract.EnvExchange:       "orders",
		contract.EnvRelayID:        "relay-a",
		contract.EnvPollInterval:   "100ms",
		contract.EnvPublishTimeout: "2s",
		EnvMaxAttempts:             "3",
		EnvBackoff:                 "100ms/2s",
	}
	c, err := configure(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if c.table.Name() != "orders_outbox" || c.db.RuntimeParams["search_path"] != `"run_1"` || c.amqpURL != "amqp://u:p@127.0.0.1:5672/" ||
		c.exchange != "orders" || len(c.opts) != 4 {
		t.Errorf("config = table %s, search path %q, broker %s, exchange %s, %d reader options", c.table, c.db.RuntimeParams["search_path"], c.amqpURL, c.exchange, len(c.opts))
	}

	bad := map[string]string{
		contract.EnvDatabaseURL:  "postgres://u:p@127.0.0.1:5432/db?sslmode=disable",
		contract.EnvTable:        "orders_outbox",
		contract.EnvPollInterval: "soon",
		EnvMaxAttempts:           "-1",
		EnvBackoff:               "2s/100ms",
	}
	_, err = configure(func(k string) string { return bad[k] })
	if err == nil {
		t.Fatal("a bad environment was accepted")
	}
	for _, name := range []string{contract.EnvTable, contract.EnvAMQPURL, contract.EnvExchange, contract.EnvPollInterval, EnvMaxAttempts, EnvBackoff} {
		if !strings.Contains(err.Error(), name) {
			t.Errorf("the error does not name %s: %v", name, err)
		}
	}
}
