// Package observe watches an outbox table from the database, on the
// database's clock, with no help from the relay that drains it: what
// every relay did to the table can be read back, whatever its language
// and whether or not it writes records of its own.
//
// It has four parts:
//
//   - Install puts a trigger on the outbox table that appends, for every
//     row inserted, updated or deleted, one row to a log table beside it
//     (ObservedTable: "<table>_observed" in the table's schema): a
//     sequence number, clock_timestamp() at the change, now() of its
//     transaction, the transaction id, the backend's pid, session_user,
//     the application_name the session set, the operation, and the old
//     and new values of the columns the contract watches (id,
//     processed_at, faulted_at, attempts, locked_by, locked_at,
//     locked_until). The trigger runs as the role that installed it
//     (SECURITY DEFINER), so a relay needs no privilege on the log.
//     Uninstall removes the trigger, its function and the log.
//   - NewRole, CreateRole and RoleURL give each relay replica a login
//     role of its own and the database URL that logs in as it, so that
//     session_user names the replica in the log whatever application
//     name the relay sets. DropRole removes a role again.
//   - Read returns the logged changes in order, each classified as a
//     Transition (inserted, claimed, retried, parked, marked, released,
//     deleted, updated), and Ops turns transitions into operations of
//     package history: the claims, marks, retries, parks and sweeps that
//     a relay's own records file would hold, as single ok records
//     stamped with the database clock.
//   - Locks reports which session holds row locks on which rows of the
//     table in a transaction that is still open, through the pgrowlocks
//     extension and pg_stat_activity: what a relay that claims with
//     SELECT ... FOR UPDATE and publishes inside that transaction holds,
//     which leaves no trace in the table's columns.
//
// # Usage
//
// With the outbox migrated, a harness connected as the table's owner (a
// superuser in outboxlab's setups) installs the trigger, creates a role
// per replica and starts each replica with its role's URL:
//
//	if err := observe.Install(ctx, admin, table); err != nil { ... }
//	role, err := observe.NewRole(table, "relay-a")
//	if err := observe.CreateRole(ctx, admin, table, role); err != nil { ... }
//	url, err := observe.RoleURL(adminURL, role) // OUTBOX_DATABASE_URL of relay-a
//	...
//	ts, err := observe.Read(ctx, admin, table, 0)
//	ops := observe.Ops(ts, observe.Processes(roles))
//
// A role is granted USAGE on the table's schema, SELECT, INSERT, UPDATE
// and DELETE on every table in it but the log, and USAGE, SELECT and
// UPDATE on its sequences: what a relay needs to claim, mark, retry,
// park and sweep, to lock rows with SELECT ... FOR UPDATE, and to keep
// the tables of an outbox with more than one. LISTEN and NOTIFY need no
// privilege. Create the roles after the outbox is migrated: a table
// created later is not granted. The role may not create objects in the
// schema, so a relay that migrates its own table at start-up must find it
// migrated.
//
// # What the log shows and what it cannot
//
// The log holds committed changes only: a transaction that rolls back
// takes its log rows with it. Its sequence follows the order in which the
// changes were made, not the order of the commits, so while relays run a
// transaction still open when Read ran may later add a row with a lower
// sequence number than one Read returned; a read after the relays have
// stopped is complete. A statement that changes nothing (a mark the lease
// fence kept) leaves no row, so Ops has no fenced marks, and no publish or
// confirm, which only the broker sees. A row lock taken with SELECT ...
// FOR UPDATE changes no column: Locks shows it while it is held, the log
// never. A session with session_replication_role = replica (superusers
// only) fires no trigger and is not observed, and neither is TRUNCATE.
//
// The scenario runner observes every run with a relay this way: a relay
// that writes no records of its own is judged from what Ops makes of the
// log, and one that does is compared with it.
package observe

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxlab/outboxlab/outbox"
)

// DB is what the package needs of a connection: *pgxpool.Pool, *pgx.Conn
// and pgx.Tx satisfy it.
type DB interface {
	Begin(ctx context.Context) (pgx.Tx, error)
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// TriggerName is the name of the trigger Install puts on an outbox table.
const TriggerName = "outboxlab_observe"

// Columns are the columns of an outbox table that the trigger logs, as
// the contract names them (docs/contract.md §2). Install refuses a table
// that lacks one.
var Columns = []string{"id", "processed_at", "faulted_at", "attempts", "locked_by", "locked_at", "locked_until"}

// ObservedTable returns the log table of table: "<table>_observed" beside
// it, length-bounded like the table's indexes (outbox.Table.Sibling).
// table should be schema-qualified; Install, Read and Uninstall qualify
// an unqualified name by the schema the database finds it in.
func ObservedTable(table outbox.Table) outbox.Table { return table.Sibling("_observed") }

// observeFunc is the trigger function of table, beside it.
func observeFunc(table outbox.Table) outbox.Table { return table.Sibling("_observe_fn") }

// qualify returns table with its schema: as it is when it has one, else
// with the schema of the table the database finds under its name.
func qualify(ctx context.Context, db DB, table outbox.Table) (outbox.Table, error) {
	if table.Schema() != "" {
		return table, nil
	}
	var schema *string
	err := db.QueryRow(ctx, `SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.oid = to_regclass($1)`, table.Ident()).Scan(&schema)
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && schema == nil) {
		return outbox.Table{}, fmt.Errorf("finding the schema of %s: no such table", table)
	}
	if err != nil {
		return outbox.Table{}, fmt.Errorf("finding the schema of %s: %w", table, err)
	}
	q, err := outbox.ParseTable(*schema + "." + table.Name())
	if err != nil {
		return outbox.Table{}, fmt.Errorf("qualifying %s: %w", table, err)
	}
	return q, nil
}

// Install creates the log table of table (ObservedTable) and the trigger
// that fills it: AFTER INSERT OR UPDATE OR DELETE, FOR EACH ROW. It is
// idempotent: installing again replaces the trigger and its function and
// keeps the log. Concurrent installs wait for each other. The table must
// exist and have the contract's Columns; the trigger function runs as the
// role that calls Install, which must own the table.
func Install(ctx context.Context, db DB, table outbox.Table) error {
	return InstallView(ctx, db, table, nil)
}

// InstallView is Install for an outbox whose table has columns of its
// own: rows returns the SELECT that shows the rows of the table it is
// given in the contract's columns (outbox.Schema.Rows, a target's rows
// view). The trigger logs each changed row as that SELECT shows it: it
// runs the SELECT over a relation holding only the row before or after
// the change, named in place of the table, so the SELECT must read the
// table through the name it is given (a target's {table}). The SELECT
// must show id; a contract column it does not show is logged as NULL
// (a relay that holds row locks has no lease columns). A change the
// SELECT shows no row for, before and after, is not logged. rows nil is
// Install.
func InstallView(ctx context.Context, db DB, table outbox.Table, rows func(outbox.Table) string) error {
	table, err := qualify(ctx, db, table)
	if err != nil {
		return fmt.Errorf("observing %s: %w", table, err)
	}
	var src source
	if rows == nil {
		if err := checkColumns(ctx, db, table); err != nil {
			return fmt.Errorf("observing %s: %w", table, err)
		}
	} else if src, err = viewSource(ctx, db, table, rows); err != nil {
		return fmt.Errorf("observing %s: %w", table, err)
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		return fmt.Errorf("observing %s: %w", table, err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('outboxlab.observe'))`); err != nil {
		return fmt.Errorf("observing %s: locking: %w", table, err)
	}
	for _, stmt := range installSQL(table, src) {
		if _, err := tx.Exec(ctx, stmt); err != nil {
			return fmt.Errorf("observing %s: %w", table, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("observing %s: commit: %w", table, err)
	}
	return nil
}

// source is how the trigger reads the contract's columns of a changed
// row: straight from the table's row (the zero value), or through a
// rows view over a relation that holds only that row.
type source struct {
	// view is the rows SELECT over viewRow; "" reads the table's row.
	view string
	// has names the contract's Columns the view shows.
	has map[string]bool
}

// viewRow names the one-row relation a rows view reads in the trigger.
var viewRow = outbox.MustParseTable("outboxlab_observed_row")

// viewSource checks a rows view of table and says which of the
// contract's Columns it shows.
func viewSource(ctx context.Context, db DB, table outbox.Table, rows func(outbox.Table) string) (source, error) {
	view := rows(viewRow)
	if !strings.Contains(view, viewRow.Ident()) {
		return source{}, errors.New("its rows view does not read the table through the name it is given ({table}), so the trigger cannot show it a changed row")
	}
	r, err := db.Query(ctx, `SELECT * FROM (`+rows(table)+`) AS v LIMIT 0`)
	if err != nil {
		return source{}, fmt.Errorf("reading the columns of its rows view: %w", err)
	}
	fields := r.FieldDescriptions()
	r.Close()
	if err := r.Err(); err != nil {
		return source{}, fmt.Errorf("reading the columns of its rows view: %w", err)
	}
	// The trigger runs the view over the changed row alone, named in place
	// of the table: a view that derives other names from the table's (the
	// tables of an outbox of several) fails there, so it is refused here
	// rather than in every transaction that changes a row.
	if _, err := db.Exec(ctx, `SELECT * FROM (WITH `+viewRow.Ident()+` AS (SELECT * FROM `+table.Ident()+` LIMIT 0) `+view+`) AS v LIMIT 0`); err != nil {
		return source{}, fmt.Errorf("its rows view does not run over one changed row named in place of the table: %w", err)
	}
	src := source{view: view, has: map[string]bool{}}
	for _, f := range fields {
		if slices.Contains(Columns, f.Name) {
			src.has[f.Name] = true
		}
	}
	if !src.has["id"] {
		return source{}, errors.New("its rows view shows no column id")
	}
	return src, nil
}

// checkColumns fails when table lacks one of Columns, naming every one
// it lacks.
func checkColumns(ctx context.Context, db DB, table outbox.Table) error {
	rows, err := db.Query(ctx, `SELECT want FROM unnest($2::text[]) AS want
WHERE NOT EXISTS (SELECT 1 FROM pg_attribute
	WHERE attrelid = to_regclass($1) AND attname = want AND attnum > 0 AND NOT attisdropped)
ORDER BY array_position($2::text[], want)`, table.Ident(), Columns)
	if err != nil {
		return fmt.Errorf("reading the columns of %s: %w", table, err)
	}
	missing, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("reading the columns of %s: %w", table, err)
	}
	if len(missing) > 0 {
		return fmt.Errorf("table %s has no column %s (the contract's columns are %s)",
			table, strings.Join(missing, ", "), strings.Join(Columns, ", "))
	}
	return nil
}

// installSQL returns the statements that install the log and trigger of
// table, which is schema-qualified, reading rows through src. Every name
// is quoted.
func installSQL(table outbox.Table, src source) []string {
	log := ObservedTable(table).Ident()
	fn := observeFunc(table).Ident()
	trg := pgx.Identifier{TriggerName}.Sanitize()
	cols := `at, tx_time, xid, pid, session_user_name, application_name, op,
		old_id, old_processed_at, old_faulted_at, old_attempts, old_locked_by, old_locked_at, old_locked_until,
		new_id, new_processed_at, new_faulted_at, new_attempts, new_locked_by, new_locked_at, new_locked_until`
	head := `clock_timestamp(), now(), pg_current_xact_id()::text::bigint, pg_backend_pid(), session_user::text,
			coalesce(current_setting('application_name', true), ''), TG_OP`
	types := []string{"text", "timestamptz", "timestamptz", "integer", "text", "timestamptz", "timestamptz"}
	vals := func(rec string) string {
		out := make([]string, len(Columns))
		for i, c := range Columns {
			if rec == "" || (src.view != "" && !src.has[c]) {
				out[i] = `NULL::` + types[i]
			} else {
				out[i] = rec + `.` + c + `::` + types[i]
			}
		}
		return strings.Join(out, ", ")
	}
	insert := func(old, new string) string {
		return `INSERT INTO ` + log + ` (` + cols + `)
		VALUES (` + head + `, ` + vals(old) + `, ` + vals(new) + `);`
	}
	decl, body := "", `
	IF TG_OP = 'INSERT' THEN
		`+insert("", "NEW")+`
	ELSIF TG_OP = 'UPDATE' THEN
		`+insert("OLD", "NEW")+`
	ELSE
		`+insert("OLD", "")+`
	END IF;`
	if src.view != "" {
		// The view's row before and after the change, each read from a
		// relation that holds only the table's row.
		through := func(rec, into string) string {
			return `SELECT * INTO ` + into + ` FROM (WITH ` + viewRow.Ident() + ` AS (SELECT ` + rec + `.*) ` +
				src.view + `) AS v LIMIT 1;
		has_` + into + ` := FOUND;`
		}
		decl = `
DECLARE
	o record;
	n record;
	has_o boolean := false;
	has_n boolean := false;`
		body = `
	BEGIN
	IF TG_OP <> 'INSERT' THEN
		` + through("OLD", "o") + `
	END IF;
	IF TG_OP <> 'DELETE' THEN
		` + through("NEW", "n") + `
	END IF;
	IF has_o AND has_n THEN
		` + insert("o", "n") + `
	ELSIF has_n THEN
		` + insert("", "n") + `
	ELSIF has_o THEN
		` + insert("o", "") + `
	END IF;
EXCEPTION WHEN OTHERS THEN
	-- The observation never fails the change it observes: it logs
	-- that it could not read it.
	INSERT INTO ` + log + ` (at, tx_time, xid, pid, session_user_name, application_name, op)
	VALUES (clock_timestamp(), now(), pg_current_xact_id()::text::bigint, pg_backend_pid(), session_user::text,
		coalesce(current_setting('application_name', true), ''), 'ERROR: ' || SQLERRM);
	END;`
	}
	return []string{
		`CREATE TABLE IF NOT EXISTS ` + log + ` (
	seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	at timestamptz NOT NULL,
	tx_time timestamptz NOT NULL,
	xid bigint NOT NULL,
	pid integer NOT NULL,
	session_user_name text NOT NULL,
	application_name text NOT NULL,
	op text NOT NULL,
	old_id text, old_processed_at timestamptz, old_faulted_at timestamptz, old_attempts integer,
	old_locked_by text, old_locked_at timestamptz, old_locked_until timestamptz,
	new_id text, new_processed_at timestamptz, new_faulted_at timestamptz, new_attempts integer,
	new_locked_by text, new_locked_at timestamptz, new_locked_until timestamptz)`,
		`REVOKE ALL ON ` + log + ` FROM PUBLIC`,
		`CREATE OR REPLACE FUNCTION ` + fn + `() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $observe$` + decl + `
BEGIN` + body + `
	RETURN NULL;
END
$observe$`,
		`REVOKE ALL ON FUNCTION ` + fn + `() FROM PUBLIC`,
		`DROP TRIGGER IF EXISTS ` + trg + ` ON ` + table.Ident(),
		`CREATE TRIGGER ` + trg + ` AFTER INSERT OR UPDATE OR DELETE ON ` + table.Ident() +
			` FOR EACH ROW EXECUTE FUNCTION ` + fn + `()`,
	}
}

// Uninstall removes what Install created for table: the trigger, its
// function and the log table with what it holds. Removing what is not
// there is no error, and neither is a table that no longer exists
// (dropping the table's schema removes everything Install created).
func Uninstall(ctx context.Context, db DB, table outbox.Table) error {
	if table.Schema() == "" {
		q, err := qualify(ctx, db, table)
		if err != nil {
			return nil // no table, so no trigger; the log is found by the same name
		}
		table = q
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		return fmt.Errorf("removing the observation of %s: %w", table, err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('outboxlab.observe'))`); err != nil {
		return fmt.Errorf("removing the observation of %s: locking: %w", table, err)
	}
	var exists bool
	if err := tx.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, table.Ident()).Scan(&exists); err != nil {
		return fmt.Errorf("removing the observation of %s: %w", table, err)
	}
	var stmts []string
	if exists {
		stmts = append(stmts, `DROP TRIGGER IF EXISTS `+pgx.Identifier{TriggerName}.Sanitize()+` ON `+table.Ident())
	}
	stmts = append(stmts,
		`DROP FUNCTION IF EXISTS `+observeFunc(table).Ident()+`()`,
		`DROP TABLE IF EXISTS `+ObservedTable(table).Ident())
	for _, stmt := range stmts {
		if _, err := tx.Exec(ctx, stmt); err != nil {
			return fmt.Errorf("removing the observation of %s: %w", table, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("removing the observation of %s: commit: %w", table, err)
	}
	return nil
}
