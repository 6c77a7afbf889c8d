// Package wmoutbox is watermill's SQL outbox as outboxlab sees it: the
// tables of one forwarder topic in watermill-sql v4's default PostgreSQL
// schema (messages and consumer-group offsets), staging an event through
// watermill-sql's Publisher inside the caller's transaction, wrapped in
// the forwarder's envelope, and a SELECT that shows the messages in
// outboxlab's row columns. The harness (package wmtarget), the replica
// that runs the forwarder (package wmrelay) and the benchmark share it.
package wmoutbox

import (
	"context"
	"fmt"

	"github.com/ThreeDotsLabs/watermill"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/components/forwarder"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxlab/outboxlab/outbox"
)

// ConsumerGroup is the consumer group of the forwarder's SQL subscriber.
// Every replica subscribes with it, so that they share one offset: the
// offsets row of the group, locked FOR UPDATE by the replica that reads a
// batch, is what keeps two replicas from forwarding the same messages.
const ConsumerGroup = "outboxlab_forwarder"

// OffsetsSuffix ends the name of the offsets table, beside the messages
// table (outbox.Table.Sibling).
const OffsetsSuffix = "_offsets"

// Tables are the tables of one forwarder topic: the messages table is the
// table the harness names (OUTBOX_TABLE), the offsets table is beside it,
// in the same schema. The topic, which watermill uses only to name them
// here, is the messages table's name.
type Tables struct {
	Messages outbox.Table
	Offsets  outbox.Table
}

// For returns the tables of the outbox named table.
func For(table outbox.Table) Tables {
	return Tables{Messages: table, Offsets: table.Sibling(OffsetsSuffix)}
}

// Topic is the SQL topic the forwarder subscribes to and the producers'
// forwarder.Publisher writes to.
func (t Tables) Topic() string { return t.Messages.Name() }

// SchemaAdapter is watermill-sql's DefaultPostgreSQLSchema over the
// messages table: a JSON payload column (the forwarder's envelope is
// JSON), its default batch of 100 messages a query.
func (t Tables) SchemaAdapter() wsql.DefaultPostgreSQLSchema {
	return wsql.DefaultPostgreSQLSchema{
		GenerateMessagesTableName: func(string) string { return t.Messages.Ident() },
		GeneratePayloadType:       func(string) string { return "JSON" },
	}
}

// OffsetsAdapter is watermill-sql's DefaultPostgreSQLOffsetsAdapter over
// the offsets table.
func (t Tables) OffsetsAdapter() wsql.DefaultPostgreSQLOffsetsAdapter {
	return wsql.DefaultPostgreSQLOffsetsAdapter{
		GenerateMessagesOffsetsTableName: func(string) string { return t.Offsets.Ident() },
	}
}

// Migrate creates both tables with watermill's own DDL (the adapters'
// schema-initializing queries, in one transaction under watermill's
// advisory lock), as a subscriber with InitializeSchema would.
func (t Tables) Migrate(ctx context.Context, db *pgxpool.Pool) error {
	q, err := t.SchemaAdapter().SchemaInitializingQueries(wsql.SchemaInitializingQueriesParams{Topic: t.Topic()})
	if err != nil {
		return fmt.Errorf("watermill schema of %s: %w", t.Messages, err)
	}
	oq, err := t.OffsetsAdapter().SchemaInitializingQueries(wsql.OffsetsSchemaInitializingQueriesParams{Topic: t.Topic()})
	if err != nil {
		return fmt.Errorf("watermill offsets schema of %s: %w", t.Offsets, err)
	}
	return pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		for _, s := range append(q, oq...) {
			if _, err := tx.Exec(ctx, s.Query, s.Args...); err != nil {
				return fmt.Errorf("creating watermill's tables %s, %s: %w", t.Messages, t.Offsets, err)
			}
		}
		return nil
	})
}

// Stage publishes msgs to destination topic, the routing key the
// forwarder will publish them with, through watermill-sql's Publisher on
// tx wrapped in forwarder.NewPublisher: each message is inserted into the
// messages table as an envelope (its own UUID, payload and metadata, and
// the destination topic) inside tx, and published by no one until a
// forwarder reads it after COMMIT.
func (t Tables) Stage(tx pgx.Tx, destination string, msgs ...*message.Message) error {
	pub, err := wsql.NewPublisher(wsql.TxFromPgx(tx), wsql.PublisherConfig{SchemaAdapter: t.SchemaAdapter()}, watermill.NopLogger{})
	if err != nil {
		return fmt.Errorf("watermill SQL publisher: %w", err)
	}
	fwd := forwarder.NewPublisher(pub, forwarder.PublisherConfig{ForwarderTopic: t.Topic()})
	if err := fwd.Publish(destination, msgs...); err != nil {
		return fmt.Errorf("staging through watermill's forwarder publisher: %w", err)
	}
	return nil
}

// Message is e as a watermill producer publishes it: the message UUID is
// the event id, the payload its JSON payload, and its correlation id, when
// it has one, is in the metadata under watermill's correlation key (which
// watermill-amqp sends as a header).
func Message(ctx context.Context, e outbox.Event) *message.Message {
	m := message.NewMessage(e.ID.String(), message.Payload(e.Payload))
	if e.CorrelationID != nil {
		middleware.SetCorrelationID(e.CorrelationID.String(), m)
	}
	m.SetContext(ctx)
	return m
}

// Rows is a SELECT over the messages table (and the offsets row of
// ConsumerGroup) in outboxlab's row columns:
//   - id: the event id, the envelope's "uuid" (the row's own uuid column
//     is a fresh UUID of the envelope);
//   - message_type: the envelope's destination topic, the routing key;
//   - processed_at: set once the forwarder's consumer group has acked the
//     message's offset ((transaction_id, offset) at or below the group's
//     last acked pair). watermill keeps no time of forwarding, so it is
//     the message's created_at, not the time it was forwarded;
//   - attempts 0, faulted_at, locked_by, locked_at and locked_until NULL:
//     watermill counts no attempts, parks nothing and leases no row (a
//     replica holds the group's offsets row FOR UPDATE while it forwards
//     a batch instead);
//   - occurred_at: created_at, the staging transaction's start by the
//     database clock (watermill keeps no time of its own for an event).
//
// created_at is a timestamp without time zone written as
// CURRENT_TIMESTAMP; it is read back in the session's time zone, the
// database's default on both sides.
func (t Tables) Rows() string {
	return `SELECT (m.payload->>'uuid')::uuid AS id,
       m.payload->>'destination_topic' AS message_type,
       CASE WHEN m.transaction_id < o.last_processed_transaction_id
              OR (m.transaction_id = o.last_processed_transaction_id AND m."offset" <= o.offset_acked)
            THEN m.created_at::timestamptz END AS processed_at,
       NULL::timestamptz AS faulted_at,
       0 AS attempts,
       m.created_at::timestamptz AS occurred_at,
       NULL::text AS locked_by,
       NULL::timestamptz AS locked_at,
       NULL::timestamptz AS locked_until
FROM ` + t.Messages.Ident() + ` m
LEFT JOIN ` + t.Offsets.Ident() + ` o ON o.consumer_group = '` + ConsumerGroup + `'`
}

// Name names the schema in reports and errors.
const Name = "watermill-sql"

// Schema is watermill's SQL outbox as an outbox.Schema: Migrate creates
// the tables of the topic derived from the table the harness names,
// Stage publishes the event inside the caller's transaction through the
// forwarder's publisher (destination topic = the event's type), Rows is
// Tables.Rows, which shows no lease of a row (the relay's locking style
// is row locks, which its target declares).
func Schema() outbox.Schema {
	return outbox.Schema{
		Name: Name,
		Migrate: func(ctx context.Context, db *pgxpool.Pool, table outbox.Table) error {
			return For(table).Migrate(ctx, db)
		},
		Stage: func(ctx context.Context, tx pgx.Tx, table outbox.Table, e outbox.Event) (string, error) {
			if e.Type == "" {
				return "", fmt.Errorf("staging event %s: empty message type", e.ID)
			}
			if err := For(table).Stage(tx, e.Type, Message(ctx, e)); err != nil {
				return "", fmt.Errorf("staging event %s: %w", e.ID, err)
			}
			return "", nil
		},
		Rows: func(table outbox.Table) string { return For(table).Rows() },
	}
}
