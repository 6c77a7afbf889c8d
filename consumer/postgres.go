package consumer

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"sort"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

//go:embed migration/*.up.sql
var migrationFS embed.FS

// DB is what MigrateInbox needs: *pgxpool.Pool and *pgx.Conn satisfy it.
type DB interface {
	Begin(ctx context.Context) (pgx.Tx, error)
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// MigrateInbox creates the inbox, effects and projection tables in the first schema of
// the search path. It is idempotent and safe to run from several processes
// at once (every statement is IF NOT EXISTS, under an advisory lock).
func MigrateInbox(ctx context.Context, db DB) error {
	files, err := fs.Glob(migrationFS, "migration/*.up.sql")
	if err != nil {
		return fmt.Errorf("loading inbox migrations: %w", err)
	}
	sort.Strings(files)
	tx, err := db.Begin(ctx)
	if err != nil {
		return fmt.Errorf("migrating inbox: %w", err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('outboxlab.migrate.inbox'))`); err != nil {
		return fmt.Errorf("migrating inbox: locking: %w", err)
	}
	for _, f := range files {
		body, err := migrationFS.ReadFile(f)
		if err != nil {
			return fmt.Errorf("migrating inbox: reading %s: %w", f, err)
		}
		if _, err := tx.Exec(ctx, string(body)); err != nil {
			return fmt.Errorf("migrating inbox: applying %s: %w", f, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("migrating inbox: commit: %w", err)
	}
	return nil
}

// Effect is a consumer's business effect, run inside the transaction that
// records the message in the inbox.
type Effect func(ctx context.Context, tx pgx.Tx, m Message) error

// RecordEffect returns an Effect that inserts one row into the effects
// table for consumer. The table has no unique key, so an effect applied
// twice leaves two rows: that is what the harness looks for.
func RecordEffect(consumer string) Effect {
	return func(ctx context.Context, tx pgx.Tx, m Message) error {
		if _, err := tx.Exec(ctx, `INSERT INTO effects (consumer, message_id) VALUES ($1, $2)`, consumer, m.ID); err != nil {
			return fmt.Errorf("recording effect of %s: %w", m.ID, err)
		}
		return nil
	}
}

// PGInbox is the PostgreSQL implementation of Inbox: the inbox row and the
// effect commit in one transaction.
type PGInbox struct {
	pool     *pgxpool.Pool
	consumer string
	effect   Effect
	q        InboxStatements
}

// InboxStatements is the text of every statement PGInbox issues. Record
// inserts the message into the inbox with $1 = consumer, $2 = message id,
// $3 = message type, and must affect no row when the pair was recorded
// before.
//
// InboxStatements is the seam of the generated SQL mutants (see
// mutant/generated): a harness reads an inbox's statements with
// Statements, changes one, and hands the set back with UseStatements
// before the inbox is used, so that the consumer runs the production code
// path on the changed statement and no file is edited. In production
// nothing calls UseStatements: an inbox issues what NewPGInbox set, read
// from a field, at no cost.
type InboxStatements struct {
	Record string
}

// recordSQL is the inbox's Record statement.
const recordSQL = `INSERT INTO inbox (consumer, message_id, message_type) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING`

// DefaultInboxStatements returns the statements NewPGInbox sets.
func DefaultInboxStatements() InboxStatements { return InboxStatements{Record: recordSQL} }

// Statements returns the statements the inbox issues.
func (in *PGInbox) Statements() InboxStatements { return in.q }

// UseStatements makes the inbox issue q instead of its statements: the
// seam InboxStatements describes. It must be called before the inbox is
// used, and fails when a statement of q is empty.
func (in *PGInbox) UseStatements(q InboxStatements) error {
	if q.Record == "" {
		return errors.New("inbox statements: the record statement is empty")
	}
	in.q = q
	return nil
}

var _ Inbox = (*PGInbox)(nil)

// NewPGInbox returns an inbox for the consumer named consumer that runs
// effect once per message id. The tables must exist (MigrateInbox).
func NewPGInbox(pool *pgxpool.Pool, consumer string, effect Effect) (*PGInbox, error) {
	if pool == nil || effect == nil {
		return nil, errors.New("inbox: pool and effect are required")
	}
	if consumer == "" {
		return nil, errors.New("inbox: consumer name is required")
	}
	return &PGInbox{pool: pool, consumer: consumer, effect: effect, q: InboxStatements{Record: recordSQL}}, nil
}

// Apply records m.ID for the consumer and runs the effect in the same
// transaction. When the id was recorded before, it runs nothing and reports
// a duplicate. An error means nothing committed, or, for a failed COMMIT,
// that the outcome is unknown: a redelivery then either applies or is
// absorbed, never both.
func (in *PGInbox) Apply(ctx context.Context, m Message) (bool, error) {
	return in.ApplyKeyed(ctx, m.ID, m, true)
}

// ApplyKeyed is Apply with key recorded in the inbox in place of m.ID;
// with check false, the effect runs even when key was recorded before
// (the insert then affects no row). Apply is ApplyKeyed(ctx, m.ID, m,
// true); the other forms exist for the harness's consumer-side mutants,
// which key or check the inbox otherwise, on the same statements.
func (in *PGInbox) ApplyKeyed(ctx context.Context, key string, m Message, check bool) (bool, error) {
	tx, err := in.pool.Begin(ctx)
	if err != nil {
		return false, fmt.Errorf("applying %s: begin: %w", m.ID, err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	tag, err := tx.Exec(ctx, in.q.Record, in.consumer, key, m.Type)
	if err != nil {
		return false, fmt.Errorf("applying %s: recording in inbox: %w", m.ID, err)
	}
	if check && tag.RowsAffected() == 0 {
		return true, nil
	}
	if err := in.effect(ctx, tx, m); err != nil {
		return false, fmt.Errorf("applying %s: %w", m.ID, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return false, fmt.Errorf("applying %s: commit: %w", m.ID, err)
	}
	return false, nil
}

// Seen reads, in a statement of its own, whether key is recorded in the
// consumer's inbox. Apply never calls it: a check apart from the insert
// is a race between consumers (the harness's consumer-check-then-insert
// mutant is built on it).
func (in *PGInbox) Seen(ctx context.Context, key string) (bool, error) {
	var seen bool
	err := in.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM inbox WHERE consumer = $1 AND message_id = $2)`, in.consumer, key).Scan(&seen)
	if err != nil {
		return false, fmt.Errorf("reading the inbox of %s: %w", in.consumer, err)
	}
	return seen, nil
}

// EffectCounts returns, for consumer, how many effects each message id has
// in the effects table. Any count above one is a duplicate effect.
func EffectCounts(ctx context.Context, db interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}, consumer string) (map[string]int, error) {
	rows, err := db.Query(ctx, `SELECT message_id, count(*) FROM effects WHERE consumer = $1 GROUP BY message_id`, consumer)
	if err != nil {
		return nil, fmt.Errorf("counting effects of %s: %w", consumer, err)
	}
	out := make(map[string]int)
	var id string
	var n int
	_, err = pgx.ForEachRow(rows, []any{&id, &n}, func() error {
		out[id] = n
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("counting effects of %s: %w", consumer, err)
	}
	return out, nil
}

// Versioned reads from a message the entity it updates and the version of
// the entity it carries; ok is false for a message that updates none.
type Versioned func(m Message) (entity string, version int, ok bool)

// ProjectNewest returns an Effect that keeps, in the projection table, the
// state of each entity the messages update: a message whose version is
// newer than the projection's replaces it, and an older or equal one (a
// late or redelivered event) changes nothing. This is a staleness guard,
// the state-based answer to events that arrive out of order; messages
// that update no entity are left alone.
func ProjectNewest(consumer string, version Versioned) Effect {
	return func(ctx context.Context, tx pgx.Tx, m Message) error {
		entity, v, ok := version(m)
		if !ok {
			return nil
		}
		if _, err := tx.Exec(ctx, `INSERT INTO projection (consumer, entity, version, message_id) VALUES ($1, $2, $3, $4)
			ON CONFLICT (consumer, entity) DO UPDATE SET version = excluded.version, message_id = excluded.message_id, updated_at = now()
			WHERE projection.version < excluded.version`, consumer, entity, v, m.ID); err != nil {
			return fmt.Errorf("projecting %s: %w", m.ID, err)
		}
		return nil
	}
}

// Projection returns, for consumer, the version each entity is at in the
// projection table.
func Projection(ctx context.Context, db interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}, consumer string) (map[string]int, error) {
	rows, err := db.Query(ctx, `SELECT entity, version FROM projection WHERE consumer = $1`, consumer)
	if err != nil {
		return nil, fmt.Errorf("reading the projection of %s: %w", consumer, err)
	}
	out := make(map[string]int)
	var entity string
	var v int
	if _, err := pgx.ForEachRow(rows, []any{&entity, &v}, func() error {
		out[entity] = v
		return nil
	}); err != nil {
		return nil, fmt.Errorf("reading the projection of %s: %w", consumer, err)
	}
	return out, nil
}
