package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// dbURLEnv names a PostgreSQL database the batch tests may create
// schemas in (and drop them). Unset, they are skipped: they start
// nothing themselves. For instance, with Debian's PostgreSQL binaries:
//
//	initdb -D /tmp/pg -A trust -U postgres && pg_ctl -D /tmp/pg -o '-p 55432 -k /tmp' start
//	ROWLOCK_TEST_DATABASE_URL=postgres://postgres@127.0.0.1:55432/postgres go test -run OnPostgreSQL ./examples/rowlock/
const dbURLEnv = "ROWLOCK_TEST_DATABASE_URL"

// targetSQL returns a block of target.yaml: migrate, stage or rows, the
// lines indented under "  NAME: |".
func targetSQL(t *testing.T, name string) string {
	t.Helper()
	data, err := os.ReadFile("target.yaml")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(data), "\n  "+name+": |\n")
	if !ok {
		t.Fatalf("target.yaml has no block %s", name)
	}
	var lines []string
	for l := range strings.SplitSeq(rest, "\n") {
		if l != "" && !strings.HasPrefix(l, "    ") {
			break
		}
		lines = append(lines, strings.TrimPrefix(l, "    "))
	}
	return strings.Join(lines, "\n")
}

// outboxDB is a schema of its own with the target's outbox in it.
type outboxDB struct {
	t      *testing.T
	url    string
	conn   *pgx.Conn
	schema string
	table  string // quoted
	stage  string
}

// schemas counts the schemas the tests made.
var schemas atomic.Int64

func newOutboxDB(t *testing.T) *outboxDB {
	t.Helper()
	url := os.Getenv(dbURLEnv)
	if url == "" {
		t.Skipf("%s is not set: no PostgreSQL to run the batch on", dbURLEnv)
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	schema := fmt.Sprintf("rowlock_test_%d_%d", os.Getpid(), schemas.Add(1))
	db := &outboxDB{t: t, url: url, conn: conn, schema: schema, table: pgx.Identifier{schema, "outbox"}.Sanitize()}
	t.Cleanup(func() {
		_, _ = conn.Exec(context.Background(), "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
		_ = conn.Close(context.Background())
	})
	place := strings.NewReplacer("{table}", db.table, "{table_name}", "outbox", "{schema}", pgx.Identifier{schema}.Sanitize())
	db.exec("CREATE SCHEMA " + pgx.Identifier{schema}.Sanitize())
	db.exec(place.Replace(targetSQL(t, "migrate")))
	db.exec("CREATE VIEW " + pgx.Identifier{schema, "outbox_rows"}.Sanitize() + " AS " + place.Replace(targetSQL(t, "rows")))
	// now() of the transaction of each change of a row, as the harness's
	// observation logs it.
	changes := pgx.Identifier{schema, "changes"}.Sanitize()
	db.exec("CREATE TABLE " + changes + " (n bigserial PRIMARY KEY, seq bigint, at timestamptz)")
	db.exec("CREATE FUNCTION " + pgx.Identifier{schema, "log_change"}.Sanitize() + "() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN " +
		"INSERT INTO " + changes + " (seq, at) VALUES (NEW.seq, now()); RETURN NEW; END $$")
	db.exec("CREATE TRIGGER log_change AFTER UPDATE ON " + db.table + " FOR EACH ROW EXECUTE FUNCTION " +
		pgx.Identifier{schema, "log_change"}.Sanitize() + "()")
	db.stage = strings.NewReplacer(":type", "$1", ":payload", "$2", ":correlation_id", "$3", ":occurred_at", "$4").
		Replace(place.Replace(targetSQL(t, "stage")))
	return db
}

func (db *outboxDB) exec(sql string, args ...any) {
	db.t.Helper()
	if _, err := db.conn.Exec(context.Background(), sql, args...); err != nil {
		db.t.Fatalf("%v\n%s", err, sql)
	}
}

// stageIn stages an event through the target's stage in q (a connection
// or an open transaction) and returns the seq the database gave it.
func (db *outboxDB) stageIn(q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, typ, payload string, at time.Time) int64 {
	db.t.Helper()
	var seq int64
	corr := "7d2b3c9e-1111-4222-8333-444455556666"
	if err := q.QueryRow(context.Background(), db.stage, typ, payload, corr, at).Scan(&seq); err != nil {
		db.t.Fatal(err)
	}
	return seq
}

// state is a row as the rows view shows it, and how long after the
// now() of the transaction that last changed it its retry_after is.
type state struct {
	published, dead bool
	attempts        int
	retryIn         time.Duration // retry_after - the failing batch's now()
}

func (db *outboxDB) row(seq int64) (state, bool) {
	db.t.Helper()
	var (
		s                      state
		processedAt, faultedAt *time.Time
		retryAfter             *time.Time
	)
	err := db.conn.QueryRow(context.Background(), `SELECT v.processed_at, v.faulted_at, v.attempts, o.retry_after
FROM `+pgx.Identifier{db.schema, "outbox_rows"}.Sanitize()+` v JOIN `+db.table+` o ON o.seq = v.id WHERE v.id = $1`, seq).
		Scan(&processedAt, &faultedAt, &s.attempts, &retryAfter)
	if errors.Is(err, pgx.ErrNoRows) {
		return s, false
	}
	if err != nil {
		db.t.Fatal(err)
	}
	s.published, s.dead = processedAt != nil, faultedAt != nil
	if retryAfter != nil {
		var at time.Time
		if err := db.conn.QueryRow(context.Background(), `SELECT at FROM `+pgx.Identifier{db.schema, "changes"}.Sanitize()+
			` WHERE seq = $1 ORDER BY n DESC LIMIT 1`, seq).Scan(&at); err != nil {
			db.t.Fatal(err)
		}
		s.retryIn = retryAfter.Sub(at)
	}
	return s, true
}

// fakeBroker answers a batch's publishes by topic: order.placed is
// confirmed, audit.oversized refused (returned), order.paid left
// unconfirmed (an outage). It records what each batch published, in
// order; hold, when set, blocks the publish until it is closed.
type fakeBroker struct {
	mu      sync.Mutex
	batches [][]int64
	hold    chan struct{}
	held    chan struct{}
}

func (f *fakeBroker) publish(rows []row) ([]result, error) {
	f.mu.Lock()
	f.batches = append(f.batches, seqs(rows))
	hold, held := f.hold, f.held
	f.mu.Unlock()
	if hold != nil {
		close(held)
		select {
		case <-hold:
		case <-time.After(10 * time.Second):
			return nil, errors.New("fakeBroker: never released")
		}
	}
	out := make([]result, len(rows))
	var err error
	for i, r := range rows {
		switch r.topic {
		case "order.placed":
			out[i] = result{confirmed, nil}
		case "audit.oversized":
			out[i] = result{refused, errors.New("returned by the broker: 312 NO_ROUTE")}
		default:
			err = errors.New("no confirm within 1s")
			out[i] = result{unconfirmed, err}
		}
	}
	return out, err
}

func (f *fakeBroker) last() []int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.batches) == 0 {
		return nil
	}
	return f.batches[len(f.batches)-1]
}

// testWriter sends log lines to t.Log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// newTestRelay is a relay on db's outbox under the harness's settings,
// changed by settings (name, value, ...), publishing to f.
func (db *outboxDB) newTestRelay(b bug, f *fakeBroker, settings ...string) *relay {
	db.t.Helper()
	e := harnessEnv()
	for i := 0; i+1 < len(settings); i += 2 {
		e[settings[i]] = settings[i+1]
	}
	e["OUTBOX_DATABASE_URL"] = db.url
	e["OUTBOX_TABLE"] = db.schema + ".outbox"
	e[bugEnv] = string(b)
	cfg, err := parseConfig(e.get, hostname, 1)
	if err != nil {
		db.t.Fatal(err)
	}
	r := newRelay(cfg, newLogger(testWriter{db.t}, "relay-"+b.String(), 0), make(chan struct{}))
	r.publish = f.publish
	db.t.Cleanup(r.dropDB)
	return r
}

func TestBatchOnPostgreSQL(t *testing.T) {
	db := newOutboxDB(t)
	f := &fakeBroker{}
	// A backoff long enough that the next batch comes before it ends.
	r := db.newTestRelay(bugNone, f, "OUTBOX_BACKOFF_BASE", "500ms")
	t0 := time.Now().Add(-time.Minute)
	body := `{"order_id": "o1", "amount": 5}`
	// Staged out of created_at order: the batch publishes oldest first.
	placed := db.stageIn(db.conn, "order.placed", body, t0.Add(5*time.Second))
	unknown := db.stageIn(db.conn, "order.teleported", body, t0.Add(time.Second))
	undecodable := db.stageIn(db.conn, "order.placed", `{"order_id": "o2", "amount": "lots"}`, t0.Add(2*time.Second))
	rejected := db.stageIn(db.conn, "audit.oversized", body, t0.Add(3*time.Second))
	outage := db.stageIn(db.conn, "order.paid", body, t0)

	n, err := r.batch()
	if n != 5 || err == nil || !strings.Contains(err.Error(), "no attempt consumed") {
		t.Fatalf("first batch: %d rows, %v; want 5 and the outage", n, err)
	}
	if got, want := f.last(), []int64{outage, rejected, placed}; !slices.Equal(got, want) {
		t.Errorf("published %v, want %v: oldest created_at first, poison never", got, want)
	}
	for seq, want := range map[int64]state{
		placed:      {published: true},
		unknown:     {dead: true},
		undecodable: {dead: true},
		rejected:    {attempts: 1, retryIn: 500 * time.Millisecond},
		outage:      {},
	} {
		if got, ok := db.row(seq); !ok || got != want {
			t.Errorf("seq %d: %+v (present %t), want %+v", seq, got, ok, want)
		}
	}
	// The session bounds its statements and idle transactions.
	var st, idle string
	if err := r.db.QueryRow(context.Background(), "SELECT current_setting('statement_timeout'), current_setting('idle_in_transaction_session_timeout')").Scan(&st, &idle); err != nil {
		t.Fatal(err)
	}
	if st != "2s" || idle != "12s" {
		t.Errorf("statement_timeout %s, idle_in_transaction_session_timeout %s; want 2s and 12s", st, idle)
	}

	// At once again: the refused row waits for its backoff, the row the
	// outage left is claimed again.
	if _, err := r.batch(); err == nil || !slices.Equal(f.last(), []int64{outage}) {
		t.Errorf("second batch published %v (%v), want only %d", f.last(), err, outage)
	}
	// The refused row fails until its third failure parks it, each
	// backoff twice the last.
	for i, want := range []state{{attempts: 2, retryIn: time.Second}, {attempts: 3, dead: true, retryIn: 2 * time.Second}} {
		deadline := time.Now().Add(5 * time.Second)
		for {
			got, _ := db.row(rejected)
			if got.attempts == want.attempts || time.Now().After(deadline) {
				break
			}
			time.Sleep(50 * time.Millisecond)
			_, _ = r.batch()
		}
		if got, _ := db.row(rejected); got != want {
			t.Errorf("failure %d: %+v, want %+v", i+2, got, want)
		}
	}
	if got, _ := db.row(outage); got != (state{}) {
		t.Errorf("the row the outages left: %+v, want pending with no attempt", got)
	}
}

// TestRowLocksOnPostgreSQL: a batch holds its rows while it publishes,
// and another relay's batch skips them; without the locks (no-lock) it
// takes them too.
func TestRowLocksOnPostgreSQL(t *testing.T) {
	for _, c := range []struct {
		bug  bug
		same bool
	}{{bugNone, false}, {bugNoLock, true}} {
		t.Run(c.bug.String(), func(t *testing.T) {
			db := newOutboxDB(t)
			fa := &fakeBroker{hold: make(chan struct{}), held: make(chan struct{})}
			fb := &fakeBroker{}
			a, b := db.newTestRelay(c.bug, fa), db.newTestRelay(c.bug, fb)
			var staged []int64
			for i := range 3 {
				staged = append(staged, db.stageIn(db.conn, "order.placed", `{"order_id": "o", "amount": 1}`, time.Now().Add(time.Duration(i)*time.Millisecond)))
			}
			done := make(chan error, 1)
			go func() { _, err := a.batch(); done <- err }()
			select {
			case <-fa.held:
			case <-time.After(10 * time.Second):
				t.Fatal("the first batch never published")
			}
			_, err := b.batch()
			close(fa.hold)
			if err := <-done; err != nil {
				t.Errorf("the first batch: %v", err)
			}
			switch {
			case err != nil:
				t.Errorf("the second batch: %v", err)
			case c.same && !slices.Equal(fb.last(), staged):
				t.Errorf("without row locks the second batch published %v, want %v too", fb.last(), staged)
			case !c.same && fb.last() != nil:
				t.Errorf("the second batch published %v, which the first one held", fb.last())
			}
			for _, seq := range staged {
				if got, _ := db.row(seq); got != (state{published: true}) {
					t.Errorf("seq %d: %+v, want published", seq, got)
				}
			}
		})
	}
}

// TestBugModesOnPostgreSQL: what each mode that acts on the database
// leaves in it.
func TestBugModesOnPostgreSQL(t *testing.T) {
	body := `{"order_id": "o1", "amount": 5}`
	t.Run("commit-first", func(t *testing.T) {
		db := newOutboxDB(t)
		r := db.newTestRelay(bugCommitFirst, &fakeBroker{})
		seq := db.stageIn(db.conn, "order.paid", body, time.Now()) // the broker is out
		if _, err := r.batch(); err == nil {
			t.Error("the outage was not reported")
		}
		if got, _ := db.row(seq); got != (state{published: true}) {
			t.Errorf("%+v, want marked published though never confirmed", got)
		}
	})
	t.Run("outage-burns-attempts", func(t *testing.T) {
		db := newOutboxDB(t)
		r := db.newTestRelay(bugBurnAttempts, &fakeBroker{})
		seq := db.stageIn(db.conn, "order.paid", body, time.Now())
		_, _ = r.batch()
		if got, _ := db.row(seq); got != (state{attempts: 1, retryIn: 100 * time.Millisecond}) {
			t.Errorf("%+v, want an attempt consumed by the outage", got)
		}
	})
	t.Run("drop-poison", func(t *testing.T) {
		db := newOutboxDB(t)
		r := db.newTestRelay(bugDropPoison, &fakeBroker{})
		seq := db.stageIn(db.conn, "order.teleported", body, time.Now())
		if _, err := r.batch(); err != nil {
			t.Fatal(err)
		}
		if got, ok := db.row(seq); ok {
			t.Errorf("%+v, want the poison row deleted", got)
		}
	})
	for _, b := range []bug{bugNone, bugSkipLate} {
		t.Run("late commit "+b.String(), func(t *testing.T) {
			db := newOutboxDB(t)
			f := &fakeBroker{}
			r := db.newTestRelay(b, f)
			ctx := context.Background()
			late, err := db.conn.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			low := db.stageIn(late, "order.placed", body, time.Now())
			other, err := pgx.Connect(ctx, db.url)
			if err != nil {
				t.Fatal(err)
			}
			defer other.Close(ctx)
			high := db.stageIn(other, "order.placed", body, time.Now())
			if _, err := r.batch(); err != nil || !slices.Equal(f.last(), []int64{high}) {
				t.Fatalf("published %v (%v), want %d", f.last(), err, high)
			}
			if err := late.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			_, _ = r.batch()
			got, _ := db.row(low)
			if want := b == bugNone; got.published != want {
				t.Errorf("the late row's seq %d < %d: published %t, want %t", low, high, got.published, want)
			}
		})
	}
}
