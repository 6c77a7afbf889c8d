package scenarios

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxlab/outboxlab/consumer"
	"github.com/outboxlab/outboxlab/fixture"
	"github.com/outboxlab/outboxlab/history"
	"github.com/outboxlab/outboxlab/outbox"
	"github.com/outboxlab/outboxlab/testenv/pgserver"
	"github.com/outboxlab/outboxlab/workload"
)

// bigintTarget is an outbox keyed by a bigint identity: its stage takes
// no :id and returns the key the database gives the row, which its rows
// view shows as id and its relay publishes as message_id.
const bigintTarget = `name: bigint
relay:
  image: my/relay:1
capabilities: parks,locking=none
outbox:
  migrate: |
    CREATE TABLE {table} (
      event_id   bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
      kind       text NOT NULL,
      body       jsonb NOT NULL,
      created_at timestamptz NOT NULL DEFAULT now(),
      sent_at    timestamptz);
  stage: |
    INSERT INTO {table} (kind, body, created_at)
    VALUES (:type, :payload, :occurred_at)
    RETURNING event_id
  rows: |
    SELECT event_id AS id, kind AS message_type, sent_at AS processed_at, NULL::timestamptz AS faulted_at,
           0 AS attempts, created_at AS occurred_at, NULL AS locked_by, NULL::timestamptz AS locked_at,
           NULL::timestamptz AS locked_until
    FROM {table}
`

// TestStageReturning reads the RETURNING that ends a stage statement: one
// column, the database's id of the row, which the statement then gives as
// text (an alias and what follows kept); only the top level counts, and a
// RETURNING of no column, of several, of every one (*) or in two
// statements is refused.
func TestStageReturning(t *testing.T) {
	for _, c := range []struct{ sql, expr, text string }{
		{`INSERT INTO t (a) VALUES ($1) RETURNING event_id`, "event_id", `INSERT INTO t (a) VALUES ($1) RETURNING (event_id)::text`},
		{"INSERT INTO t (a) VALUES ($1)\nreturning o.seq AS id;\n-- done", "o.seq", "INSERT INTO t (a) VALUES ($1)\nRETURNING (o.seq)::text AS id;\n-- done"},
		{`INSERT INTO t (a) VALUES ($1) RETURNING "Key" k`, `"Key"`, `INSERT INTO t (a) VALUES ($1) RETURNING ("Key")::text k`},
		{`INSERT INTO t (a) VALUES ($1) RETURNING coalesce(a, 'x,y') -- the key`, "coalesce(a, 'x,y')", `INSERT INTO t (a) VALUES ($1) RETURNING (coalesce(a, 'x,y'))::text -- the key`},
	} {
		ret, ok, err := stageReturning(c.sql)
		if !ok || err != nil || ret.expr != c.expr || ret.text(c.sql) != c.text {
			t.Errorf("%q: ok %v, err %v, expr %q, text\n%s\nwant expr %q, text\n%s", c.sql, ok, err, ret.expr, ret.text(c.sql), c.expr, c.text)
		}
	}
	for _, sql := range []string{
		`INSERT INTO t (a) VALUES ($1)`,
		`WITH x AS (INSERT INTO t (a) VALUES ($1) RETURNING a, b) INSERT INTO u SELECT a FROM x`,
		`INSERT INTO t (a) VALUES ('returning a, b')`,
	} {
		if _, ok, err := stageReturning(sql); ok || err != nil {
			t.Errorf("%q: ok %v, err %v; want no RETURNING at its top level", sql, ok, err)
		}
	}
	for _, c := range []struct{ sql, want string }{
		{`INSERT INTO t (a) VALUES ($1) RETURNING seq, kind`, "RETURNING gives 2 columns (seq, kind); it must give one"},
		{`INSERT INTO t (a) VALUES ($1) RETURNING *`, "RETURNING * gives every column of the row"},
		{`INSERT INTO t AS o (a) VALUES ($1) RETURNING o.*`, "RETURNING o.* gives every column of the row"},
		{`INSERT INTO t (a) VALUES ($1) RETURNING;`, "RETURNING gives no column"},
	} {
		if _, ok, err := stageReturning(c.sql); !ok || err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: ok %v, err %v; want one saying %q", c.sql, ok, err, c.want)
		}
	}

	u, err := ParseTarget([]byte(bigintTarget), ".")
	if err != nil {
		t.Fatal(err)
	}
	if !u.Outbox.ReturnsID {
		t.Error("a stage that ends in RETURNING does not return the database's ids")
	}
	c, err := check(t, bigintTarget)
	if err != nil || c.Returns != "event_id" || !slices.Equal(c.Stage[0], []string{"type", "payload", "occurred_at"}) {
		t.Errorf("CheckTarget: %v, returns %q, stage %v; want a stage without :id accepted for its RETURNING", err, c.Returns, c.Stage)
	}
	if u, err := ParseTarget([]byte(otherColumns), "."); err != nil || u.Outbox.ReturnsID {
		t.Errorf("a stage that keeps :id: %v, returns ids %v", err, u.Outbox.ReturnsID)
	}
	for _, c := range []struct{ name, from, to, want string }{
		{"two columns", "RETURNING event_id", "RETURNING event_id, kind", "outbox.stage[0]: RETURNING gives 2 columns (event_id, kind)"},
		{"every column", "RETURNING event_id", "RETURNING *", "outbox.stage[0]: RETURNING * gives every column"},
		{"two statements", "    RETURNING event_id\n", "    RETURNING event_id\n  - |\n    UPDATE {table} SET sent_at = NULL RETURNING event_id\n",
			"outbox.stage[1]: ends in RETURNING, as outbox.stage[0] does"},
		{"neither :id nor RETURNING", "    RETURNING event_id\n", "\n", "outbox.stage: no statement uses :id"},
	} {
		text := strings.Replace(bigintTarget, c.from, c.to, 1)
		if c.name == "two statements" {
			text = strings.Replace(text, "  stage: |\n", "  stage:\n  - |\n", 1)
		}
		if text == bigintTarget {
			t.Fatalf("%s: %q is not in the target", c.name, c.from)
		}
		if _, err := check(t, text); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one saying %q", c.name, err, c.want)
		}
	}
}

// TestReturnedIDsOnPostgreSQL runs a target that returns the bigint key
// its database gives each row on a throwaway PostgreSQL (the local
// binaries, under -short too): its stage returns the key as text, the
// harness keeps it in the staging transaction, and the rows view the run
// reads shows the committed row under its event's id, nothing of the
// rolled-back one (whose key the map in memory still names), and a row
// nobody the harness knows staged under its key after "db:". A RETURNING
// that gives no row, or NULL, fails the stage.
func TestReturnedIDsOnPostgreSQL(t *testing.T) {
	srv := pgserver.StartT(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db, err := pgxpool.New(ctx, srv.AdminURL())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(ctx, `CREATE SCHEMA ids`); err != nil {
		t.Fatal(err)
	}
	u, err := ParseTarget([]byte(bigintTarget), ".")
	if err != nil {
		t.Fatal(err)
	}
	table := outbox.MustParseTable("ids.orders_outbox")
	if err := u.Outbox.Create(ctx, db, table); err != nil {
		t.Fatal(err)
	}
	view, idsTable, mapped := table.RowsView().Ident(), table.Sibling("_ids").Ident(), table.Sibling("_id_rows").Ident()
	for _, sql := range []string{
		`CREATE VIEW ` + view + ` AS ` + u.Outbox.Rows(table),
		workload.IDsTableSQL(idsTable),
		`CREATE VIEW ` + mapped + ` AS ` + fixture.MappedRows(view, idsTable),
	} {
		if _, err := db.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	ids := workload.NewIDs(idsTable)
	store := workload.PG{Table: table, Schema: u.Outbox, IDs: ids}
	stage := func(commit bool) (outbox.Event, string) {
		t.Helper()
		e := outbox.Event{ID: uuid.New(), Type: workload.TypeOrderPlaced, Payload: []byte(`{"order_id":"o1","amount":1}`)}
		tx, err := db.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback(ctx) }()
		dbID, err := store.Stage(ctx, tx, e)
		if err != nil {
			t.Fatal(err)
		}
		if commit {
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
		}
		return e, dbID
	}
	committed, first := stage(true)
	rolledBack, second := stage(false)
	if first != "1" || second != "2" {
		t.Errorf("the stage returned %q and %q, want the identity's 1 and 2", first, second)
	}
	if ids.Event(second) != rolledBack.ID.String() {
		t.Errorf("the rolled-back stage's key names %q in memory, want its event %s", ids.Event(second), rolledBack.ID)
	}
	if _, err := db.Exec(ctx, `INSERT INTO `+table.Ident()+` (kind, body) VALUES ('order.placed', '{}')`); err != nil {
		t.Fatal(err)
	}
	rows, err := db.Query(ctx, `SELECT id, message_type FROM `+mapped+` ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	var id, typ string
	if _, err := pgx.ForEachRow(rows, []any{&id, &typ}, func() error { got = append(got, id+" "+typ); return nil }); err != nil {
		t.Fatal(err)
	}
	want := []string{committed.ID.String() + " order.placed", "db:3 order.placed"}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("the rows the run reads: %q, want %q", got, want)
	}
	// The run's every read reads these columns of it.
	if _, err := db.Exec(ctx, `SELECT id::text, message_type, processed_at, faulted_at, attempts, occurred_at, locked_by, locked_at, locked_until FROM `+mapped); err != nil {
		t.Errorf("reading the columns of the mapped rows: %v", err)
	}

	for name, returning := range map[string]string{"no row": "RETURNING event_id", "NULL": "RETURNING NULL::bigint"} {
		text := strings.Replace(bigintTarget, "RETURNING event_id", returning, 1)
		if name == "no row" {
			text = strings.Replace(text, "VALUES (:type, :payload, :occurred_at)", "SELECT :type, :payload::jsonb, :occurred_at WHERE false", 1)
		}
		u, err := ParseTarget([]byte(text), ".")
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		err = pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
			_, err := u.Outbox.StageIn(ctx, tx, table, outbox.Event{ID: uuid.New(), Type: "t", Payload: []byte(`{}`)})
			return err
		})
		if err == nil || !strings.Contains(err.Error(), "(outbox.stage[0]): RETURNING") {
			t.Errorf("a RETURNING that gives %s: err = %v", name, err)
		}
	}
}

// nopInbox is an inbox that notes the ids it is given.
type nopInbox struct{ got []string }

func (n *nopInbox) Apply(_ context.Context, m consumer.Message) (bool, error) {
	n.got = append(n.got, m.ID)
	return false, nil
}

// TestConsumersNameTheDatabasesIDs delivers the database's key of a row
// to a run's consumer: the history and the inbox get the event's own id;
// a key no stage returned stays as it is.
func TestConsumersNameTheDatabasesIDs(t *testing.T) {
	ids := workload.NewIDs("")
	e := uuid.New()
	if err := ids.Note("7", e); err != nil {
		t.Fatal(err)
	}
	r := &run{rec: &history.Recorder{}}
	inner := &nopInbox{}
	in := &recordingInbox{r: r, process: "consumer-1", bc: &boundedCtx{ids: ids}, inner: inner}
	for _, id := range []string{"7", "8"} {
		if _, err := in.Apply(context.Background(), consumer.Message{ID: id, Type: workload.TypeOrderPlaced}); err != nil {
			t.Fatal(err)
		}
	}
	if want := []string{e.String(), "8"}; !slices.Equal(inner.got, want) {
		t.Errorf("the inbox applied %q, want %q", inner.got, want)
	}
	var recorded []string
	for _, op := range r.rec.Ops() {
		recorded = append(recorded, string(op.F)+" "+strings.Join(op.Events, ","))
	}
	want := []string{"deliver " + e.String(), "apply " + e.String(), "apply " + e.String(), "deliver 8", "apply 8", "apply 8"}
	if !slices.Equal(recorded, want) {
		t.Errorf("the history records %q, want %q", recorded, want)
	}
}

// TestRecordsNameTheDatabasesIDs merges a relay's records that name the
// database's keys of its rows: the history names the events by their own
// ids, and a key no stage returned as it is.
func TestRecordsNameTheDatabasesIDs(t *testing.T) {
	ids := workload.NewIDs("")
	e := uuid.New()
	if err := ids.Note("7", e); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	t0 := time.Now().Round(0)
	path := filepath.Join(dir, "relay-a.1.jsonl")
	body := history.Header + "\n" +
		recordLine(t, history.Op{Time: t0, Process: "relay-a", Type: history.OK, F: history.Claim, Events: []string{"7", "8"}}) +
		recordLine(t, history.Op{Time: t0.Add(time.Millisecond), Process: "relay-a", Type: history.OK, F: history.Stop})
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	r := &run{rec: &history.Recorder{}, recordsDir: dir}
	r.contexts = []*boundedCtx{{ids: ids, relays: []*Replica{{name: "relay-a", records: []string{path}}}}}
	h, _, _, _ := r.history(context.Background())
	if len(h) != 2 || !slices.Equal(h[0].Events, []string{e.String(), "8"}) {
		t.Errorf("merged history %+v; want the claim of %s and 8", h, e)
	}
}
