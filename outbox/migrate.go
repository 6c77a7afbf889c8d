package outbox

import (
	"bytes"
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
	"text/template"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

//go:embed migration/*.up.sql
var migrationFS embed.FS

// Migration is one embedded schema step.
type Migration struct {
	Version int
	Name    string
	sql     *template.Template
}

// Migrations returns the embedded migrations in version order.
func Migrations() ([]Migration, error) {
	files, err := fs.Glob(migrationFS, "migration/*.up.sql")
	if err != nil {
		return nil, err
	}
	var ms []Migration
	for _, f := range files {
		base := path.Base(f)
		num, name, ok := strings.Cut(strings.TrimSuffix(base, ".up.sql"), "_")
		if !ok {
			return nil, fmt.Errorf("migration %s: want NNN_name.up.sql", base)
		}
		v, err := strconv.Atoi(num)
		if err != nil {
			return nil, fmt.Errorf("migration %s: version: %w", base, err)
		}
		body, err := migrationFS.ReadFile(f)
		if err != nil {
			return nil, err
		}
		tmpl, err := template.New(base).Option("missingkey=error").Parse(string(body))
		if err != nil {
			return nil, fmt.Errorf("migration %s: %w", base, err)
		}
		ms = append(ms, Migration{Version: v, Name: name, sql: tmpl})
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].Version < ms[j].Version })
	return ms, nil
}

// SQL renders the migration for table. A migration's template sees the
// quoted names {{.Table}}, {{.PendingIndex}} and {{.ProcessedIndex}}:
// every name it splices in is quoted and at most MaxIdentifierLen bytes,
// so that no two tables' indexes share a name (see Table.PendingIndex).
func (m Migration) SQL(table Table) (string, error) {
	var buf bytes.Buffer
	err := m.sql.Execute(&buf, map[string]string{
		"Table":          table.Ident(),
		"PendingIndex":   pgx.Identifier{table.PendingIndex()}.Sanitize(),
		"ProcessedIndex": pgx.Identifier{table.ProcessedIndex()}.Sanitize(),
	})
	return buf.String(), err
}

// Conn is what Migrate needs: *pgx.Conn and *pgxpool.Pool satisfy it.
type Conn interface {
	Begin(ctx context.Context) (pgx.Tx, error)
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Migrate applies the migrations that table has not seen yet. It is
// idempotent and safe to run from several processes at once: each table's
// migrations run under a transaction-scoped advisory lock and are recorded in
// outbox_migrations.
func Migrate(ctx context.Context, db Conn, table Table) error {
	ms, err := Migrations()
	if err != nil {
		return fmt.Errorf("loading migrations: %w", err)
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		return fmt.Errorf("migrating %s: %w", table, err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('outboxlab.migrate'))`); err != nil {
		return fmt.Errorf("migrating %s: locking: %w", table, err)
	}
	if table.Schema() != "" {
		if _, err := tx.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS `+pgx.Identifier{table.Schema()}.Sanitize()); err != nil {
			return fmt.Errorf("migrating %s: creating schema: %w", table, err)
		}
	}
	if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS public.outbox_migrations (
		table_name text NOT NULL,
		version    integer NOT NULL,
		name       text NOT NULL,
		applied_at timestamptz NOT NULL DEFAULT now(),
		PRIMARY KEY (table_name, version))`); err != nil {
		return fmt.Errorf("migrating %s: creating outbox_migrations: %w", table, err)
	}
	for _, m := range ms {
		tag, err := tx.Exec(ctx,
			`INSERT INTO public.outbox_migrations (table_name, version, name) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING`,
			table.String(), m.Version, m.Name)
		if err != nil {
			return fmt.Errorf("migrating %s: recording %03d_%s: %w", table, m.Version, m.Name, err)
		}
		if tag.RowsAffected() == 0 {
			continue // applied before
		}
		stmt, err := m.SQL(table)
		if err != nil {
			return fmt.Errorf("migrating %s: rendering %03d_%s: %w", table, m.Version, m.Name, err)
		}
		if _, err := tx.Exec(ctx, stmt); err != nil {
			return fmt.Errorf("migrating %s: applying %03d_%s: %w", table, m.Version, m.Name, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("migrating %s: commit: %w", table, err)
	}
	return nil
}

// Drop removes table and forgets its migrations, so that a later Migrate
// of the same name starts afresh. With cascade it drops the table's whole
// schema (a test's throwaway schema) instead of the table alone. Dropping
// what does not exist is no error.
func Drop(ctx context.Context, db Conn, table Table, cascade bool) error {
	stmt := `DROP TABLE IF EXISTS ` + table.Ident()
	if cascade && table.Schema() != "" {
		stmt = `DROP SCHEMA IF EXISTS ` + pgx.Identifier{table.Schema()}.Sanitize() + ` CASCADE`
	}
	if _, err := db.Exec(ctx, stmt); err != nil {
		return fmt.Errorf("dropping %s: %w", table, err)
	}
	_, err := db.Exec(ctx, `DELETE FROM public.outbox_migrations WHERE table_name = $1`, table.String())
	var pgErr *pgconn.PgError
	if err != nil && !(errors.As(err, &pgErr) && pgErr.Code == "42P01") { // no migrations table yet
		return fmt.Errorf("forgetting the migrations of %s: %w", table, err)
	}
	return nil
}
