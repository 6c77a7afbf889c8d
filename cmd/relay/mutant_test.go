//go:build mutants

// The tests of the relay-side mutants, compiled only with the mutants tag
// (`make test` runs them with go test -tags mutants -run Mutant).
package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxlab/outboxlab/internal/mutant"
	"github.com/outboxlab/outboxlab/outbox"
	"github.com/outboxlab/outboxlab/relay"
)

func TestMutantFromEnv(t *testing.T) {
	if mutantEnv != mutant.EnvVar {
		t.Fatalf("the relay reads %s, package mutant names %s", mutantEnv, mutant.EnvVar)
	}
	none, err := mutantFromEnv(env(nil))
	if err != nil || none.m != nil {
		t.Fatalf("no OUTBOX_MUTANT: %+v, %v", none, err)
	}
	if none.publishOptions() != nil {
		t.Error("no mutant changes the publish options")
	}
	cfg := relay.Config{RelayID: "r", BatchSize: 7}
	if got := none.config(cfg); got.RelayID != cfg.RelayID || got.BatchSize != cfg.BatchSize {
		t.Errorf("no mutant changes the config: %+v", got)
	}

	np, err := mutantFromEnv(env(map[string]string{mutant.EnvVar: " non-persistent "}))
	if err != nil || np.m == nil || np.m.Name != "non-persistent" {
		t.Fatalf("non-persistent: %+v, %v", np, err)
	}
	if o := np.publishOptions(); o == nil || o.Persistent || !o.Mandatory {
		t.Errorf("non-persistent publishes with %+v, want transient and mandatory", o)
	}

	for _, name := range []string{"no-such-bug", "consumer-no-dedupe", "publish-before-commit"} {
		_, err := mutantFromEnv(env(map[string]string{mutant.EnvVar: name}))
		var ce *configError
		if !errors.As(err, &ce) || ce.Var != mutant.EnvVar {
			t.Errorf("OUTBOX_MUTANT=%s: %v, want a configuration error naming the variable", name, err)
		}
	}
}

// TestMutantWire: with no mutant the relay gets relay.PGStore and the
// publisher as they are; with one, the mutant's decorators over PGRaw.
func TestMutantWire(t *testing.T) {
	pool, err := pgxpool.New(context.Background(), "postgres://u:p@127.0.0.1:1/db")
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	table := outbox.MustParseTable("outbox")
	var logs bytes.Buffer
	log := newLogger(&logs, settings{Relay: relay.Config{RelayID: "r"}.WithDefaults()})
	pub := &relay.AMQPPublisher{}

	store, got := relayMutant{}.wire(pool, table, pub, nil, log)
	if _, ok := store.(*relay.PGStore); !ok || got != relay.Publisher(pub) {
		t.Errorf("no mutant: store %T, publisher %T", store, got)
	}
	if logs.Len() != 0 {
		t.Errorf("no mutant logged: %s", logs.String())
	}

	m, err := mutantFromEnv(env(map[string]string{mutant.EnvVar: "unfenced-mark"}))
	if err != nil {
		t.Fatal(err)
	}
	store, got = m.wire(pool, table, pub, nil, log)
	if _, ok := store.(*relay.PGStore); ok || got != relay.Publisher(pub) {
		t.Errorf("unfenced-mark: store %T (want a decorator), publisher %T", store, got)
	}
	if !strings.Contains(logs.String(), `"mutant":"unfenced-mark"`) {
		t.Errorf("the relay did not log its mutant: %s", logs.String())
	}

	m, _ = mutantFromEnv(env(map[string]string{mutant.EnvVar: "no-confirm"}))
	if _, got = m.wire(pool, table, pub, nil, log); got == relay.Publisher(pub) {
		t.Error("no-confirm left the publisher undecorated")
	}
}

func TestRunRejectsUnknownMutant(t *testing.T) {
	var stderr bytes.Buffer
	code := run(context.Background(), env(map[string]string{mutant.EnvVar: "no-such-bug"}), &stderr)
	if code != exitConfig || !strings.Contains(stderr.String(), mutant.EnvVar) {
		t.Fatalf("exit %d, stderr %q; want %d naming %s", code, stderr.String(), exitConfig, mutant.EnvVar)
	}
}
