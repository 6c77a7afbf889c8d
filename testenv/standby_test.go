package testenv

import (
	"context"
	"fmt"
	"net/url"
	"testing"
	"time"
)

// TestFailover fails the database over to a synchronous standby: a row
// the primary acknowledged is on the new primary, which every link and
// the direct URL now lead to; a second standby then follows the new
// primary.
func TestFailover(t *testing.T) {
	env := StartT(t, Options{NoBroker: true, Standby: ReplicationSync})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	first := env.Standby()
	if first == nil || env.Replication() != ReplicationSync {
		t.Fatalf("standby %v, replication %q: want a synchronous standby", first, env.Replication())
	}
	old, oldURL := env.Postgres(), env.DirectDatabaseURL()
	db := connectPG(ctx, t, env.DatabaseURL(LinkAppDB))
	mustExec(ctx, t, db, `CREATE TABLE testenv_rows (id int PRIMARY KEY, note text NOT NULL)`)
	mustExec(ctx, t, db, `INSERT INTO testenv_rows VALUES (1, 'acknowledged')`)
	if err := env.Failover(ctx); err != nil {
		t.Fatal(err)
	}
	if env.Postgres() != first || env.Standby() != nil || env.DirectDatabaseURL() == oldURL {
		t.Fatalf("after the failover: primary %s (was %s), standby %v, direct URL %s (was %s)",
			env.Postgres().Name(), old.Name(), env.Standby(), env.DirectDatabaseURL(), oldURL)
	}
	for _, l := range []string{LinkAppDB, LinkRelayDB, LinkConsumerDB} {
		if n := countRows(ctx, t, env.DatabaseURL(l)); n != 1 {
			t.Errorf("link %s: %d rows on the new primary, want the acknowledged one", l, n)
		}
	}
	if n := countRows(ctx, t, env.DirectDatabaseURL()); n != 1 {
		t.Errorf("direct: %d rows on the new primary, want 1", n)
	}
	if err := env.StartStandby(ctx); err != nil {
		t.Fatal(err)
	}
	second := env.Standby()
	if second == nil || second == first {
		t.Fatalf("second standby %v", second)
	}
	db2 := connectPG(ctx, t, env.DatabaseURL(LinkAppDB))
	mustExec(ctx, t, db2, `INSERT INTO testenv_rows VALUES (2, 'after the failover')`)
	if err := env.Failover(ctx); err != nil {
		t.Fatal(err)
	}
	if n := countRows(ctx, t, env.DatabaseURL(LinkAppDB)); n != 2 {
		t.Errorf("after a second failover: %d rows, want 2", n)
	}
}

// TestRestore replaces the database by a dump and restore of it: the
// rows, a sequence and a login role are on the new server, which every
// link and the direct URL lead to, and its transaction ids started
// again.
func TestRestore(t *testing.T) {
	env := StartT(t, Options{NoBroker: true})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	old, oldURL := env.Postgres(), env.DirectDatabaseURL()
	db := connectPG(ctx, t, env.DatabaseURL(LinkAppDB))
	mustExec(ctx, t, db, `CREATE TABLE testenv_rows (id int PRIMARY KEY, note text NOT NULL)`)
	mustExec(ctx, t, db, `CREATE SEQUENCE testenv_seq`)
	mustExec(ctx, t, db, `SELECT nextval('testenv_seq') FROM generate_series(1, 40)`)
	mustExec(ctx, t, db, `CREATE ROLE testenv_relay LOGIN PASSWORD 'secret'`)
	// Burn transaction ids, as a server that has run a while has.
	for i := range 50 {
		mustExec(ctx, t, db, fmt.Sprintf(`INSERT INTO testenv_rows VALUES (%d, 'before')`, i))
	}
	var xidBefore int64
	if err := db.QueryRow(ctx, `SELECT txid_current()`).Scan(&xidBefore); err != nil {
		t.Fatal(err)
	}
	if err := env.Restore(ctx); err != nil {
		t.Fatal(err)
	}
	if env.Postgres() == old || env.DirectDatabaseURL() == oldURL {
		t.Fatalf("after the restore: primary %s, direct URL %s", env.Postgres().Name(), env.DirectDatabaseURL())
	}
	for _, l := range []string{LinkAppDB, LinkRelayDB, LinkConsumerDB} {
		if n := countRows(ctx, t, env.DatabaseURL(l)); n != 50 {
			t.Errorf("link %s: %d rows on the new server, want 50", l, n)
		}
	}
	db2 := connectPG(ctx, t, env.DirectDatabaseURL())
	var next, xidAfter int64
	if err := db2.QueryRow(ctx, `SELECT nextval('testenv_seq'), txid_current()`).Scan(&next, &xidAfter); err != nil {
		t.Fatal(err)
	}
	if next != 41 || xidAfter >= xidBefore {
		t.Errorf("after the restore: nextval %d (want 41), transaction id %d (before %d, want it to start again)", next, xidAfter, xidBefore)
	}
	role, err := url.Parse(env.DatabaseURL(LinkRelayDB))
	if err != nil {
		t.Fatal(err)
	}
	role.User = url.UserPassword("testenv_relay", "secret")
	connectPG(ctx, t, role.String())
}
