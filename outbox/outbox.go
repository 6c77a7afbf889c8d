// Package outbox is the staging side of the transactional outbox: the table
// schema and its migrations, the Event that a business transaction stages,
// and Stage, which inserts an event inside the caller's transaction and
// publishes nothing.
package outbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Event is one integration event staged in the outbox.
type Event struct {
	// ID identifies the event end to end: it becomes the AMQP message_id and
	// the consumer's dedupe key. NewEvent fills it with a UUIDv7.
	ID uuid.UUID
	// Type is the message type; it is also the routing key.
	Type string
	// Payload is the JSON body.
	Payload json.RawMessage
	// CorrelationID is optional.
	CorrelationID *uuid.UUID
	// OccurredAt is when the business change happened. The zero value lets
	// the database clock decide (now() of the staging transaction).
	OccurredAt time.Time
}

// NewEvent returns an event with a fresh time-ordered ID and the payload
// encoded as JSON.
func NewEvent(messageType string, payload any) (Event, error) {
	body, err := json.Marshal(payload)
	if err != nil {
		return Event{}, fmt.Errorf("encoding %s payload: %w", messageType, err)
	}
	id, err := uuid.NewV7()
	if err != nil {
		return Event{}, fmt.Errorf("generating event id: %w", err)
	}
	return Event{ID: id, Type: messageType, Payload: body}, nil
}

// ErrInvalidIdentifier is returned for a schema or table name that is not a
// plain SQL identifier.
var ErrInvalidIdentifier = errors.New("invalid SQL identifier")

var identRe = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)

// Table is a validated, optionally schema-qualified table name. Its zero
// value is not usable; build one with ParseTable.
type Table struct {
	schema string
	name   string
}

// ParseTable validates s ("outbox" or "schema.outbox") as a table name.
// Only plain identifiers are accepted, so a Table can be spliced into SQL.
func ParseTable(s string) (Table, error) {
	parts := strings.Split(s, ".")
	var t Table
	switch len(parts) {
	case 1:
		t.name = parts[0]
	case 2:
		t.schema, t.name = parts[0], parts[1]
	default:
		return Table{}, fmt.Errorf("table %q: %w: want name or schema.name", s, ErrInvalidIdentifier)
	}
	for i, p := range []string{t.schema, t.name} {
		if i == 0 && len(parts) == 1 {
			continue // unqualified
		}
		if !identRe.MatchString(p) {
			return Table{}, fmt.Errorf("table %q: %w: %q must match %s", s, ErrInvalidIdentifier, p, identRe)
		}
	}
	return t, nil
}

// MustParseTable is ParseTable for names known at compile time.
func MustParseTable(s string) Table {
	t, err := ParseTable(s)
	if err != nil {
		panic(err)
	}
	return t
}

// Schema returns the schema, or "" when the name is unqualified.
func (t Table) Schema() string { return t.schema }

// Name returns the unqualified table name.
func (t Table) Name() string { return t.name }

// String returns the name as given, e.g. "chat.outbox".
func (t Table) String() string {
	if t.schema == "" {
		return t.name
	}
	return t.schema + "." + t.name
}

// canonical is the table's name as the names derived from it read it:
// String, without the schema when that is public, where an unqualified
// name is found with PostgreSQL's default search_path. (The table's own
// SQL, Ident, keeps the schema as given.)
func (t Table) canonical() string {
	if t.schema == "public" {
		return t.name
	}
	return t.String()
}

// Ident returns the quoted identifier for use in SQL.
func (t Table) Ident() string {
	if t.schema == "" {
		return pgx.Identifier{t.name}.Sanitize()
	}
	return pgx.Identifier{t.schema, t.name}.Sanitize()
}

// MaxIdentifierLen is the longest identifier PostgreSQL keeps, in bytes
// (NAMEDATALEN - 1). A longer name is cut: silently for an index, whose
// cut name may then be taken (CREATE INDEX IF NOT EXISTS skips it), and
// with an error for a NOTIFY channel.
const MaxIdentifierLen = 63

// Channel is the LISTEN/NOTIFY channel that wakes the table's relay:
// "outbox_" and the name with its dot as "_" (outbox_chat_outbox), or,
// for a name too long for that or with upper-case letters, its start and
// a hash of the whole name (see derivedName). It is at most
// MaxIdentifierLen bytes and case-sensitive (LISTEN quotes it).
// public.outbox has outbox's channel, and its indexes (see derivedName).
func (t Table) Channel() string {
	return t.derivedName("outbox_", "")
}

// PendingIndex is the name of the partial index that serves the relay's
// claim (migration 001): chat_outbox_pending_idx for chat.outbox. The
// index lives in the table's schema.
func (t Table) PendingIndex() string { return t.derivedName("", "_pending_idx") }

// ProcessedIndex is the name of the index the sweep deletes by (migration
// 001): chat_outbox_processed_idx for chat.outbox.
func (t Table) ProcessedIndex() string { return t.derivedName("", "_processed_idx") }

// ParkedIndex is the name of the index of the parked rows (migration
// 004): chat_outbox_parked_idx for chat.outbox.
func (t Table) ParkedIndex() string { return t.derivedName("", "_parked_idx") }

// derivedName names an object of the table: prefix, the table's name with
// its dot as "_", and suffix. That name is used as it is when it fits in
// MaxIdentifierLen bytes and is all lower case. Otherwise the table's name
// is cut to fit and followed by "_" and 8 hex digits of the SHA-256 of the
// whole name: names that PostgreSQL would cut to the same bytes, or that
// differ only in case (Outbox and outbox, which an unquoted use would fold
// together), get distinct names, and the same table always the same one.
// The name is the table's as given, less a schema of "public" (see
// canonical): public.outbox and outbox, one table with PostgreSQL's
// default search_path, listen on one channel and share their indexes.
func (t Table) derivedName(prefix, suffix string) string {
	stem := strings.ReplaceAll(t.canonical(), ".", "_")
	if name := prefix + stem + suffix; len(name) <= MaxIdentifierLen && name == strings.ToLower(name) {
		return name
	}
	sum := sha256.Sum256([]byte(t.canonical()))
	tag := "_" + hex.EncodeToString(sum[:4])
	if room := MaxIdentifierLen - len(prefix) - len(tag) - len(suffix); len(stem) > room {
		stem = stem[:room]
	}
	return prefix + stem + tag + suffix
}

// Querier is what Stage needs: a pgx.Tx satisfies it.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// StageOptions tunes Stage.
type StageOptions struct {
	// Notify sends NOTIFY on the table's channel inside the same transaction,
	// so that a listening relay wakes at COMMIT instead of the next poll.
	Notify bool
}

// Stage inserts e into the outbox table inside tx. It publishes nothing: the
// row commits or rolls back with the caller's business write, and a relay
// publishes it after COMMIT.
func Stage(ctx context.Context, tx Querier, table Table, e Event, opts StageOptions) error {
	if e.ID == uuid.Nil {
		return errors.New("staging event: empty id")
	}
	if e.Type == "" {
		return fmt.Errorf("staging event %s: empty message type", e.ID)
	}
	if len(e.Payload) == 0 {
		return fmt.Errorf("staging event %s: empty payload", e.ID)
	}
	var occurred any
	if !e.OccurredAt.IsZero() {
		occurred = e.OccurredAt
	}
	_, err := tx.Exec(ctx,
		`INSERT INTO `+table.Ident()+` (id, message_type, payload, correlation_id, occurred_at)
		 VALUES ($1, $2, $3, $4, coalesce($5, now()))`,
		e.ID, e.Type, []byte(e.Payload), e.CorrelationID, occurred)
	if err != nil {
		return fmt.Errorf("staging event %s: %w", e.ID, err)
	}
	if opts.Notify {
		if _, err := tx.Exec(ctx, `SELECT pg_notify($1, '')`, table.Channel()); err != nil {
			return fmt.Errorf("notifying %s: %w", table.Channel(), err)
		}
	}
	return nil
}
