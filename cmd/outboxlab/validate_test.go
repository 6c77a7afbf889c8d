package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/outboxlab/outboxlab/scenarios"
	"github.com/outboxlab/outboxlab/testenv"
)

// validTarget is a target file whose relay is ./bin/relay beside it; every
// test of validate breaks it one way.
const validTarget = `name: orders
relay:
  command: ./bin/relay --poll 100ms
  env: {RELAY_POLL: 100ms}
capabilities: parks,fenced,lease=5s
outbox:
  migrate: |
    CREATE TABLE {table} (event_id uuid PRIMARY KEY, kind text NOT NULL, body jsonb NOT NULL,
      created_at timestamptz NOT NULL DEFAULT now(), sent_at timestamptz);
  stage:
    - INSERT INTO {table} (event_id, kind, body, created_at) VALUES (:id, :type, :payload, :occurred_at)
    - SELECT pg_notify('{channel}', '')
  rows: |
    SELECT event_id AS id, kind AS message_type, sent_at AS processed_at, NULL::timestamptz AS faulted_at,
           0 AS attempts, created_at AS occurred_at, NULL AS locked_by, NULL::timestamptz AS locked_at,
           NULL::timestamptz AS locked_until
    FROM {table}
delivery:
  id: header:x-event-id
`

// writeValidTarget writes text as target.yaml in dir, with an executable
// bin/relay beside it, and returns the file's path.
func writeValidTarget(t *testing.T, dir, text string) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(dir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "bin", "relay"), []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "target.yaml")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// noProbe replaces the setup probe for the test with one that fails it if
// called.
func noProbe(t *testing.T) {
	t.Helper()
	saved := probeTarget
	t.Cleanup(func() { probeTarget = saved })
	probeTarget = func(context.Context, scenarios.RelayUnderTest, func(string)) error {
		t.Error("the setup probe ran")
		return nil
	}
}

// TestValidateAcceptsTheRepositorysTargets validates every target file of
// the repository: each is accepted with one line saying what it declares.
func TestValidateAcceptsTheRepositorysTargets(t *testing.T) {
	noProbe(t)
	files, _ := filepath.Glob("../../examples/*/target.yaml")
	if len(files) == 0 {
		t.Fatal("no example target files")
	}
	// The row-lock example's target names the binary `make build` writes;
	// a checkout that has not run it gets it built here.
	if bin := "../../.build/bin/rowlock-relay"; !executable(bin) {
		if out, err := exec.Command("go", "build", "-o", bin, "../../examples/rowlock").CombinedOutput(); err != nil {
			t.Fatalf("building the row-lock example's relay: %v\n%s", err, out)
		}
	}
	for _, f := range files {
		code, out, errOut := invoke(t, "validate", "--target", f)
		if code != exitOK || errOut != "" || strings.Count(out, "\n") != 1 || !strings.Contains(out, "is valid: relay ") {
			t.Errorf("validate %s: exit %d, want 0 and one line\nstdout: %s\nstderr: %s", f, code, out, errOut)
		}
	}
	path := writeValidTarget(t, t.TempDir(), validTarget)
	code, out, errOut := invoke(t, "validate", "--target", path)
	want := fmt.Sprintf("target orders (%s) is valid: relay command %s --poll 100ms with RELAY_POLL; capabilities parks,fenced,lease=5s; "+
		"stage 2 statements (:id :type :payload :occurred_at; :); rows give the 9 columns; delivery id header:x-event-id\n",
		path, filepath.Join(filepath.Dir(path), "bin", "relay"))
	if code != exitOK || out != want || errOut != "" {
		t.Errorf("exit %d\nstdout: %s\nwant:   %s\nstderr: %s", code, out, want, errOut)
	}
}

// TestValidateRefuses breaks the valid target one way at a time: each is
// refused with exit 2, naming the field, and nothing on stdout.
func TestValidateRefuses(t *testing.T) {
	noProbe(t)
	for _, c := range []struct{ name, from, to, want string }{
		{"unknown placeholder", "pg_notify('{channel}', '')", "pg_notify('{chan}', '')",
			"outbox.stage[1]: unknown placeholder {chan} (known: {table}, {schema}, {table_name}, {channel})"},
		{"unknown parameter", "VALUES (:id, :type, :payload, :occurred_at)", "VALUES (:id, :type, :body, :occurred_at)",
			"outbox.stage[0]: unknown parameter :body (known: :id, :type, :payload, :correlation_id, :occurred_at)"},
		{"missing rows column", "NULL::timestamptz AS locked_until", "NULL::timestamptz AS lease_until",
			"outbox.rows: the SELECT gives no column locked_until"},
		{"bad relay path", "command: ./bin/relay", "command: ./bin/no-such-relay",
			"relay.command: the program " + "%DIR%/bin/no-such-relay is not an executable file"},
		{"relay program not on PATH", "command: ./bin/relay", "command: no-such-relay-on-path",
			"relay.command: the program no-such-relay-on-path is not on PATH"},
		{"unknown field", "  env: {RELAY_POLL: 100ms}", "  environment: {RELAY_POLL: 100ms}",
			"relay.environment: unknown field (line 4; known here: image, command, env)"},
		{"bad image reference", "command: ./bin/relay --poll 100ms", "image: My/Relay", `relay.image: "My/Relay" is not an image reference`},
		{"bad capability", "parks,fenced,lease=5s", "parks,fenced,lease=soon", "lease=soon is not a positive duration"},
		{"bad locking style", "parks,fenced,lease=5s", "parks,locking=optimistic", "locking=optimistic is not lease, rowlock or none"},
		{"fenced without a lease", "parks,fenced,lease=5s", "parks,fenced,locking=rowlock",
			"fenced promises writes only under the relay's own unexpired lease, and it declares row locks held while publishing (locking=rowlock)"},
		{"two locking styles", "parks,fenced,lease=5s", "parks,fenced,lease=5s,locking=lease", "the locking style is given twice (lease=5s and locking=lease)"},
		{"outbox.no_leases", "  rows: |", "  no_leases: true\n  rows: |", "outbox.no_leases: unknown field (line 13; known here: migrate, stage, rows): the relay declares its locking style in capabilities"},
		{"bad delivery identity", "id: header:x-event-id", "id: property:x", "delivery.id: "},
	} {
		t.Run(c.name, func(t *testing.T) {
			text := strings.Replace(validTarget, c.from, c.to, 1)
			if text == validTarget {
				t.Fatalf("%q is not in the valid target", c.from)
			}
			dir := t.TempDir()
			path := writeValidTarget(t, dir, text)
			code, out, errOut := invoke(t, "validate", "--target", path)
			want := strings.ReplaceAll(c.want, "%DIR%", dir)
			if code != exitUsage || out != "" || !strings.Contains(errOut, "target file "+path+": 1 problem:\n  ") || !strings.Contains(errOut, want) {
				t.Errorf("exit %d, want 2 saying %q\nstdout: %s\nstderr: %s", code, want, out, errOut)
			}
		})
	}
}

// TestValidateReportsEveryProblem breaks the target four ways at once:
// all four are reported, in the order of the file.
func TestValidateReportsEveryProblem(t *testing.T) {
	noProbe(t)
	text := validTarget
	for from, to := range map[string]string{
		"command: ./bin/relay":              "command: ./bin/gone",
		"{channel}":                         "{chan}",
		":payload":                          ":body",
		"NULL::timestamptz AS locked_until": "NULL::timestamptz AS until",
	} {
		text = strings.Replace(text, from, to, 1)
	}
	code, _, errOut := invoke(t, "validate", "--target", writeValidTarget(t, t.TempDir(), text))
	if code != exitUsage || !strings.Contains(errOut, ": 4 problems:\n") {
		t.Fatalf("exit %d, want 2 with 4 problems\n%s", code, errOut)
	}
	last := -1
	for _, field := range []string{"relay.command", "outbox.stage[0]", "outbox.stage[1]", "outbox.rows"} {
		i := strings.Index(errOut, "\n  "+field+": ")
		if i < 0 || i < last {
			t.Errorf("%s is not reported after the problems before it:\n%s", field, errOut)
		}
		last = i
	}
}

// TestValidateReturningTheDatabasesID: a stage that ends in RETURNING the
// key the database gives the row needs no :id, and the line says what it
// returns; a RETURNING of two columns is refused, naming the statement.
func TestValidateReturningTheDatabasesID(t *testing.T) {
	noProbe(t)
	text := strings.Replace(validTarget, "event_id uuid PRIMARY KEY", "event_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY", 1)
	text = strings.Replace(text, "(event_id, kind, body, created_at) VALUES (:id, :type, :payload, :occurred_at)",
		"(kind, body, created_at) VALUES (:type, :payload, :occurred_at) RETURNING event_id", 1)
	code, out, errOut := invoke(t, "validate", "--target", writeValidTarget(t, t.TempDir(), text))
	if code != exitOK || !strings.Contains(out, "stage 2 statements (:type :payload :occurred_at; :) returning the row's id event_id; rows give") {
		t.Errorf("exit %d, want 0 saying what the stage returns\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	two := strings.Replace(text, "RETURNING event_id", "RETURNING event_id, kind", 1)
	code, out, errOut = invoke(t, "validate", "--target", writeValidTarget(t, t.TempDir(), two))
	if code != exitUsage || out != "" || !strings.Contains(errOut, "outbox.stage[0]: RETURNING gives 2 columns (event_id, kind); it must give one") {
		t.Errorf("exit %d, want 2 refusing two columns\nstdout: %s\nstderr: %s", code, out, errOut)
	}
}

// TestValidateSaysWhatItCannotTell: a rows SELECT whose select list has
// a * is not refused, and the command says it could not check it.
func TestValidateSaysWhatItCannotTell(t *testing.T) {
	noProbe(t)
	text := strings.Replace(validTarget, "SELECT event_id AS id,", "SELECT *, event_id AS id,", 1)
	text = strings.Replace(text, "NULL::timestamptz AS locked_until", "NULL::timestamptz AS until", 1)
	code, out, errOut := invoke(t, "validate", "--target", writeValidTarget(t, t.TempDir(), text))
	if code != exitOK || !strings.Contains(out, "rows unchecked without a database") ||
		!strings.Contains(errOut, "outbox.rows: cannot tell") || !strings.Contains(errOut, "item 1 (*)") || !strings.Contains(errOut, "locked_until") {
		t.Errorf("exit %d, want 0 saying what it could not tell\nstdout: %s\nstderr: %s", code, out, errOut)
	}
}

// TestTargetByAbsolutePath gives a target file whose command's program is
// relative by its absolute path, then by a relative one: validate accepts
// both, and run hands the runner the program where it is (an absolute
// target path used to make it .//abs/...).
func TestTargetByAbsolutePath(t *testing.T) {
	noProbe(t)
	root := t.TempDir()
	path := writeValidTarget(t, filepath.Join(root, "targets"), validTarget)
	prog := filepath.Join(root, "targets", "bin", "relay")
	for _, p := range []string{path, filepath.Join("targets", "target.yaml")} {
		if p != path {
			t.Chdir(root)
			prog = "./targets/bin/relay"
		}
		if code, out, errOut := invoke(t, "validate", "--target", p); code != exitOK || !strings.Contains(out, "relay command "+prog+" --poll") {
			t.Errorf("validate --target %s: exit %d, want 0 with the program %s\nstdout: %s\nstderr: %s", p, code, prog, out, errOut)
		}
		var specs []runSpec
		d := capturingRunner(testDeps(), &specs)
		d.lookPath = exec.LookPath
		code, out, errOut := invokeWith(t, d, "run", "--scenario", "broker-down", "--seed", "1", "--target", p)
		if code != exitOK || len(specs) != 1 || specs[0].Relay.Command[0] != prog {
			t.Errorf("run --target %s: exit %d, %d specs, want the program %s\nstdout: %s\nstderr: %s", p, code, len(specs), prog, out, errOut)
		}
	}
}

// TestValidateProbe covers --probe without containers: a file with a
// problem is refused before the Docker engine is asked; without an engine,
// or without the relay's image, it says so and starts nothing; the
// probe's mapping error and an environment that cannot start exit 2
// naming what failed; a probe that passes exits 0.
func TestValidateProbe(t *testing.T) {
	path := writeValidTarget(t, t.TempDir(), validTarget)
	var probed []scenarios.RelayUnderTest
	probe := func(err error) {
		probeTarget = func(_ context.Context, u scenarios.RelayUnderTest, status func(string)) error {
			probed = append(probed, u)
			status("event staged")
			return err
		}
	}
	saved := probeTarget
	t.Cleanup(func() { probeTarget = saved })

	probe(nil)
	asked := false
	d := testDeps()
	d.dockerAvailable = func(context.Context) error { asked = true; return nil }
	bad := writeValidTarget(t, t.TempDir(), strings.Replace(validTarget, "{channel}", "{chan}", 1))
	if code, _, errOut := invokeWith(t, d, "validate", "--probe", "--target", bad); code != exitUsage || asked || !strings.Contains(errOut, "unknown placeholder {chan}") {
		t.Errorf("a bad file with --probe: exit %d, engine asked %v\n%s", code, asked, errOut)
	}

	code, out, errOut := invokeWith(t, noDocker(testDeps()), "validate", "--target", path, "--probe")
	if code != exitUsage || out != "" || !strings.Contains(errOut, "the Docker engine cannot be reached") || !strings.Contains(errOut, "validate without --probe") {
		t.Errorf("--probe without Docker: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	image := writeValidTarget(t, t.TempDir(), strings.Replace(validTarget, "command: ./bin/relay --poll 100ms", "image: my/relay:1.2", 1))
	d = withDocker(testDeps())
	d.imageExists = func(context.Context, string) (bool, error) { return false, nil }
	if code, _, errOut := invokeWith(t, d, "validate", "--target", image, "--probe"); code != exitUsage || !strings.Contains(errOut, "the relay image my/relay:1.2 is not in the local Docker engine") {
		t.Errorf("--probe without the relay's image: exit %d\n%s", code, errOut)
	}
	if len(probed) != 0 {
		t.Fatalf("the probe ran %d times where it could not", len(probed))
	}

	d = withDocker(testDeps())
	probe(fmt.Errorf("%w: outbox.rows: the rows view's id is not the id the stage was given", scenarios.ErrMapping))
	code, out, errOut = invokeWith(t, d, "validate", "--target", path, "--probe")
	if code != exitUsage || out != "" || !strings.Contains(errOut, "probe: event staged\n") ||
		!strings.Contains(errOut, "target file "+path+": the setup probe on containers: the event identity does not round-trip: outbox.rows: the rows view's id") {
		t.Errorf("a mapping that does not round-trip: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	probe(fmt.Errorf("starting the environment: %w", testenv.ErrImageNotFound))
	if code, _, errOut := invokeWith(t, d, "validate", "--target", path, "--probe"); code != exitUsage || !strings.Contains(errOut, "make images") {
		t.Errorf("an environment that cannot start: exit %d\n%s", code, errOut)
	}
	probe(errors.New("setup probe: beginning the business transaction: conn closed"))
	if code, _, errOut := invokeWith(t, d, "validate", "--target", path, "--probe"); code != exitUsage || !strings.Contains(errOut, "the setup probe: setup probe: beginning") {
		t.Errorf("a probe that could not run: exit %d\n%s", code, errOut)
	}
	probe(nil)
	code, out, errOut = invokeWith(t, d, "validate", "--target", path, "--probe")
	if code != exitOK || !strings.Contains(out, "is valid: relay command ") || !strings.HasSuffix(out, "; the setup probe on containers found no disagreement\n") {
		t.Errorf("a probe that passes: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	if len(probed) != 4 || probed[3].Name != "orders" || probed[3].Identity.Header != "x-event-id" || !probed[3].Outbox.Own() {
		t.Errorf("the probe got %d relays, the last %+v", len(probed), probed[len(probed)-1])
	}
}

func TestValidateUsage(t *testing.T) {
	for _, args := range [][]string{{"validate"}, {"validate", "--target"}, {"validate", "--target", "x.yaml", "extra"}, {"validate", "--probe"}} {
		if code, _, errOut := invoke(t, args...); code != exitUsage || errOut == "" {
			t.Errorf("%q: exit %d, want 2 saying why\n%s", args, code, errOut)
		}
	}
	if code, _, errOut := invoke(t, "validate", "--target", filepath.Join(t.TempDir(), "missing.yaml")); code != exitUsage || !strings.Contains(errOut, "missing.yaml") {
		t.Errorf("a missing file: exit %d\n%s", code, errOut)
	}
}

// executable reports whether path is a file with an execute bit.
func executable(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode().IsRegular() && st.Mode().Perm()&0o111 != 0
}
