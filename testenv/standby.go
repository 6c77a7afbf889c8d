package testenv

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2/client"
	"github.com/jackc/pgx/v5"
)

// Replication is how a standby of PostgreSQL (Options.Standby) follows
// its primary.
type Replication string

const (
	// ReplicationAsync streams the WAL to the standby after the primary
	// acknowledged the commit, PostgreSQL's default: a commit the primary
	// acknowledged may be missing on the standby when the primary dies.
	ReplicationAsync Replication = "async"
	// ReplicationSync makes the primary acknowledge a commit only once
	// the standby applied it (synchronous_standby_names naming the
	// standby, synchronous_commit = remote_apply): a promoted standby
	// has every acknowledged commit.
	ReplicationSync Replication = "sync"
)

// standbyRole is the role of a standby's container.
const standbyRole = "postgres-standby"

// Standby returns the streaming standby, nil when there is none (no
// Options.Standby, or a Failover promoted it and no new one started).
func (e *Env) Standby() *Container {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.standby
}

// Replication returns the standby's mode, empty without Options.Standby.
func (e *Env) Replication() Replication { return e.replication }

// primaryAlias is the host name of the current primary on the network.
func (e *Env) primaryAlias() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.primary == "" {
		return AliasPostgres
	}
	return e.primary
}

// StartStandby starts a streaming standby of the current primary, a
// container named postgres-standby-N, and waits until it streams (and,
// under ReplicationSync, until the primary waits for it at every
// commit). Its replication slot and application_name are its name. A
// standby already running is kept.
func (e *Env) StartStandby(ctx context.Context) error {
	if e.replication == "" {
		return errors.New("starting a standby: the environment has none (Options.Standby)")
	}
	e.mu.Lock()
	if e.standby != nil {
		e.mu.Unlock()
		return nil
	}
	e.standbys++
	name := "postgres-standby-" + strconv.Itoa(e.standbys)
	primary := e.primary
	image := e.postgres.Image()
	primaryURL := postgresURL(e.host, e.pgHostPort)
	e.mu.Unlock()

	slot := "standby_" + strconv.Itoa(e.standbys)
	var port int
	c, ports, err := e.run(ctx, ContainerSpec{
		Name: name, Image: image, Role: standbyRole, StopTimeout: 10 * time.Second,
		// It replicates through its own link, which a fault can cut.
		Env: map[string]string{"OUTBOXLAB_STANDBY_OF": AliasToxiproxy, "OUTBOXLAB_STANDBY_PORT": strconv.Itoa(e.mustLink(LinkStandbyDB, ServiceDB).listenPort),
			"OUTBOXLAB_STANDBY_NAME": slot},
		// Ready once it accepts connections, as a standby and, once
		// promoted, as the primary.
		Ready: func(ctx context.Context) error { return pingPostgres(ctx, postgresURL(e.host, port)) },
	}, []int{postgresPort})
	if err != nil {
		return fmt.Errorf("starting a standby of %s: %w", primary, err)
	}
	port = ports[postgresPort]
	if err := c.WaitReady(ctx); err != nil {
		return fmt.Errorf("standby %s: %w", name, err)
	}
	// The primary names the standby it waits for only now: a base backup
	// taken with the setting would carry it to the standby, which would
	// then wait, once promoted, for a standby of its own.
	if e.replication == ReplicationSync {
		for _, q := range []string{
			"ALTER SYSTEM SET synchronous_standby_names = '" + slot + "'",
			"ALTER SYSTEM SET synchronous_commit = 'remote_apply'",
			"SELECT pg_reload_conf()",
		} {
			if err := queryPostgres(ctx, primaryURL, q); err != nil {
				return fmt.Errorf("making %s synchronous: %s: %w", name, q, err)
			}
		}
	}
	want := "async"
	if e.replication == ReplicationSync {
		want = "sync"
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	err = WaitUntil(wctx, 100*time.Millisecond, func(ctx context.Context) error {
		var state string
		if err := queryPostgres(ctx, primaryURL, "SELECT coalesce((SELECT sync_state FROM pg_stat_replication WHERE application_name = '"+slot+"' AND state = 'streaming'), '')", &state); err != nil {
			return err
		}
		if state != want {
			return fmt.Errorf("standby %s: replication state %q, want %q streaming", name, state, want)
		}
		return nil
	})
	if err != nil {
		return err
	}
	e.mu.Lock()
	e.standby, e.standbyPort = c, port
	e.mu.Unlock()
	e.logf("testenv: standby %s of %s streams (%s)", name, primary, e.replication)
	return nil
}

// Failover is the failover of PostgreSQL to its standby, as an operator
// or a failover manager does it: the primary's container is killed (it
// is not started again), the standby is promoted, and every link to the
// database is moved to it, as a virtual IP or a DNS name moves: clients
// see their connections reset and reconnect to the new primary at the
// same address. DirectDatabaseURL and ContainerDirectDatabaseURL lead to
// the new primary from then on. The environment has no standby after
// it; StartStandby starts a new one of the new primary.
func (e *Env) Failover(ctx context.Context) error {
	if err := e.KillPrimary(ctx); err != nil {
		return err
	}
	return e.Promote(ctx)
}

// KillPrimary takes the primary away, the first half of Failover:
// every link to the database is closed (its clients' connections reset,
// and new ones refused, as an address no server holds any more), and the
// primary's container is killed and removed.
func (e *Env) KillPrimary(ctx context.Context) error {
	if e.Standby() == nil {
		return errors.New("failover: no standby to fail over to")
	}
	// Closed first: a proxy dials its upstream as it accepts, and a
	// dial to a killed container's address waits for minutes, which a
	// later move of the link would wait for too.
	if err := e.eachDBProxy(ctx, func(p *toxiproxy.Proxy) bool { p.Enabled = false; return true }); err != nil {
		return fmt.Errorf("failover: closing the links to the primary: %w", err)
	}
	old := e.Postgres()
	if err := old.Kill(ctx); err != nil {
		return fmt.Errorf("failover: killing the primary: %w", err)
	}
	if err := old.Remove(ctx); err != nil {
		return fmt.Errorf("failover: removing the killed primary: %w", err)
	}
	return nil
}

// eachDBProxy applies change to the proxy of every link to the database
// and saves it when change says so, within a deadline.
func (e *Env) eachDBProxy(ctx context.Context, change func(p *toxiproxy.Proxy) bool) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for _, l := range e.links {
		if l.Service != ServiceDB {
			continue
		}
		p, err := withCtx(ctx, func() (*toxiproxy.Proxy, error) { return e.toxi.Proxy(l.Name) })
		if err != nil {
			return fmt.Errorf("reading proxy %s: %w", l.Name, err)
		}
		if !change(p) {
			continue
		}
		if _, err := withCtx(ctx, func() (struct{}, error) { return struct{}{}, p.Save() }); err != nil {
			return fmt.Errorf("saving proxy %s: %w", l.Name, err)
		}
	}
	return nil
}

// Promote promotes the standby and opens every link to the database
// again, leading to it: the second half of Failover.
func (e *Env) Promote(ctx context.Context) error {
	e.mu.Lock()
	standby, port := e.standby, e.standbyPort
	e.mu.Unlock()
	if standby == nil {
		return errors.New("failover: no standby to promote")
	}
	url := postgresURL(e.host, port)
	var promoted bool
	if err := queryPostgres(ctx, url, "SELECT pg_promote(false)", &promoted); err != nil || !promoted {
		return fmt.Errorf("failover: promoting %s: %v (promoted %t)", standby.Name(), err, promoted)
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := WaitUntil(wctx, 50*time.Millisecond, func(ctx context.Context) error {
		var recovering bool
		if err := queryPostgres(ctx, url, "SELECT pg_is_in_recovery()", &recovering); err != nil {
			return err
		}
		if recovering {
			return errors.New("still in recovery")
		}
		return nil
	}); err != nil {
		return fmt.Errorf("failover: promoting %s: %w", standby.Name(), err)
	}
	e.mu.Lock()
	e.postgres, e.pgHostPort, e.primary = standby, port, standby.Name()
	e.standby, e.standbyPort = nil, 0
	e.mu.Unlock()
	if err := e.OpenLinks(ctx); err != nil {
		return fmt.Errorf("failover: %w", err)
	}
	e.logf("testenv: failover: %s promoted, the links to the database lead to it", standby.Name())
	return nil
}

// queryPostgres runs q once on a connection of its own to url, scanning
// its row into dst when given.
func queryPostgres(ctx context.Context, url, q string, dst ...any) error {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if len(dst) == 0 {
		_, err = conn.Exec(ctx, q)
		return err
	}
	return conn.QueryRow(ctx, q).Scan(dst...)
}
