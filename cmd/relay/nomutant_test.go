//go:build !mutants

package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxlab/outboxlab/outbox"
	"github.com/outboxlab/outboxlab/relay"
	"github.com/outboxlab/outboxlab/testenv"
)

// TestNoMutantsInTheRelayBinary: the relay built without the mutants tag
// runs as it is when OUTBOX_MUTANT is unset, and refuses the variable as
// a configuration error (exit 2) naming the image that has the mutants.
func TestNoMutantsInTheRelayBinary(t *testing.T) {
	if mutantsImage != testenv.ImageRelayMutants {
		t.Errorf("the relay names the mutants image %s, testenv builds %s", mutantsImage, testenv.ImageRelayMutants)
	}
	if _, err := mutantFromEnv(env(nil)); err != nil {
		t.Fatalf("no OUTBOX_MUTANT: %v", err)
	}
	var none relayMutant
	if none.publishOptions() != nil {
		t.Error("no mutant changes the publish options")
	}
	if got := none.config(relay.Config{RelayID: "r", BatchSize: 7}); got.RelayID != "r" || got.BatchSize != 7 {
		t.Errorf("no mutant changes the config: %+v", got)
	}
	pool, err := pgxpool.New(context.Background(), "postgres://u:p@127.0.0.1:1/db")
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	pub := &relay.AMQPPublisher{}
	store, got := none.wire(pool, outbox.MustParseTable("outbox"), pub, nil, nil)
	if _, ok := store.(*relay.PGStore); !ok || got != relay.Publisher(pub) {
		t.Errorf("store %T, publisher %T; want relay.PGStore and the publisher as it is", store, got)
	}

	var stderr bytes.Buffer
	code := run(context.Background(), env(map[string]string{mutantEnv: "no-lease"}), &stderr)
	for _, want := range []string{mutantEnv, `"no-lease"`, "built without mutants", testenv.ImageRelayMutants} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr %q lacks %q", stderr.String(), want)
		}
	}
	if code != exitConfig {
		t.Fatalf("exit %d, want %d", code, exitConfig)
	}
}

// TestNoMutantsInTheBuiltBinary is the same refusal from the binary that
// `go build ./cmd/relay` makes, as the relay image runs it.
func TestNoMutantsInTheBuiltBinary(t *testing.T) {
	e := goodEnv()
	e[mutantEnv] = "unfenced-mark"
	p := start(t, e)
	if code := p.wait(t, 30*time.Second); code != exitConfig {
		t.Fatalf("exit code %d, want %d", code, exitConfig)
	}
	if out := p.output(); !strings.Contains(out, "built without mutants") || !strings.Contains(out, testenv.ImageRelayMutants) {
		t.Errorf("stderr does not say the binary has no mutants:\n%s", out)
	}
}
