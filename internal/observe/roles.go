package observe

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/outboxlab/outboxlab/outbox"
)

// Role is a login role of one relay replica: session_user in the log of
// every change a session logged in as it makes.
type Role struct {
	// Name is the role's name, a plain lower-case identifier
	// (ValidRoleName).
	Name string
	// Password is the role's password, which RoleURL puts in the URL.
	Password string
	// Process is the replica the role stands for, its process name in
	// the history ("relay-a").
	Process string
}

// ErrInvalidRole is returned for a role name that is not a plain
// lower-case identifier, or that PostgreSQL reserves.
var ErrInvalidRole = errors.New("invalid role name")

var roleRe = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// ValidRoleName fails unless name is a lower-case identifier of at most
// outbox.MaxIdentifierLen bytes (letters, digits and "_", not starting
// with a digit) that does not start with "pg_", which PostgreSQL
// reserves.
func ValidRoleName(name string) error {
	if !roleRe.MatchString(name) {
		return fmt.Errorf("role %q: %w: it must match %s", name, ErrInvalidRole, roleRe)
	}
	if strings.HasPrefix(name, "pg_") {
		return fmt.Errorf("role %q: %w: the prefix pg_ is reserved", name, ErrInvalidRole)
	}
	return nil
}

// RoleName returns the name of the role of replica process over table:
// the table's schema (or "outbox" for an unqualified name), "_" and the
// process name, lower-cased, with every character but letters, digits
// and "_" as "_" ("run_1a2b_relay_a" for relay-a over run_1a2b.outbox).
// Roles are shared by every database of the server, and the harness gives
// each run a schema of its own, so runs that share a server do not share
// roles; the replicas of a run must have names that stay distinct once
// so replaced. A name too long for an identifier is cut and followed by
// "_" and 8 hex digits of the SHA-256 of the schema and process, so that
// long names stay distinct.
func RoleName(table outbox.Table, process string) string {
	schema := table.Schema()
	if schema == "" {
		schema = "outbox"
	}
	b := []byte(strings.ToLower(schema + "_" + process))
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			b[i] = '_'
		}
	}
	name := string(b)
	if strings.HasPrefix(name, "pg_") || name[0] >= '0' && name[0] <= '9' {
		name = "r_" + name
	}
	if len(name) > outbox.MaxIdentifierLen {
		sum := sha256.Sum256([]byte(schema + "\x00" + process))
		tag := "_" + hex.EncodeToString(sum[:4])
		name = name[:outbox.MaxIdentifierLen-len(tag)] + tag
	}
	return name
}

// NewRole returns the role of replica process over table: RoleName and a
// fresh random password. It creates nothing; CreateRole does.
func NewRole(table outbox.Table, process string) (Role, error) {
	if process == "" {
		return Role{}, errors.New("new role: empty process name")
	}
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return Role{}, fmt.Errorf("generating a password: %w", err)
	}
	r := Role{Name: RoleName(table, process), Password: hex.EncodeToString(b[:]), Process: process}
	if err := ValidRoleName(r.Name); err != nil {
		return Role{}, err
	}
	return r, nil
}

// CreateRole creates r as a login role, or sets its password when it
// exists, and grants it what a relay needs over table's schema: USAGE on
// the schema; SELECT, INSERT, UPDATE and DELETE on every table in it but
// the observation log (ObservedTable), from which it is revoked; USAGE,
// SELECT and UPDATE on every sequence in it. LISTEN and NOTIFY need no
// grant, and CONNECT and TEMPORARY on the database are PUBLIC's by
// default. Only tables that exist are granted: create the role after the
// outbox is migrated. The caller needs the right to create roles and to
// grant on the schema's objects (a superuser, or their owner with
// CREATEROLE).
func CreateRole(ctx context.Context, db DB, table outbox.Table, r Role) error {
	if err := ValidRoleName(r.Name); err != nil {
		return fmt.Errorf("creating role: %w", err)
	}
	if r.Password == "" {
		return fmt.Errorf("creating role %s: empty password", r.Name)
	}
	table, err := qualify(ctx, db, table)
	if err != nil {
		return fmt.Errorf("creating role %s: %w", r.Name, err)
	}
	role := pgx.Identifier{r.Name}.Sanitize()
	schema := pgx.Identifier{table.Schema()}.Sanitize()
	tx, err := db.Begin(ctx)
	if err != nil {
		return fmt.Errorf("creating role %s: %w", r.Name, err)
	}
	defer tx.Rollback(ctx)
	// Role names are cluster-wide: one lock for every database.
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('outboxlab.observe.roles'))`); err != nil {
		return fmt.Errorf("creating role %s: locking: %w", r.Name, err)
	}
	var exists bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1)`, r.Name).Scan(&exists); err != nil {
		return fmt.Errorf("creating role %s: %w", r.Name, err)
	}
	create := `CREATE ROLE ` + role + ` LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE PASSWORD ` + literal(r.Password)
	if exists {
		create = `ALTER ROLE ` + role + ` LOGIN PASSWORD ` + literal(r.Password)
	}
	stmts := []string{
		create,
		`GRANT USAGE ON SCHEMA ` + schema + ` TO ` + role,
		`GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA ` + schema + ` TO ` + role,
		`GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA ` + schema + ` TO ` + role,
	}
	for _, stmt := range stmts {
		if _, err := tx.Exec(ctx, stmt); err != nil {
			return fmt.Errorf("creating role %s: %w", r.Name, err)
		}
	}
	var logged bool
	log := ObservedTable(table)
	if err := tx.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, log.Ident()).Scan(&logged); err != nil {
		return fmt.Errorf("creating role %s: %w", r.Name, err)
	}
	if logged {
		if _, err := tx.Exec(ctx, `REVOKE ALL ON `+log.Ident()+` FROM `+role); err != nil {
			return fmt.Errorf("creating role %s: %w", r.Name, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("creating role %s: commit: %w", r.Name, err)
	}
	return nil
}

// literal quotes s as an SQL string literal (standard_conforming_strings
// on, PostgreSQL's default since 9.1).
// settingRe is what SetRoleSetting accepts as a setting's name.
var settingRe = regexp.MustCompile(`^[a-z_][a-z0-9_]*(\.[a-z_][a-z0-9_]*)?$`)

// SetRoleSetting sets a configuration parameter of every session that
// logs in as the role named name from then on (ALTER ROLE ... SET):
// idle_in_transaction_session_timeout, for one, makes the server end a
// replica's session that stays idle in an open transaction, and with it
// the row locks it holds. Sessions already open keep what they had.
func SetRoleSetting(ctx context.Context, db DB, name, setting, value string) error {
	if err := ValidRoleName(name); err != nil {
		return err
	}
	if !settingRe.MatchString(setting) {
		return fmt.Errorf("setting %q of role %s: not a parameter name", setting, name)
	}
	if _, err := db.Exec(ctx, `ALTER ROLE `+pgx.Identifier{name}.Sanitize()+` SET `+setting+` = `+literal(value)); err != nil {
		return fmt.Errorf("setting %s of role %s: %w", setting, name, err)
	}
	return nil
}

func literal(s string) string { return `'` + strings.ReplaceAll(s, `'`, `''`) + `'` }

// DropRole drops the role named name: first what it owns and was granted
// in the database db is connected to (DROP OWNED BY), then the role.
// Dropping a role that does not exist is no error. A role that was
// granted in other databases too must be dropped from each of them
// first; its sessions may still be connected.
func DropRole(ctx context.Context, db DB, name string) error {
	if err := ValidRoleName(name); err != nil {
		return fmt.Errorf("dropping role: %w", err)
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		return fmt.Errorf("dropping role %s: %w", name, err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('outboxlab.observe.roles'))`); err != nil {
		return fmt.Errorf("dropping role %s: locking: %w", name, err)
	}
	var exists bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1)`, name).Scan(&exists); err != nil {
		return fmt.Errorf("dropping role %s: %w", name, err)
	}
	if !exists {
		return nil
	}
	role := pgx.Identifier{name}.Sanitize()
	for _, stmt := range []string{`DROP OWNED BY ` + role, `DROP ROLE ` + role} {
		if _, err := tx.Exec(ctx, stmt); err != nil {
			return fmt.Errorf("dropping role %s: %w", name, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("dropping role %s: commit: %w", name, err)
	}
	return nil
}

// RoleURL returns base, a postgres:// or postgresql:// URL, logging in as
// r: its user and password replace base's, in the URL's user information
// and in user and password query parameters where base has them. Every
// other part of base (host, database, a host= socket directory, sslmode,
// application_name) is kept. A key=value connection string is refused.
func RoleURL(base string, r Role) (string, error) {
	if err := ValidRoleName(r.Name); err != nil {
		return "", fmt.Errorf("URL of role: %w", err)
	}
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return "", errors.New("URL of role " + r.Name + ": the base is not a postgres:// URL")
	}
	u.User = url.UserPassword(r.Name, r.Password)
	q := u.Query()
	for k, v := range map[string]string{"user": r.Name, "password": r.Password} {
		if q.Has(k) {
			q.Set(k, v)
		}
	}
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// Processes maps the roles' names to their processes, for Ops.
func Processes(roles []Role) map[string]string {
	out := make(map[string]string, len(roles))
	for _, r := range roles {
		out[r.Name] = r.Process
	}
	return out
}
