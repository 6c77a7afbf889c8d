// Package oaoutbox is the outbox table of github.com/oagudo/outbox
// (v1.0.1) as an outbox.Schema, so that the harness stages events through
// the library's own writer and reads its rows back in outboxlab's
// columns.
//
// The table is the library's, with the DDL its README gives for
// PostgreSQL: id uuid, created_at and scheduled_at timestamptz, metadata
// and payload bytea, times_attempted integer, and the two indexes. The
// library keeps no message type: the harness writes the event's type
// (the routing key its relay publishes with) and correlation id into the
// metadata as JSON (Metadata), where the library's users put such
// attributes. The library deletes a row once it is published, and
// discards (deletes) one whose attempts reached its limit; it marks,
// parks and leases nothing, so the rows view shows processed_at,
// faulted_at and the lease columns NULL, and times_attempted as attempts.
package oaoutbox

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	oa "github.com/oagudo/outbox"

	"github.com/outboxlab/outboxlab/outbox"
)

// Name names the schema in reports and errors.
const Name = "oagudo-outbox"

// Metadata is what the harness keeps of an event in the library's
// metadata column.
type Metadata struct {
	Type          string `json:"type"`
	CorrelationID string `json:"correlation_id,omitempty"`
}

// Schema is the library's table as an outbox.Schema: Migrate runs the
// library's DDL, Stage stores the event with the library's
// UnmanagedWriter inside the caller's transaction, Rows reads the rows
// back.
func Schema() outbox.Schema {
	return outbox.Schema{Name: Name, Migrate: Migrate, Stage: Stage, Rows: Rows}
}

// Migrate creates the library's table and indexes for table.
func Migrate(ctx context.Context, db *pgxpool.Pool, table outbox.Table) error {
	_, err := db.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+table.Ident()+` (
    id UUID PRIMARY KEY,
    created_at TIMESTAMP WITH TIME ZONE NOT NULL,
    scheduled_at TIMESTAMP WITH TIME ZONE NOT NULL,
    metadata BYTEA,
    payload BYTEA NOT NULL,
    times_attempted INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS `+pgx.Identifier{table.Name() + "_created_at"}.Sanitize()+` ON `+table.Ident()+` (created_at);
CREATE INDEX IF NOT EXISTS `+pgx.Identifier{table.Name() + "_scheduled_at"}.Sanitize()+` ON `+table.Ident()+` (scheduled_at);`)
	if err != nil {
		return fmt.Errorf("creating the oagudo/outbox table %s: %w", table, err)
	}
	return nil
}

// Stage stores e with the library's UnmanagedWriter inside tx: id = the
// event's id, created_at and scheduled_at = its occurred_at, the
// producer's clock (the library's now when unset), payload =
// its JSON payload, metadata = Metadata. The library names its table
// without a schema, as its users' search path finds it; Stage puts
// table's schema first on tx's search path for the call and puts the
// path back after it.
func Stage(ctx context.Context, tx pgx.Tx, table outbox.Table, e outbox.Event) (string, error) {
	m, err := Message(e)
	if err != nil {
		return "", fmt.Errorf("staging event %s: %w", e.ID, err)
	}
	path, err := searchFirst(ctx, tx, table)
	if err != nil {
		return "", fmt.Errorf("staging event %s: %w", e.ID, err)
	}
	w := oa.NewWriter(oa.NewDBContextWithDB(nil, oa.SQLDialectPostgres, oa.WithTableName(table.Name())))
	if err := w.Unmanaged().Store(ctx, pgxTx{tx}, m); err != nil {
		return "", fmt.Errorf("staging event %s: %w", e.ID, err)
	}
	if _, err := tx.Exec(ctx, `SELECT set_config('search_path', $1, true)`, path); err != nil {
		return "", fmt.Errorf("staging event %s: restoring the search path: %w", e.ID, err)
	}
	return "", nil
}

// searchFirst puts table's schema first on tx's search path, for the
// rest of tx, and returns the path it had.
func searchFirst(ctx context.Context, tx pgx.Tx, table outbox.Table) (string, error) {
	var path string
	if err := tx.QueryRow(ctx, `SELECT current_setting('search_path')`).Scan(&path); err != nil {
		return "", fmt.Errorf("reading the search path: %w", err)
	}
	if _, err := tx.Exec(ctx, `SELECT set_config('search_path', $1, true)`, pgx.Identifier{table.Schema()}.Sanitize()+", "+path); err != nil {
		return "", fmt.Errorf("setting the search path: %w", err)
	}
	return path, nil
}

// Message is the library's message of e: id = the event's id,
// created_at and scheduled_at = its occurred_at, the producer's clock
// (the library's now when unset), payload = its JSON payload, metadata =
// Metadata.
func Message(e outbox.Event) (*oa.Message, error) {
	if e.Type == "" {
		return nil, errors.New("empty message type")
	}
	meta, err := json.Marshal(Metadata{Type: e.Type, CorrelationID: correlation(e)})
	if err != nil {
		return nil, err
	}
	opts := []oa.MessageOption{oa.WithID(e.ID), oa.WithMetadata(meta)}
	if !e.OccurredAt.IsZero() {
		// The app's now, which the library takes for both when it is
		// not given: the event's time is the producer's clock.
		opts = append(opts, oa.WithCreatedAt(e.OccurredAt), oa.WithScheduledAt(e.OccurredAt))
	}
	return oa.NewMessage(e.Payload, opts...), nil
}

// Event is the event a message of the library's carries, as Message
// wrote it: its id, its type and correlation id from Metadata, its
// payload. A message without a type in its metadata is an error.
func Event(m *oa.Message) (outbox.Event, error) {
	var meta Metadata
	if err := json.Unmarshal(m.Metadata, &meta); err != nil || meta.Type == "" {
		return outbox.Event{}, fmt.Errorf("message %s: no type in its metadata %q", m.ID, m.Metadata)
	}
	e := outbox.Event{ID: m.ID, Type: meta.Type, Payload: m.Payload, OccurredAt: m.CreatedAt}
	if meta.CorrelationID != "" {
		id, err := uuid.Parse(meta.CorrelationID)
		if err != nil {
			return outbox.Event{}, fmt.Errorf("message %s: correlation id %q: %w", m.ID, meta.CorrelationID, err)
		}
		e.CorrelationID = &id
	}
	return e, nil
}

func correlation(e outbox.Event) string {
	if e.CorrelationID == nil {
		return ""
	}
	return e.CorrelationID.String()
}

// Rows reads the library's rows in outboxlab's columns: the message type
// from the metadata, created_at as occurred_at, times_attempted as
// attempts, and NULL for what the library does not keep.
func Rows(table outbox.Table) string {
	return `SELECT id, convert_from(metadata, 'UTF8')::jsonb->>'type' AS message_type,
       NULL::timestamptz AS processed_at, NULL::timestamptz AS faulted_at,
       times_attempted AS attempts, created_at AS occurred_at,
       NULL::text AS locked_by, NULL::timestamptz AS locked_at, NULL::timestamptz AS locked_until
FROM ` + table.Ident()
}

// pgxTx is a pgx.Tx as the library's TxQueryer. The library's
// UnmanagedWriter.Store only executes its INSERT; the query methods,
// which would need database/sql's own results, are never called by it:
// QueryContext refuses, and QueryRowContext returns nil.
type pgxTx struct{ tx pgx.Tx }

var errQuery = errors.New("oaoutbox: the harness's transaction runs the library's statements, not its queries")

func (t pgxTx) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	tag, err := t.tx.Exec(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return result(tag.RowsAffected()), nil
}

func (t pgxTx) QueryContext(context.Context, string, ...any) (*sql.Rows, error) {
	return nil, errQuery
}

func (t pgxTx) QueryRowContext(context.Context, string, ...any) *sql.Row {
	return nil
}

// result is the sql.Result of a statement that affected n rows.
type result int64

func (r result) LastInsertId() (int64, error) { return 0, errors.New("no insert id") }
func (r result) RowsAffected() (int64, error) { return int64(r), nil }
