package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxlab/outboxlab/contract"
	"github.com/outboxlab/outboxlab/outbox"
)

// errTableMissing means the outbox table (or its schema) does not exist
// and the relay was not asked to create it.
var errTableMissing = errors.New("the outbox table does not exist")

// errTableColumns means the outbox table lacks a column the relay reads
// or writes: no retry and no migration (CREATE TABLE IF NOT EXISTS leaves
// a table as it is) can add it.
var errTableColumns = errors.New("the outbox table lacks columns the relay needs")

// PostgreSQL's SQLSTATEs for a relation, a schema or a column that does
// not exist.
const (
	sqlstateUndefinedTable  = "42P01"
	sqlstateInvalidSchema   = "3F000"
	sqlstateUndefinedColumn = "42703"
)

// outboxColumns are the columns of the outbox table (migration 001) that
// the relay's statements read and write.
var outboxColumns = []string{
	"id", "message_type", "payload", "correlation_id", "occurred_at", "processed_at",
	"attempts", "faulted_at", "last_error", "locked_by", "locked_at", "locked_until",
}

// querier is what checkTable needs of a pool.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// checkTable reads no row of table but checks that it exists with every
// column the relay uses. It returns nil when it does; a *configError for
// OUTBOX_TABLE wrapping errTableMissing, which says how to create it, when
// PostgreSQL answers that the table or its schema does not exist, or
// wrapping errTableColumns, naming every column missing, when it lacks
// columns (the relay would otherwise fail every tick for ever); and any
// other error as it is (the database may be unreachable: the caller
// retries).
func checkTable(ctx context.Context, db querier, table outbox.Table) error {
	_, err := db.Exec(ctx, `SELECT `+strings.Join(outboxColumns, ", ")+` FROM `+table.Ident()+` LIMIT 0`)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != sqlstateUndefinedColumn {
		return classifyTableError(table, err)
	}
	// Which columns: one probe each, only now that one is missing.
	var missing []string
	for _, c := range outboxColumns {
		_, err := db.Exec(ctx, `SELECT `+c+` FROM `+table.Ident()+` LIMIT 0`)
		var colErr *pgconn.PgError
		switch {
		case errors.As(err, &colErr) && colErr.Code == sqlstateUndefinedColumn:
			missing = append(missing, c)
		case err != nil:
			return classifyTableError(table, err)
		}
	}
	what := pgErr.Message
	if len(missing) > 0 {
		what = "no column " + strings.Join(missing, ", ")
	}
	return &configError{Var: contract.EnvTable, Err: fmt.Errorf(
		"%w: %s has %s (SQLSTATE %s); the relay reads and writes %s: create the table with the outbox migrations "+
			"(outbox.Migrate, the files in outbox/migration/), or name an outbox table that has them",
		errTableColumns, table, what, pgErr.Code, strings.Join(outboxColumns, ", "))}
}

// classifyTableError is checkTable's judgement of the error of a
// statement on table.
func classifyTableError(table outbox.Table, err error) error {
	var pgErr *pgconn.PgError
	if err == nil || !errors.As(err, &pgErr) {
		return err
	}
	if pgErr.Code != sqlstateUndefinedTable && pgErr.Code != sqlstateInvalidSchema {
		return err
	}
	return &configError{Var: contract.EnvTable, Err: fmt.Errorf(
		"%w: %s is not in the database (%s, SQLSTATE %s): set OUTBOX_MIGRATE=true to let the relay create it, "+
			"or run the outbox migrations first (outbox.Migrate, the files in outbox/migration/)",
		errTableMissing, table, pgErr.Message, pgErr.Code)}
}

// permanentSQLError reports whether err is PostgreSQL's answer that a
// statement cannot work as written against this database (SQLSTATE class
// 42, syntax error or access rule violation: a column or a table that
// does not exist, a right not granted), which no retry mends.
func permanentSQLError(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && strings.HasPrefix(pgErr.Code, "42")
}
