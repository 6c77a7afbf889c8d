package scenarios

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/outboxlab/outboxlab/consumer"
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
capabilities: parks,lease=3s
outbox:
  migrate: CREATE TABLE {table} (event_id uuid PRIMARY KEY, kind text, body jsonb, at timestamptz)
  stage:
    - INSERT INTO {table} (event_id, kind, body, at) VALUES (:id, :type, :payload, :occurred_at)
    - SELECT pg_notify('{channel}', '')
  rows: SELECT event_id AS id, kind AS message_type FROM {table}
  no_leases: true
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
	if u.Env["OTHER_POLL"] != "100ms" || !u.Features.Parks || u.Features.Fenced || u.Lease.String() != "3s" {
		t.Errorf("env %v, features %+v, lease %s", u.Env, u.Features, u.Lease)
	}
	if !u.Outbox.NoLeases {
		t.Error("no_leases was not read")
	}
	if u.Identity != (consumer.Identity{Header: "x-event-id"}) {
		t.Errorf("identity %+v", u.Identity)
	}
	table := outbox.MustParseTable("sc_1.orders_outbox")
	if got := u.Outbox.Rows(table); got != `SELECT event_id AS id, kind AS message_type FROM "sc_1"."orders_outbox"` {
		t.Errorf("rows %q", got)
	}
}

func TestParseTargetRefusesWhatCannotWork(t *testing.T) {
	for _, c := range []struct{ name, text, want string }{
		{"no relay", "outbox: {migrate: x, stage: x, rows: x}", "relay: give image"},
		{"both", "relay: {image: a, command: b}\noutbox: {migrate: x, stage: x, rows: x}", "not both"},
		{"no outbox", "relay: {image: a}", "outbox.migrate, outbox.stage, outbox.rows: missing"},
		{"unknown field", "relay: {image: a}\ntable: x", "field table not found"},
		{"bad identity", "relay: {image: a}\noutbox: {migrate: x, stage: x, rows: x}\ndelivery: {id: property}", "delivery.id"},
		{"bad capability", "relay: {image: a}\ncapabilities: teleports\noutbox: {migrate: x, stage: x, rows: x}", "unknown capability"},
		{"bad parameter", "relay: {image: a}\noutbox: {migrate: x, stage: 'INSERT INTO {table} VALUES (:event)', rows: x}", "unknown parameter :event"},
		{"bad placeholder", "relay: {image: a}\noutbox: {migrate: 'CREATE TABLE {tbl} ()', stage: x, rows: x}", "unknown placeholder {tbl}"},
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
	if got := ReplayCommand("poison", 3, u, 0, 0); got != "go run ./cmd/outboxlab run --scenario poison --seed 3 --target "+QuoteArg(path) {
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
