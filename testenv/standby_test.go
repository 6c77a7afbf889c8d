package testenv

import (
	"context"
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
