package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxlab/outboxlab/outbox"
)

// errTableMissing means the outbox table (or its schema) does not exist
// and the relay was not asked to create it.
var errTableMissing = errors.New("the outbox table does not exist")

// PostgreSQL's SQLSTATEs for a relation or a schema that does not exist.
const (
	sqlstateUndefinedTable = "42P01"
	sqlstateInvalidSchema  = "3F000"
)

// querier is what checkTable needs of a pool.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// checkTable reads nothing from table but checks that it exists. It
// returns nil when it does; a *configError for OUTBOX_TABLE wrapping
// errTableMissing, which says how to create it, when PostgreSQL answers
// that the table or its schema does not exist; and any other error as it
// is (the database may be unreachable: the caller retries).
func checkTable(ctx context.Context, db querier, table outbox.Table) error {
	_, err := db.Exec(ctx, `SELECT 1 FROM `+table.Ident()+` LIMIT 0`)
	return classifyTableError(table, err)
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
	return &configError{Var: "OUTBOX_TABLE", Err: fmt.Errorf(
		"%w: %s is not in the database (%s, SQLSTATE %s): set OUTBOX_MIGRATE=true to let the relay create it, "+
			"or run the outbox migrations first (outbox.Migrate, the files in outbox/migration/)",
		errTableMissing, table, pgErr.Message, pgErr.Code)}
}
