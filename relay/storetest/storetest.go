// Package storetest is one behaviour suite for relay.Store, run against
// every backend: the simulation's in-memory store (sim.Store, under -short)
// and relay.PGStore on a real PostgreSQL. The simulation tier is only as
// good as its fakes, and this suite is what keeps the fake honest: the same
// cases, the same assertions, both backends.
//
// Time passes through Backend.Advance. The simulated store moves its clock;
// the PostgreSQL backend waits in real time until the database clock has
// moved that far, which is why its Unit is small (a lease of 3 units is
// under a second) and why its cases take a few seconds in all.
package storetest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/outboxlab/outboxlab/outbox"
	"github.com/outboxlab/outboxlab/relay"
)

// Row is the state of one outbox row as a backend reads it. Zero times
// stand for NULL.
type Row struct {
	ProcessedAt time.Time
	FaultedAt   time.Time
	Attempts    int
	LockedBy    string
	LockedUntil time.Time
	OccurredAt  time.Time
}

// Backend is one implementation of relay.Store with the means to drive it.
type Backend struct {
	// Store is a store over a fresh, empty outbox table.
	Store relay.Store
	// Stage commits events in one transaction.
	Stage func(t testing.TB, events ...outbox.Event)
	// Now reads the store's clock (the database clock).
	Now func(t testing.TB) time.Time
	// Advance lets at least d pass on the store's clock.
	Advance func(t testing.TB, d time.Duration)
	// Row reads a row; false when it is gone.
	Row func(t testing.TB, id uuid.UUID) (Row, bool)
	// Unit is the time scale of the cases: leases are a few units long.
	Unit time.Duration
	// Concurrent says the store may be called from several goroutines at
	// once; the suite then races claims against each other.
	Concurrent bool
	// LockElsewhere, when set, locks row id in a transaction of another
	// session (another replica's claim in flight) and returns what
	// releases it. Nil for a backend whose calls are atomic.
	LockElsewhere func(t testing.TB, id uuid.UUID) (release func())
	// Rewrite, when set, rewrites row id without changing a value, as an
	// operator's no-op UPDATE or a vacuum moving it does: the row takes
	// another place in the table, so that a statement without its ORDER
	// BY meets rows in another order than their times'. Nil: the backend
	// keeps no physical order.
	Rewrite func(t testing.TB, id uuid.UUID)
	// FaultByHand, when set, sets faulted_at on row id as an operator
	// parking a row by hand does, whatever state the row is in.
	FaultByHand func(t testing.TB, id uuid.UUID)
}

// Run runs every case; newBackend is called once per case.
func Run(t *testing.T, newBackend func(t *testing.T) Backend) { run(t, newBackend, false) }

// RunParallel is Run with the cases running at the same time, for a
// backend whose cases are isolated from each other (a schema each) and
// whose time passes for real: their waits on the clock then overlap
// instead of adding up.
func RunParallel(t *testing.T, newBackend func(t *testing.T) Backend) { run(t, newBackend, true) }

func run(t *testing.T, newBackend func(t *testing.T) Backend, parallel bool) {
	cases := []struct {
		name string
		fn   func(t *testing.T, b Backend)
	}{
		{"ClaimOldestFirst", testClaimOldestFirst},
		{"ClaimSkipsLeasedTakesExpired", testClaimSkipsLeased},
		{"TwoOwnersNeverShareARow", testTwoOwners},
		{"ConcurrentClaimsAreDisjoint", testConcurrentClaims},
		{"ClaimSkipsRowsLockedElsewhere", testClaimSkipsLocked},
		{"MarkIsFenced", testMarkFenced},
		{"RetryBacksOff", testRetryBacksOff},
		{"RetryParksAtMaxAttempts", testRetryParks},
		{"RetryAndParkAreFenced", testRetryParkFenced},
		{"WritesTouchOnlyPendingRows", testWritesOnlyPending},
		{"ParkUnknownType", testParkUnknownType},
		{"SweepOnlyOldProcessedRows", testSweep},
		{"SweepOldestFirstNeverFaulted", testSweepOrder},
		{"SweepSkipsRowsLockedElsewhere", testSweepSkipsLocked},
		{"TimesAreTheStoreClock", testStoreClock},
		{"Stats", testStats},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if parallel {
				t.Parallel()
			}
			c.fn(t, newBackend(t))
		})
	}
}

// ID returns a fixed event id for n, time-ordered like the ids of
// outbox.NewEvent so that id order breaks occurred_at ties predictably.
func ID(n int) uuid.UUID {
	var id uuid.UUID
	id[6], id[8] = 0x70, 0x80
	for i := 15; i >= 10 && n > 0; i-- {
		id[i] = byte(n)
		n >>= 8
	}
	return id
}

// event returns event n of type typ, occurred at the given time (zero:
// the database decides).
func event(n int, typ string, at time.Time) outbox.Event {
	return outbox.Event{ID: ID(n), Type: typ, Payload: []byte(fmt.Sprintf(`{"n":%d}`, n)), OccurredAt: at}
}

func ids(rows []relay.Row) []uuid.UUID {
	out := make([]uuid.UUID, len(rows))
	for i, r := range rows {
		out[i] = r.ID
	}
	return out
}

func claim(t *testing.T, b Backend, owner string, limit int, lease time.Duration) []relay.Row {
	t.Helper()
	rows, err := b.Store.Claim(context.Background(), owner, limit, lease)
	if err != nil {
		t.Fatalf("claim by %s: %v", owner, err)
	}
	return rows
}

func mark(t *testing.T, b Backend, owner string, want ...uuid.UUID) []uuid.UUID {
	t.Helper()
	got, err := b.Store.Mark(context.Background(), owner, want)
	if err != nil {
		t.Fatalf("mark by %s: %v", owner, err)
	}
	return got
}

func row(t *testing.T, b Backend, id uuid.UUID) Row {
	t.Helper()
	r, ok := b.Row(t, id)
	if !ok {
		t.Fatalf("row %s is gone", id)
	}
	return r
}

// sameJSON compares a payload by value: jsonb does not keep the bytes.
func sameJSON(got []byte, want string) bool {
	var g, w any
	if json.Unmarshal(got, &g) != nil || json.Unmarshal([]byte(want), &w) != nil {
		return false
	}
	return reflect.DeepEqual(g, w)
}

func sameIDs(got, want []uuid.UUID) bool {
	g := slices.Clone(got)
	w := slices.Clone(want)
	cmp := func(a, b uuid.UUID) int { return bytes.Compare(a[:], b[:]) }
	slices.SortFunc(g, cmp)
	slices.SortFunc(w, cmp)
	return slices.Equal(g, w)
}

func testClaimOldestFirst(t *testing.T, b Backend) {
	now := b.Now(t)
	// Committed in this order, occurred in another: 3 is oldest, then 1
	// and 2 at the same instant (id order decides), then 4.
	b.Stage(t, event(1, "t", now.Add(-2*time.Minute)), event(2, "t", now.Add(-2*time.Minute)))
	b.Stage(t, event(4, "t", now.Add(-time.Minute)))
	b.Stage(t, event(3, "t", now.Add(-3*time.Minute)))
	lease := 3 * b.Unit
	first := claim(t, b, "a", 2, lease)
	if want := []uuid.UUID{ID(3), ID(1)}; !slices.Equal(ids(first), want) {
		t.Fatalf("first claim = %v, want %v (oldest occurred_at first, then id)", ids(first), want)
	}
	if first[0].Type != "t" || !sameJSON(first[0].Payload, `{"n":3}`) || first[0].Attempts != 0 {
		t.Errorf("claimed row = %+v, want type t, payload {\"n\":3}, attempts 0", first[0])
	}
	if !first[0].OccurredAt.Equal(now.Add(-3 * time.Minute).Truncate(time.Microsecond)) {
		t.Errorf("occurred_at = %s, want %s", first[0].OccurredAt, now.Add(-3*time.Minute))
	}
	second := claim(t, b, "a", 10, lease)
	if want := []uuid.UUID{ID(2), ID(4)}; !slices.Equal(ids(second), want) {
		t.Fatalf("second claim = %v, want %v", ids(second), want)
	}
	if rest := claim(t, b, "a", 10, lease); len(rest) != 0 {
		t.Fatalf("third claim = %v, want nothing", ids(rest))
	}
	// Every lease runs out: one claim takes all four back, in order, the
	// two of one instant by id.
	b.Advance(t, lease+b.Unit)
	if all := claim(t, b, "b", 10, lease); !slices.Equal(ids(all), []uuid.UUID{ID(3), ID(1), ID(2), ID(4)}) {
		t.Fatalf("claim of every row = %v, want %v", ids(all), []uuid.UUID{ID(3), ID(1), ID(2), ID(4)})
	}
}

func testClaimSkipsLeased(t *testing.T, b Backend) {
	b.Stage(t, event(1, "t", time.Time{}), event(2, "t", time.Time{}))
	lease := 3 * b.Unit
	before := b.Now(t)
	got := claim(t, b, "a", 10, lease)
	if len(got) != 2 {
		t.Fatalf("claim = %v, want both rows", ids(got))
	}
	r := row(t, b, ID(1))
	if r.LockedBy != "a" || r.LockedUntil.Before(before.Add(lease)) {
		t.Errorf("row after claim: locked_by %q until %s, want a until at least %s", r.LockedBy, r.LockedUntil, before.Add(lease))
	}
	if other := claim(t, b, "b", 10, lease); len(other) != 0 {
		t.Fatalf("b claimed %v while a's lease holds", ids(other))
	}
	b.Advance(t, lease+b.Unit)
	taken := claim(t, b, "b", 10, lease)
	if !sameIDs(ids(taken), []uuid.UUID{ID(1), ID(2)}) {
		t.Fatalf("after the lease expired b claimed %v, want both rows", ids(taken))
	}
	if r := row(t, b, ID(2)); r.LockedBy != "b" {
		t.Errorf("locked_by = %q after b's claim, want b", r.LockedBy)
	}
}

func testTwoOwners(t *testing.T, b Backend) {
	var evs []outbox.Event
	for i := 1; i <= 10; i++ {
		evs = append(evs, event(i, "t", time.Time{}))
	}
	b.Stage(t, evs...)
	lease := 3 * b.Unit
	a := claim(t, b, "a", 4, lease)
	bb := claim(t, b, "b", 100, lease)
	if len(a) != 4 || len(bb) != 6 {
		t.Fatalf("a claimed %d, b claimed %d; want 4 and 6", len(a), len(bb))
	}
	all := append(ids(a), ids(bb)...)
	var want []uuid.UUID
	for i := 1; i <= 10; i++ {
		want = append(want, ID(i))
	}
	if !sameIDs(all, want) {
		t.Fatalf("a and b claimed %v together, want each row exactly once", all)
	}
}

func testConcurrentClaims(t *testing.T, b Backend) {
	if !b.Concurrent {
		t.Skip("the backend is called one call at a time; its calls are atomic")
	}
	const rows, owners = 60, 6
	var evs []outbox.Event
	for i := 1; i <= rows; i++ {
		evs = append(evs, event(i, "t", time.Time{}))
	}
	b.Stage(t, evs...)
	var (
		mu   sync.Mutex
		seen = map[uuid.UUID]string{}
		wg   sync.WaitGroup
	)
	for o := range owners {
		wg.Add(1)
		go func() {
			defer wg.Done()
			owner := fmt.Sprintf("owner-%d", o)
			for {
				got, err := b.Store.Claim(context.Background(), owner, 3, 10*b.Unit)
				if err != nil {
					t.Errorf("claim by %s: %v", owner, err)
					return
				}
				if len(got) == 0 {
					return
				}
				mu.Lock()
				for _, r := range got {
					if prev, dup := seen[r.ID]; dup {
						t.Errorf("row %s claimed by %s and %s", r.ID, prev, owner)
					}
					seen[r.ID] = owner
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(seen) != rows {
		t.Fatalf("%d rows claimed, want %d", len(seen), rows)
	}
}

// testClaimSkipsLocked holds a lock on the oldest row in another session,
// as a replica's claim in flight does, and claims: the claim must take the
// next rows at once, neither wait for the lock (FOR UPDATE without SKIP
// LOCKED) nor take the locked row (no FOR UPDATE: the update would wait,
// then take it over).
func testClaimSkipsLocked(t *testing.T, b Backend) {
	if b.LockElsewhere == nil {
		t.Skip("the backend's calls are atomic: no lock outlives a call")
	}
	now := b.Now(t)
	b.Stage(t, event(1, "t", now.Add(-3*time.Minute)), event(2, "t", now.Add(-2*time.Minute)), event(3, "t", now.Add(-time.Minute)))
	release := b.LockElsewhere(t, ID(1))
	defer release()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	start := time.Now()
	got, err := b.Store.Claim(ctx, "a", 2, 10*b.Unit)
	if err != nil {
		t.Fatalf("claim beside a row locked elsewhere: %v after %s (it waited on the lock)", err, time.Since(start).Round(time.Millisecond))
	}
	if !slices.Equal(ids(got), []uuid.UUID{ID(2), ID(3)}) {
		t.Fatalf("claimed %v beside locked row 1, want [%s %s]", ids(got), ID(2), ID(3))
	}
	release()
	if got := claim(t, b, "b", 10, 10*b.Unit); !slices.Equal(ids(got), []uuid.UUID{ID(1)}) {
		t.Fatalf("after the lock went, b claimed %v, want [%s]", ids(got), ID(1))
	}
}

// testWritesOnlyPending checks that a lease holder's mark, retry and park
// change only pending rows: a row it already parked or marked stays as it
// is, under a lease that is still live.
func testWritesOnlyPending(t *testing.T, b Backend) {
	b.Stage(t, event(1, "t", time.Time{}), event(2, "t", time.Time{}))
	lease := 10 * b.Unit
	p := policy(b, 5)
	claim(t, b, "a", 10, lease)
	if ok, err := b.Store.Park(context.Background(), "a", ID(1), "poison"); err != nil || !ok {
		t.Fatalf("park = %v, %v; want true", ok, err)
	}
	if got := mark(t, b, "a", ID(2)); !slices.Equal(got, []uuid.UUID{ID(2)}) {
		t.Fatalf("a marked %v, want [%s]", got, ID(2))
	}
	parked, marked := row(t, b, ID(1)), row(t, b, ID(2))
	b.Advance(t, b.Unit)
	for _, id := range []uuid.UUID{ID(1), ID(2)} {
		if res := retry(t, b, "a", id, p); res.Applied {
			t.Errorf("retry of row %s, no longer pending, applied: %+v", id, res)
		}
		if ok, err := b.Store.Park(context.Background(), "a", id, "again"); err != nil || ok {
			t.Errorf("park of row %s, no longer pending = %v, %v; want false", id, ok, err)
		}
	}
	if got := mark(t, b, "a", ID(1), ID(2)); len(got) != 0 {
		t.Errorf("mark of rows no longer pending marked %v", got)
	}
	if r := row(t, b, ID(1)); r != parked {
		t.Errorf("parked row changed by later writes: %+v, was %+v", r, parked)
	}
	if r := row(t, b, ID(2)); r != marked {
		t.Errorf("processed row changed by later writes: %+v, was %+v", r, marked)
	}
}

func testMarkFenced(t *testing.T, b Backend) {
	b.Stage(t, event(1, "t", time.Time{}), event(2, "t", time.Time{}))
	lease := 3 * b.Unit
	claim(t, b, "a", 10, lease)
	if got := mark(t, b, "b", ID(1)); len(got) != 0 {
		t.Fatalf("b marked %v, a row a holds", got)
	}
	if got := mark(t, b, "a", ID(1)); !slices.Equal(got, []uuid.UUID{ID(1)}) {
		t.Fatalf("a marked %v, want [%s]", got, ID(1))
	}
	if r := row(t, b, ID(1)); r.ProcessedAt.IsZero() {
		t.Fatal("row 1 not processed after a's mark")
	}
	if got := mark(t, b, "a", ID(1)); len(got) != 0 {
		t.Fatalf("second mark of a processed row returned %v", got)
	}
	// a's lease on row 2 expires: its late mark must change nothing.
	b.Advance(t, lease+b.Unit)
	if got := mark(t, b, "a", ID(2)); len(got) != 0 {
		t.Fatalf("a's mark after its lease expired marked %v", got)
	}
	if r := row(t, b, ID(2)); !r.ProcessedAt.IsZero() {
		t.Fatal("late mark set processed_at")
	}
	if got := claim(t, b, "b", 10, lease); !slices.Equal(ids(got), []uuid.UUID{ID(2)}) {
		t.Fatalf("b claimed %v, want row 2 back", ids(got))
	}
	if got := mark(t, b, "a", ID(2)); len(got) != 0 {
		t.Fatalf("a marked %v, a row b holds now", got)
	}
	if got := mark(t, b, "b", ID(2), ID(1), ID(99)); !slices.Equal(got, []uuid.UUID{ID(2)}) {
		t.Fatalf("b marked %v, want only [%s]", got, ID(2))
	}
}

func policy(b Backend, maxAttempts int) relay.RetryPolicy {
	return relay.RetryPolicy{MaxAttempts: maxAttempts, BackoffBase: 2 * b.Unit, BackoffMax: 3 * b.Unit}
}

func retry(t *testing.T, b Backend, owner string, id uuid.UUID, p relay.RetryPolicy) relay.RetryResult {
	t.Helper()
	res, err := b.Store.Retry(context.Background(), owner, id, p, "boom")
	if err != nil {
		t.Fatalf("retry by %s: %v", owner, err)
	}
	return res
}

func testRetryBacksOff(t *testing.T, b Backend) {
	b.Stage(t, event(1, "t", time.Time{}))
	lease := 10 * b.Unit
	p := policy(b, 5)
	claim(t, b, "a", 1, lease)
	before := b.Now(t)
	res := retry(t, b, "a", ID(1), p)
	if !res.Applied || res.Attempts != 1 || res.Parked {
		t.Fatalf("first retry = %+v, want applied, 1 attempt, not parked", res)
	}
	r := row(t, b, ID(1))
	// The first failure backs off by Backoff(0) = BackoffBase: the backoff
	// counts the attempts made before this failure.
	if want := before.Add(p.Backoff(0)); r.Attempts != 1 || r.LockedUntil.Before(want) || r.LockedUntil.After(want.Add(b.Unit)) {
		t.Fatalf("row after retry: attempts %d, locked_until %s; want 1 and about %s", r.Attempts, r.LockedUntil, want)
	}
	if got := claim(t, b, "b", 1, lease); len(got) != 0 {
		t.Fatal("row claimable during its backoff")
	}
	b.Advance(t, p.Backoff(0)+b.Unit/2)
	got := claim(t, b, "b", 1, lease)
	if len(got) != 1 || got[0].Attempts != 1 {
		t.Fatalf("after the backoff b claimed %+v, want the row with 1 attempt", got)
	}
	before = b.Now(t)
	res = retry(t, b, "b", ID(1), p)
	if !res.Applied || res.Attempts != 2 {
		t.Fatalf("second retry = %+v, want applied with 2 attempts", res)
	}
	// The second backs off by Backoff(1) = min(2 x base, max) = max here.
	if want := before.Add(p.Backoff(1)); row(t, b, ID(1)).LockedUntil.Before(want) {
		t.Fatalf("second backoff shorter than %s", p.Backoff(1))
	}
	b.Advance(t, p.Backoff(0)+b.Unit/2)
	if got := claim(t, b, "b", 1, lease); len(got) != 0 {
		t.Fatal("row claimable after the first backoff's length: the second must be longer")
	}
	b.Advance(t, p.Backoff(1)-p.Backoff(0)+b.Unit/2)
	if got := claim(t, b, "b", 1, lease); len(got) != 1 {
		t.Fatal("row not claimable after its second backoff")
	}
}

func testRetryParks(t *testing.T, b Backend) {
	b.Stage(t, event(1, "t", time.Time{}))
	p := policy(b, 2)
	lease := 10 * b.Unit
	claim(t, b, "a", 1, lease)
	if res := retry(t, b, "a", ID(1), p); !res.Applied || res.Parked {
		t.Fatalf("first retry = %+v, want applied, not parked", res)
	}
	b.Advance(t, p.Backoff(0)+b.Unit/2)
	if got := claim(t, b, "a", 1, lease); len(got) != 1 {
		t.Fatal("row not back after its backoff")
	}
	res := retry(t, b, "a", ID(1), p)
	if !res.Applied || !res.Parked || res.Attempts != 2 {
		t.Fatalf("retry at the limit = %+v, want applied, parked, 2 attempts", res)
	}
	r := row(t, b, ID(1))
	if r.FaultedAt.IsZero() || r.Attempts != 2 || !r.ProcessedAt.IsZero() {
		t.Fatalf("row after parking: %+v, want faulted with 2 attempts, not processed", r)
	}
	b.Advance(t, p.BackoffMax+b.Unit)
	if got := claim(t, b, "b", 10, lease); len(got) != 0 {
		t.Fatal("a faulted row was claimed")
	}
	if got := mark(t, b, "a", ID(1)); len(got) != 0 {
		t.Fatal("a faulted row was marked")
	}
}

func testRetryParkFenced(t *testing.T, b Backend) {
	b.Stage(t, event(1, "t", time.Time{}))
	p := policy(b, 5)
	lease := 3 * b.Unit
	claim(t, b, "a", 1, lease)
	if res := retry(t, b, "b", ID(1), p); res.Applied {
		t.Fatalf("b's retry of a's row applied: %+v", res)
	}
	if ok, err := b.Store.Park(context.Background(), "b", ID(1), "poison"); err != nil || ok {
		t.Fatalf("b's park of a's row = %v, %v; want false", ok, err)
	}
	b.Advance(t, lease+b.Unit)
	if res := retry(t, b, "a", ID(1), p); res.Applied {
		t.Fatalf("retry after the lease expired applied: %+v", res)
	}
	if ok, err := b.Store.Park(context.Background(), "a", ID(1), "poison"); err != nil || ok {
		t.Fatalf("park after the lease expired = %v, %v; want false", ok, err)
	}
	if r := row(t, b, ID(1)); r.Attempts != 0 || !r.FaultedAt.IsZero() {
		t.Fatalf("row changed by fenced-out writes: %+v", r)
	}
}

func testParkUnknownType(t *testing.T, b Backend) {
	b.Stage(t, event(1, "no.such.type", time.Time{}), event(2, "t", time.Time{}))
	lease := 3 * b.Unit
	got := claim(t, b, "a", 10, lease)
	if len(got) != 2 {
		t.Fatalf("claimed %v, want both", ids(got))
	}
	ok, err := b.Store.Park(context.Background(), "a", ID(1), "unknown message type")
	if err != nil || !ok {
		t.Fatalf("park = %v, %v; want true", ok, err)
	}
	r := row(t, b, ID(1))
	if r.FaultedAt.IsZero() || r.Attempts != 0 {
		t.Fatalf("parked row %+v: want faulted at once, no attempt consumed", r)
	}
	if ok, _ := b.Store.Park(context.Background(), "a", ID(1), "again"); ok {
		t.Fatal("a faulted row was parked twice")
	}
	b.Advance(t, lease+b.Unit)
	if got := claim(t, b, "b", 10, lease); !slices.Equal(ids(got), []uuid.UUID{ID(2)}) {
		t.Fatalf("after expiry b claimed %v, want only the healthy row", ids(got))
	}
}

func testSweep(t *testing.T, b Backend) {
	b.Stage(t, event(1, "t", time.Time{}), event(2, "t", time.Time{}), event(3, "t", time.Time{}),
		event(4, "bad", time.Time{}), event(5, "t", time.Time{}))
	lease := 10 * b.Unit
	retention := 2 * b.Unit
	claim(t, b, "a", 4, lease) // 1..4; 5 stays pending and unclaimed
	mark(t, b, "a", ID(1), ID(2), ID(3))
	if ok, err := b.Store.Park(context.Background(), "a", ID(4), "poison"); err != nil || !ok {
		t.Fatalf("park = %v, %v", ok, err)
	}
	if n, err := b.Store.Sweep(context.Background(), retention, 10); err != nil || n != 0 {
		t.Fatalf("sweep before retention deleted %d (%v), want 0", n, err)
	}
	b.Advance(t, retention+b.Unit)
	n, err := b.Store.Sweep(context.Background(), retention, 2)
	if err != nil || n != 2 {
		t.Fatalf("sweep with limit 2 deleted %d (%v), want 2", n, err)
	}
	n, err = b.Store.Sweep(context.Background(), retention, 10)
	if err != nil || n != 1 {
		t.Fatalf("second sweep deleted %d (%v), want the last processed row", n, err)
	}
	for _, i := range []int{1, 2, 3} {
		if _, ok := b.Row(t, ID(i)); ok {
			t.Errorf("processed row %d survived the sweep", i)
		}
	}
	for _, i := range []int{4, 5} {
		if _, ok := b.Row(t, ID(i)); !ok {
			t.Errorf("row %d (faulted or pending) was swept", i)
		}
	}
	// Rows processed now are young again: a sweep leaves them.
	claim(t, b, "a", 1, lease)
	mark(t, b, "a", ID(5))
	if n, err := b.Store.Sweep(context.Background(), retention, 10); err != nil || n != 0 {
		t.Fatalf("sweep of a freshly processed row deleted %d (%v)", n, err)
	}
}

// testSweepOrder checks that a sweep limited to fewer rows than are due
// deletes the rows processed first, whatever their place in the table,
// and never a faulted row, even one an operator faulted after it was
// processed.
func testSweepOrder(t *testing.T, b Backend) {
	b.Stage(t, event(1, "t", time.Time{}), event(2, "t", time.Time{}), event(3, "t", time.Time{}), event(4, "t", time.Time{}))
	lease := 10 * b.Unit
	retention := 2 * b.Unit
	claim(t, b, "a", 10, lease)
	mark(t, b, "a", ID(1))
	b.Advance(t, b.Unit/2)
	mark(t, b, "a", ID(2), ID(4))
	b.Advance(t, b.Unit/2)
	mark(t, b, "a", ID(3))
	if b.Rewrite != nil {
		// Row 1, processed first, now lies after the others.
		b.Rewrite(t, ID(1))
	}
	if b.FaultByHand != nil {
		b.FaultByHand(t, ID(4))
	}
	b.Advance(t, retention+2*b.Unit)
	if n, err := b.Store.Sweep(context.Background(), retention, 1); err != nil || n != 1 {
		t.Fatalf("sweep with limit 1 deleted %d (%v), want 1", n, err)
	}
	if _, ok := b.Row(t, ID(1)); ok {
		t.Fatal("a sweep limited to one row left the row processed first")
	}
	if n, err := b.Store.Sweep(context.Background(), retention, 10); err != nil {
		t.Fatalf("sweep: %v", err)
	} else if want := 2 + btoi(b.FaultByHand == nil); n != want {
		t.Fatalf("second sweep deleted %d, want %d", n, want)
	}
	if b.FaultByHand != nil {
		if _, ok := b.Row(t, ID(4)); !ok {
			t.Fatal("a sweep deleted a row an operator faulted")
		}
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// testSweepSkipsLocked holds a lock on an old processed row in another
// session and sweeps: the sweep must delete the other rows at once, not
// wait for the lock.
func testSweepSkipsLocked(t *testing.T, b Backend) {
	if b.LockElsewhere == nil {
		t.Skip("the backend's calls are atomic: no lock outlives a call")
	}
	b.Stage(t, event(1, "t", time.Time{}), event(2, "t", time.Time{}))
	retention := 2 * b.Unit
	claim(t, b, "a", 10, 10*b.Unit)
	mark(t, b, "a", ID(1), ID(2))
	b.Advance(t, retention+b.Unit)
	release := b.LockElsewhere(t, ID(1))
	defer release()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	start := time.Now()
	n, err := b.Store.Sweep(ctx, retention, 10)
	if err != nil {
		t.Fatalf("sweep beside a row locked elsewhere: %v after %s (it waited on the lock)", err, time.Since(start).Round(time.Millisecond))
	}
	if n != 1 {
		t.Fatalf("sweep beside locked row 1 deleted %d, want 1", n)
	}
	if _, ok := b.Row(t, ID(1)); !ok {
		t.Fatal("the locked row was swept")
	}
}

// testStoreClock checks that every time the store writes or reports is its
// own clock's (the database's) at the call: processed_at, faulted_at, a
// retry's time, a timed mark's and sweep's time.
func testStoreClock(t *testing.T, b Backend) {
	b.Stage(t, event(1, "t", time.Time{}), event(2, "t", time.Time{}), event(3, "t", time.Time{}))
	claim(t, b, "a", 10, 10*b.Unit)
	within := func(what string, got, before, after time.Time) {
		t.Helper()
		if got.Before(before.Truncate(time.Microsecond)) || got.After(after) {
			t.Errorf("%s = %s, want the store's clock at the call, between %s and %s", what, got, before, after)
		}
	}
	before := b.Now(t)
	res := retry(t, b, "a", ID(1), policy(b, 1))
	after := b.Now(t)
	if !res.Applied || !res.Parked {
		t.Fatalf("retry at the limit = %+v, want applied and parked", res)
	}
	if !res.At.IsZero() {
		within("the retry's time", res.At, before, after)
	}
	within("faulted_at of the row parked by its retry", row(t, b, ID(1)).FaultedAt, before, after)
	b.Advance(t, b.Unit)
	before = b.Now(t)
	if ok, err := b.Store.Park(context.Background(), "a", ID(2), "poison"); err != nil || !ok {
		t.Fatalf("park = %v, %v; want true", ok, err)
	}
	after = b.Now(t)
	within("faulted_at of the parked row", row(t, b, ID(2)).FaultedAt, before, after)
	b.Advance(t, b.Unit)
	before = b.Now(t)
	ts, timed := b.Store.(relay.TimedStore)
	if timed {
		got, at, err := ts.MarkAt(context.Background(), "a", []uuid.UUID{ID(3)})
		if err != nil || len(got) != 1 {
			t.Fatalf("timed mark = %v, %v; want row 3", got, err)
		}
		within("the timed mark's time", at, before, b.Now(t))
	} else {
		mark(t, b, "a", ID(3))
	}
	after = b.Now(t)
	within("processed_at", row(t, b, ID(3)).ProcessedAt, before, after)
	if !timed {
		return
	}
	b.Advance(t, 3*b.Unit)
	before = b.Now(t)
	gone, at, err := ts.SweepIDs(context.Background(), 2*b.Unit, 10)
	if err != nil || !slices.Equal(gone, []uuid.UUID{ID(3)}) {
		t.Fatalf("timed sweep = %v, %v; want row 3", gone, err)
	}
	within("the timed sweep's time", at, before, b.Now(t))
}

func testStats(t *testing.T, b Backend) {
	stats := func() relay.Stats {
		t.Helper()
		st, err := b.Store.Stats(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	if st := stats(); st != (relay.Stats{}) {
		t.Fatalf("stats of an empty table = %+v, want zeros", st)
	}
	now := b.Now(t)
	b.Stage(t, event(1, "t", now.Add(-time.Hour)), event(2, "t", now.Add(-2*time.Hour)),
		event(3, "t", now.Add(-30*time.Minute)), event(4, "t", now.Add(-10*time.Minute)), event(5, "t", now.Add(-5*time.Minute)))
	lease := 10 * b.Unit
	claim(t, b, "a", 2, lease) // 2 and 1
	mark(t, b, "a", ID(1))
	if ok, _ := b.Store.Park(context.Background(), "a", ID(2), "poison"); !ok {
		t.Fatal("park failed")
	}
	claim(t, b, "a", 1, lease) // 3, leased
	st := stats()
	want := relay.Stats{Pending: 3, Eligible: 2, Faulted: 1, Processed: 1}
	got := st
	got.OldestEligibleAge = 0
	if got != want {
		t.Fatalf("stats = %+v, want %+v", st, want)
	}
	// The oldest eligible row is 4, occurred 10 minutes before now.
	if st.OldestEligibleAge < 10*time.Minute || st.OldestEligibleAge > 10*time.Minute+time.Minute {
		t.Fatalf("oldest eligible age = %s, want about 10m", st.OldestEligibleAge)
	}
	// Every lease runs out: row 3 is eligible again; the processed and
	// the parked row, whose leases ran out too, are neither.
	b.Advance(t, lease+b.Unit)
	st = stats()
	got = st
	got.OldestEligibleAge = 0
	if want := (relay.Stats{Pending: 3, Eligible: 3, Faulted: 1, Processed: 1}); got != want {
		t.Fatalf("stats after the leases ran out = %+v, want %+v", st, want)
	}
	if age := 30*time.Minute + lease + b.Unit; st.OldestEligibleAge < age || st.OldestEligibleAge > age+time.Minute {
		t.Fatalf("oldest eligible age after the leases ran out = %s, want about %s (row 3's)", st.OldestEligibleAge, age)
	}
	// Nothing eligible: no age.
	claim(t, b, "a", 10, lease)
	if st := stats(); st.Eligible != 0 || st.OldestEligibleAge != 0 {
		t.Fatalf("stats with every pending row leased = %+v, want no eligible row and no age", st)
	}
}
