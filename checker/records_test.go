package checker

import (
	"testing"
	"time"

	"github.com/outboxlab/outboxlab/history"
)

// The tests in this file feed the checkers histories as a relay's own
// records write them on containers (relay.FileRecords): claims with their
// lease on the database clock, marks with their processed_at, retries
// with their next eligible time, sweeps with their cutoff. Each promise
// of docs/contract.md §2 is broken once, and kept once.

// db is a database clock, apart from the records' own times.
var db = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

const lease = 20 * time.Second

// claimAt records a claim by p of ids at database time at, for lease.
func (b *hb) claimAt(p string, at time.Time, ids ...string) *hb {
	return b.invoke(p, history.Claim).rec(p, history.OK, history.Claim, history.Meta{DBTime: at, Until: at.Add(lease)}, ids...)
}

// retryAt records a retry by p of id at database time at that left n
// attempts and the row eligible again after backoff.
func (b *hb) retryAt(p, id string, n int, at time.Time, backoff time.Duration) *hb {
	return b.retry(p, id, history.Meta{Attempts: n, DBTime: at, Until: at.Add(backoff)})
}

func fenced() Config { return Config{Features: Features{Stages: true, Fenced: true, Parks: true}} }

func TestLeasesFromRecords(t *testing.T) {
	runCases(t, Leases, []checkCase{
		{
			name: "claimed again after the lease ran out",
			h: build().commit("p", "e1").claimAt("relay-a", db, "e1").publish("relay-a", "e1").
				claimAt("relay-b", db.Add(lease+time.Second), "e1").publish("relay-b", "e1").markAt("relay-b", db.Add(lease+2*time.Second), "e1").h(),
			cfg: fenced(), valid: true,
		},
		{
			name: "claimed while another relay's lease was live",
			h: build().commit("p", "e1").claimAt("relay-a", db, "e1").
				claimAt("relay-b", db.Add(5*time.Second), "e1").h(),
			cfg: fenced(), valid: false, offending: []string{"e1"},
		},
		{
			name: "claimed after the holder's retry gave the row up, leaving no next eligible time",
			h: build().commit("p", "e1").claimAt("relay-a", db, "e1").
				retry("relay-a", "e1", history.Meta{Attempts: 1, DBTime: db.Add(time.Second)}).
				claimAt("relay-b", db.Add(2*time.Second), "e1").h(),
			cfg: fenced(), valid: true,
		},
		{
			name: "claimed before the holder's retry gave the row up",
			h: build().commit("p", "e1").claimAt("relay-a", db, "e1").
				claimAt("relay-b", db.Add(time.Second), "e1").
				retry("relay-a", "e1", history.Meta{Attempts: 1, DBTime: db.Add(2 * time.Second)}).h(),
			cfg: fenced(), valid: false, offending: []string{"e1"},
		},
		{
			name: "claimed while another relay's lease was live, after a database kill undid that claim",
			h: build().commit("p", "e1").claimAt("relay-a", db, "e1").dbKill("postgres kill").heal("postgres kill").
				claimAt("relay-b", db.Add(5*time.Second), "e1").h(),
			cfg: fenced(), valid: true,
		},
		{
			name: "claimed while the database kill was under way, before it took: the kill undid that claim",
			h: build().commit("p", "e1").dbKillInvoke("postgres kill").claimAt("relay-a", db, "e1").dbKillTook("postgres kill").
				heal("postgres kill").claimAt("relay-b", db.Add(5*time.Second), "e1").h(),
			cfg: fenced(), valid: true,
		},
		{
			name: "claimed after the database was killed and back: a second claim in its lease is not excused",
			h: build().commit("p", "e1").dbKill("postgres kill").heal("postgres kill").claimAt("relay-a", db, "e1").
				claimAt("relay-b", db.Add(5*time.Second), "e1").h(),
			cfg: fenced(), valid: false, offending: []string{"e1"},
		},
		{
			name: "a database kill before both claims excuses neither",
			h: build().commit("p", "e1").dbKill("postgres kill").heal("postgres kill").claimAt("relay-a", db, "e1").
				claimAt("relay-b", db.Add(5*time.Second), "e1").h(),
			cfg: fenced(), valid: false, offending: []string{"e1"},
		},
		{
			name: "its lease extended by the relay that holds it",
			h: build().commit("p", "e1").claimAt("relay-a", db, "e1").claimAt("relay-a", db.Add(2*time.Second), "e1").
				publish("relay-a", "e1").markAt("relay-a", db.Add(lease+time.Second), "e1").h(),
			cfg: fenced(), valid: true,
		},
		{
			name: "claimed by another relay under a lease its holder extended",
			h: build().commit("p", "e1").claimAt("relay-a", db, "e1").claimAt("relay-a", db.Add(2*time.Second), "e1").
				claimAt("relay-b", db.Add(lease+time.Second), "e1").h(),
			cfg: fenced(), valid: false, offending: []string{"e1"},
		},
		{
			name: "claimed during its own backoff",
			h: build().commit("p", "e1").claimAt("relay-a", db, "e1").retryAt("relay-a", "e1", 1, db.Add(time.Second), time.Minute).
				claimAt("relay-b", db.Add(30*time.Second), "e1").h(),
			cfg: fenced(), valid: false, offending: []string{"e1"},
		},
		{
			name: "marked under its own live lease",
			h:    build().commit("p", "e1").claimAt("relay-a", db, "e1").publish("relay-a", "e1").markAt("relay-a", db.Add(time.Second), "e1").h(),
			cfg:  fenced(), valid: true,
		},
		{
			name: "marked after its own lease ended",
			h:    build().commit("p", "e1").claimAt("relay-a", db, "e1").publish("relay-a", "e1").markAt("relay-a", db.Add(lease+time.Second), "e1").h(),
			cfg:  fenced(), valid: false, offending: []string{"e1"},
		},
		{
			name: "marked after another relay claimed it",
			h: build().commit("p", "e1").claimAt("relay-a", db, "e1").publish("relay-a", "e1").
				claimAt("relay-b", db.Add(lease+time.Second), "e1").
				markAt("relay-a", db.Add(lease+2*time.Second), "e1").h(),
			cfg: fenced(), valid: false, offending: []string{"e1"},
		},
		{
			name: "no lease records: skipped",
			h:    build().commit("p", "e1").claim("relay-a", "e1").mark("relay-a", "e1").h(),
			cfg:  fenced(), valid: true,
		},
	})
}

// TestFencedMarkFromRecords: a mark after the lease was lost must leave
// the row out of its ok (0 rows affected), as the records of a fenced
// mark show it (Fenced counts it).
func TestFencedMarkFromRecords(t *testing.T) {
	fencedMark := func(b *hb, p string, at time.Time, ids ...string) *hb {
		return b.invoke(p, history.Mark, ids...).rec(p, history.OK, history.Mark, history.Meta{DBTime: at, Fenced: len(ids)})
	}
	base := func() *hb {
		return build().commit("p", "e1").claimAt("relay-a", db, "e1").publish("relay-a", "e1").
			claimAt("relay-b", db.Add(lease+time.Second), "e1").publish("relay-b", "e1").markAt("relay-b", db.Add(lease+2*time.Second), "e1")
	}
	runCases(t, Fencing, []checkCase{
		{name: "late mark fenced", h: fencedMark(base(), "relay-a", db.Add(lease+3*time.Second), "e1").h(), cfg: fenced(), valid: true},
		{name: "late mark took effect", h: base().markAt("relay-a", db.Add(lease+3*time.Second), "e1").h(), cfg: fenced(), valid: false, offending: []string{"e1"}},
	})
	r := Check(fencedMark(base(), "relay-a", db.Add(lease+3*time.Second), "e1").h(), State{}, fenced())
	if r.Counts.LostLeases != 1 {
		t.Errorf("lost leases = %d, want the fenced row", r.Counts.LostLeases)
	}
}

// TestBackoffFromRecords: retries of a row are spaced by the declared
// backoff on the database clock.
func TestBackoffFromRecords(t *testing.T) {
	cfg := fenced()
	cfg.Backoff = func(n int) time.Duration { return time.Second << (n - 1) }
	retries := func(gaps ...time.Duration) []history.Op {
		b := build().commit("p", "e1")
		at := db
		for i, g := range gaps {
			at = at.Add(g)
			b.claimAt("relay-a", at, "e1").retryAt("relay-a", "e1", i+1, at.Add(time.Millisecond), cfg.Backoff(i+1))
		}
		return b.h()
	}
	runCases(t, Parking, []checkCase{
		{name: "spaced by the backoff", h: retries(0, 2*time.Second, 3*time.Second), cfg: cfg, valid: true},
		// The clock of the records (Time) says a minute apart; the
		// database clock says 200 ms.
		{name: "retried early on the database clock", h: retries(0, 200*time.Millisecond), cfg: cfg, valid: false, offending: []string{"e1"}},
	})
}

// TestNextEligibleFromRecords: a retry sets the row's next eligible time
// exactly the declared backoff after its own database time; a longer or a
// shorter one is a broken backoff even when no second retry came.
func TestNextEligibleFromRecords(t *testing.T) {
	cfg := fenced()
	cfg.Backoff = func(n int) time.Duration { return time.Second << (n - 1) }
	h := func(backoff time.Duration) []history.Op {
		return build().commit("p", "e1").claimAt("relay-a", db, "e1").retryAt("relay-a", "e1", 1, db.Add(time.Millisecond), backoff).h()
	}
	runCases(t, Parking, []checkCase{
		{name: "the declared backoff", h: h(time.Second), cfg: cfg, valid: true},
		{name: "a thousand times the backoff (a unit changed)", h: h(1000 * time.Second), cfg: cfg, valid: false, offending: []string{"e1"}},
		{name: "half the backoff", h: h(500 * time.Millisecond), cfg: cfg, valid: false, offending: []string{"e1"}},
	})
}

// TestBrokerOutageFromRecords: a retry recorded while a broker fault hit
// the retrying relay consumed an attempt for an outage.
func TestBrokerOutageFromRecords(t *testing.T) {
	h := func(target string) []history.Op {
		return build().commit("p", "e1").claimAt("relay-a", db, "e1").fault("broker-down", history.ClassBroker, target).
			invoke("relay-a", history.Publish, "e1").rec("relay-a", history.Info, history.Publish, history.Meta{Confirm: history.ConfirmClosed}, "e1").
			retryAt("relay-a", "e1", 1, db.Add(time.Second), time.Second).heal("broker-down").h()
	}
	runCases(t, Parking, []checkCase{
		{name: "outage of another relay", h: h("relay-b"), cfg: fenced(), valid: true},
		{name: "attempt consumed in the relay's outage", h: h("relay-a"), cfg: fenced(), valid: false, offending: []string{"e1"}},
	})
}

// TestPoisonFromRecords: poison is parked within the attempt limit and
// never published; healthy rows are never parked.
func TestPoisonFromRecords(t *testing.T) {
	cfg := fenced()
	cfg.MaxAttempts = 2
	cfg.Poison = map[string]bool{"bad": true}
	parked := faultedRow("bad", 2)
	runCases(t, Parking, []checkCase{
		{
			name: "poison parked at the limit",
			h: build().commit("p", "bad", "ok").claimAt("relay-a", db, "bad", "ok").
				retryAt("relay-a", "bad", 1, db, time.Second).publish("relay-a", "ok").markAt("relay-a", db, "ok").
				claimAt("relay-a", db.Add(2*time.Second), "bad").retry("relay-a", "bad", history.Meta{Attempts: 2, Parked: true, DBTime: db.Add(2 * time.Second)}).h(),
			s: State{Outbox: rows(parked, processedRow("ok", db))}, cfg: cfg, valid: true,
		},
		{
			name: "poison published",
			h:    build().commit("p", "bad").claimAt("relay-a", db, "bad").publish("relay-a", "bad").markAt("relay-a", db, "bad").h(),
			s:    State{Outbox: rows(processedRow("bad", db))}, cfg: cfg, valid: false, offending: []string{"bad"},
		},
		{
			name: "poison retried past the limit",
			h: build().commit("p", "bad").claimAt("relay-a", db, "bad").retryAt("relay-a", "bad", 1, db, time.Second).
				claimAt("relay-a", db.Add(2*time.Second), "bad").retryAt("relay-a", "bad", 2, db.Add(2*time.Second), time.Second).
				claimAt("relay-a", db.Add(4*time.Second), "bad").retryAt("relay-a", "bad", 3, db.Add(4*time.Second), time.Second).h(),
			s: State{Outbox: rows(pendingRow("bad", 3))}, cfg: cfg, valid: false, offending: []string{"bad"},
		},
		{
			name: "healthy row parked",
			h:    build().commit("p", "ok").claimAt("relay-a", db, "ok").park("relay-a", "ok").h(),
			s:    State{Outbox: rows(faultedRow("ok", 0))}, cfg: cfg, valid: false, offending: []string{"ok"},
		},
	})
}

// TestSweepFromRecords: a sweep deletes only rows processed at least
// retention before it on the database clock, with a cutoff that says so.
func TestSweepFromRecords(t *testing.T) {
	cfg := fenced()
	cfg.Features.Sweeps = true
	cfg.Retention = time.Hour
	h := func(age, cutoff time.Duration) []history.Op {
		at := db.Add(age)
		return build().commit("p", "e1").claimAt("relay-a", db, "e1").publish("relay-a", "e1").markAt("relay-a", db, "e1").
			sweep("relay-a", history.Meta{DBTime: at, Cutoff: at.Add(-cutoff)}, "e1").h()
	}
	runCases(t, Retention, []checkCase{
		{name: "swept after retention", h: h(2*time.Hour, time.Hour), cfg: cfg, valid: true},
		{name: "swept within retention", h: h(30*time.Minute, time.Hour), cfg: cfg, valid: false, offending: []string{"e1"}},
		{name: "swept with a short cutoff", h: h(2*time.Hour, time.Minute), cfg: cfg, valid: false, offending: []string{"e1"}},
	})
}

// TestClaimLeaseFromRecords: a claim's recorded lease must be the
// declared one, as a lease computed on the database clock is; one taken
// from a skewed application clock (locked_until = app clock + lease) shows
// the skew there.
func TestClaimLeaseFromRecords(t *testing.T) {
	declared := fenced()
	declared.Lease = lease
	runCases(t, Leases, []checkCase{
		{
			name: "leased for the declared lease",
			h:    build().commit("p", "e1").claimAt("relay-a", db, "e1").publish("relay-a", "e1").markAt("relay-a", db.Add(time.Second), "e1").h(),
			cfg:  declared, valid: true,
		},
		{
			name: "leased from a skewed clock",
			h: build().commit("p", "e1").invoke("relay-a", history.Claim).
				rec("relay-a", history.OK, history.Claim, history.Meta{DBTime: db, Until: db.Add(lease - 5*time.Minute)}, "e1").h(),
			cfg: declared, valid: false, offending: []string{"e1"},
		},
		{
			name: "no declared lease: lengths unchecked",
			h: build().commit("p", "e1").invoke("relay-a", history.Claim).
				rec("relay-a", history.OK, history.Claim, history.Meta{DBTime: db, Until: db.Add(lease - 5*time.Minute)}, "e1").h(),
			cfg: fenced(), valid: true,
		},
	})
}
