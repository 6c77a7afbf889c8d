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
