package observe_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxlab/outboxlab/internal/observe"
	"github.com/outboxlab/outboxlab/outbox"
	"github.com/outboxlab/outboxlab/relay"
)

// TestInstallIsIdempotentAndUninstallRemovesIt installs the observation
// twice (one trigger, each change logged once), checks that a replica's
// role can drain the table but neither read nor write the log, that an
// unqualified name is observed in the schema the database finds it in,
// that a table without the contract's columns is refused with their
// names, and that Uninstall removes the trigger, its function and the
// log, and may run again.
func TestInstallIsIdempotentAndUninstallRemovesIt(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e := startEnv(t, ctx)
	table := e.outboxTable(t, ctx, "obs_install.outbox")
	if err := observe.Install(ctx, e.admin, table); err != nil {
		t.Fatalf("installing again: %v", err)
	}
	if n := triggers(t, ctx, e.admin, table); n != 1 {
		t.Fatalf("%d observation triggers on %s after two installs, want 1", n, table)
	}
	_, pool := e.replica(t, ctx, table, "relay-a")
	ids, _ := e.stage(t, ctx, table, 1)
	claimed, err := relay.NewPGStore(pool, table).Claim(ctx, "relay-a", 10, time.Minute)
	if err != nil || len(claimed) != 1 {
		t.Fatalf("relay-a claiming with its role's grants: %v, %v", claimed, err)
	}
	ts, err := observe.Read(ctx, e.admin, table, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(ts) != 2 || ts[0].Kind != observe.Inserted || ts[1].Kind != observe.Claimed || ts[1].ID != ids[0].String() {
		t.Fatalf("changes after a stage and a claim: %+v, want one insert and one claim of %s", ts, ids[0])
	}
	log := observe.ObservedTable(table).Ident()
	for _, stmt := range []string{
		`SELECT count(*) FROM ` + log,
		`INSERT INTO ` + log + ` (at, tx_time, xid, pid, session_user_name, application_name, op) VALUES (now(), now(), 1, 1, 'x', 'x', 'DELETE')`,
	} {
		_, err := pool.Exec(ctx, stmt)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "42501" {
			t.Errorf("a replica's role ran %q: %v, want permission denied", stmt, err)
		}
	}

	// An unqualified name, found in public.
	bare := outbox.MustParseTable("obs_bare")
	if err := outbox.Migrate(ctx, e.admin, bare); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = outbox.Drop(context.Background(), e.admin, bare, false) })
	if err := observe.Install(ctx, e.admin, bare); err != nil {
		t.Fatal(err)
	}
	e.stage(t, ctx, outbox.MustParseTable("public.obs_bare"), 2)
	if ts, err := observe.Read(ctx, e.admin, bare, 0); err != nil || len(ts) != 2 {
		t.Errorf("changes of %s staged as public.obs_bare: %d, %v; want 2", bare, len(ts), err)
	}
	var where string
	if err := e.admin.QueryRow(ctx, `SELECT to_regclass('public.obs_bare_observed')::text`).Scan(&where); err != nil || where == "" {
		t.Errorf("the log of %s is not public.obs_bare_observed: %q, %v", bare, where, err)
	}
	if err := observe.Uninstall(ctx, e.admin, bare); err != nil {
		t.Fatal(err)
	}

	// A table without the contract's columns.
	other := outbox.MustParseTable("obs_install.other")
	if _, err := e.admin.Exec(ctx, `CREATE TABLE `+other.Ident()+` (id uuid PRIMARY KEY, processed_at timestamptz, attempts int)`); err != nil {
		t.Fatal(err)
	}
	err = observe.Install(ctx, e.admin, other)
	if err == nil || !strings.Contains(err.Error(), "no column faulted_at, locked_by, locked_at, locked_until") {
		t.Errorf("installing on a table without the lease columns: %v", err)
	}
	if n := triggers(t, ctx, e.admin, other); n != 0 {
		t.Errorf("%d triggers on %s after a refused install", n, other)
	}

	if err := observe.Uninstall(ctx, e.admin, table); err != nil {
		t.Fatal(err)
	}
	if n := triggers(t, ctx, e.admin, table); n != 0 {
		t.Errorf("%d observation triggers on %s after Uninstall", n, table)
	}
	var left []string
	if err := e.admin.QueryRow(ctx, `SELECT array_remove(ARRAY[to_regclass($1)::text, to_regproc($2)::text], NULL)`,
		observe.ObservedTable(table).String(), "obs_install.obs_install_outbox_observe_fn").Scan(&left); err != nil {
		t.Fatal(err)
	}
	if len(left) != 0 {
		t.Errorf("left after Uninstall: %v", left)
	}
	e.stage(t, ctx, table, 1)
	if err := observe.Uninstall(ctx, e.admin, table); err != nil {
		t.Errorf("uninstalling again: %v", err)
	}
	if _, err := observe.Read(ctx, e.admin, table, 0); err == nil {
		t.Error("reading the observations of an uninstalled table: no error")
	}
	if err := outbox.Drop(ctx, e.admin, table, true); err != nil {
		t.Fatal(err)
	}
	if err := observe.Uninstall(ctx, e.admin, table); err != nil {
		t.Errorf("uninstalling from a dropped schema: %v", err)
	}
}

// triggers counts the observation triggers on table.
func triggers(t *testing.T, ctx context.Context, db *pgxpool.Pool, table outbox.Table) int {
	t.Helper()
	var n int
	err := db.QueryRow(ctx, `SELECT count(*) FROM pg_trigger WHERE tgrelid = to_regclass($1) AND tgname = $2`,
		table.Ident(), observe.TriggerName).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestInstallViewObservesATableOfItsOwn observes a table with columns of
// its own, a bigint identity key and no lease columns (a relay that holds
// row locks), through the rows view a target gives: the changes are
// logged in the contract's columns, the lease columns as NULL, a row the
// view filters out is not logged, and a view that does not read its
// table through the name it is given, or shows no id, is refused.
func TestInstallViewObservesATableOfItsOwn(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e := startEnv(t, ctx)
	table := outbox.MustParseTable("obs_view.events")
	for _, stmt := range []string{
		`CREATE SCHEMA obs_view`,
		`CREATE TABLE ` + table.Ident() + ` (seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
			kind text NOT NULL, sent timestamptz, dead timestamptz, tries int NOT NULL DEFAULT 0)`,
	} {
		if _, err := e.admin.Exec(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	rows := func(tb outbox.Table) string {
		return `SELECT seq AS id, kind AS message_type, sent AS processed_at, dead AS faulted_at, tries AS attempts
FROM ` + tb.Ident() + ` ev WHERE kind <> 'hidden'`
	}
	if err := observe.InstallView(ctx, e.admin, table, rows); err != nil {
		t.Fatal(err)
	}
	for _, stmt := range []string{
		`INSERT INTO ` + table.Ident() + ` (kind) VALUES ('a'), ('b'), ('hidden')`,
		`UPDATE ` + table.Ident() + ` SET tries = 1 WHERE seq = 2`,
		`UPDATE ` + table.Ident() + ` SET sent = now() WHERE seq = 1`,
		`UPDATE ` + table.Ident() + ` SET tries = 2, dead = now() WHERE seq = 2`,
		`UPDATE ` + table.Ident() + ` SET tries = 5 WHERE seq = 3`,
		`DELETE FROM ` + table.Ident() + ` WHERE seq = 1`,
	} {
		if _, err := e.admin.Exec(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	ts, err := observe.Read(ctx, e.admin, table, 0)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, tr := range ts {
		s := fmt.Sprintf("%s %s", tr.Kind, tr.ID)
		if tr.New != nil {
			s += fmt.Sprintf(" attempts=%d leased=%v", tr.New.Attempts, tr.New.LockedBy != "" || !tr.New.LockedUntil.IsZero())
		}
		got = append(got, s)
	}
	want := []string{
		"inserted 1 attempts=0 leased=false",
		"inserted 2 attempts=0 leased=false",
		"retried 2 attempts=1 leased=false",
		"marked 1 attempts=0 leased=false",
		"parked 2 attempts=2 leased=false",
		"deleted 1",
	}
	diffLines(t, "changes observed through the view", got, want)

	// A second table named after the first, as an outbox of several tables
	// names its own: it exists for the table, not for the changed row.
	if _, err := e.admin.Exec(ctx, `CREATE TABLE `+table.Sibling("_offsets").Ident()+` (n int)`); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		rows func(outbox.Table) string
		want string
	}{
		{"a view of a table named in full", func(outbox.Table) string { return `SELECT seq AS id FROM ` + table.Ident() }, "does not read the table through the name it is given"},
		{"a view without id", func(tb outbox.Table) string { return `SELECT kind AS message_type FROM ` + tb.Ident() }, "shows no column id"},
		{"a view that derives another table's name", func(tb outbox.Table) string {
			return `SELECT seq AS id FROM ` + tb.Ident() + ` JOIN ` + tb.Sibling("_offsets").Ident() + ` ON true`
		}, "does not run over one changed row named in place of the table"},
	} {
		if err := observe.InstallView(ctx, e.admin, table, c.rows); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("installing through %s: %v, want an error saying it %s", c.name, err, c.want)
		}
	}
}

// TestInstallViewNeverFailsTheChange observes a table through a rows view
// that fails over some rows at run time: the changes are made, the
// trigger logs that it could not read them, and Read returns the others
// with a ViewError that counts them.
func TestInstallViewNeverFailsTheChange(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e := startEnv(t, ctx)
	table := outbox.MustParseTable("obs_fail.events")
	for _, stmt := range []string{
		`CREATE SCHEMA obs_fail`,
		`CREATE TABLE ` + table.Ident() + ` (seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, tries int NOT NULL DEFAULT 0)`,
	} {
		if _, err := e.admin.Exec(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	rows := func(tb outbox.Table) string {
		return `SELECT seq AS id, 10 / (3 - tries) AS attempts FROM ` + tb.Ident()
	}
	if err := observe.InstallView(ctx, e.admin, table, rows); err != nil {
		t.Fatal(err)
	}
	for _, stmt := range []string{
		`INSERT INTO ` + table.Ident() + ` (tries) VALUES (0), (0)`,
		`UPDATE ` + table.Ident() + ` SET tries = 3 WHERE seq = 2`, // the view divides by zero
	} {
		if _, err := e.admin.Exec(ctx, stmt); err != nil {
			t.Fatalf("%s under observation: %v", stmt, err)
		}
	}
	var tries int
	if err := e.admin.QueryRow(ctx, `SELECT tries FROM `+table.Ident()+` WHERE seq = 2`).Scan(&tries); err != nil || tries != 3 {
		t.Fatalf("the update the view failed over: tries %d, %v; want it made", tries, err)
	}
	ts, err := observe.Read(ctx, e.admin, table, 0)
	var ve *observe.ViewError
	if !errors.As(err, &ve) || ve.Changes != 1 || !strings.Contains(ve.First, "division by zero") {
		t.Fatalf("reading: %v, want a ViewError for 1 change (division by zero)", err)
	}
	if len(ts) != 2 || ts[0].Kind != observe.Inserted || ts[1].Kind != observe.Inserted {
		t.Errorf("changes read: %+v, want the two inserts", ts)
	}
}
