package observe_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxlab/outboxlab/internal/observe"
	"github.com/outboxlab/outboxlab/outbox"
)

// TestLocksShowsRowLockRelays runs the claim of a relay that holds row
// locks while it publishes: each replica, with its role, opens a
// transaction that selects the oldest pending rows FOR UPDATE SKIP
// LOCKED and keeps it open. Locks must name which replica holds which
// rows, idle in its transaction, while the log shows no change at all;
// a row no one locks is never reported, and a lock goes with its
// transaction.
func TestLocksShowsRowLockRelays(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e := startEnv(t, ctx)
	table := e.outboxTable(t, ctx, "obs_locks.outbox")
	roleA, poolA := e.replica(t, ctx, table, "relay-a")
	roleB, poolB := e.replica(t, ctx, table, "relay-b")
	ids, _ := e.stage(t, ctx, table, 4)
	before, err := observe.Read(ctx, e.admin, table, 0)
	if err != nil {
		t.Fatal(err)
	}

	if locks, err := observe.Locks(ctx, e.admin, table); errors.Is(err, observe.ErrRowLocksUnavailable) {
		t.Skipf("no pgrowlocks on this server: %v", err)
	} else if err != nil || len(locks) != 0 {
		t.Fatalf("locks before any claim: %+v, %v", locks, err)
	}

	txA, pidA, gotA := lockOldest(t, ctx, poolA, table, 2)
	defer txA.Rollback(context.Background())
	txB, pidB, gotB := lockOldest(t, ctx, poolB, table, 1)
	defer txB.Rollback(context.Background())
	if !slices.Equal(gotA, []string{ids[0].String(), ids[1].String()}) || !slices.Equal(gotB, []string{ids[2].String()}) {
		t.Fatalf("relay-a locked %v and relay-b %v, want e1, e2 and e3", gotA, gotB)
	}

	locks, err := observe.Locks(ctx, e.admin, table)
	if err != nil {
		t.Fatal(err)
	}
	held := observe.Held(locks)
	want := map[string][]string{roleA.Name: gotA, roleB.Name: gotB}
	if len(held) != len(want) || !slices.Equal(held[roleA.Name], gotA) || !slices.Equal(held[roleB.Name], gotB) {
		t.Errorf("rows held: %v, want %v", held, want)
	}
	for _, l := range locks {
		wantPID := map[string]int32{roleA.Name: pidA, roleB.Name: pidB}[l.Session]
		if l.PID != wantPID || l.Mode != "For Update" || l.State != "idle in transaction" || l.App != "relay" || l.XactStart.IsZero() || l.CTID == "" {
			t.Errorf("lock of %s: %+v, want pid %d, For Update, idle in transaction", l.ID, l, wantPID)
		}
	}
	after, err := observe.Read(ctx, e.admin, table, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(after) != len(before) {
		t.Errorf("the log grew by %d changes for row locks, which change no column", len(after)-len(before))
	}

	if err := txA.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	locks, err = observe.Locks(ctx, e.admin, table)
	if err != nil {
		t.Fatal(err)
	}
	if held := observe.Held(locks); len(held) != 1 || !slices.Equal(held[roleB.Name], gotB) {
		t.Errorf("rows held after relay-a's commit: %v, want only relay-b's e3", held)
	}
	if err := txB.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if locks, err := observe.Locks(ctx, e.admin, table); err != nil || len(locks) != 0 {
		t.Errorf("locks after both transactions ended: %+v, %v", locks, err)
	}
}

// lockOldest opens a transaction on pool that locks the n oldest pending
// rows it can, as a row-lock relay's claim does, and returns it open with
// its session's pid and the ids it locked.
func lockOldest(t *testing.T, ctx context.Context, pool *pgxpool.Pool, table outbox.Table, n int) (pgx.Tx, int32, []string) {
	t.Helper()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var pid int32
	if err := tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	rows, err := tx.Query(ctx, `SELECT id::text FROM `+table.Ident()+`
WHERE processed_at IS NULL AND faulted_at IS NULL ORDER BY occurred_at, id LIMIT $1 FOR UPDATE SKIP LOCKED`, n)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return tx, pid, ids
}

// TestLocksViewNamesRowsByTheirViewID locks rows of a table keyed by a
// bigint identity, with columns of its own: LocksView must name each
// locked row by the id its rows view shows (the seq, as text), and
// Locks, which reads an id column the table lacks, must fail rather than
// name rows wrongly.
func TestLocksViewNamesRowsByTheirViewID(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e := startEnv(t, ctx)
	table := outbox.MustParseTable("obs_lockview.events")
	for _, stmt := range []string{
		`CREATE SCHEMA obs_lockview`,
		`CREATE TABLE ` + table.Ident() + ` (seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, kind text NOT NULL, sent timestamptz)`,
		`INSERT INTO ` + table.Ident() + ` (kind) VALUES ('a'), ('b'), ('c')`,
	} {
		if _, err := e.admin.Exec(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	rows := func(tb outbox.Table) string {
		return `SELECT seq AS id, kind AS message_type, sent AS processed_at FROM ` + tb.Ident()
	}
	tx, err := e.admin.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx, `SELECT seq FROM `+table.Ident()+` WHERE seq IN (1, 3) FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	locks, err := observe.LocksView(ctx, e.admin, table, rows)
	if errors.Is(err, observe.ErrRowLocksUnavailable) {
		t.Skipf("no pgrowlocks on this server: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, l := range locks {
		ids = append(ids, l.ID)
	}
	if !slices.Equal(ids, []string{"1", "3"}) {
		t.Errorf("locked rows by their view's id: %v, want [1 3]", ids)
	}
	if _, err := observe.Locks(ctx, e.admin, table); err == nil {
		t.Error("Locks read a table without an id column and reported no error")
	}
	bad := func(outbox.Table) string { return `SELECT seq AS id FROM ` + table.Ident() }
	if _, err := observe.LocksView(ctx, e.admin, table, bad); err == nil {
		t.Error("LocksView took a rows view that does not read the table through the name it is given")
	}
}

// TestSetRoleSettingEndsAnIdleTransaction gives a replica's role an
// idle_in_transaction_session_timeout: the server must end a session of
// that role that holds a row lock idle in its transaction, and the lock
// must go with it, while another role's locks stay.
func TestSetRoleSettingEndsAnIdleTransaction(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e := startEnv(t, ctx)
	table := e.outboxTable(t, ctx, "obs_idle.outbox")
	roleA, poolA := e.replica(t, ctx, table, "relay-a")
	roleB, poolB := e.replica(t, ctx, table, "relay-b")
	e.stage(t, ctx, table, 2)
	if err := observe.SetRoleSetting(ctx, e.admin, roleA.Name, "idle_in_transaction_session_timeout", "300ms"); err != nil {
		t.Fatal(err)
	}
	if err := observe.SetRoleSetting(ctx, e.admin, roleA.Name, "bad name; DROP", "1"); err == nil {
		t.Error("SetRoleSetting took a setting name that is no identifier")
	}
	poolA.Reset() // the setting holds for sessions opened after it
	txA, _, gotA := lockOldest(t, ctx, poolA, table, 1)
	defer txA.Rollback(context.Background())
	txB, _, gotB := lockOldest(t, ctx, poolB, table, 1)
	defer txB.Rollback(context.Background())
	if len(gotA) != 1 || len(gotB) != 1 {
		t.Fatalf("locked %v and %v, want one row each", gotA, gotB)
	}
	var held map[string][]string
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		locks, err := observe.Locks(ctx, e.admin, table)
		if errors.Is(err, observe.ErrRowLocksUnavailable) {
			t.Skipf("no pgrowlocks on this server: %v", err)
		}
		if err != nil {
			t.Fatal(err)
		}
		if held = observe.Held(locks); len(held[roleA.Name]) == 0 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if len(held[roleA.Name]) != 0 || !slices.Equal(held[roleB.Name], gotB) {
		t.Fatalf("rows held: %v; want relay-a's lock gone with its idle session and relay-b's %v kept", held, gotB)
	}
	if _, err := txA.Exec(ctx, `SELECT 1`); err == nil {
		t.Error("relay-a's transaction went on after the server ended its idle session")
	}
}
