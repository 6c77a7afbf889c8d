package outbox

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Schema is an outbox's schema as a harness sees it: how to create the
// outbox of one bounded context, how to stage an event into it inside the
// caller's business transaction, and how to read its rows back in this
// package's columns. The zero value is this package's table (Migrate,
// Stage with NOTIFY, the table itself); a team's own outbox, with its own
// table, columns and staging call, sets all three functions.
type Schema struct {
	// Name names the schema in reports and errors ("watermill-sql", a
	// target file's name); empty for this package's.
	Name string
	// Migrate creates the outbox that table names (schema-qualified, in
	// a schema of its own that the harness drops after the run; the relay
	// is given the same name as OUTBOX_TABLE). It may create more than one
	// object, all in table's schema.
	Migrate func(ctx context.Context, db *pgxpool.Pool, table Table) error
	// Stage stages e in the outbox inside tx, the caller's business
	// transaction, and publishes nothing: the harness commits or rolls
	// tx back. It wakes a listening relay if the outbox has a wake-up.
	// It returns the id the database gave the event's row when
	// ReturnsID is set, and "" otherwise.
	Stage func(ctx context.Context, tx pgx.Tx, table Table, e Event) (dbID string, err error)
	// ReturnsID says that the outbox keys its rows by an id the database
	// gives them (a bigint identity, a sequence, a uuid default) rather
	// than by the event's own id: Stage returns that id as text, and the
	// rows view and the relay's deliveries show it. The harness keeps,
	// per outbox, which event each such id stands for.
	ReturnsID bool
	// Rows returns a SELECT over the outbox of table with this package's
	// row columns, by name: id (the event id), message_type,
	// processed_at, faulted_at, attempts, occurred_at, locked_by,
	// locked_at and locked_until. A column the outbox does not keep is
	// NULL of its type (0 for attempts). The harness reads the final
	// rows, the backlog and the leases a paused replica holds through it.
	// An outbox whose relay takes no lease of a row shows the three lease
	// columns NULL, and the relay declares its locking style
	// (contract.Promises.Locking) so that nothing judges leases on it.
	Rows func(table Table) string
	// Table, when set, is the fixed name of the outbox's table in the
	// run's schema, for an outbox that keeps one table per schema under
	// a name of its own (River's river_job): the harness names the table
	// so, and runs only scenarios of one bounded context against it.
	// Empty: the harness names the table ("orders_outbox").
	Table string
	// Commit, when set, ends a producer's business transaction through
	// the outbox's own writer, for an outbox whose writer owns the COMMIT
	// and acts after it (oagudo/outbox's Writer.Write publishes what it
	// stored at once after committing, and deletes what the broker
	// confirmed). The producer then makes its business writes in the
	// transaction and stages nothing itself: Commit stores c.Events in
	// the outbox inside c.Tx, sends COMMIT by calling c.Send (exactly
	// once, or never when it gives up before COMMIT), and may act after
	// it through c.Publish and c.After. It returns the error its writer
	// returned. Stage still stages where the harness owns the
	// transaction (a pipeline's hop, the setup probe). An outbox with a
	// Commit writes one table per transaction: a run whose events of one
	// transaction go to several contexts' outboxes does not apply.
	Commit func(ctx context.Context, c Commit) error
}

// Commit is a producer's business transaction handed to an outbox's own
// writer (Schema.Commit).
type Commit struct {
	// Tx is the business transaction, with the producer's writes made
	// and nothing staged.
	Tx pgx.Tx
	// Table is the outbox the events go to.
	Table Table
	// Events are the events to store, in the producer's order.
	Events []Event
	// Send sends COMMIT of Tx; the producer records its outcome from
	// the error Commit returns.
	Send func(ctx context.Context) error
	// Publish publishes e to the broker as the producer does (through
	// its link to the broker, the contract's message for e, waiting for
	// the broker's confirm), recorded in the history as the producer's
	// publish. It fails at once, without publishing, once the producer
	// has stopped.
	Publish func(ctx context.Context, e Event) error
	// After runs fn in a transaction of its own on the producer's
	// database link, committed when fn returns nil: the writer's
	// statements after the COMMIT. It fails at once once the producer
	// has stopped.
	After func(ctx context.Context, fn func(tx pgx.Tx) error) error
}

// Own reports whether s is a schema of its own rather than this
// package's.
func (s Schema) Own() bool { return s.Migrate != nil || s.Stage != nil || s.Rows != nil }

// Validate checks that an own schema sets all three functions, and that
// only an own schema returns ids.
func (s Schema) Validate() error {
	if !s.Own() {
		if s.Table != "" {
			return errors.New("outbox schema: a Table name without a Migrate, Stage and Rows of its own")
		}
		if s.ReturnsID {
			return errors.New("outbox schema: ReturnsID without a Stage of its own (this package's table keeps the event's id)")
		}
		if s.Commit != nil {
			return errors.New("outbox schema: a Commit without a Migrate, Stage and Rows of its own")
		}
		return nil
	}
	var missing []error
	if s.Migrate == nil {
		missing = append(missing, errors.New("no Migrate"))
	}
	if s.Stage == nil {
		missing = append(missing, errors.New("no Stage"))
	}
	if s.Rows == nil {
		missing = append(missing, errors.New("no Rows"))
	}
	if s.Commit != nil && s.ReturnsID {
		missing = append(missing, errors.New("a Commit of its own with ReturnsID: a writer that commits keeps the event's own id"))
	}
	if s.Table != "" {
		if _, err := ParseTable(s.Table); err != nil || strings.Contains(s.Table, ".") {
			missing = append(missing, fmt.Errorf("table name %q: want a bare table name, which the harness puts in the run's schema", s.Table))
		}
	}
	if err := errors.Join(missing...); err != nil {
		return fmt.Errorf("outbox schema %s: %w", s.label(), err)
	}
	return nil
}

func (s Schema) label() string {
	if s.Name == "" {
		return "(unnamed)"
	}
	return s.Name
}

// Create creates the outbox of table: s.Migrate, or this package's
// migrations.
func (s Schema) Create(ctx context.Context, db *pgxpool.Pool, table Table) error {
	if s.Migrate == nil {
		return Migrate(ctx, db, table)
	}
	if err := s.Migrate(ctx, db, table); err != nil {
		return fmt.Errorf("creating outbox %s of schema %s: %w", table, s.label(), err)
	}
	return nil
}

// StageIn stages e inside tx: s.Stage, or this package's Stage with
// NOTIFY. dbID is the id the database gave the row when s.ReturnsID, and
// "" otherwise; a schema that returns ids and returned none is an error.
func (s Schema) StageIn(ctx context.Context, tx pgx.Tx, table Table, e Event) (dbID string, err error) {
	if s.Stage == nil {
		return "", Stage(ctx, tx, table, e, StageOptions{Notify: true})
	}
	dbID, err = s.Stage(ctx, tx, table, e)
	switch {
	case err != nil:
		return "", err
	case !s.ReturnsID:
		return "", nil
	case dbID == "":
		return "", fmt.Errorf("outbox schema %s: staging event %s returned no id, and the schema returns the id the database gives each row", s.label(), e.ID)
	}
	return dbID, nil
}

// RowsView is the view a harness reads an own schema's rows through,
// beside table: "<table>_rows", length-bounded like the table's indexes.
func (t Table) RowsView() Table { return t.Sibling("_rows") }

// Sibling names another object of an own schema beside table, in its
// schema: the table's name with its dot as "_" and suffix, length-bounded
// and kept distinct like the table's indexes (see Channel). An outbox
// that keeps more than one table (an offsets table beside the messages)
// names the others so, and the harness drops them with the schema.
func (t Table) Sibling(suffix string) Table {
	return Table{schema: t.schema, name: t.derivedName("", suffix)}
}
