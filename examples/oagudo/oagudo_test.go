// Package oagudo_test puts github.com/oagudo/outbox (v1.0.1) under
// outboxlab's catalogue through the public suite and target.yaml: the
// library's table, the row its writer stores (the target file's stage,
// held here to the library's own writer), and its reader as the relay
// (cmd/oagudo-relay). results/oagudo/findings.md says what the catalogue
// found.
package oagudo_test

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/outboxlab/outboxlab/outbox"
	"github.com/outboxlab/outboxlab/scenarios"
	"github.com/outboxlab/outboxlab/suite"
	"github.com/outboxlab/outboxlab/target/oagudo/oaoutbox"
	"github.com/outboxlab/outboxlab/testenv/pgserver"
)

// Target is the library as target.yaml describes it, its reader built
// from cmd/oagudo-relay unless the tests are short.
func Target(t *testing.T) suite.Target {
	return suite.TargetFile(t, "target.yaml", "../../cmd/oagudo-relay")
}

// TestTargetFile: the target file loads (no Docker needed) and declares
// what the library does, and nothing it does not.
func TestTargetFile(t *testing.T) {
	u, err := scenarios.LoadTarget("target.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := u.Promises.String(), "deletes,locking=none"; got != want {
		t.Errorf("capabilities %s, want %s", got, want)
	}
	if len(u.Command) != 1 || !strings.HasSuffix(u.Command[0], filepath.Join(".build", "bin", "oagudo-relay")) {
		t.Errorf("command %q, want the binary `make build` writes", u.Command)
	}
}

// TestStageIsTheLibrarysWriter stages one event through the target file's
// statement and one through the library's own writer (oaoutbox.Stage,
// Writer.Unmanaged().Store) and requires the two rows to be the same but
// for the id: created_at and scheduled_at, the payload's bytes, the
// metadata the reader takes the routing key from, no attempt. The rows
// view shows both alike.
func TestStageIsTheLibrarysWriter(t *testing.T) {
	u, err := scenarios.LoadTarget("target.yaml")
	if err != nil {
		t.Fatal(err)
	}
	srv := pgserver.StartT(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db := srv.SchemaPoolT(t, "oa")
	table := outbox.MustParseTable("oa.orders_outbox")
	if err := u.Outbox.Create(ctx, db, table); err != nil {
		t.Fatal(err)
	}
	corr := uuid.New()
	at := time.Date(2026, 12, 6, 10, 0, 0, 123456000, time.UTC)
	base := outbox.Event{Type: "order.placed", Payload: json.RawMessage(`{"order_id":"o1","amount":3}`), OccurredAt: at}
	type row struct {
		created, scheduled time.Time
		meta               oaoutbox.Metadata
		payload            []byte
		attempts           int
		viewType           string
	}
	stage := func(name string, st func(e outbox.Event) error, e outbox.Event) row {
		t.Helper()
		if err := st(e); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var r row
		var meta []byte
		if err := db.QueryRow(ctx, `SELECT created_at, scheduled_at, metadata, payload, times_attempted FROM oa.orders_outbox WHERE id = $1`, e.ID).
			Scan(&r.created, &r.scheduled, &meta, &r.payload, &r.attempts); err != nil {
			t.Fatalf("%s: reading its row: %v", name, err)
		}
		if err := json.Unmarshal(meta, &r.meta); err != nil {
			t.Fatalf("%s: metadata %q: %v", name, meta, err)
		}
		if err := db.QueryRow(ctx, `SELECT message_type FROM (`+u.Outbox.Rows(table)+`) r WHERE id = $1`, e.ID).Scan(&r.viewType); err != nil {
			t.Fatalf("%s: the rows view: %v", name, err)
		}
		r.created, r.scheduled = r.created.UTC(), r.scheduled.UTC()
		return r
	}
	inTx := func(s func(context.Context, pgx.Tx, outbox.Table, outbox.Event) (string, error)) func(outbox.Event) error {
		return func(e outbox.Event) error {
			tx, err := db.Begin(ctx)
			if err != nil {
				return err
			}
			defer tx.Rollback(ctx)
			if _, err := s(ctx, tx, table, e); err != nil {
				return err
			}
			return tx.Commit(ctx)
		}
	}
	for _, c := range []struct {
		name string
		corr *uuid.UUID
	}{{"with a correlation id", &corr}, {"without one", nil}} {
		t.Run(c.name, func(t *testing.T) {
			e1, e2 := base, base
			e1.ID, e2.ID = uuid.New(), uuid.New()
			e1.CorrelationID, e2.CorrelationID = c.corr, c.corr
			file := stage("the target file's stage", inTx(u.Outbox.Stage), e1)
			lib := stage("the library's writer", inTx(oaoutbox.Stage), e2)
			if !file.created.Equal(lib.created) || !file.scheduled.Equal(lib.scheduled) || file.meta != lib.meta ||
				file.attempts != lib.attempts || file.viewType != lib.viewType || !jsonEqual(t, file.payload, lib.payload) {
				t.Errorf("the target file's row %+v\nthe library's row     %+v", file, lib)
			}
			if !lib.created.Equal(at) || lib.meta.Type != base.Type || lib.viewType != base.Type {
				t.Errorf("the library's row %+v: want created_at %s and type %s", lib, at, base.Type)
			}
		})
	}
}

func jsonEqual(t *testing.T, a, b []byte) bool {
	t.Helper()
	var x, y bytes.Buffer
	if err := json.Compact(&x, a); err != nil {
		t.Fatalf("payload %q: %v", a, err)
	}
	if err := json.Compact(&y, b); err != nil {
		t.Fatalf("payload %q: %v", b, err)
	}
	return bytes.Equal(x.Bytes(), y.Bytes())
}

// TestCatalogue runs the library's reader on seed 1 of a broker outage:
// no event lost, every duplicate explained (by the outage, or by the two
// readers publishing one row). `outboxlab run --target examples/oagudo/target.yaml`
// runs the whole catalogue after `make build` (docs/examples.md). It
// starts containers: skipped under -short, and without a Docker engine
// unless OUTBOXLAB_REQUIRE_DOCKER is set.
func TestCatalogue(t *testing.T) {
	suite.Run(t, Target(t), suite.Options{
		Scenarios: []string{scenarios.BrokerDown},
		Seed:      1,
		Timeout:   5 * time.Minute,
	})
}
