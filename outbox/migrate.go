package outbox

import (
	"bytes"
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/template"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

//go:embed migration/*.up.sql
var migrationFS embed.FS

// Migration is one embedded schema step.
type Migration struct {
	Version int
	Name    string
	// NoTransaction says that the migration runs outside a transaction,
	// one statement at a time: its file's first line is
	// "-- outboxlab:no-transaction". CREATE INDEX CONCURRENTLY, which
	// lets producers and relays write the table while the index is
	// built, cannot run inside one.
	NoTransaction bool
	sql           *template.Template
}

// noTransaction is the first line of a migration that runs outside a
// transaction.
const noTransaction = "-- outboxlab:no-transaction"

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
		first, _, _ := strings.Cut(string(body), "\n")
		ms = append(ms, Migration{Version: v, Name: name, NoTransaction: strings.TrimSpace(first) == noTransaction, sql: tmpl})
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].Version < ms[j].Version })
	return ms, nil
}

// LatestVersion is the version of the newest embedded migration: the
// one a table that Migrate brought up to date has last.
func LatestVersion() (int, error) {
	ms, err := Migrations()
	if err != nil || len(ms) == 0 {
		return 0, errors.Join(err, errors.New("no migrations"))
	}
	return ms[len(ms)-1].Version, nil
}

// SQL renders the migration for table. A migration's template sees the
// quoted names {{.Table}}, {{.PendingIndex}}, {{.ProcessedIndex}} and
// {{.ParkedIndex}}, and {{.ParkedIndexRef}}, the last one qualified by the
// table's schema (DROP INDEX names an index so): every name it splices in
// is quoted and at most MaxIdentifierLen bytes, so that no two tables'
// indexes share a name (see Table.PendingIndex).
func (m Migration) SQL(table Table) (string, error) {
	return m.render(table, true)
}

// render renders the migration for table; concurrently sets
// {{.Concurrently}}, which a migration that runs outside a transaction
// puts where CONCURRENTLY goes: empty when it runs in Migrate's
// transaction on a table that transaction creates.
func (m Migration) render(table Table, concurrently bool) (string, error) {
	var buf bytes.Buffer
	parked := pgx.Identifier{table.ParkedIndex()}
	if table.Schema() != "" {
		parked = pgx.Identifier{table.Schema(), table.ParkedIndex()}
	}
	err := m.sql.Execute(&buf, map[string]string{
		"Table":          table.Ident(),
		"PendingIndex":   pgx.Identifier{table.PendingIndex()}.Sanitize(),
		"ProcessedIndex": pgx.Identifier{table.ProcessedIndex()}.Sanitize(),
		"ParkedIndex":    pgx.Identifier{table.ParkedIndex()}.Sanitize(),
		"ParkedIndexRef": parked.Sanitize(),
		"Concurrently":   map[bool]string{true: "CONCURRENTLY"}[concurrently],
	})
	return buf.String(), err
}

// Statements renders the migration for table as the statements it runs:
// the whole text as one, or, for a migration that runs outside a
// transaction, each statement that ends a line with ";" on its own
// (PostgreSQL runs the statements of one query string in one implicit
// transaction). Comment lines are dropped from the latter.
func (m Migration) Statements(table Table) ([]string, error) {
	sql, err := m.SQL(table)
	if err != nil || !m.NoTransaction {
		return []string{sql}, err
	}
	var out []string
	var cur strings.Builder
	for _, line := range strings.Split(sql, "\n") {
		if t := strings.TrimSpace(line); t == "" || strings.HasPrefix(t, "--") {
			continue
		}
		cur.WriteString(line + "\n")
		if strings.HasSuffix(strings.TrimSpace(line), ";") {
			out = append(out, strings.TrimSpace(cur.String()))
			cur.Reset()
		}
	}
	if rest := strings.TrimSpace(cur.String()); rest != "" {
		out = append(out, rest)
	}
	return out, nil
}

// Conn is what Migrate needs: *pgx.Conn, *pgxpool.Conn and *pgxpool.Pool
// satisfy it. A migration that runs outside a transaction
// (Migration.NoTransaction) cannot run on a pgx.Tx.
type Conn interface {
	Begin(ctx context.Context) (pgx.Tx, error)
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// migrateLock is the advisory lock every Migrate takes: transaction-scoped
// around the migrations that run in a transaction, session-scoped around
// one that runs outside.
const migrateLock = `hashtext('outboxlab.migrate')`

// awaitLock calls try, which tries to take migrateLock without waiting,
// until it does, backing off from 10 ms to 200 ms between tries. No
// Migrate waits for the lock inside a transaction: an index built
// CONCURRENTLY under the lock waits for every transaction older than its
// snapshots to end, and a transaction waiting for the lock would wait for
// the build in turn, a deadlock.
func awaitLock(ctx context.Context, try func() (bool, error)) error {
	wait := 10 * time.Millisecond
	for {
		ok, err := try()
		if err != nil || ok {
			return err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		wait = min(2*wait, 200*time.Millisecond)
	}
}

// Migrate applies the migrations that table has not seen yet. It is
// idempotent and safe to run from several processes at once: each table's
// migrations run under an advisory lock and are recorded in
// outbox_migrations. Consecutive migrations that run in a transaction run
// in one, all or none; one that runs outside a transaction
// (Migration.NoTransaction) is recorded once all its statements are done.
func Migrate(ctx context.Context, db Conn, table Table) error {
	return MigrateTo(ctx, db, table, 0)
}

// MigrateTo applies the migrations up to and including version that table
// has not seen yet, as Migrate does; 0 applies them all. A rolling upgrade
// creates the table of the version it starts from with it.
func MigrateTo(ctx context.Context, db Conn, table Table, version int) error {
	ms, err := Migrations()
	if err != nil {
		return fmt.Errorf("loading migrations: %w", err)
	}
	if version > 0 {
		i := slices.IndexFunc(ms, func(m Migration) bool { return m.Version == version })
		if i < 0 {
			return fmt.Errorf("migrating %s: there is no migration %03d", table, version)
		}
		ms = ms[:i+1]
	}
	if slices.ContainsFunc(ms, func(m Migration) bool { return m.NoTransaction }) {
		// The session lock of a migration outside a transaction must be
		// taken and released on one connection.
		if p, ok := db.(interface {
			Acquire(ctx context.Context) (*pgxpool.Conn, error)
		}); ok {
			c, err := p.Acquire(ctx)
			if err != nil {
				return fmt.Errorf("migrating %s: %w", table, err)
			}
			defer c.Release()
			db = c
		}
	}
	for i := 0; i < len(ms); {
		if ms[i].NoTransaction {
			if err := migrateAlone(ctx, db, table, ms[i]); err != nil {
				return err
			}
			i++
			continue
		}
		j := i
		for j < len(ms) && !ms[j].NoTransaction {
			j++
		}
		all, err := migrateInTx(ctx, db, table, ms[i:j], ms[j:])
		if err != nil || all {
			return err
		}
		i = j
	}
	return nil
}

// migrateInTx applies those of ms that table has not seen yet in one
// transaction, under the transaction-scoped lock. When that transaction
// creates the table (it does not exist and no migration of it is
// recorded), nobody else can write the table before it commits: it
// applies rest too, the migrations that would run outside a transaction
// included (without CONCURRENTLY), and reports all.
func migrateInTx(ctx context.Context, db Conn, table Table, ms, rest []Migration) (all bool, err error) {
	var tx pgx.Tx
	err = awaitLock(ctx, func() (bool, error) {
		t, err := db.Begin(ctx)
		if err != nil {
			return false, err
		}
		var got bool
		if err := t.QueryRow(ctx, `SELECT pg_try_advisory_xact_lock(`+migrateLock+`)`).Scan(&got); err != nil || !got {
			_ = t.Rollback(ctx)
			return false, err
		}
		tx = t
		return true, nil
	})
	if err != nil {
		return false, fmt.Errorf("migrating %s: locking: %w", table, err)
	}
	defer tx.Rollback(ctx)
	if table.Schema() != "" {
		if _, err := tx.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS `+pgx.Identifier{table.Schema()}.Sanitize()); err != nil {
			return false, fmt.Errorf("migrating %s: creating schema: %w", table, err)
		}
	}
	if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS public.outbox_migrations (
		table_name text NOT NULL,
		version    integer NOT NULL,
		name       text NOT NULL,
		applied_at timestamptz NOT NULL DEFAULT now(),
		PRIMARY KEY (table_name, version))`); err != nil {
		return false, fmt.Errorf("migrating %s: creating outbox_migrations: %w", table, err)
	}
	if len(rest) > 0 {
		if err := tx.QueryRow(ctx, `SELECT to_regclass($1) IS NULL AND NOT EXISTS (SELECT 1 FROM public.outbox_migrations WHERE table_name = $2)`,
			table.Ident(), table.String()).Scan(&all); err != nil {
			return false, fmt.Errorf("migrating %s: reading whether the table exists: %w", table, err)
		}
		if all {
			ms = append(slices.Clone(ms), rest...)
		}
	}
	for _, m := range ms {
		tag, err := tx.Exec(ctx,
			`INSERT INTO public.outbox_migrations (table_name, version, name) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING`,
			table.String(), m.Version, m.Name)
		if err != nil {
			return false, fmt.Errorf("migrating %s: recording %03d_%s: %w", table, m.Version, m.Name, err)
		}
		if tag.RowsAffected() == 0 {
			continue // applied before
		}
		stmt, err := m.render(table, false)
		if err != nil {
			return false, fmt.Errorf("migrating %s: rendering %03d_%s: %w", table, m.Version, m.Name, err)
		}
		if _, err := tx.Exec(ctx, stmt); err != nil {
			return false, fmt.Errorf("migrating %s: applying %03d_%s: %w", table, m.Version, m.Name, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return false, fmt.Errorf("migrating %s: commit: %w", table, err)
	}
	return all, nil
}

// migrateAlone applies m, a migration that runs outside a transaction,
// unless table has seen it: each statement on its own, under the
// session-scoped lock, and records it once all are done. The migrations
// before it have been applied (MigrateTo runs them in order), so the
// table and outbox_migrations exist.
func migrateAlone(ctx context.Context, db Conn, table Table, m Migration) (err error) {
	label := fmt.Sprintf("%03d_%s", m.Version, m.Name)
	q, ok := db.(interface {
		QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	})
	if !ok {
		return fmt.Errorf("migrating %s: %s needs a connection that can query (QueryRow)", table, label)
	}
	if err := awaitLock(ctx, func() (got bool, err error) {
		err = q.QueryRow(ctx, `SELECT pg_try_advisory_lock(`+migrateLock+`)`).Scan(&got)
		return got, err
	}); err != nil {
		return fmt.Errorf("migrating %s: locking for %s: %w", table, label, err)
	}
	defer func() {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if _, uerr := db.Exec(uctx, `SELECT pg_advisory_unlock(`+migrateLock+`)`); uerr != nil {
			// A connection that kept the lock would hold off every later
			// Migrate: close it, which releases the lock.
			if c, ok := db.(interface{ Conn() *pgx.Conn }); ok {
				_ = c.Conn().Close(uctx)
			}
			err = errors.Join(err, fmt.Errorf("migrating %s: unlocking after %s: %w", table, label, uerr))
		}
	}()
	var done bool
	if err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM public.outbox_migrations WHERE table_name = $1 AND version = $2)`,
		table.String(), m.Version).Scan(&done); err != nil {
		return fmt.Errorf("migrating %s: reading whether %s was applied: %w", table, label, err)
	}
	if done {
		return nil
	}
	stmts, err := m.Statements(table)
	if err != nil {
		return fmt.Errorf("migrating %s: rendering %s: %w", table, label, err)
	}
	for _, stmt := range stmts {
		if _, err := db.Exec(ctx, stmt); err != nil {
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) && pgErr.Code == "25001" { // active_sql_transaction
				return fmt.Errorf("migrating %s: applying %s, which runs outside a transaction: pass a pool or a connection, not a transaction: %w", table, label, err)
			}
			return fmt.Errorf("migrating %s: applying %s: %w", table, label, err)
		}
	}
	if _, err := db.Exec(ctx, `INSERT INTO public.outbox_migrations (table_name, version, name) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING`,
		table.String(), m.Version, m.Name); err != nil {
		return fmt.Errorf("migrating %s: recording %s: %w", table, label, err)
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
