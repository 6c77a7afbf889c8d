package scenarios

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/outboxlab/outboxlab/consumer"
	"github.com/outboxlab/outboxlab/contract"
	"github.com/outboxlab/outboxlab/fixture"
	"github.com/outboxlab/outboxlab/internal/argv"
	"github.com/outboxlab/outboxlab/outbox"
)

func TestBindNamed(t *testing.T) {
	sql, args, err := bindNamed(`INSERT INTO t (a, b, c) VALUES (:id, :payload::jsonb, ':type') -- :nope
	ON CONFLICT DO NOTHING RETURNING ":id", :id, :type`, stageParams)
	if err != nil {
		t.Fatal(err)
	}
	want := `INSERT INTO t (a, b, c) VALUES ($1, $2::jsonb, ':type') -- :nope
	ON CONFLICT DO NOTHING RETURNING ":id", $1, $3`
	if sql != want {
		t.Errorf("bound\n%s\nwant\n%s", sql, want)
	}
	if got := []string{stageParams[args[0]], stageParams[args[1]], stageParams[args[2]]}; strings.Join(got, ",") != "id,payload,type" || len(args) != 3 {
		t.Errorf("args %v name %v, want id, payload, type", args, got)
	}
	sql, _, err = bindNamed(`INSERT INTO t (at) VALUES (:occurred_at)`, stageParams)
	if err != nil || sql != `INSERT INTO t (at) VALUES (coalesce($1::timestamptz, now()))` {
		t.Errorf("occurred_at bound as %q (%v): an event without a time takes the transaction's", sql, err)
	}
	for _, bad := range []string{
		`INSERT INTO t VALUES (:ids)`, // not a parameter
		`INSERT INTO t VALUES (':id)`, // unterminated literal
		`INSERT INTO {tabel} VALUES (:id)`,
	} {
		if _, _, err := bindNamed(bad, stageParams); err == nil {
			t.Errorf("bindNamed(%q) accepted it", bad)
		}
	}
}

const otherColumns = `
name: other
relay:
  command: bin/other-relay --quiet "two words"
  env: {OTHER_POLL: 100ms}
capabilities: parks,locking=rowlock
outbox:
  migrate: CREATE TABLE {table} (event_id uuid PRIMARY KEY, kind text, body jsonb, at timestamptz)
  stage:
    - INSERT INTO {table} (event_id, kind, body, at) VALUES (:id, :type, :payload, :occurred_at)
    - SELECT pg_notify('{channel}', '')
  rows: SELECT event_id AS id, kind AS message_type FROM {table}
delivery:
  id: header:x-event-id
`

func TestParseTarget(t *testing.T) {
	u, err := ParseTarget([]byte(otherColumns), "examples/other")
	if err != nil {
		t.Fatal(err)
	}
	if u.Name != "other" || u.Outbox.Name != "other" || !u.Outbox.Own() {
		t.Errorf("name %q, outbox %q own %v", u.Name, u.Outbox.Name, u.Outbox.Own())
	}
	if strings.Join(u.Command, "|") != "./examples/other/bin/other-relay|--quiet|two words" {
		t.Errorf("command %q: want the relative program under the file's directory, quoted words kept", u.Command)
	}
	if u.Env["OTHER_POLL"] != "100ms" || u.Promises != (contract.Promises{Parks: true, Locking: contract.RowLocks}) {
		t.Errorf("env %v, promises %s", u.Env, u.Promises)
	}
	if u.Identity != (consumer.Identity{Header: "x-event-id"}) {
		t.Errorf("identity %+v", u.Identity)
	}
	table := outbox.MustParseTable("sc_1.orders_outbox")
	if got := u.Outbox.Rows(table); got != `SELECT event_id AS id, kind AS message_type FROM "sc_1"."orders_outbox"` {
		t.Errorf("rows %q", got)
	}
}

// TestParseTargetNext reads a target's next version into the rolling
// upgrade from the target's relay to it, and a target without one has
// none: the scenario is not applicable to it.
func TestParseTargetNext(t *testing.T) {
	u, err := ParseTarget([]byte(otherColumns+`next:
  relay:
    image: other-relay:2
    env: {OTHER_POLL: 50ms}
  migrate: ALTER TABLE {table} ADD COLUMN IF NOT EXISTS version int
`), "examples/other")
	if err != nil {
		t.Fatal(err)
	}
	up := u.PlannedUpgrade()
	if up == nil {
		t.Fatal("a target with next has no upgrade")
	}
	if !up.From.self() || up.To.Image != "other-relay:2" || up.To.Env["OTHER_POLL"] != "50ms" || up.Before != nil || up.Migrate == nil {
		t.Errorf("upgrade %+v: want from the target's relay to other-relay:2, on the target's outbox", up)
	}
	if err := up.Validate(); err != nil {
		t.Error(err)
	}
	plain, err := ParseTarget([]byte(otherColumns), "examples/other")
	if err != nil {
		t.Fatal(err)
	}
	if plain.PlannedUpgrade() != nil {
		t.Error("a target with an outbox of its own and no next has an upgrade")
	}
	sc, _ := Lookup(RollingUpgrade)
	if err := sc.Unmet(plain); !errors.Is(err, ErrNotApplicable) || !strings.Contains(err.Error(), "next") {
		t.Errorf("rolling-upgrade on a target without next: %v, want not applicable naming next", err)
	}
	if err := sc.Unmet(u); err != nil {
		t.Errorf("rolling-upgrade on a target with next: %v", err)
	}
	// The shipped example with a next version passes CheckTarget too.
	c, err := CheckTarget("../examples/pyrelay/upgrade.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if up := c.Relay.PlannedUpgrade(); up == nil || up.To.Env["OUTBOX_BATCH_SIZE"] != "10" || c.Relay.Env["OUTBOX_BATCH_SIZE"] != "100" {
		t.Errorf("examples/pyrelay/upgrade.yaml: relay env %v, upgrade %+v", c.Relay.Env, up)
	}
	if ours := (RelayUnderTest{}).PlannedUpgrade(); ours == nil || ours.From.Image != "outboxlab/relay:prev" || !ours.To.self() {
		t.Errorf("our relay's upgrade %+v: want from outboxlab/relay:prev to itself", ours)
	}
}

func TestParseTargetRefusesWhatCannotWork(t *testing.T) {
	for _, c := range []struct{ name, text, want string }{
		{"no relay", "outbox: {migrate: x, stage: x, rows: x}", "relay: give image"},
		{"both", "relay: {image: a, command: b}\noutbox: {migrate: x, stage: x, rows: x}", "not both"},
		{"no outbox", "relay: {image: a}", "outbox.migrate, outbox.stage, outbox.rows: missing"},
		{"unknown field", "relay: {image: a}\ntable: x", "table: unknown field (line 2; known here: name, relay, capabilities, outbox, delivery, next)"},
		{"bad identity", "relay: {image: a}\noutbox: {migrate: x, stage: x, rows: x}\ndelivery: {id: property}", "delivery.id"},
		{"bad capability", "relay: {image: a}\ncapabilities: teleports\noutbox: {migrate: x, stage: x, rows: x}", "unknown capability"},
		{"bad parameter", "relay: {image: a}\noutbox: {migrate: x, stage: 'INSERT INTO {table} VALUES (:event)', rows: x}", "unknown parameter :event"},
		{"bad placeholder", "relay: {image: a}\noutbox: {migrate: 'CREATE TABLE {tbl} ()', stage: x, rows: x}", "unknown placeholder {tbl}"},
		{"next without a relay", "relay: {image: a}\noutbox: {migrate: x, stage: x, rows: x}\nnext: {migrate: x}", "next.relay: give image"},
		{"next with a bad placeholder", "relay: {image: a}\noutbox: {migrate: x, stage: x, rows: x}\nnext: {relay: {image: b}, migrate: 'ALTER TABLE {tbl} ADD x int'}", "next.migrate: unknown placeholder {tbl}"},
	} {
		_, err := ParseTarget([]byte(c.text), ".")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one saying %q", c.name, err, c.want)
		}
	}
}

func TestLoadTargetNamesFileAndReplay(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "mine.yaml")
	if err := os.WriteFile(path, []byte(strings.Replace(otherColumns, "name: other\n", "", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	u, err := LoadTarget(path)
	if err != nil {
		t.Fatal(err)
	}
	if u.Name != "mine" {
		t.Errorf("name %q, want the file's", u.Name)
	}
	if got := ReplayCommand("poison", 3, u, 0, 0); got != "go run ./cmd/outboxlab run --scenario poison --seed 3 --target "+argv.QuoteArg(path) {
		t.Errorf("replay %q", got)
	}
	if _, err := LoadTarget(filepath.Join(dir, "missing.yaml")); err == nil || !strings.Contains(err.Error(), "missing.yaml") {
		t.Errorf("a missing file: %v", err)
	}
}

// TestExampleTargetsParse keeps the shipped target files readable.
func TestExampleTargetsParse(t *testing.T) {
	files, _ := filepath.Glob("../examples/*/target.yaml")
	if len(files) == 0 {
		t.Fatal("no example target files")
	}
	for _, f := range files {
		if _, err := LoadTarget(f); err != nil {
			t.Error(err)
		}
	}
}

// TestParseTargetReportsEveryProblem gives a file with a problem in each
// of its parts: every one is reported, naming its field, where the first
// one used to hide the others.
func TestParseTargetReportsEveryProblem(t *testing.T) {
	text := `relay:
  image: My/Relay
  cmd: ./relay
  env: {"": x}
capabilities: parks,teleports
outbox:
  migrate: CREATE TABLE {tbl} (id uuid); CREATE INDEX ON {tabel} (id)
  stage:
    - INSERT INTO {table} VALUES (:id, :kind, :body)
    - ""
  rows:
    - SELECT id FROM {table}
delivery:
  id: property
`
	_, err := ParseTarget([]byte(text), ".")
	var te *TargetError
	if !errors.As(err, &te) {
		t.Fatalf("error %v, want a *TargetError", err)
	}
	for _, want := range []string{
		"relay.cmd: unknown field (line 3; known here: image, command, env)",
		"outbox.rows: cannot unmarshal !!seq into string (line 12)",
		`relay.image: "My/Relay" is not an image reference`,
		`relay.env: "" is not a variable name`,
		`unknown capability "teleports"`,
		"outbox.migrate: unknown placeholders {tbl}, {tabel}",
		"outbox.stage[0]: unknown parameters :kind, :body (known: :id, :type, :payload, :correlation_id, :occurred_at)",
		"outbox.stage[1]: empty",
		"delivery.id: ",
	} {
		if !slices.ContainsFunc(te.Problems, func(p error) bool { return strings.Contains(p.Error(), want) }) {
			t.Errorf("no problem says %q; the problems:\n%v", want, err)
		}
	}
	if len(te.Problems) != 9 {
		t.Errorf("%d problems, want 9:\n%v", len(te.Problems), err)
	}
	if !strings.HasPrefix(err.Error(), "9 problems:\n  ") {
		t.Errorf("the error does not list its problems one a line:\n%v", err)
	}
	for _, c := range []struct{ text, want string }{
		{"", "empty"},
		{"relay: {image: a\n", "reading the YAML"},
		{"relay: {image: a}\noutbox: {migrate: x, stage: x, rows: x}\n---\nname: two\n", "a second YAML document"},
		{"relay: {image: a}\noutbox: {migrate: x, stage: {a: b}, rows: x}", "outbox.stage: want a statement or a list of statements (line 2)"},
	} {
		if _, err := ParseTarget([]byte(c.text), "."); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want one saying %q", c.text, err, c.want)
		}
	}
}

// TestTargetLockingStyle: a target file declares its relay's locking
// style among its capabilities; a bad style and one that contradicts the
// rest are refused, naming the field, and the field outbox.no_leases that
// the style replaced says so.
func TestTargetLockingStyle(t *testing.T) {
	for _, c := range []struct {
		capabilities string
		want         contract.Locking
		problem      string
	}{
		{"lease=4s", contract.Lease(4 * time.Second), ""},
		{"locking=lease", contract.Lease(0), ""},
		{"failpoints,locking=rowlock", contract.RowLocks, ""},
		{"locking=none", contract.NoLocks, ""},
		{"none", contract.Locking{}, ""},
		{"locking=optimistic", contract.Locking{}, `capabilities "locking=optimistic": locking=optimistic is not lease, rowlock or none`},
		{"fenced,locking=none", contract.Locking{}, "it declares no lock of a row (locking=none): declare its lease"},
		{"lease=4s,locking=rowlock", contract.Locking{}, "the locking style is given twice (lease=4s and locking=rowlock)"},
	} {
		text := strings.Replace(otherColumns, "capabilities: parks,locking=rowlock", "capabilities: "+c.capabilities, 1)
		u, err := ParseTarget([]byte(text), ".")
		switch {
		case c.problem == "" && (err != nil || u.Promises.Locking != c.want):
			t.Errorf("capabilities %s: locking %s, %v; want %s", c.capabilities, u.Promises.Locking.Describe(), err, c.want.Describe())
		case c.problem != "" && (err == nil || !strings.Contains(err.Error(), c.problem) || !strings.HasPrefix(err.Error(), "capabilities ")):
			t.Errorf("capabilities %s: %v, want the capabilities refused with %q", c.capabilities, err, c.problem)
		}
	}
	text := strings.Replace(otherColumns, "  rows: ", "  no_leases: true\n  rows: ", 1)
	if _, err := ParseTarget([]byte(text), "."); err == nil || !strings.Contains(err.Error(), "outbox.no_leases: unknown field") ||
		!strings.Contains(err.Error(), "declares its locking style in capabilities instead (locking=rowlock") {
		t.Errorf("outbox.no_leases: %v, want it refused with a word on the locking style", err)
	}
}

func TestImageReferences(t *testing.T) {
	for _, ref := range []string{"a", "my/relay:1.2", "outboxlab/pyrelay:dev", "localhost:5000/team/relay:v1", "registry.example.com/a-b/c_d.e:Tag_1",
		"relay@sha256:" + strings.Repeat("0f", 32), "[::1]:5000/relay"} {
		if err := checkImageRef(ref); err != nil {
			t.Errorf("%q refused: %v", ref, err)
		}
	}
	for _, ref := range []string{"My/Relay", "relay:", "a b", "relay:-x", "/relay", "relay/", "relay@sha256:12", "re--lay_"} {
		if err := checkImageRef(ref); err == nil {
			t.Errorf("%q accepted", ref)
		}
	}
}

func TestProgramPath(t *testing.T) {
	for _, c := range []struct{ dir, prog, want string }{
		{"/srv/targets", "./bin/relay", "/srv/targets/bin/relay"},
		{"/srv/targets", "../bin/relay", "/srv/bin/relay"},
		{"examples/mine", "./bin/relay", "./examples/mine/bin/relay"},
		{"examples/mine", "bin/relay", "./examples/mine/bin/relay"},
		{".", "./relay", "./relay"},
		{".", "../relay", "../relay"},
		{"../targets", "./relay", "../targets/relay"},
		{"/srv/targets", "/opt/relay", "/opt/relay"},
		{"/srv/targets", "relay", "relay"},
	} {
		if got := programPath(c.dir, c.prog); got != c.want {
			t.Errorf("programPath(%q, %q) = %q, want %q", c.dir, c.prog, got, c.want)
		}
	}
}

// writeTarget writes a target file whose relay is the command ./bin/relay,
// an executable script beside it, and returns its path.
func writeTarget(t *testing.T, dir string) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(dir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "bin", "relay"), []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	text := strings.Replace(otherColumns, "command: bin/other-relay", "command: ./bin/relay", 1)
	path := filepath.Join(dir, "target.yaml")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestLoadTargetFindsARelativeProgramFromAnAbsolutePath loads a target
// file by its absolute path and by a relative one: the command's
// relative program is found from both (an absolute path used to become
// .//abs/...).
func TestLoadTargetFindsARelativeProgramFromAnAbsolutePath(t *testing.T) {
	root := t.TempDir()
	path := writeTarget(t, filepath.Join(root, "targets"))
	u, err := LoadTarget(path)
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(root, "targets", "bin", "relay"); u.Command[0] != want {
		t.Errorf("program %q, want %q", u.Command[0], want)
	}
	if _, err := exec.LookPath(u.Command[0]); err != nil {
		t.Errorf("the program of a target given by its absolute path is not found: %v", err)
	}
	t.Chdir(root)
	u, err = LoadTarget(filepath.Join("targets", "target.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if u.Command[0] != "./targets/bin/relay" {
		t.Errorf("program %q, want ./targets/bin/relay", u.Command[0])
	}
	if _, err := exec.LookPath(u.Command[0]); err != nil {
		t.Errorf("the program of a target given by a relative path is not found: %v", err)
	}
}

// allColumns is a rows SELECT that gives every column of fixture.RowColumns.
const allColumns = `SELECT event_id AS id, kind AS message_type, sent_at AS processed_at, NULL::timestamptz AS faulted_at,
	0 AS attempts, created_at AS occurred_at, NULL AS locked_by, NULL::timestamptz AS locked_at, NULL::timestamptz AS locked_until
	FROM {table}`

func TestRowsColumns(t *testing.T) {
	for _, c := range []struct {
		name, sql string
		names     []string
		unsure    bool
	}{
		{"AS aliases", allColumns, fixture.RowColumns, false},
		{"bare names, qualified and quoted", `SELECT o.id, "message_type", processed_at::timestamptz, faulted_at, attempts::int, occurred_at,
			locked_by, locked_at, o.locked_until FROM {table} o WHERE id IS NOT NULL`, fixture.RowColumns, false},
		{"bare aliases", `SELECT event_id id, 'x' message_type, now() processed_at, (NULL) faulted_at, 0 attempts, created_at occurred_at,
			NULL locked_by, NULL locked_at, NULL locked_until FROM {table}`, fixture.RowColumns, false},
		{"upper case folds, quoted keeps its case", `SELECT EVENT_ID AS ID, kind AS "Message_Type" FROM {table}`, []string{"id", "Message_Type"}, false},
		{"nested parentheses, commas and keywords", `SELECT coalesce(a, (SELECT max(b) FROM t WHERE c IN (1, 2))) AS id,
			a IS DISTINCT FROM b AS message_type, percentile_cont(0.5) WITHIN GROUP (ORDER BY x) AS attempts FROM {table} ORDER BY 1`,
			[]string{"id", "message_type", "attempts"}, false},
		{"literals and comments that look like SQL", `SELECT 'a, b FROM c' AS id, -- , x AS y FROM
			/* , z AS w */ $$ , FROM $$ AS message_type, E'\', x' AS attempts, "a ""b"" FROM" FROM {table}`,
			[]string{"id", "message_type", "attempts", `a "b" FROM`}, false},
		{"WITH and DISTINCT ON", `WITH x AS (SELECT 1 AS nope, 2 AS nope2) SELECT DISTINCT ON (id) id, message_type FROM x`, []string{"id", "message_type"}, false},
		{"an alias that is a keyword", `SELECT a AS from, b AS id FROM {table}`, []string{"from", "id"}, false},
		{"a star", `SELECT * FROM {table}`, nil, true},
		{"a qualified star", `SELECT o.*, 1 AS extra FROM {table} o`, []string{"extra"}, true},
		{"an expression without a name", `SELECT event_id AS id, coalesce(tries, 0) FROM {table}`, []string{"id"}, true},
		{"a cast to a type of several words", `SELECT locked_at::timestamp with time zone FROM {table}`, nil, true},
		{"a cast then a bare alias", `SELECT tries::int attempts FROM {table}`, nil, true},
		{"not a SELECT", `TABLE {table}`, nil, true},
		{"a SELECT in parentheses", `(SELECT id FROM {table})`, nil, true},
		{"unterminated", `SELECT 'id FROM {table}`, nil, true},
		{"a star among every column", `SELECT *, event_id AS id, kind AS message_type, sent_at AS processed_at, dead_at AS faulted_at,
			tries AS attempts, created_at AS occurred_at, owner AS locked_by, owned_at AS locked_at, lease_until AS locked_until FROM {table}`, fixture.RowColumns, false},
	} {
		names, unsure := rowsColumns(c.sql)
		if !slices.Equal(names, c.names) || (unsure != "") != c.unsure {
			t.Errorf("%s: names %q, unsure %q; want %q, unsure %v", c.name, names, unsure, c.names, c.unsure)
		}
	}
}

// check writes text as a target file and checks it.
func check(t *testing.T, text string) (TargetCheck, error) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "t.yaml")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return CheckTarget(path)
}

// TestCheckTargetRefuses gives CheckTarget a good target file with one
// mistake at a time; each is refused naming its field.
func TestCheckTargetRefuses(t *testing.T) {
	good := strings.Replace(otherColumns, "rows: SELECT event_id AS id, kind AS message_type FROM {table}", "rows: |\n    "+strings.ReplaceAll(allColumns, "\n", "\n    "), 1)
	if c, err := check(t, good); err != nil || c.RowsUnsure != "" || !slices.Equal(c.Rows, fixture.RowColumns) {
		t.Fatalf("the good file: %v, rows %q, unsure %q", err, c.Rows, c.RowsUnsure)
	}
	for _, c := range []struct{ name, from, to, want string }{
		{"unknown placeholder", "SELECT pg_notify('{channel}', '')", "SELECT pg_notify('{chanel}', '')", "outbox.stage[1]: unknown placeholder {chanel}"},
		{"unknown parameter", ":occurred_at)", ":created_at)", "outbox.stage[0]: unknown parameter :created_at"},
		{"missing rows column", "NULL::timestamptz AS locked_until", "NULL::timestamptz AS lease_until", "outbox.rows: the SELECT gives no column locked_until"},
		{"a rows column given twice", "0 AS attempts", "0 AS id", "outbox.rows: the SELECT gives id more than once"},
		{"a stage that never keeps the id", "VALUES (:id,", "VALUES (gen_random_uuid(),", "outbox.stage: no statement uses :id"},
		{"an image reference with a blank", "command: bin/other-relay --quiet \"two words\"", "image: my relay", `relay.image: "my relay" is not an image reference`},
		{"a capability twice", "capabilities: parks,locking=rowlock", "capabilities: parks,parks", "parks is given twice"},
		{"a delivery id nowhere", "id: header:x-event-id", "id: property:x", "delivery.id: "},
	} {
		text := strings.Replace(good, c.from, c.to, 1)
		if text == good {
			t.Fatalf("%s: %q is not in the good file", c.name, c.from)
		}
		_, err := check(t, text)
		var te *TargetError
		if !errors.As(err, &te) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "t.yaml") {
			t.Errorf("%s: error %v, want a *TargetError naming the file and saying %q", c.name, err, c.want)
		}
	}
	// What the text cannot tell is said, not refused.
	c, err := check(t, strings.Replace(good, "0 AS attempts", "coalesce(tries, 0)", 1))
	if err != nil || !strings.Contains(c.RowsUnsure, "item 5 (coalesce(tries, 0))") || !strings.Contains(c.RowsUnsure, "attempts") {
		t.Errorf("an unnamed item: %v, unsure %q", err, c.RowsUnsure)
	}
}

// TestCheckTargetAcceptsTheShippedTargets checks the target files of the
// repository and the examples of docs/targets.md.
func TestCheckTargetAcceptsTheShippedTargets(t *testing.T) {
	files, _ := filepath.Glob("../examples/*/target.yaml")
	if len(files) == 0 {
		t.Fatal("no example target files")
	}
	for _, f := range files {
		c, err := CheckTarget(f)
		if err != nil {
			t.Error(err)
			continue
		}
		if c.RowsUnsure != "" || !slices.Equal(c.Rows, fixture.RowColumns) {
			t.Errorf("%s: rows %q, unsure %q: want every column told", f, c.Rows, c.RowsUnsure)
		}
	}
	doc, err := os.ReadFile("../docs/targets.md")
	if err != nil {
		t.Fatal(err)
	}
	examples := 0
	for rest := string(doc); ; examples++ {
		var ok bool
		if _, rest, ok = strings.Cut(rest, "```yaml\n"); !ok {
			break
		}
		example, after, ok := strings.Cut(rest, "```")
		if !ok {
			t.Fatal("docs/targets.md has a YAML example that does not end")
		}
		rest = after
		c, err := check(t, example)
		if err != nil || c.RowsUnsure != "" {
			t.Errorf("example %d of docs/targets.md: %v (rows unsure: %q)", examples+1, err, c.RowsUnsure)
		}
	}
	if examples == 0 {
		t.Fatal("docs/targets.md has no YAML example")
	}
}
