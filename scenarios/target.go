package scenarios

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.yaml.in/yaml/v3"

	"github.com/outboxlab/outboxlab/consumer"
	"github.com/outboxlab/outboxlab/contract"
	"github.com/outboxlab/outboxlab/fixture"
	"github.com/outboxlab/outboxlab/internal/argv"
	"github.com/outboxlab/outboxlab/outbox"
)

// TargetFile is a target file as `outboxlab run --target FILE` reads it
// (YAML, or JSON, which YAML reads too): an outbox of its own, with its
// own table, columns and staging statement, and the relay that publishes
// from it. docs/targets.md is its reference.
//
//	name: pyrelay
//	relay:
//	  image: outboxlab/pyrelay:dev      # or command: ./bin/my-relay --flag
//	  env: {PYRELAY_POLL: 200ms}
//	capabilities: parks,fenced,lease=4s
//	outbox:
//	  migrate: |
//	    CREATE TABLE {table} (event_id uuid PRIMARY KEY, kind text NOT NULL, ...);
//	  stage: |
//	    INSERT INTO {table} (event_id, kind, body) VALUES (:id, :type, :payload)
//	  rows: |
//	    SELECT event_id AS id, kind AS message_type, ... FROM {table}
//	delivery:
//	  id: message_id                    # or header:NAME, body:FIELD
type TargetFile struct {
	// Name names the target in reports; default the file's name.
	Name  string      `yaml:"name"`
	Relay TargetRelay `yaml:"relay"`
	// Capabilities is what the relay promises beyond the core guarantee,
	// its locking style included, as --capabilities takes it
	// (contract.Parse; default none).
	Capabilities string        `yaml:"capabilities"`
	Outbox       TargetOutbox  `yaml:"outbox"`
	Delivery     TargetDeliver `yaml:"delivery"`
	// Next, when set, is the relay's next version, for the
	// rolling-upgrade scenario: the replicas start as Relay on the outbox
	// that Outbox.Migrate creates, Next.Migrate runs while they drain,
	// and Next.Relay replaces them one by one.
	Next *TargetNext `yaml:"next"`
}

// TargetNext is a target's next version: how its relay starts, as
// TargetRelay, and the SQL that migrates the outbox to it, with the
// placeholders of TargetOutbox. The SQL runs as one query string while
// producers stage and relays claim and mark (so in one implicit
// transaction); empty migrates nothing.
type TargetNext struct {
	Relay   TargetRelay `yaml:"relay"`
	Migrate string      `yaml:"migrate"`
}

// TargetRelay is how a replica of the target's relay starts: an image on
// the harness's network, or a command on the host (a relative program
// path is relative to the target file's directory), with the contract's
// OUTBOX_* variables and Env in its environment.
type TargetRelay struct {
	Image string `yaml:"image"`
	// Command is split as a shell splits words (quotes included); no
	// shell runs it.
	Command string            `yaml:"command"`
	Env     map[string]string `yaml:"env"`
}

// TargetOutbox is the target's outbox schema in SQL. Every statement may
// name the context's outbox with placeholders: {table} (schema-qualified
// and quoted), {schema} (quoted), {table_name} (the bare name: lower-case
// letters, digits and _, for derived names such as an index's) and
// {channel} (a LISTEN/NOTIFY channel name derived from the table, for
// pg_notify('{channel}', ”)).
type TargetOutbox struct {
	// Migrate creates the outbox (several statements may follow one
	// another).
	Migrate string `yaml:"migrate"`
	// Stage is the statement, or list of statements, that stages one
	// event inside the business transaction, with named parameters :id
	// (uuid), :type (text), :payload (the JSON body as text),
	// :correlation_id (uuid or NULL) and :occurred_at (timestamptz: the
	// event's time, or the transaction's now() when it has none). One
	// statement may end in RETURNING with one column: the id the database
	// gave the event's row (a bigint identity, say), which the rows view
	// then shows as id and deliveries carry; :id is then optional.
	Stage stringList `yaml:"stage"`
	// Rows is a SELECT that shows the outbox's rows in the harness's
	// columns: id, message_type, processed_at, faulted_at, attempts,
	// occurred_at, locked_by, locked_at, locked_until (NULL of its type
	// where the outbox keeps no such column).
	Rows string `yaml:"rows"`
}

// TargetDeliver is how a delivery names its event.
type TargetDeliver struct {
	// ID is message_id (default), header:NAME or body:FIELD.
	ID string `yaml:"id"`
}

// stringList reads a YAML string or list of strings.
type stringList []string

func (l *stringList) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		*l = []string{n.Value}
		return nil
	}
	var s []string
	if err := n.Decode(&s); err != nil {
		// A type error, so that the decoder goes on and reports the
		// file's other problems too.
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: want a statement or a list of statements", n.Line)}}
	}
	*l = s
	return nil
}

// stageParams are the named parameters of a staging statement, in the
// order of their values (stageArgs).
var stageParams = []string{"id", "type", "payload", "correlation_id", "occurred_at"}

// TargetError is a refused target file: every problem found in it, each
// naming its field.
type TargetError struct {
	// File is the target file's path; empty for the text ParseTarget
	// reads.
	File string
	// Problems are the problems found, in the order of the file's fields.
	Problems []error
}

func (e *TargetError) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString("target file " + e.File + ": ")
	}
	if len(e.Problems) == 1 {
		return b.String() + e.Problems[0].Error()
	}
	fmt.Fprintf(&b, "%d problems:", len(e.Problems))
	for _, p := range e.Problems {
		b.WriteString("\n  " + strings.ReplaceAll(p.Error(), "\n", "\n  "))
	}
	return b.String()
}

// Unwrap returns the problems.
func (e *TargetError) Unwrap() []error { return e.Problems }

// TargetCheck is what CheckTarget found in a target file.
type TargetCheck struct {
	// Relay is the relay under test the file describes, as LoadTarget
	// returns it.
	Relay RelayUnderTest
	// Stage lists, for each statement of outbox.stage, the named
	// parameters it uses, in the order they first appear.
	Stage [][]string
	// Returns is the expression of the RETURNING that ends a statement of
	// outbox.stage, as written: the id the database gives the event's
	// row. Empty when the stage returns nothing, and the rows keep :id.
	Returns string
	// Rows lists the columns the SELECT of outbox.rows gives, as far as
	// its text names them.
	Rows []string
	// RowsUnsure says why the text of outbox.rows cannot tell whether it
	// gives every column of fixture.RowColumns; empty when it can tell, and then
	// it gives them all (else CheckTarget refuses the file). PostgreSQL
	// tells when a run sets up.
	RowsUnsure string
}

// LoadTarget reads the target file at path into the relay under test it
// describes. It returns every problem it finds, each naming its field,
// in a *TargetError; what only PostgreSQL can tell (the SQL itself, the
// columns of outbox.rows) is left to the run's setup.
func LoadTarget(path string) (RelayUnderTest, error) {
	c, problems, err := readTarget(path)
	if err != nil {
		return RelayUnderTest{}, err
	}
	if len(problems) > 0 {
		return RelayUnderTest{}, &TargetError{File: path, Problems: problems}
	}
	return c.Relay, nil
}

// CheckTarget reads the target file at path as LoadTarget does, and
// checks more without a database: that some statement of outbox.stage
// keeps the event's id (:id) or returns the one the database gives its
// row (RETURNING), and that the SELECT of outbox.rows gives
// every column of fixture.RowColumns, as far as its text tells (the columns
// named with AS, and bare column names, of its first select list;
// TargetCheck.RowsUnsure says when the text cannot tell). It returns
// every problem it finds in a *TargetError. Whether a command's program
// exists is left to the caller, which resolves it as it runs it.
func CheckTarget(path string) (TargetCheck, error) {
	c, problems, err := readTarget(path)
	if err != nil {
		return TargetCheck{}, err
	}
	problems = append(problems, c.strict()...)
	if len(problems) > 0 {
		return c, &TargetError{File: path, Problems: problems}
	}
	return c, nil
}

// readTarget reads and parses the target file at path, naming the
// relay after the file when the file gives no name. err is an error
// reading the file; problems are what parsing found.
func readTarget(path string) (c TargetCheck, problems []error, err error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return c, nil, fmt.Errorf("target file: %w", err)
	}
	c, problems = parseTarget(data, filepath.Dir(path))
	if c.Relay.Name == "" {
		c.Relay.Name = strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
		c.Relay.Outbox.Name = c.Relay.Name
	}
	c.Relay.Replay = "--target " + argv.QuoteArg(path)
	return c, problems, nil
}

// ParseTarget reads a target file's text; dir is the file's directory,
// which a relative command path is taken relative to. It returns every
// problem it finds in a *TargetError.
func ParseTarget(data []byte, dir string) (RelayUnderTest, error) {
	c, problems := parseTarget(data, dir)
	if len(problems) > 0 {
		return c.Relay, &TargetError{Problems: problems}
	}
	return c.Relay, nil
}

// parseTarget reads a target file's text and checks each field, going
// on past a problem so as to report them all.
func parseTarget(data []byte, dir string) (TargetCheck, []error) {
	var c TargetCheck
	f, problems, ok := decodeTarget(data)
	if !ok {
		return c, problems
	}
	u := RelayUnderTest{Name: f.Name, Env: f.Relay.Env}
	var err error
	if u.Image, u.Command, err = f.Relay.resolve(dir); err != nil {
		problems = append(problems, err)
	}
	for _, k := range slices.Sorted(maps.Keys(f.Relay.Env)) {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			problems = append(problems, fmt.Errorf("relay.env: %q is not a variable name", k))
		}
	}
	if f.Capabilities != "" {
		if u.Promises, err = contract.Parse(f.Capabilities); err != nil {
			problems = append(problems, err)
		}
	}
	// A field the YAML could not give is not missing too.
	undecoded := map[string]bool{}
	for _, p := range problems {
		if fe, ok := p.(*fieldError); ok {
			undecoded[fe.field] = true
		}
	}
	var errs []error
	u.Outbox, c.Stage, c.Returns, errs = f.Outbox.schema(f.Name, undecoded)
	problems = append(problems, errs...)
	if u.Identity, err = consumer.ParseIdentity(f.Delivery.ID); err != nil {
		problems = append(problems, fmt.Errorf("delivery.id: %w", err))
	}
	if f.Next != nil {
		up, errs := f.Next.upgrade(dir)
		problems = append(problems, errs...)
		u.Upgrade = up
	}
	c.Relay = u
	c.Rows, c.RowsUnsure = rowsColumns(f.Outbox.Rows)
	return c, problems
}

// upgrade reads the next version of a target file into the rolling
// upgrade from the target's relay to it.
func (n TargetNext) upgrade(dir string) (*Upgrade, []error) {
	var problems []error
	image, command, err := n.Relay.resolve(dir)
	if err != nil {
		problems = append(problems, fmt.Errorf("next.%w", err))
	}
	for _, k := range slices.Sorted(maps.Keys(n.Relay.Env)) {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			problems = append(problems, fmt.Errorf("next.relay.env: %q is not a variable name", k))
		}
	}
	if err := checkPlaceholders(n.Migrate); err != nil {
		problems = append(problems, fmt.Errorf("next.migrate: %w", err))
	}
	if len(problems) > 0 {
		return nil, problems
	}
	name := image
	if name == "" {
		name = strings.Join(command, " ")
	}
	name = "next (" + name + ")"
	sql := n.Migrate
	return &Upgrade{
		To: Version{Name: name, Image: image, Command: command, Env: n.Relay.Env},
		Migrate: func(ctx context.Context, db *pgxpool.Pool, table outbox.Table) error {
			if strings.TrimSpace(sql) == "" {
				return nil
			}
			_, err := db.Exec(ctx, expand(sql, table))
			return err
		},
	}, nil
}

// strict returns what CheckTarget refuses beyond ParseTarget: a stage
// that neither uses :id nor returns the database's id, and a rows SELECT
// whose text shows that a column of fixture.RowColumns is missing or given twice
// (of other names PostgreSQL tells, since the text may name them
// otherwise than it does).
func (c TargetCheck) strict() []error {
	var problems []error
	if len(c.Stage) > 0 && c.Returns == "" && !slices.ContainsFunc(c.Stage, func(ps []string) bool { return slices.Contains(ps, "id") }) {
		problems = append(problems, errors.New("outbox.stage: no statement uses :id, so no row can keep the event's id, by which the harness follows every event (the rows view must show it as id), and none ends in RETURNING the id the database gives the row instead"))
	}
	var twice []string
	for i, n := range c.Rows {
		if slices.Contains(fixture.RowColumns, n) && slices.Index(c.Rows, n) != i && !slices.Contains(twice, n) {
			twice = append(twice, n)
		}
	}
	if len(twice) > 0 {
		problems = append(problems, fmt.Errorf("outbox.rows: the SELECT gives %s more than once (a view takes each column name once)", strings.Join(twice, ", ")))
	}
	if c.RowsUnsure == "" && len(c.Rows) > 0 {
		var missing []string
		for _, n := range fixture.RowColumns {
			if !slices.Contains(c.Rows, n) {
				missing = append(missing, n)
			}
		}
		if len(missing) > 0 {
			problems = append(problems, fmt.Errorf("outbox.rows: the SELECT gives no column %s (it gives %s); the harness reads %s by name: give each, NULL of its type where the outbox keeps no such column (0 for attempts)",
				strings.Join(missing, ", "), strings.Join(c.Rows, ", "), strings.Join(fixture.RowColumns, ", ")))
		}
	}
	return problems
}

// decodeTarget decodes a target file's YAML, refusing unknown fields. A
// problem of syntax stops it (ok false); the problems of type and the
// unknown fields are each reported with the field they are in, and the
// fields that decoded are still checked.
func decodeTarget(data []byte) (f TargetFile, problems []error, ok bool) {
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return f, []error{fmt.Errorf("reading the YAML: %w", err)}, false
	}
	if root.Kind == 0 {
		return f, []error{errors.New("empty: a target file gives at least relay and outbox")}, false
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	err := dec.Decode(&f)
	var te *yaml.TypeError
	switch {
	case errors.As(err, &te):
		for _, m := range te.Errors {
			problems = append(problems, yamlProblem(m, &root))
		}
	case err != nil:
		return f, []error{fmt.Errorf("reading the YAML: %w", err)}, false
	}
	if err := dec.Decode(new(yaml.Node)); !errors.Is(err, io.EOF) {
		problems = append(problems, errors.New("a second YAML document (after ---): a target file is one document"))
	}
	return f, problems, true
}

// targetSections are the parts of a target file, by the Go type the YAML
// decoder names in its errors, with their field paths.
var targetSections = map[string]struct {
	path string
	typ  reflect.Type
}{
	"scenarios.TargetFile":    {"", reflect.TypeFor[TargetFile]()},
	"scenarios.TargetRelay":   {"relay", reflect.TypeFor[TargetRelay]()},
	"scenarios.TargetOutbox":  {"outbox", reflect.TypeFor[TargetOutbox]()},
	"scenarios.TargetDeliver": {"delivery", reflect.TypeFor[TargetDeliver]()},
}

var (
	yamlUnknownField = regexp.MustCompile(`^line (\d+): field (.+) not found in type (\S+)$`)
	yamlLine         = regexp.MustCompile("^line (\\d+): (.*?)(?: `([^`]*)`.*)?$")
)

// goneFields say what took the place of a field target files no longer
// have.
var goneFields = map[string]string{
	"outbox.no_leases": "the relay declares its locking style in capabilities instead (locking=rowlock for row locks held while publishing, locking=none for no lock of a row)",
}

// fieldError is a problem of one field of a target file.
type fieldError struct {
	field string
	err   error
}

func (e *fieldError) Error() string { return e.err.Error() }
func (e *fieldError) Unwrap() error { return e.err }

// yamlProblem rewrites a YAML type error of a target file to name the
// field it is in (the decoder names Go types and lines), as a
// *fieldError when it can tell the field.
func yamlProblem(msg string, root *yaml.Node) error {
	if m := yamlUnknownField.FindStringSubmatch(msg); m != nil {
		if sec, ok := targetSections[m[3]]; ok {
			field := m[2]
			if sec.path != "" {
				field = sec.path + "." + field
			}
			var known []string
			for i := range sec.typ.NumField() {
				name, _, _ := strings.Cut(sec.typ.Field(i).Tag.Get("yaml"), ",")
				known = append(known, name)
			}
			hint := ""
			if h, ok := goneFields[field]; ok {
				hint = ": " + h
			}
			return &fieldError{field, fmt.Errorf("%s: unknown field (line %s; known here: %s)%s", field, m[1], strings.Join(known, ", "), hint)}
		}
	}
	m := yamlLine.FindStringSubmatch(msg)
	if m == nil {
		return errors.New(msg)
	}
	line, _ := strconv.Atoi(m[1])
	var at []string // the fields whose value is on that line
	var walk func(n *yaml.Node, path string)
	walk = func(n *yaml.Node, path string) {
		switch n.Kind {
		case yaml.DocumentNode:
			for _, c := range n.Content {
				walk(c, path)
			}
		case yaml.MappingNode:
			if n.Line == line && m[3] == "" {
				at = append(at, path)
			}
			for i := 0; i+1 < len(n.Content); i += 2 {
				p := n.Content[i].Value
				if path != "" {
					p = path + "." + p
				}
				walk(n.Content[i+1], p)
			}
		case yaml.SequenceNode:
			if n.Line == line && m[3] == "" {
				at = append(at, path)
			}
			for i, c := range n.Content {
				walk(c, fmt.Sprintf("%s[%d]", path, i))
			}
		default:
			if n.Line == line && m[3] != "" && strings.HasPrefix(n.Value, strings.TrimSuffix(m[3], "...")) {
				at = append(at, path)
			}
		}
	}
	walk(root, "")
	// On a line of flow mappings ({a: {b: c}}), the innermost field.
	all := slices.Clone(at)
	at = slices.DeleteFunc(at, func(p string) bool {
		return slices.ContainsFunc(all, func(q string) bool { return strings.HasPrefix(q, p+".") || strings.HasPrefix(q, p+"[") })
	})
	if len(at) == 1 && at[0] != "" {
		return &fieldError{at[0], fmt.Errorf("%s: %s (line %d)", at[0], msg[len("line ")+len(m[1])+len(": "):], line)}
	}
	return errors.New(msg)
}

// resolve returns the relay's image or command, a relative program path
// taken relative to dir.
func (r TargetRelay) resolve(dir string) (image string, command []string, err error) {
	switch {
	case r.Image != "" && r.Command != "":
		return "", nil, errors.New("relay: give image or command, not both")
	case r.Image != "":
		if err := checkImageRef(r.Image); err != nil {
			return "", nil, fmt.Errorf("relay.image: %w", err)
		}
		return r.Image, nil, nil
	case r.Command != "":
		args, err := argv.SplitCommand(r.Command)
		if err != nil {
			return "", nil, fmt.Errorf("relay.command: %w", err)
		}
		if len(args) == 0 || args[0] == "" {
			return "", nil, errors.New("relay.command: empty")
		}
		args[0] = programPath(dir, args[0])
		return "", args, nil
	}
	return "", nil, errors.New("relay: give image (a relay image) or command (a relay run on the host)")
}

// programPath is where a target file in dir finds the program of its
// command: a relative path (one that holds a slash) is taken relative to
// dir, and stays absolute when dir is, or else holds a slash, so that it
// is never looked up on PATH; an absolute path, or a name to look up on
// PATH, is kept as it is.
func programPath(dir, prog string) string {
	if !strings.Contains(prog, "/") || filepath.IsAbs(prog) {
		return prog
	}
	p := filepath.Join(dir, prog)
	if filepath.IsAbs(p) || strings.HasPrefix(p, "../") {
		return p
	}
	return "./" + p
}

// imageRef is the grammar of an image reference: [HOST[:PORT]/]PATH
// [:TAG][@DIGEST], the path in lower case.
var imageRef = func() *regexp.Regexp {
	const (
		domainPart = `(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])`
		host       = `(?:` + domainPart + `(?:\.` + domainPart + `)*|\[[a-fA-F0-9:]+\])`
		pathPart   = `[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*`
		tag        = `[\w][\w.-]{0,127}`
		digest     = `[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}`
	)
	return regexp.MustCompile(`^((?:` + host + `(?::[0-9]+)?/)?` + pathPart + `(?:/` + pathPart + `)*)(?::` + tag + `)?(?:@` + digest + `)?$`)
}()

// checkImageRef refuses what is not an image reference.
func checkImageRef(ref string) error {
	m := imageRef.FindStringSubmatch(ref)
	if m == nil || len(m[1]) > 255 {
		return fmt.Errorf("%q is not an image reference ([HOST[:PORT]/]NAME[:TAG][@DIGEST], the name in lower case, such as my/relay:1.2)", ref)
	}
	return nil
}

// schema turns the SQL of a target file into an outbox schema, with the
// named parameters of each stage statement, the expression of the
// RETURNING that ends one of them ("" for none), and every problem found;
// a field in undecoded, which the YAML could not give, is not reported
// missing.
func (o TargetOutbox) schema(name string, undecoded map[string]bool) (outbox.Schema, [][]string, string, []error) {
	var problems []error
	var missing []string
	for _, f := range []struct {
		name string
		set  bool
	}{{"outbox.migrate", strings.TrimSpace(o.Migrate) != ""}, {"outbox.stage", len(o.Stage) > 0}, {"outbox.rows", strings.TrimSpace(o.Rows) != ""}} {
		if !f.set && !undecoded[f.name] {
			missing = append(missing, f.name)
		}
	}
	if len(missing) > 0 {
		problems = append(problems, fmt.Errorf("%s: missing (a target names its own outbox's SQL; a relay that reads outboxlab's own table needs no target file: run it with --relay image:REF or cmd:COMMAND)", strings.Join(missing, ", ")))
	}
	if err := checkPlaceholders(o.Migrate); err != nil {
		problems = append(problems, fmt.Errorf("outbox.migrate: %w", err))
	}
	type stmt struct {
		sql  string
		args []int // indexes into stageParams, one per $n
		// returns: the statement ends in RETURNING the row's id, which
		// sql gives as text.
		returns bool
	}
	var (
		stage   []stmt
		params  [][]string
		returns string
		retIn   = -1
	)
	for i, s := range o.Stage {
		if strings.TrimSpace(s) == "" {
			problems = append(problems, fmt.Errorf("outbox.stage[%d]: empty", i))
			continue
		}
		if err := checkPlaceholders(s); err != nil {
			problems = append(problems, fmt.Errorf("outbox.stage[%d]: %w", i, err))
		}
		sql, args, err := bindParams(s, stageParams)
		var used []string
		for _, a := range args {
			used = append(used, stageParams[a])
		}
		params = append(params, used)
		if err != nil {
			problems = append(problems, fmt.Errorf("outbox.stage[%d]: %w", i, err))
			continue
		}
		st := stmt{sql: sql, args: args}
		// Read as written, for the problems and the expression's text;
		// the bound statement is the one rewritten.
		ret, ok, err := stageReturning(s)
		switch {
		case err != nil:
			problems = append(problems, fmt.Errorf("outbox.stage[%d]: %w", i, err))
			continue
		case ok && retIn >= 0:
			problems = append(problems, fmt.Errorf("outbox.stage[%d]: ends in RETURNING, as outbox.stage[%d] does: one statement returns the id the database gives the event's row", i, retIn))
			continue
		case ok:
			bound, bok, berr := stageReturning(sql)
			if !bok || berr != nil {
				problems = append(problems, fmt.Errorf("outbox.stage[%d]: its RETURNING cannot be read once its parameters are bound", i))
				continue
			}
			st.sql, st.returns, returns, retIn = bound.text(sql), true, ret.expr, i
		}
		stage = append(stage, st)
	}
	if err := checkPlaceholders(o.Rows); err != nil {
		problems = append(problems, fmt.Errorf("outbox.rows: %w", err))
	}
	if len(problems) > 0 {
		return outbox.Schema{Name: name}, params, returns, problems
	}
	return outbox.Schema{
		Name: name,
		Migrate: func(ctx context.Context, db *pgxpool.Pool, table outbox.Table) error {
			_, err := db.Exec(ctx, expand(o.Migrate, table))
			return err
		},
		Stage: func(ctx context.Context, tx pgx.Tx, table outbox.Table, e outbox.Event) (string, error) {
			vals := stageValues(e)
			var dbID string
			for i, s := range stage {
				args := make([]any, len(s.args))
				for k, p := range s.args {
					args[k] = vals[p]
				}
				if !s.returns {
					if _, err := tx.Exec(ctx, expand(s.sql, table), args...); err != nil {
						return "", fmt.Errorf("staging event %s (outbox.stage[%d]): %w", e.ID, i, err)
					}
					continue
				}
				rows, err := tx.Query(ctx, expand(s.sql, table), args...)
				if err != nil {
					return "", fmt.Errorf("staging event %s (outbox.stage[%d]): %w", e.ID, i, err)
				}
				got, err := pgx.CollectRows(rows, pgx.RowTo[*string])
				switch {
				case err != nil:
					return "", fmt.Errorf("staging event %s (outbox.stage[%d]): %w", e.ID, i, err)
				case len(got) != 1:
					return "", fmt.Errorf("staging event %s (outbox.stage[%d]): RETURNING %s gave %d rows; it must give one, the id of the event's row", e.ID, i, returns, len(got))
				case got[0] == nil:
					return "", fmt.Errorf("staging event %s (outbox.stage[%d]): RETURNING %s gave NULL, not the id of the event's row", e.ID, i, returns)
				}
				dbID = *got[0]
			}
			return dbID, nil
		},
		ReturnsID: retIn >= 0,
		Rows:      func(table outbox.Table) string { return expand(o.Rows, table) },
	}, params, returns, nil
}

// stageClause is the RETURNING clause at the top level of a stage
// statement.
type stageClause struct {
	// at is where RETURNING starts; from and to bound the text of its
	// expression, an alias left out.
	at, from, to int
	// expr is the expression's text.
	expr string
}

// text is sql with the clause rewritten to give its expression as text,
// the form the harness keeps the database's ids in.
func (c stageClause) text(sql string) string {
	return sql[:c.at] + "RETURNING (" + c.expr + ")::text" + sql[c.to:]
}

// stageReturning finds the RETURNING at the top level of a stage
// statement: ok is false when there is none, and err refuses one that does
// not give exactly one column.
func stageReturning(sql string) (c stageClause, ok bool, err error) {
	toks, at, read := sqlTokensAt(sql)
	if !read {
		return c, false, nil // bindParams refuses what it cannot read
	}
	start := topLevel(toks, "returning")
	if start < 0 {
		return c, false, nil
	}
	c.at = at[start].from
	end := len(toks)
	var items [][]sqlToken
	var cur []sqlToken
	first := start + 1
	depth := 0
	for i := start + 1; i < len(toks); i++ {
		t := toks[i]
		depth += t.nesting()
		if depth == 0 && t.nesting() == 0 && (t.is('p', ";") || t.is('p', ",")) {
			items = append(items, cur)
			cur = nil
			if t.is('p', ";") {
				end = i
				break
			}
			continue
		}
		cur = append(cur, t)
	}
	if end == len(toks) {
		items = append(items, cur)
	}
	var texts []string
	for _, it := range items {
		texts = append(texts, tokensText(it))
	}
	switch {
	case len(items) == 1 && len(items[0]) == 0:
		return c, true, errors.New("RETURNING gives no column; it must give one, the id the database gives the event's row")
	case len(items) > 1:
		return c, true, fmt.Errorf("RETURNING gives %d columns (%s); it must give one, the id the database gives the event's row, which the rows view shows as id and deliveries carry",
			len(items), strings.Join(texts, ", "))
	}
	item := items[0]
	if last := item[len(item)-1]; last.is('p', "*") {
		return c, true, fmt.Errorf("RETURNING %s gives every column of the row; it must give one, the id the database gives the event's row", texts[0])
	}
	// Leave out an alias: the harness names the column itself.
	n := len(item)
	switch {
	case n >= 3 && item[n-2].is('w', "as"):
		n -= 2
	case n >= 2 && (item[n-1].kind == 'w' && item[n-1].text != "isnull" && item[n-1].text != "notnull" || item[n-1].kind == 'q') && primaryEnd(item[:n-1]) == n-1:
		n--
	}
	c.from, c.to = at[first].from, at[first+n-1].to
	c.expr = sql[c.from:c.to]
	return c, true, nil
}

// stageValues are an event's values of stageParams.
func stageValues(e outbox.Event) []any {
	var occurred any
	if !e.OccurredAt.IsZero() {
		occurred = e.OccurredAt.UTC().Truncate(time.Microsecond)
	}
	var corr any
	if e.CorrelationID != nil {
		corr = *e.CorrelationID
	}
	return []any{e.ID, e.Type, string(e.Payload), corr, occurred}
}

// placeholders are the names a target's SQL may use for its outbox.
var placeholders = []string{"table", "schema", "table_name", "channel"}

// expand fills a statement's placeholders for table.
func expand(sql string, table outbox.Table) string {
	return strings.NewReplacer(
		"{table}", table.Ident(),
		"{schema}", pgx.Identifier{table.Schema()}.Sanitize(),
		"{table_name}", table.Name(),
		"{channel}", table.Channel(),
	).Replace(sql)
}

// checkPlaceholders refuses a {name} that is not a placeholder, which
// would otherwise reach PostgreSQL as a syntax error far from its cause.
// It names every unknown one.
func checkPlaceholders(sql string) error {
	var unknown []string
	for rest := sql; ; {
		i := strings.IndexByte(rest, '{')
		if i < 0 {
			break
		}
		j := strings.IndexByte(rest[i:], '}')
		if j < 0 {
			break
		}
		name := rest[i+1 : i+j]
		if isWord(name) && !slices.Contains(placeholders, name) && !slices.Contains(unknown, "{"+name+"}") {
			unknown = append(unknown, "{"+name+"}")
		}
		rest = rest[i+j+1:]
	}
	switch len(unknown) {
	case 0:
		return nil
	case 1:
		return fmt.Errorf("unknown placeholder %s (known: {%s})", unknown[0], strings.Join(placeholders, "}, {"))
	}
	return fmt.Errorf("unknown placeholders %s (known: {%s})", strings.Join(unknown, ", "), strings.Join(placeholders, "}, {"))
}

// bindNamed checks the placeholders of sql and binds its named
// parameters (bindParams).
func bindNamed(sql string, names []string) (string, []int, error) {
	if err := checkPlaceholders(sql); err != nil {
		return "", nil, err
	}
	return bindParams(sql, names)
}

// bindParams replaces the named parameters of sql (:name, outside string
// literals, quoted identifiers, comments and :: casts) by $1, $2, ...,
// one number per distinct name, and returns for each number the index of
// its name in names. An unknown name is an error, which names every
// unknown one; the indexes of the known ones are returned with it.
func bindParams(sql string, names []string) (string, []int, error) {
	var (
		out     strings.Builder
		args    []int
		unknown []string
	)
	for i := 0; i < len(sql); i++ {
		c := sql[i]
		switch {
		case c == '\'' || c == '"':
			j := strings.IndexByte(sql[i+1:], c)
			if j < 0 {
				return "", args, fmt.Errorf("unterminated %c", c)
			}
			out.WriteString(sql[i : i+j+2])
			i += j + 1
		case c == '-' && strings.HasPrefix(sql[i:], "--"):
			j := strings.IndexByte(sql[i:], '\n')
			if j < 0 {
				j = len(sql) - i
			}
			out.WriteString(sql[i : i+j])
			i += j - 1
		case c == ':' && strings.HasPrefix(sql[i:], "::"):
			out.WriteString("::")
			i++
		case c == ':' && i+1 < len(sql) && isWordByte(sql[i+1]):
			j := i + 1
			for j < len(sql) && isWordByte(sql[j]) {
				j++
			}
			name := sql[i+1 : j]
			p := slices.Index(names, name)
			if p < 0 {
				if !slices.Contains(unknown, ":"+name) {
					unknown = append(unknown, ":"+name)
				}
				i = j - 1
				continue
			}
			n := slices.Index(args, p)
			if n < 0 {
				args = append(args, p)
				n = len(args) - 1
			}
			if name == "occurred_at" {
				// An event without a time of its own (a pipeline's next
				// hop) takes the transaction's, on the database clock, as
				// package outbox's Stage does: NULL would defeat a NOT NULL
				// column's default.
				fmt.Fprintf(&out, "coalesce($%d::timestamptz, now())", n+1)
			} else {
				fmt.Fprintf(&out, "$%d", n+1)
			}
			i = j - 1
		default:
			out.WriteByte(c)
		}
	}
	switch len(unknown) {
	case 0:
		return out.String(), args, nil
	case 1:
		return "", args, fmt.Errorf("unknown parameter %s (known: :%s)", unknown[0], strings.Join(names, ", :"))
	}
	return "", args, fmt.Errorf("unknown parameters %s (known: :%s)", strings.Join(unknown, ", "), strings.Join(names, ", :"))
}

func isWordByte(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

func isWord(s string) bool {
	if s == "" {
		return false
	}
	for i := range len(s) {
		if !isWordByte(s[i]) {
			return false
		}
	}
	return true
}

// rowsSample is the table a rows SELECT's placeholders are filled with
// to read its text.
var rowsSample = outbox.MustParseTable("sc_check.orders_outbox")

// rowsColumns reads the columns that the SELECT of a target's
// outbox.rows gives, from its text alone: the names of the items of its
// first select list at the top level (the SELECT itself, or the one after
// WITH's queries), each the name after AS, a bare alias after a column,
// literal, function call or parenthesised expression, or the column name
// of a column reference (cast to a one-word type or not). unsure says why
// the text cannot tell whether every column of fixture.RowColumns is among them:
// a * or an expression without a name among the items, or a text that is
// not such a SELECT; it is empty when the named columns hold them all, or
// when the text shows that some are missing.
func rowsColumns(sql string) (names []string, unsure string) {
	if strings.TrimSpace(sql) == "" {
		return nil, ""
	}
	toks, ok := sqlTokens(expand(sql, rowsSample))
	if !ok {
		return nil, "its text does not read as SQL (an unterminated literal, quoted name or comment)"
	}
	start := -1
	switch {
	case len(toks) > 0 && toks[0].is('w', "select"):
		start = 0
	case len(toks) > 0 && toks[0].is('w', "with"):
		start = topLevel(toks, "select")
	}
	if start < 0 {
		return nil, "it is not a SELECT (or WITH ... SELECT) whose select list its text shows"
	}
	i := start + 1
	switch {
	case i < len(toks) && toks[i].is('w', "all"):
		i++
	case i < len(toks) && toks[i].is('w', "distinct"):
		i++
		if i < len(toks) && toks[i].is('w', "on") {
			i++
			if i < len(toks) && toks[i].is('p', "(") {
				i = groupEnd(toks, i)
			}
		}
	}
	var (
		items [][]sqlToken
		cur   []sqlToken
		depth int
	)
	for ; i < len(toks); i++ {
		t := toks[i]
		depth += t.nesting()
		if depth < 0 {
			return nil, "its parentheses do not balance"
		}
		if depth == 0 && t.nesting() == 0 {
			if t.is('p', ";") {
				break
			}
			if t.is('p', ",") {
				items = append(items, cur)
				cur = nil
				continue
			}
			if t.kind == 'w' && selectListEnds[t.text] && !continuesItem(cur, t.text) {
				break
			}
		}
		cur = append(cur, t)
	}
	if depth > 0 {
		return nil, "its parentheses do not balance"
	}
	items = append(items, cur)
	var unnamed []string
	for k, it := range items {
		if len(it) == 0 {
			return nil, fmt.Sprintf("item %d of its select list is empty", k+1)
		}
		if n, ok := itemName(it); ok {
			names = append(names, n)
		} else {
			unnamed = append(unnamed, fmt.Sprintf("item %d (%s)", k+1, tokensText(it)))
		}
	}
	if len(unnamed) > 0 && slices.ContainsFunc(fixture.RowColumns, func(c string) bool { return !slices.Contains(names, c) }) {
		return names, fmt.Sprintf("its select list has %s, whose name the text does not settle, and it names no %s: name each column with AS",
			strings.Join(unnamed, ", "), strings.Join(slices.DeleteFunc(slices.Clone(fixture.RowColumns), func(c string) bool { return slices.Contains(names, c) }), ", "))
	}
	return names, ""
}

// topLevel returns the index of the first of toks that is the word w
// outside brackets, -1 when none is.
func topLevel(toks []sqlToken, w string) int {
	depth := 0
	for i, t := range toks {
		depth += t.nesting()
		if depth == 0 && t.is('w', w) {
			return i
		}
	}
	return -1
}

// selectListEnds are the keywords that end a select list at the top
// level.
var selectListEnds = map[string]bool{
	"from": true, "into": true, "where": true, "group": true, "having": true, "window": true, "union": true,
	"intersect": true, "except": true, "order": true, "limit": true, "offset": true, "fetch": true, "for": true,
}

// continuesItem reports whether keyword, after the tokens of an item so
// far, belongs to the item: an alias after AS, IS [NOT] DISTINCT FROM,
// WITHIN GROUP.
func continuesItem(item []sqlToken, keyword string) bool {
	if len(item) == 0 {
		return false
	}
	prev := item[len(item)-1]
	return prev.is('w', "as") || keyword == "from" && prev.is('w', "distinct") || keyword == "group" && prev.is('w', "within")
}

// exprKeywords begin an expression rather than name a column, so that a
// word after one is no alias.
var exprKeywords = map[string]bool{
	"not": true, "exists": true, "array": true, "row": true, "case": true, "cast": true, "interval": true,
	"distinct": true, "all": true, "any": true, "some": true, "unique": true, "as": true,
}

// itemName returns the name of a select list item, when its text settles
// it.
func itemName(t []sqlToken) (string, bool) {
	n := len(t)
	if n >= 3 && t[n-2].is('w', "as") {
		return t[n-1].name()
	}
	ref := refEnd(t, 0)
	if ref == n {
		return t[n-1].name()
	}
	if ref > 0 && castEnd(t, ref) == n {
		return t[ref-1].name()
	}
	if n >= 2 && (t[n-1].kind == 'w' && t[n-1].text != "isnull" && t[n-1].text != "notnull" || t[n-1].kind == 'q') && primaryEnd(t[:n-1]) == n-1 {
		return t[n-1].name()
	}
	return "", false
}

// refEnd returns the end of the column reference (name.name...) that
// starts at i, i when there is none.
func refEnd(t []sqlToken, i int) int {
	if i >= len(t) || t[i].kind != 'q' && (t[i].kind != 'w' || exprKeywords[t[i].text]) {
		return i
	}
	j := i + 1
	for j+1 < len(t) && t[j].is('p', ".") && (t[j+1].kind == 'w' || t[j+1].kind == 'q') {
		j += 2
	}
	return j
}

// castEnd returns the end of the casts to one-word types (::int,
// ::numeric(10,2), ::text[]) that start at i, i when there is none.
func castEnd(t []sqlToken, i int) int {
	for i+1 < len(t) && t[i].is('p', "::") && t[i+1].kind == 'w' {
		i += 2
		if i < len(t) && t[i].is('p', "(") {
			i = groupEnd(t, i)
		}
		for i+1 < len(t) && t[i].is('p', "[") && t[i+1].is('p', "]") {
			i += 2
		}
	}
	return i
}

// primaryEnd returns the end of the expression at the start of t when it
// is a literal, a parenthesised expression, a column reference or a
// function call, 0 otherwise.
func primaryEnd(t []sqlToken) int {
	switch {
	case len(t) == 0:
		return 0
	case t[0].kind == 'l':
		return 1
	case t[0].is('p', "("):
		return groupEnd(t, 0)
	}
	j := refEnd(t, 0)
	if j > 0 && j < len(t) && t[j].is('p', "(") {
		return groupEnd(t, j)
	}
	return j
}

// groupEnd returns the index after the bracket that closes the one at i,
// len(t) when none does.
func groupEnd(t []sqlToken, i int) int {
	depth := 0
	for j := i; j < len(t); j++ {
		depth += t[j].nesting()
		if depth == 0 {
			return j + 1
		}
	}
	return len(t)
}

// tokensText writes tokens back as text, shortened, to name an item.
func tokensText(t []sqlToken) string {
	var b strings.Builder
	for i, x := range t {
		if i > 0 && !x.is('p', ",") && !x.is('p', ")") && !x.is('p', ".") && !t[i-1].is('p', ".") && !t[i-1].is('p', "(") && !x.is('p', "(") {
			b.WriteByte(' ')
		}
		if x.kind == 'q' {
			b.WriteString(`"` + x.text + `"`)
		} else {
			b.WriteString(x.text)
		}
	}
	if s := b.String(); len(s) > 40 {
		return s[:37] + "..."
	}
	return b.String()
}

// sqlToken is a token of a SQL text, as far as reading a select list
// needs.
type sqlToken struct {
	// kind is 'w' for a word (a name or keyword, lower-cased), 'q' for a
	// quoted name (its text unquoted), 'l' for a literal (a string, a
	// number, a parameter) and 'p' for a punctuation mark or operator.
	kind byte
	text string
}

func (t sqlToken) is(kind byte, text string) bool { return t.kind == kind && t.text == text }

// nesting is +1 for an opening bracket, -1 for a closing one.
func (t sqlToken) nesting() int {
	switch {
	case t.is('p', "("), t.is('p', "["):
		return 1
	case t.is('p', ")"), t.is('p', "]"):
		return -1
	}
	return 0
}

// name returns the column name a word or a quoted name gives.
func (t sqlToken) name() (string, bool) {
	if t.kind == 'w' || t.kind == 'q' {
		return t.text, true
	}
	return "", false
}

// sqlOperatorChars are the characters of PostgreSQL's operators.
const sqlOperatorChars = "+-*/<>=~!@#%^&|`?"

// sqlTokens splits sql into tokens, leaving out blanks and comments; ok is
// false for a text it cannot read (an unterminated literal, quoted name
// or comment).
func sqlTokens(sql string) (toks []sqlToken, ok bool) {
	toks, _, ok = sqlTokensAt(sql)
	return toks, ok
}

// sqlTokensAt is sqlTokens that also returns where each token starts
// and ends in sql.
func sqlTokensAt(sql string) (toks []sqlToken, at []span, ok bool) {
	start := 0
	// mark notes where the token the last step added, if any, starts and
	// ends.
	mark := func(end int) {
		if len(toks) > len(at) {
			at = append(at, span{start, end})
		}
	}
	for i := 0; i < len(sql); {
		mark(i)
		start = i
		c := sql[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v':
			i++
		case strings.HasPrefix(sql[i:], "--"):
			j := strings.IndexByte(sql[i:], '\n')
			if j < 0 {
				mark(i)
				return toks, at, true
			}
			i += j + 1
		case strings.HasPrefix(sql[i:], "/*"):
			depth, j := 0, i
			for j < len(sql) {
				if strings.HasPrefix(sql[j:], "/*") {
					depth, j = depth+1, j+2
				} else if strings.HasPrefix(sql[j:], "*/") {
					depth, j = depth-1, j+2
					if depth == 0 {
						break
					}
				} else {
					j++
				}
			}
			if depth != 0 {
				return nil, nil, false
			}
			i = j
		case c == '\'':
			j, ok := quotedEnd(sql, i, false)
			if !ok {
				return nil, nil, false
			}
			toks, i = append(toks, sqlToken{'l', sql[i:j]}), j
		case c == '"':
			j, ok := quotedEnd(sql, i, false)
			if !ok {
				return nil, nil, false
			}
			toks, i = append(toks, sqlToken{'q', strings.ReplaceAll(sql[i+1:j-1], `""`, `"`)}), j
		case c == '$':
			j := i + 1
			for j < len(sql) && (isWordByte(sql[j]) || sql[j] >= 0x80) {
				j++
			}
			if j < len(sql) && sql[j] == '$' && (j == i+1 || !isDigit(sql[i+1])) {
				// A dollar-quoted string: $$...$$ or $tag$...$tag$.
				delim := sql[i : j+1]
				k := strings.Index(sql[j+1:], delim)
				if k < 0 {
					return nil, nil, false
				}
				end := j + 1 + k + len(delim)
				toks, i = append(toks, sqlToken{'l', sql[i:end]}), end
				continue
			}
			toks, i = append(toks, sqlToken{'l', sql[i:j]}), j
		case isDigit(c) || c == '.' && i+1 < len(sql) && isDigit(sql[i+1]):
			j := i + 1
			for j < len(sql) && (isWordByte(sql[j]) || sql[j] == '.' && !strings.HasPrefix(sql[j:], "..") ||
				(sql[j] == '+' || sql[j] == '-') && (sql[j-1] == 'e' || sql[j-1] == 'E')) {
				j++
			}
			toks, i = append(toks, sqlToken{'l', sql[i:j]}), j
		case c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= 0x80:
			j := i + 1
			for j < len(sql) && (isWordByte(sql[j]) || sql[j] == '$' || sql[j] >= 0x80) {
				j++
			}
			w := sql[i:j]
			switch {
			case j < len(sql) && sql[j] == '\'' && len(w) == 1 && strings.ContainsAny(w, "eEbBxXnN"):
				// E'...', B'...', X'...', N'...'.
				k, ok := quotedEnd(sql, j, w == "e" || w == "E")
				if !ok {
					return nil, nil, false
				}
				toks, i = append(toks, sqlToken{'l', sql[i:k]}), k
			case (w == "u" || w == "U") && (strings.HasPrefix(sql[j:], "&'") || strings.HasPrefix(sql[j:], `&"`)):
				// U&'...' and U&"...": a quoted name with escapes is not
				// decoded, so it names no column of fixture.RowColumns.
				k, ok := quotedEnd(sql, j+1, false)
				if !ok {
					return nil, nil, false
				}
				kind := byte('l')
				if sql[j+1] == '"' {
					kind = 'q'
				}
				toks, i = append(toks, sqlToken{kind, sql[i:k]}), k
			default:
				toks, i = append(toks, sqlToken{'w', strings.ToLower(w)}), j
			}
		case strings.HasPrefix(sql[i:], "::"):
			toks, i = append(toks, sqlToken{'p', "::"}), i+2
		case strings.IndexByte(sqlOperatorChars, c) >= 0:
			j := i + 1
			for j < len(sql) && strings.IndexByte(sqlOperatorChars, sql[j]) >= 0 && !strings.HasPrefix(sql[j:], "--") && !strings.HasPrefix(sql[j:], "/*") {
				j++
			}
			toks, i = append(toks, sqlToken{'p', sql[i:j]}), j
		default:
			toks, i = append(toks, sqlToken{'p', string(c)}), i+1
		}
	}
	mark(len(sql))
	return toks, at, true
}

// span is where a token starts and ends in a text.
type span struct{ from, to int }

// quotedEnd returns the index after the quote that closes the one at i
// (a doubled quote stands for itself; with backslash, a backslash escapes
// the next character).
func quotedEnd(sql string, i int, backslash bool) (int, bool) {
	q := sql[i]
	for j := i + 1; j < len(sql); j++ {
		switch {
		case backslash && sql[j] == '\\':
			j++
		case sql[j] == q && j+1 < len(sql) && sql[j+1] == q:
			j++
		case sql[j] == q:
			return j + 1, true
		}
	}
	return 0, false
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }
