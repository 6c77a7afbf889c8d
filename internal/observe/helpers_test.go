package observe_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxlab/outboxlab/internal/observe"
	"github.com/outboxlab/outboxlab/outbox"
	"github.com/outboxlab/outboxlab/testenv/pgserver"
)

// env is a throwaway local PostgreSQL with an admin pool on it.
type env struct {
	srv   *pgserver.Server
	admin *pgxpool.Pool
}

// startEnv starts a server from the local binaries; pgserver.StartT
// skips the test under -short when they are missing.
func startEnv(t *testing.T, ctx context.Context) env {
	t.Helper()
	srv := pgserver.StartT(t)
	admin, err := pgxpool.New(ctx, srv.AdminURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)
	return env{srv: srv, admin: admin}
}

// outboxTable migrates the harness's outbox table name and installs the
// observation on it.
func (e env) outboxTable(t *testing.T, ctx context.Context, name string) outbox.Table {
	t.Helper()
	table := outbox.MustParseTable(name)
	if err := outbox.Migrate(ctx, e.admin, table); err != nil {
		t.Fatal(err)
	}
	if err := observe.Install(ctx, e.admin, table); err != nil {
		t.Fatal(err)
	}
	return table
}

// replica creates the role of process over table and returns it with a
// pool logged in as it, whose sessions all set the same application
// name, "relay", as a relay under test might. The pool is closed and the
// role dropped when the test ends.
func (e env) replica(t *testing.T, ctx context.Context, table outbox.Table, process string) (observe.Role, *pgxpool.Pool) {
	t.Helper()
	role, err := observe.NewRole(table, process)
	if err != nil {
		t.Fatal(err)
	}
	if err := observe.CreateRole(ctx, e.admin, table, role); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := observe.DropRole(context.Background(), e.admin, role.Name); err != nil {
			t.Errorf("dropping role %s: %v", role.Name, err)
		}
	})
	url, err := observe.RoleURL(e.srv.URL("postgres")+"&application_name=relay", role)
	if err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	var who string
	if err := pool.QueryRow(ctx, `SELECT session_user::text`).Scan(&who); err != nil {
		t.Fatalf("logging in as %s: %v", role.Name, err)
	}
	if who != role.Name {
		t.Fatalf("session_user of %s's pool is %s", role.Name, who)
	}
	return role, pool
}

// stage stages n events in one transaction of the admin pool, their
// occurred_at one millisecond apart so that claims take them in order,
// and returns their ids with a label for each (e1, e2, ...).
func (e env) stage(t *testing.T, ctx context.Context, table outbox.Table, n int) ([]uuid.UUID, map[string]string) {
	t.Helper()
	var ids []uuid.UUID
	labels := make(map[string]string)
	base := time.Now().Add(-time.Minute)
	err := pgx.BeginFunc(ctx, e.admin, func(tx pgx.Tx) error {
		for i := range n {
			ev, err := outbox.NewEvent("order.placed", map[string]int{"n": i})
			if err != nil {
				return err
			}
			ev.OccurredAt = base.Add(time.Duration(i) * time.Millisecond)
			if err := outbox.Stage(ctx, tx, table, ev, outbox.StageOptions{}); err != nil {
				return err
			}
			ids = append(ids, ev.ID)
			labels[ev.ID.String()] = fmt.Sprintf("e%d", i+1)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return ids, labels
}

// waitDBPast waits until the database clock is past until: one
// pg_sleep of the time left, then a check that fails the test if the
// clock is not past it yet.
func waitDBPast(t *testing.T, ctx context.Context, db *pgxpool.Pool, until time.Time) {
	t.Helper()
	var past bool
	err := db.QueryRow(ctx, `SELECT clock_timestamp() > $1 FROM (
	SELECT pg_sleep(greatest(0, extract(epoch FROM $1::timestamptz - clock_timestamp()))::double precision + 0.001)) s`, until).Scan(&past)
	if err != nil {
		t.Fatal(err)
	}
	if !past {
		t.Fatalf("the database clock is not past %s after waiting for it", until)
	}
}

// render writes a transition as one line a test compares: who, what,
// which row, and the lease the row had before the change.
func render(tr observe.Transition, labels, processes map[string]string) string {
	who := tr.Session
	if p, ok := processes[who]; ok {
		who = p
	}
	s := who + " " + string(tr.Kind)
	if tr.Claim != "" {
		s += "/" + string(tr.Claim)
	}
	if tr.State != "" {
		s += "/" + string(tr.State)
	}
	s += " " + label(labels, tr.ID)
	if tr.Kind == observe.Retried || tr.Kind == observe.Parked {
		s += fmt.Sprintf(" attempts=%d", tr.New.Attempts)
	}
	if tr.Kind == observe.Inserted {
		return s
	}
	switch {
	case tr.PrevHolder == "" && !tr.LeaseLive:
		s += " lease=-"
	case tr.LeaseLive:
		s += " lease=" + tr.PrevHolder + ":live"
	default:
		s += " lease=" + tr.PrevHolder + ":expired"
	}
	return s
}

// renderAll renders transitions, sorting the lines of each run of
// changes of one transaction: the order in which one statement changes
// its rows is the database's choice.
func renderAll(ts []observe.Transition, labels, processes map[string]string) []string {
	var out []string
	for i := 0; i < len(ts); {
		j := i
		for j < len(ts) && ts[j].Xid == ts[i].Xid {
			j++
		}
		var run []string
		for _, tr := range ts[i:j] {
			run = append(run, render(tr, labels, processes))
		}
		slices.Sort(run)
		out = append(out, run...)
		i = j
	}
	return out
}

func label(labels map[string]string, id string) string {
	if l, ok := labels[id]; ok {
		return l
	}
	return id
}

// diffLines fails t with both lists, line by line, when got is not want.
func diffLines(t *testing.T, what string, got, want []string) {
	t.Helper()
	if slices.Equal(got, want) {
		return
	}
	var b strings.Builder
	for i := range max(len(got), len(want)) {
		g, w := "", ""
		if i < len(got) {
			g = got[i]
		}
		if i < len(want) {
			w = want[i]
		}
		mark := "  "
		if g != w {
			mark = "! "
		}
		fmt.Fprintf(&b, "%s%-55s | %s\n", mark, g, w)
	}
	t.Errorf("%s: got (left) is not want (right):\n%s", what, b.String())
}
