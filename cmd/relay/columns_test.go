package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxlab/outboxlab/contract"
	"github.com/outboxlab/outboxlab/testenv/pgserver"
)

// TestTableWithoutRequiredColumnsExitsTwo runs the relay on a throwaway
// local PostgreSQL whose outbox table lacks processed_at and faulted_at:
// with and without OUTBOX_MIGRATE (which leaves an existing table as it
// is), the relay exits 2 naming them, before it reaches the broker,
// instead of failing every tick for ever.
func TestTableWithoutRequiredColumnsExitsTwo(t *testing.T) {
	srv := pgserver.StartT(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, srv.AdminURL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `CREATE TABLE outbox (id uuid PRIMARY KEY, message_type text NOT NULL, payload jsonb NOT NULL,
		correlation_id uuid, occurred_at timestamptz NOT NULL DEFAULT now(), attempts integer NOT NULL DEFAULT 0,
		last_error text, locked_by text, locked_at timestamptz, locked_until timestamptz)`); err != nil {
		t.Fatal(err)
	}
	for _, migrate := range []string{"false", "true"} {
		env := goodEnv()
		env[contract.EnvDatabaseURL] = srv.AdminURL()
		env[contract.EnvTable] = "outbox"
		env[contract.EnvMigrate] = migrate
		p := start(t, env)
		if code := p.wait(t, 30*time.Second); code != exitConfig {
			t.Fatalf("OUTBOX_MIGRATE=%s: exit code %d, want %d\n%s", migrate, code, exitConfig, p.output())
		}
		out := p.output()
		for _, want := range []string{contract.EnvTable, "no column processed_at, faulted_at"} {
			if !strings.Contains(out, want) {
				t.Errorf("OUTBOX_MIGRATE=%s: stderr lacks %q:\n%s", migrate, want, out)
			}
		}
		if strings.Contains(out, "tick failed") || strings.Contains(out, "broker") && strings.Contains(out, "unreachable") {
			t.Errorf("OUTBOX_MIGRATE=%s: the relay ran before refusing the table:\n%s", migrate, out)
		}
	}
}
