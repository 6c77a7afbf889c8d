package outbox

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

func TestParseTable(t *testing.T) {
	for _, tc := range []struct {
		in, ident, str string
		ok             bool
	}{
		{"outbox", `"outbox"`, "outbox", true},
		{"chat.outbox", `"chat"."outbox"`, "chat.outbox", true},
		{"_x9.t_1", `"_x9"."t_1"`, "_x9.t_1", true},
		{"", "", "", false},
		{"a.b.c", "", "", false},
		{".outbox", "", "", false},
		{"chat.", "", "", false},
		{`outbox"; DROP TABLE x; --`, "", "", false},
		{"9lives", "", "", false},
		{"white space", "", "", false},
		{strings.Repeat("a", 64), "", "", false},
	} {
		got, err := ParseTable(tc.in)
		if tc.ok != (err == nil) {
			t.Errorf("ParseTable(%q) error = %v, want ok=%v", tc.in, err, tc.ok)
			continue
		}
		if err != nil {
			if !errors.Is(err, ErrInvalidIdentifier) {
				t.Errorf("ParseTable(%q) error %v does not wrap ErrInvalidIdentifier", tc.in, err)
			}
			continue
		}
		if got.Ident() != tc.ident || got.String() != tc.str {
			t.Errorf("ParseTable(%q) = %s / %s, want %s / %s", tc.in, got.Ident(), got, tc.ident, tc.str)
		}
	}
}

func TestMigrationsRenderForTable(t *testing.T) {
	ms, err := Migrations()
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) < 2 || ms[0].Version != 1 {
		t.Fatalf("migrations = %+v, want 001 first and at least two", ms)
	}
	for i := 1; i < len(ms); i++ {
		if ms[i].Version <= ms[i-1].Version {
			t.Fatalf("migrations out of order: %d after %d", ms[i].Version, ms[i-1].Version)
		}
	}
	sql, err := ms[0].SQL(MustParseTable("chat.outbox"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`CREATE TABLE IF NOT EXISTS "chat"."outbox"`, "chat_outbox_pending_idx", "WHERE processed_at IS NULL AND faulted_at IS NULL"} {
		if !strings.Contains(sql, want) {
			t.Errorf("rendered migration lacks %q:\n%s", want, sql)
		}
	}
}

type orderPlaced struct {
	OrderID string `json:"order_id"`
	Amount  int    `json:"amount"`
}

func TestRegistryDecode(t *testing.T) {
	r := NewRegistry()
	r.Register("order.placed", orderPlaced{})
	v, err := r.Decode("order.placed", []byte(`{"order_id":"o1","amount":3}`))
	if err != nil {
		t.Fatal(err)
	}
	if got := v.(*orderPlaced); got.OrderID != "o1" || got.Amount != 3 {
		t.Errorf("decoded %+v", got)
	}
	if _, err := r.Decode("order.shipped", []byte(`{}`)); !errors.Is(err, ErrUnknownType) {
		t.Errorf("unknown type: err = %v, want ErrUnknownType", err)
	}
	for _, bad := range []string{`{"amount":"lots"}`, `{"order_id":"o1","colour":"red"}`, `[1,2]`} {
		if _, err := r.Decode("order.placed", []byte(bad)); !errors.Is(err, ErrUndecodable) {
			t.Errorf("payload %s: err = %v, want ErrUndecodable", bad, err)
		}
	}
}

func TestNewEventIsTimeOrdered(t *testing.T) {
	a, err := NewEvent("order.placed", orderPlaced{OrderID: "a"})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := NewEvent("order.placed", orderPlaced{OrderID: "b"})
	if a.ID.Version() != 7 || a.ID.String() >= b.ID.String() {
		t.Errorf("ids %s, %s: want UUIDv7 in creation order", a.ID, b.ID)
	}
}

// edgeTables are names that ParseTable accepts and that naive derived
// names mishandle: case that folds together, and 57 to 63 byte names that
// PostgreSQL would cut to the same bytes.
func edgeTables(t *testing.T) []Table {
	t.Helper()
	long := strings.Repeat("a", 63)
	var names = []string{
		"outbox", "Outbox", "OUTBOX", "chat.outbox", "chat.Outbox", "Chat.outbox",
		long, long[:62] + "b", long[:57], long[:57] + "x", "s." + long, long + "." + long, long + ".outbox",
		strings.Repeat("b", 50), strings.Repeat("b", 49), "x.outbox_pending_idx",
	}
	var ts []Table
	for _, n := range names {
		tb, err := ParseTable(n)
		if err != nil {
			t.Fatalf("ParseTable(%q): %v", n, err)
		}
		ts = append(ts, tb)
	}
	return ts
}

func TestDerivedNamesFitAndAreDistinct(t *testing.T) {
	type owner struct{ table, what string }
	channels := map[string]owner{}
	// Index names are per schema; channels are per database. Fold case
	// too: even an unquoted use must not merge two tables.
	indexes := map[string]owner{}
	for _, tb := range edgeTables(t) {
		for what, name := range map[string]string{"channel": tb.Channel(), "pending": tb.PendingIndex(), "processed": tb.ProcessedIndex()} {
			if len(name) > MaxIdentifierLen || name == "" {
				t.Errorf("%s of %s is %d bytes: %q", what, tb, len(name), name)
			}
			if !identRe.MatchString(name) {
				t.Errorf("%s of %s, %q, is not a plain identifier", what, tb, name)
			}
			key, seen := strings.ToLower(name), indexes
			if what == "channel" {
				seen = channels
			} else {
				key = tb.Schema() + "." + key
			}
			if prev, ok := seen[key]; ok {
				t.Errorf("%s of %s and %s of %s are both %q", what, tb, prev.what, prev.table, name)
			}
			seen[key] = owner{tb.String(), what}
		}
	}
}

func TestDerivedNamesAreDeterministic(t *testing.T) {
	for _, tb := range edgeTables(t) {
		again := MustParseTable(tb.String())
		if tb.Channel() != again.Channel() || tb.PendingIndex() != again.PendingIndex() || tb.ProcessedIndex() != again.ProcessedIndex() {
			t.Errorf("%s: names differ between two parses", tb)
		}
	}
	// Plain lower-case names keep the names they always had: tables
	// migrated before keep their indexes, and other relays their channel.
	for name, want := range map[string][3]string{
		"outbox":      {"outbox_outbox", "outbox_pending_idx", "outbox_processed_idx"},
		"chat.outbox": {"outbox_chat_outbox", "chat_outbox_pending_idx", "chat_outbox_processed_idx"},
	} {
		tb := MustParseTable(name)
		if got := [3]string{tb.Channel(), tb.PendingIndex(), tb.ProcessedIndex()}; got != want {
			t.Errorf("%s: names %v, want %v", name, got, want)
		}
	}
	// Others get a hash of the whole name after as much of it as fits.
	up := MustParseTable("Outbox")
	if !strings.HasPrefix(up.PendingIndex(), "Outbox_") || len(up.PendingIndex()) != len("Outbox_")+8+len("_pending_idx") {
		t.Errorf("Outbox's pending index = %q", up.PendingIndex())
	}
	long := MustParseTable(strings.Repeat("a", 63))
	for _, n := range []string{long.Channel(), long.PendingIndex(), long.ProcessedIndex()} {
		if len(n) != MaxIdentifierLen {
			t.Errorf("a 63-byte table's name %q is %d bytes, want the whole %d", n, len(n), MaxIdentifierLen)
		}
	}
}

func TestMigrationsQuoteDerivedNames(t *testing.T) {
	ms, err := Migrations()
	if err != nil {
		t.Fatal(err)
	}
	for _, tb := range edgeTables(t) {
		sql, err := ms[0].SQL(tb)
		if err != nil {
			t.Fatal(err)
		}
		for _, idx := range []string{tb.PendingIndex(), tb.ProcessedIndex()} {
			if want := `CREATE INDEX IF NOT EXISTS "` + idx + `"`; !strings.Contains(sql, want) {
				t.Errorf("%s: migration lacks %s:\n%s", tb, want, sql)
			}
		}
	}
}

// TestPublicSchemaNamesTheUnqualifiedTable gives the names derived from
// public.outbox and outbox, one table with PostgreSQL's default
// search_path: they listen on one channel and share their indexes, while
// the table's own SQL keeps the schema it was given.
func TestPublicSchemaNamesTheUnqualifiedTable(t *testing.T) {
	for _, name := range []string{"outbox", "Outbox", strings.Repeat("o", 63), "orders_outbox"} {
		bare, public := MustParseTable(name), MustParseTable("public."+name)
		if got, want := [3]string{public.Channel(), public.PendingIndex(), public.ProcessedIndex()},
			[3]string{bare.Channel(), bare.PendingIndex(), bare.ProcessedIndex()}; got != want {
			t.Errorf("public.%s derives %v, %s derives %v: want the same", name, got, name, want)
		}
		if public.Ident() != `"public".`+bare.Ident() || public.String() != "public."+name {
			t.Errorf("public.%s is spelt %s, %s in SQL and logs", name, public.Ident(), public)
		}
	}
	if MustParseTable("chat.outbox").Channel() == MustParseTable("outbox").Channel() {
		t.Error("chat.outbox and outbox share a channel")
	}
}

// TestSchemaValidate: a schema of its own sets Migrate, Stage and Rows; a
// fixed table name, ids the database gives and a writer that commits
// each need one, and a writer that commits keeps the event's own id.
func TestSchemaValidate(t *testing.T) {
	migrate := func(context.Context, *pgxpool.Pool, Table) error { return nil }
	stage := func(context.Context, pgx.Tx, Table, Event) (string, error) { return "", nil }
	rows := func(Table) string { return "SELECT 1" }
	commit := func(context.Context, Commit) error { return nil }
	own := Schema{Name: "own", Migrate: migrate, Stage: stage, Rows: rows}
	withCommit := own
	withCommit.Commit = commit
	commitIDs := withCommit
	commitIDs.ReturnsID = true
	badTable := own
	badTable.Table = "a.b"
	for _, c := range []struct {
		name string
		s    Schema
		ok   bool
	}{
		{"this package's", Schema{}, true},
		{"own", own, true},
		{"own with a writer that commits", withCommit, true},
		{"a writer that commits without a schema of its own", Schema{Commit: commit}, false},
		{"ids without a stage of its own", Schema{ReturnsID: true}, false},
		{"a table name without a schema of its own", Schema{Table: "river_job"}, false},
		{"a writer that commits and ids the database gives", commitIDs, false},
		{"a schema-qualified table name", badTable, false},
		{"no Rows", Schema{Migrate: migrate, Stage: stage}, false},
	} {
		if err := c.s.Validate(); (err == nil) != c.ok {
			t.Errorf("%s: Validate() = %v, want ok %v", c.name, err, c.ok)
		}
	}
}

func TestNoTransactionMigrationSplitsItsStatements(t *testing.T) {
	ms, err := Migrations()
	if err != nil {
		t.Fatal(err)
	}
	var alone []Migration
	for _, m := range ms {
		if m.NoTransaction {
			alone = append(alone, m)
		}
	}
	if len(alone) != 1 || alone[0].Version != 4 {
		t.Fatalf("migrations outside a transaction: %+v, want 004", alone)
	}
	stmts, err := alone[0].Statements(MustParseTable("chat.outbox"))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		`DROP INDEX CONCURRENTLY IF EXISTS "chat"."chat_outbox_parked_idx";`,
		"CREATE INDEX CONCURRENTLY \"chat_outbox_parked_idx\"\n    ON \"chat\".\"outbox\" (faulted_at)\n    WHERE faulted_at IS NOT NULL;",
	}
	if !slices.Equal(stmts, want) {
		t.Fatalf("statements = %q, want %q", stmts, want)
	}
	one, err := ms[0].Statements(MustParseTable("chat.outbox"))
	if err != nil || len(one) != 1 {
		t.Fatalf("a migration in a transaction runs as one statement: %d, %v", len(one), err)
	}
}
