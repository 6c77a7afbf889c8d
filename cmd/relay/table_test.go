package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxlab/outboxlab/contract"
	"github.com/outboxlab/outboxlab/outbox"
)

// fakeDB answers every statement with err.
type fakeDB struct {
	err  error
	stmt string
}

func (f *fakeDB) Exec(_ context.Context, sql string, _ ...any) (pgconn.CommandTag, error) {
	f.stmt = sql
	return pgconn.CommandTag{}, f.err
}

func TestCheckTableClassifiesTheError(t *testing.T) {
	table := outbox.MustParseTable("chat.outbox")
	undefined := &pgconn.PgError{Code: "42P01", Message: `relation "chat.outbox" does not exist`}
	noSchema := &pgconn.PgError{Code: "3F000", Message: `schema "chat" does not exist`}
	for _, tc := range []struct {
		name    string
		err     error
		missing bool
	}{
		{"exists", nil, false},
		{"undefined table", undefined, true},
		{"undefined table, wrapped", fmt.Errorf("claiming: %w", undefined), true},
		{"no schema", noSchema, true},
		{"permission denied", &pgconn.PgError{Code: "42501", Message: "permission denied for table outbox"}, false},
		{"unreachable", errors.New("dial tcp 10.0.0.1:5432: connect: connection refused"), false},
	} {
		db := &fakeDB{err: tc.err}
		err := checkTable(context.Background(), db, table)
		if !strings.Contains(db.stmt, table.Ident()) {
			t.Errorf("%s: the check ran %q, not a statement on %s", tc.name, db.stmt, table.Ident())
		}
		if got := errors.Is(err, errTableMissing); got != tc.missing {
			t.Errorf("%s: missing = %v (%v), want %v", tc.name, got, err, tc.missing)
		}
		if tc.err == nil && err != nil {
			t.Errorf("%s: %v", tc.name, err)
		}
		if !tc.missing {
			if tc.err != nil && !errors.Is(err, tc.err) {
				t.Errorf("%s: %v lost the original error", tc.name, err)
			}
			continue
		}
		var ce *configError
		if !errors.As(err, &ce) || ce.Var != contract.EnvTable {
			t.Errorf("%s: %v is not a configuration error about OUTBOX_TABLE", tc.name, err)
		}
		for _, want := range []string{"chat.outbox", "OUTBOX_MIGRATE=true", "migrations", pgCode(tc.err)} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: message %q lacks %q", tc.name, err, want)
			}
		}
	}
}

func pgCode(err error) string {
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		return pg.Code
	}
	return ""
}

// columnsDB is a database whose outbox table lacks the columns missing:
// a statement that names one fails as PostgreSQL's does.
type columnsDB struct {
	missing []string
	stmts   []string
}

func (c *columnsDB) Exec(_ context.Context, sql string, _ ...any) (pgconn.CommandTag, error) {
	c.stmts = append(c.stmts, sql)
	selected, _, _ := strings.Cut(strings.TrimPrefix(sql, "SELECT "), " FROM ")
	for _, col := range strings.Split(selected, ", ") {
		if slices.Contains(c.missing, col) {
			return pgconn.CommandTag{}, &pgconn.PgError{Code: "42703", Message: fmt.Sprintf("column %q does not exist", col)}
		}
	}
	return pgconn.CommandTag{}, nil
}

func TestCheckTableNamesTheMissingColumns(t *testing.T) {
	table := outbox.MustParseTable("chat.outbox")
	if err := checkTable(context.Background(), &columnsDB{}, table); err != nil {
		t.Fatalf("a table with every column: %v", err)
	}
	db := &columnsDB{missing: []string{"processed_at", "locked_until"}}
	err := checkTable(context.Background(), db, table)
	var ce *configError
	if !errors.Is(err, errTableColumns) || !errors.As(err, &ce) || ce.Var != contract.EnvTable {
		t.Fatalf("checkTable = %v, want a configuration error about OUTBOX_TABLE wrapping errTableColumns", err)
	}
	for _, want := range []string{"chat.outbox", "no column processed_at, locked_until", "42703", "outbox.Migrate"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("message %q lacks %q", err, want)
		}
	}
	if !strings.Contains(db.stmts[0], "SELECT id, message_type, payload") || !strings.Contains(db.stmts[0], table.Ident()) {
		t.Errorf("the check ran %q", db.stmts[0])
	}
}
