package scenarios

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.yaml.in/yaml/v3"

	"github.com/outboxlab/outboxlab/consumer"
	"github.com/outboxlab/outboxlab/outbox"
)

// TargetFile is a target file as `outboxlab run --target FILE` reads it
// (YAML, or JSON, which YAML reads too): an outbox of its own, with its
// own table, columns and staging statement, and the relay that publishes
// from it. See the README, "Putting your own outbox under test".
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
	// as --capabilities takes it (default none).
	Capabilities string        `yaml:"capabilities"`
	Outbox       TargetOutbox  `yaml:"outbox"`
	Delivery     TargetDeliver `yaml:"delivery"`
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
	// event's time, or the transaction's now() when it has none).
	Stage stringList `yaml:"stage"`
	// Rows is a SELECT that shows the outbox's rows in the harness's
	// columns: id, message_type, processed_at, faulted_at, attempts,
	// occurred_at, locked_by, locked_at, locked_until (NULL of its type
	// where the outbox keeps no such column).
	Rows string `yaml:"rows"`
	// NoLeases says the outbox keeps no lease of a row (rows shows
	// locked_by, locked_at and locked_until NULL): the scenarios that
	// judge the leases a relay takes are not applicable to it.
	NoLeases bool `yaml:"no_leases"`
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
		return errors.New("want a statement or a list of statements")
	}
	*l = s
	return nil
}

// stageParams are the named parameters of a staging statement, in the
// order of their values (stageArgs).
var stageParams = []string{"id", "type", "payload", "correlation_id", "occurred_at"}

// LoadTarget reads the target file at path into the relay under test it
// describes. Every error names the file and the field.
func LoadTarget(path string) (RelayUnderTest, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return RelayUnderTest{}, fmt.Errorf("target file: %w", err)
	}
	u, err := ParseTarget(data, filepath.Dir(path))
	if err != nil {
		return RelayUnderTest{}, fmt.Errorf("target file %s: %w", path, err)
	}
	if u.Name == "" {
		u.Name = strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
		u.Outbox.Name = u.Name
	}
	u.Replay = "--target " + QuoteArg(path)
	return u, nil
}

// ParseTarget reads a target file's text; dir resolves a relative
// command path.
func ParseTarget(data []byte, dir string) (RelayUnderTest, error) {
	var f TargetFile
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		return RelayUnderTest{}, err
	}
	u := RelayUnderTest{Name: f.Name, Env: f.Relay.Env}
	switch {
	case f.Relay.Image != "" && f.Relay.Command != "":
		return u, errors.New("relay: give image or command, not both")
	case f.Relay.Image != "":
		if strings.ContainsAny(f.Relay.Image, " \t") {
			return u, fmt.Errorf("relay.image %q: not an image reference", f.Relay.Image)
		}
		u.Image = f.Relay.Image
	case f.Relay.Command != "":
		args, err := SplitCommand(f.Relay.Command)
		if err != nil {
			return u, fmt.Errorf("relay.command: %w", err)
		}
		if len(args) == 0 {
			return u, errors.New("relay.command: empty")
		}
		if strings.Contains(args[0], "/") && !filepath.IsAbs(args[0]) {
			args[0] = "./" + filepath.Join(dir, args[0])
		}
		u.Command = args
	default:
		return u, errors.New("relay: give image (a relay image) or command (a relay run on the host)")
	}
	if f.Capabilities != "" {
		if err := CheckCapabilitiesOnce(f.Capabilities); err != nil {
			return u, err
		}
		var err error
		if u, err = u.WithCapabilities(f.Capabilities); err != nil {
			return u, err
		}
	}
	id, err := consumer.ParseIdentity(f.Delivery.ID)
	if err != nil {
		return u, fmt.Errorf("delivery.id: %w", err)
	}
	u.Identity = id
	if u.Outbox, err = f.Outbox.schema(f.Name); err != nil {
		return u, err
	}
	return u, nil
}

// schema turns the SQL of a target file into an outbox schema.
func (o TargetOutbox) schema(name string) (outbox.Schema, error) {
	var missing []string
	for _, f := range []struct {
		name string
		set  bool
	}{{"outbox.migrate", strings.TrimSpace(o.Migrate) != ""}, {"outbox.stage", len(o.Stage) > 0}, {"outbox.rows", strings.TrimSpace(o.Rows) != ""}} {
		if !f.set {
			missing = append(missing, f.name)
		}
	}
	if len(missing) > 0 {
		return outbox.Schema{}, fmt.Errorf("%s: missing (a target names its own outbox's SQL; a relay that reads outboxlab's own table needs no target file: run it with --relay image:REF or cmd:COMMAND)", strings.Join(missing, ", "))
	}
	type stmt struct {
		sql  string
		args []int // indexes into stageParams, one per $n
	}
	var stage []stmt
	for i, s := range o.Stage {
		sql, args, err := bindNamed(s, stageParams)
		if err != nil {
			return outbox.Schema{}, fmt.Errorf("outbox.stage[%d]: %w", i, err)
		}
		stage = append(stage, stmt{sql, args})
	}
	if err := checkPlaceholders(o.Migrate); err != nil {
		return outbox.Schema{}, fmt.Errorf("outbox.migrate: %w", err)
	}
	if err := checkPlaceholders(o.Rows); err != nil {
		return outbox.Schema{}, fmt.Errorf("outbox.rows: %w", err)
	}
	return outbox.Schema{
		Name: name,
		Migrate: func(ctx context.Context, db *pgxpool.Pool, table outbox.Table) error {
			_, err := db.Exec(ctx, expand(o.Migrate, table))
			return err
		},
		Stage: func(ctx context.Context, tx pgx.Tx, table outbox.Table, e outbox.Event) error {
			vals := stageValues(e)
			for i, s := range stage {
				args := make([]any, len(s.args))
				for k, p := range s.args {
					args[k] = vals[p]
				}
				if _, err := tx.Exec(ctx, expand(s.sql, table), args...); err != nil {
					return fmt.Errorf("staging event %s (outbox.stage[%d]): %w", e.ID, i, err)
				}
			}
			return nil
		},
		Rows:     func(table outbox.Table) string { return expand(o.Rows, table) },
		NoLeases: o.NoLeases,
	}, nil
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
func checkPlaceholders(sql string) error {
	for rest := sql; ; {
		i := strings.IndexByte(rest, '{')
		if i < 0 {
			return nil
		}
		j := strings.IndexByte(rest[i:], '}')
		if j < 0 {
			return nil
		}
		name := rest[i+1 : i+j]
		if isWord(name) && !slices.Contains(placeholders, name) {
			return fmt.Errorf("unknown placeholder {%s} (known: {%s})", name, strings.Join(placeholders, "}, {"))
		}
		rest = rest[i+j+1:]
	}
}

// bindNamed replaces the named parameters of sql (:name, outside string
// literals, quoted identifiers, comments and :: casts) by $1, $2, ...,
// one number per distinct name, and returns for each number the index of
// its name in names. An unknown name is an error.
func bindNamed(sql string, names []string) (string, []int, error) {
	if err := checkPlaceholders(sql); err != nil {
		return "", nil, err
	}
	var (
		out  strings.Builder
		args []int
	)
	for i := 0; i < len(sql); i++ {
		c := sql[i]
		switch {
		case c == '\'' || c == '"':
			j := strings.IndexByte(sql[i+1:], c)
			if j < 0 {
				return "", nil, fmt.Errorf("unterminated %c", c)
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
				return "", nil, fmt.Errorf("unknown parameter :%s (known: :%s)", name, strings.Join(names, ", :"))
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
	return out.String(), args, nil
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
