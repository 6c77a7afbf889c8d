package infra

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxlab/outboxlab/consumer"
	"github.com/outboxlab/outboxlab/internal/mutant"
	"github.com/outboxlab/outboxlab/internal/sim"
	"github.com/outboxlab/outboxlab/outbox"
	"github.com/outboxlab/outboxlab/relay"
	"github.com/outboxlab/outboxlab/testenv"
)

// pgTable creates a fresh outbox table in its own schema and stages n
// events, one a millisecond apart in occurred_at, oldest first.
func pgTable(t *testing.T, env *testenv.Env, name string, n int) (*pgxpool.Pool, outbox.Table, []uuid.UUID) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, err := pgxpool.New(ctx, env.DirectDatabaseURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	schema := fmt.Sprintf("mutant_%s_%d", name, time.Now().UnixNano()%1_000_000_000)
	if _, err := pool.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = pool.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE") })
	table := outbox.MustParseTable(schema + ".outbox")
	if err := outbox.Migrate(ctx, pool, table); err != nil {
		t.Fatal(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	base := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	var ids []uuid.UUID
	for i := range n {
		body, _ := json.Marshal(map[string]int{"n": i})
		e := outbox.Event{ID: uuid.New(), Type: "order.placed", Payload: body, OccurredAt: base.Add(time.Duration(i) * time.Millisecond)}
		if err := outbox.Stage(ctx, tx, table, e, outbox.StageOptions{}); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, e.ID)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	return pool, table, ids
}

func scanIDs(t *testing.T, raw *sim.PGRaw, all bool) []uuid.UUID {
	t.Helper()
	rows, err := raw.Scan(context.Background(), 100, all)
	if err != nil {
		t.Fatal(err)
	}
	var out []uuid.UUID
	for _, r := range rows {
		out = append(out, r.ID)
	}
	return out
}

// TestPGRaw checks the PostgreSQL form of the raw statements against the
// semantics sim.RawStore documents (and the simulated store implements):
// Scan reads in claim order without locking, Lease takes rows whatever
// their lease, MarkUnfenced marks whoever holds them, Delete deletes
// whatever the state.
func TestPGRaw(t *testing.T) {
	env := sharedEnv(t)
	ctx := context.Background()
	pool, table, ids := pgTable(t, env, "raw", 4)
	raw := sim.NewPGRaw(pool, table)

	now, err := raw.Now(ctx)
	if err != nil || time.Since(now).Abs() > time.Minute {
		t.Fatalf("Now() = %s, %v", now, err)
	}
	if got := scanIDs(t, raw, false); !slices.Equal(got, ids) {
		t.Fatalf("Scan(pending) = %v, want %v in claim order", got, ids)
	}
	// relay-a holds the oldest row under a proper claim.
	claimed, err := raw.Claim(ctx, "a", 1, time.Minute)
	if err != nil || len(claimed) != 1 || claimed[0].ID != ids[0] {
		t.Fatalf("Claim = %v, %v", claimed, err)
	}
	// Lease ignores a's lease, keeps the order of ids, skips unknown ids.
	until := now.Add(time.Hour).Truncate(time.Microsecond)
	leased, err := raw.Lease(ctx, "b", []uuid.UUID{ids[1], ids[0], uuid.New()}, until)
	if err != nil || len(leased) != 2 || leased[0].ID != ids[1] || leased[1].ID != ids[0] {
		t.Fatalf("Lease = %+v, %v; want rows %s, %s", leased, err, ids[1], ids[0])
	}
	if string(leased[0].Payload) != `{"n": 1}` && string(leased[0].Payload) != `{"n":1}` {
		t.Errorf("leased payload %s", leased[0].Payload)
	}
	rows, err := raw.Scan(ctx, 100, false)
	if err != nil {
		t.Fatal(err)
	}
	if rows[0].LockedBy != "b" || !rows[0].LockedUntil.Equal(until) || rows[0].LockedAt.IsZero() {
		t.Errorf("after Lease: %+v", rows[0])
	}
	// A zero until leases with no expiry (locked_until NULL): eligible at once.
	if _, err := raw.Lease(ctx, "c", []uuid.UUID{ids[3]}, time.Time{}); err != nil {
		t.Fatal(err)
	}
	rows, _ = raw.Scan(ctx, 100, false)
	if r := rows[3]; r.LockedBy != "c" || !r.LockedUntil.IsZero() {
		t.Errorf("Lease with zero until: %+v", r)
	}
	// a lost its lease: the fenced mark marks nothing, the unfenced one does.
	if marked, err := raw.Mark(ctx, "a", []uuid.UUID{ids[0]}); err != nil || len(marked) != 0 {
		t.Errorf("fenced Mark by a = %v, %v; want nothing (b holds the row)", marked, err)
	}
	marked, err := raw.MarkUnfenced(ctx, []uuid.UUID{ids[0]})
	if err != nil || !slices.Equal(marked, []uuid.UUID{ids[0]}) {
		t.Fatalf("MarkUnfenced = %v, %v", marked, err)
	}
	if got := scanIDs(t, raw, false); !slices.Equal(got, ids[1:]) {
		t.Errorf("Scan(pending) after the mark = %v, want %v", got, ids[1:])
	}
	all, _ := raw.Scan(ctx, 100, true)
	if len(all) != 4 || all[0].ProcessedAt.IsZero() {
		t.Errorf("Scan(all) = %+v", all)
	}
	// A processed row is no longer pending: neither marked nor leased again.
	if marked, _ := raw.MarkUnfenced(ctx, []uuid.UUID{ids[0]}); len(marked) != 0 {
		t.Errorf("MarkUnfenced marked a processed row: %v", marked)
	}
	if leased, _ := raw.Lease(ctx, "b", []uuid.UUID{ids[0]}, until); len(leased) != 0 {
		t.Errorf("Lease took a processed row: %v", leased)
	}
	// Park a row, then delete it and a pending one: Delete minds no state.
	got, err := raw.Claim(ctx, "d", 10, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	var idsClaimed []uuid.UUID
	for _, r := range got {
		idsClaimed = append(idsClaimed, r.ID)
	}
	if !slices.Equal(idsClaimed, []uuid.UUID{ids[2], ids[3]}) {
		t.Fatalf("Claim by d = %v, want the unleased and the NULL-lease rows %v", idsClaimed, []uuid.UUID{ids[2], ids[3]})
	}
	if ok, err := raw.Park(ctx, "d", ids[2], "poison"); !ok || err != nil {
		t.Fatalf("Park = %v, %v", ok, err)
	}
	n, err := raw.Delete(ctx, []uuid.UUID{ids[2], ids[3], uuid.New()})
	if err != nil || n != 2 {
		t.Fatalf("Delete = %d, %v; want 2", n, err)
	}
	if got := scanIDs(t, raw, true); !slices.Equal(got, ids[:2]) {
		t.Errorf("Scan(all) after Delete = %v, want %v", got, ids[:2])
	}
	if n, err := raw.Delete(ctx, nil); n != 0 || err != nil {
		t.Errorf("Delete(nil) = %d, %v", n, err)
	}
}

// TestMutantsOverPGRaw runs three relay-side mutants' decorators over
// PostgreSQL, as the relay process does, and sees their bug in the table.
func TestMutantsOverPGRaw(t *testing.T) {
	env := sharedEnv(t)
	ctx := context.Background()
	wrap := func(name string, raw *sim.PGRaw) relay.Store {
		m, err := mutant.LookupRelay(name)
		if err != nil {
			t.Fatal(err)
		}
		s, _ := m.Relay.Wrap(raw, nil, time.Now)
		return s
	}

	t.Run("no-lease", func(t *testing.T) {
		pool, table, ids := pgTable(t, env, "nolease", 2)
		raw := sim.NewPGRaw(pool, table)
		if rows, err := raw.Claim(ctx, "a", 10, time.Minute); err != nil || len(rows) != 2 {
			t.Fatalf("a's claim: %v, %v", rows, err)
		}
		rows, err := wrap("no-lease", raw).Claim(ctx, "b", 10, time.Minute)
		if err != nil || len(rows) != 2 || rows[0].ID != ids[0] {
			t.Fatalf("no-lease claim took %v, %v; want both rows a holds", rows, err)
		}
	})

	t.Run("sweep-pending", func(t *testing.T) {
		pool, table, _ := pgTable(t, env, "sweep", 3)
		raw := sim.NewPGRaw(pool, table)
		// The rows occurred an hour ago and none is processed.
		if n, err := raw.Sweep(ctx, time.Minute, 10); err != nil || n != 0 {
			t.Fatalf("the correct sweep deleted %d, %v", n, err)
		}
		n, err := wrap("sweep-pending", raw).Sweep(ctx, time.Minute, 10)
		if err != nil || n != 3 {
			t.Fatalf("sweep-pending deleted %d, %v; want the 3 pending rows", n, err)
		}
	})

	t.Run("unfenced-mark", func(t *testing.T) {
		pool, table, ids := pgTable(t, env, "unfenced", 1)
		raw := sim.NewPGRaw(pool, table)
		if _, err := raw.Claim(ctx, "b", 1, time.Minute); err != nil {
			t.Fatal(err)
		}
		marked, err := wrap("unfenced-mark", raw).Mark(ctx, "a", ids)
		if err != nil || !slices.Equal(marked, ids) {
			t.Fatalf("unfenced-mark by a marked %v, %v; want the row b holds", marked, err)
		}
	})
}

// TestConsumerMutantsOverPostgres runs the consumer-side mutants' forms
// over consumer.PGInbox, as a scenario's consumer would: without dedupe a
// redelivery adds a second effect; acked first, a failed apply reports
// success and leaves no effect.
func TestConsumerMutantsOverPostgres(t *testing.T) {
	env := sharedEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	schema := fmt.Sprintf("mutant_inbox_%d", time.Now().UnixNano()%1_000_000_000)
	admin, err := pgxpool.New(ctx, env.DirectDatabaseURL())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatal(err)
	}
	defer admin.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE")
	cfg, err := pgxpool.ParseConfig(env.DirectDatabaseURL())
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if err := consumer.MigrateInbox(ctx, pool); err != nil {
		t.Fatal(err)
	}
	effect := consumer.RecordEffect("c")
	pg, err := consumer.NewPGInbox(pool, "c", effect)
	if err != nil {
		t.Fatal(err)
	}
	msg := func(id string) consumer.Message {
		return consumer.Message{ID: id, Type: "order.placed", Payload: []byte(`{}`)}
	}
	counts := func() map[string]int {
		t.Helper()
		c, err := consumer.EffectCounts(ctx, pool, "c")
		if err != nil {
			t.Fatal(err)
		}
		return c
	}

	// The reference absorbs the redelivery.
	for range 2 {
		if _, err := pg.Apply(ctx, msg("ref")); err != nil {
			t.Fatal(err)
		}
	}
	nodedupe, _ := mutant.Lookup("consumer-no-dedupe")
	in := nodedupe.WrapInbox(pg, mutant.PGEffect(pool, effect))
	for range 2 {
		if dup, err := in.Apply(ctx, msg("twice")); dup || err != nil {
			t.Fatalf("no-dedupe Apply = %v, %v", dup, err)
		}
	}
	ackFirst, _ := mutant.Lookup("consumer-ack-before-commit")
	in = ackFirst.WrapInbox(pg, mutant.PGEffect(pool, effect))
	dead, stop := context.WithCancel(ctx)
	stop()
	if dup, err := in.Apply(dead, msg("gone")); dup || err != nil {
		t.Fatalf("ack-before-commit Apply on a failing database = %v, %v; want success reported", dup, err)
	}
	if _, err := pg.Apply(dead, msg("kept")); err == nil {
		t.Fatal("the reference reported success for an apply that could not run")
	}
	// The forms that key or check the inbox themselves run on the
	// production inbox's statements: a key recorded before absorbs
	// another event (the delivery-tag bug), and a write without the
	// check applies an event recorded before.
	k := mutant.PGKeyed(pg)
	if seen, err := k.Seen(ctx, "ref"); !seen || err != nil {
		t.Fatalf("Seen(ref) = %v, %v; want true", seen, err)
	}
	if seen, err := k.Seen(ctx, "tag-1"); seen || err != nil {
		t.Fatalf("Seen(tag-1) = %v, %v; want false", seen, err)
	}
	if dup, err := k.ApplyAs(ctx, "tag-1", msg("a")); dup || err != nil {
		t.Fatalf("ApplyAs(tag-1, a) = %v, %v", dup, err)
	}
	if dup, err := k.ApplyAs(ctx, "tag-1", msg("b")); !dup || err != nil {
		t.Fatalf("ApplyAs(tag-1, b) = %v, %v; want a duplicate", dup, err)
	}
	if err := k.Record(ctx, "ref", msg("ref")); err != nil {
		t.Fatal(err)
	}
	got := counts()
	if got["ref"] != 2 || got["twice"] != 2 || got["gone"] != 0 || got["kept"] != 0 || got["a"] != 1 || got["b"] != 0 {
		t.Errorf("effects %v: want ref twice (once more by Record), twice twice, a once, none for gone, kept and b", got)
	}
	if reference, _ := mutant.Lookup("no-lease"); reference.WrapInbox(pg, nil) != consumer.Inbox(pg) {
		t.Error("a relay-side mutant changed the consumer's inbox")
	}
}
