package testenv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2/client"
)

// Restore replaces PostgreSQL by a dump and restore of it, as an
// operator moving the database to a new server does: every link to the
// database is closed (its clients' connections reset, new ones refused),
// a fresh server from the same image is started, the old one's roles
// (pg_dumpall --globals-only) and its database (pg_dump, pg_restore) are
// copied into it, the old server is killed and removed, and the links
// open on the new one at the same address. The new server's data is the
// old one's, rows, sequences and all; its transaction ids start again
// from a fresh cluster's, and its statistics are empty. An environment
// with a standby is refused: the standby follows the old server.
func (e *Env) Restore(ctx context.Context) error {
	if err := e.DumpRestore(ctx); err != nil {
		return err
	}
	return e.OpenLinks(ctx)
}

// DumpRestore is Restore but for the last step: the links to the
// database stay closed until OpenLinks.
func (e *Env) DumpRestore(ctx context.Context) error {
	if e.Standby() != nil {
		return errors.New("restore: the environment has a standby, which would follow the old server")
	}
	if err := e.eachDBProxy(ctx, func(p *toxiproxy.Proxy) bool { p.Enabled = false; return true }); err != nil {
		return fmt.Errorf("restore: closing the links to the database: %w", err)
	}
	old := e.Postgres()
	e.mu.Lock()
	e.restores++
	name := "postgres-restored-" + strconv.Itoa(e.restores)
	e.mu.Unlock()
	var port int
	c, ports, err := e.run(ctx, ContainerSpec{
		Name: name, Image: old.Image(), Role: "postgres", StopTimeout: 10 * time.Second,
		Ready: func(ctx context.Context) error { return pingPostgres(ctx, postgresURL(e.host, port)) },
	}, []int{postgresPort})
	if err != nil {
		return fmt.Errorf("restore: starting a new server: %w", err)
	}
	port = ports[postgresPort]
	if err := c.WaitReady(ctx); err != nil {
		return fmt.Errorf("restore: %s: %w", name, err)
	}
	// The roles first (the one that exists already fails alone and is
	// kept), then the database, over the objects the image made.
	script := `set -e
export PGPASSWORD=outbox
pg_dumpall -h "$1" -U outbox --globals-only >/tmp/globals.sql
psql -q -U postgres -d postgres -f /tmp/globals.sql >/dev/null 2>&1 || true
pg_dump -h "$1" -U outbox -Fc -f /tmp/outbox.dump outbox
pg_restore -U postgres -d outbox --clean --if-exists --exit-on-error /tmp/outbox.dump`
	code, out, err := c.Exec(ctx, "sh", "-c", script, "restore", old.Name())
	if err != nil || code != 0 {
		return fmt.Errorf("restore: dumping %s into %s: exit %d: %v: %s", old.Name(), name, code, err, out)
	}
	if err := old.Kill(ctx); err != nil {
		return fmt.Errorf("restore: killing the old server: %w", err)
	}
	if err := old.Remove(ctx); err != nil {
		return fmt.Errorf("restore: removing the old server: %w", err)
	}
	e.mu.Lock()
	e.postgres, e.pgHostPort, e.primary = c, port, name
	e.mu.Unlock()
	e.logf("testenv: restore: %s holds a dump of %s", name, old.Name())
	return nil
}

// OpenLinks opens every link to the database on the current server (after
// DumpRestore, on the new one), as they were before.
func (e *Env) OpenLinks(ctx context.Context) error {
	upstream := net.JoinHostPort(e.primaryAlias(), strconv.Itoa(postgresPort))
	if err := e.eachDBProxy(ctx, func(p *toxiproxy.Proxy) bool { p.Upstream, p.Enabled = upstream, true; return true }); err != nil {
		return fmt.Errorf("opening the links to %s: %w", e.primaryAlias(), err)
	}
	return nil
}
