package observe

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/outboxlab/outboxlab/outbox"
)

// ErrRowLocksUnavailable is returned by Locks when the server has no
// pgrowlocks extension to create (Debian ships it in postgresql-contrib,
// which the postgresql package depends on).
var ErrRowLocksUnavailable = errors.New("the pgrowlocks extension is not available on the server")

// RowLock is one session's lock on one row of an outbox table, held by
// a transaction that has not ended.
type RowLock struct {
	// ID is the row's id, as text; empty when the locked version of the
	// row is no longer the one a new snapshot sees.
	ID string
	// CTID is the locked row version's physical address.
	CTID string
	// Mode is pgrowlocks' name of the lock: "For Update", "For No Key
	// Update", "For Share", "For Key Share", or "Update" / "No Key
	// Update" for a row the transaction changed.
	Mode string
	// PID is the server process of the session holding the lock;
	// Session its login role (session_user, the replica's role), App
	// its application_name, State its state in pg_stat_activity ("idle
	// in transaction" for a relay publishing with the lock held), and
	// XactStart when its transaction began, on the database clock.
	// Session, App and State are empty and XactStart zero when the
	// session ended between the two reads.
	PID       int32
	Session   string
	App       string
	State     string
	XactStart time.Time
}

// Locks returns the row locks held on table in open transactions, one
// per row and session, by row id and then pid. It reads them with
// pgrowlocks (which reads the whole table, taking no lock that blocks a
// relay) and pg_stat_activity, creating the extension when the database
// lacks it (CREATE EXTENSION needs a superuser); without the extension on
// the server the error wraps ErrRowLocksUnavailable. A session that
// updated a row holds its lock too: Locks shows a relay's claim
// transaction as well as a SELECT ... FOR UPDATE, while they are open.
func Locks(ctx context.Context, db DB, table outbox.Table) ([]RowLock, error) {
	return LocksView(ctx, db, table, nil)
}

// LocksView is Locks for an outbox whose table has columns of its own:
// each lock's ID is the id its rows view (as InstallView takes it) shows
// of the locked row, read by running the view over that row alone. rows
// nil is Locks, which reads the table's id column.
func LocksView(ctx context.Context, db DB, table outbox.Table, rows func(outbox.Table) string) ([]RowLock, error) {
	table, err := qualify(ctx, db, table)
	if err != nil {
		return nil, fmt.Errorf("reading the row locks of %s: %w", table, err)
	}
	fn, err := rowLocksFunc(ctx, db)
	if err != nil {
		return nil, fmt.Errorf("reading the row locks of %s: %w", table, err)
	}
	// The id of a locked row: the table's own, or what the rows view
	// shows of the row version at that address.
	id := `(SELECT t.id::text FROM ` + table.Ident() + ` t WHERE t.ctid = l.locked_row)`
	if rows != nil {
		view := rows(viewRow)
		if !strings.Contains(view, viewRow.Ident()) {
			return nil, fmt.Errorf("reading the row locks of %s: its rows view does not read the table through the name it is given ({table})", table)
		}
		id = `(SELECT v.id::text FROM (WITH ` + viewRow.Ident() + ` AS (SELECT * FROM ` + table.Ident() +
			` t WHERE t.ctid = l.locked_row) ` + view + `) AS v LIMIT 1)`
	}
	r, err := db.Query(ctx, `SELECT coalesce(`+id+`, ''), l.locked_row::text, u.mode, u.pid,
	coalesce(a.usename::text, ''), coalesce(a.application_name, ''), coalesce(a.state, ''), a.xact_start
FROM `+fn+`($1) AS l
CROSS JOIN LATERAL unnest(l.pids, l.modes) AS u(pid, mode)
LEFT JOIN pg_stat_activity a ON a.pid = u.pid
ORDER BY 1, u.pid`, table.Ident())
	if err != nil {
		return nil, fmt.Errorf("reading the row locks of %s: %w", table, err)
	}
	var (
		out   []RowLock
		l     RowLock
		start pgtype.Timestamptz
	)
	_, err = pgx.ForEachRow(r, []any{&l.ID, &l.CTID, &l.Mode, &l.PID, &l.Session, &l.App, &l.State, &start}, func() error {
		r := l
		if start.Valid {
			r.XactStart = start.Time
		}
		out = append(out, r)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading the row locks of %s: %w", table, err)
	}
	return out, nil
}

// Held sums locks up by session: for every session (login role), the ids
// of the rows it holds, in the order of locks.
func Held(locks []RowLock) map[string][]string {
	out := make(map[string][]string)
	for _, l := range locks {
		if l.ID != "" {
			out[l.Session] = append(out[l.Session], l.ID)
		}
	}
	return out
}

// rowLocksFunc returns the quoted, schema-qualified name of the
// pgrowlocks function, creating the extension when the database lacks
// it.
func rowLocksFunc(ctx context.Context, db DB) (string, error) {
	schema, err := rowLocksSchema(ctx, db)
	if err != nil || schema != "" {
		return qualifiedFunc(schema), err
	}
	var available bool
	if err := db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'pgrowlocks')`).Scan(&available); err != nil {
		return "", fmt.Errorf("looking for pgrowlocks: %w", err)
	}
	if !available {
		return "", fmt.Errorf("%w (Debian: install postgresql-contrib for the server's version)", ErrRowLocksUnavailable)
	}
	_, cerr := db.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pgrowlocks`)
	// A concurrent CREATE EXTENSION may have won the race: look again
	// before reporting the error.
	if schema, err = rowLocksSchema(ctx, db); err != nil {
		return "", err
	}
	if schema == "" {
		return "", fmt.Errorf("creating the pgrowlocks extension: %w", cerr)
	}
	return qualifiedFunc(schema), nil
}

func qualifiedFunc(schema string) string {
	if schema == "" {
		return ""
	}
	return pgx.Identifier{schema, "pgrowlocks"}.Sanitize()
}

// rowLocksSchema returns the schema of the pgrowlocks extension, or ""
// when the database has none.
func rowLocksSchema(ctx context.Context, db DB) (string, error) {
	var schema string
	err := db.QueryRow(ctx, `SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace
WHERE e.extname = 'pgrowlocks'`).Scan(&schema)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("looking for pgrowlocks: %w", err)
	}
	return schema, nil
}
