package checker

import (
	"math"
	"slices"
	"testing"
	"time"

	"github.com/outboxlab/outboxlab/history"
)

func TestParking(t *testing.T) {
	poison := map[string]bool{"p1": true}
	parks := Config{Poison: poison, Features: Features{Stages: true, Parks: true}}
	backoff := func(n int) time.Duration { return 30 * time.Second << n }
	spaced := Config{Backoff: backoff, MaxAttempts: 5}
	db := func(d time.Duration) time.Time { return t0.Add(d) }

	runCases(t, Parking, []checkCase{
		{
			name: "poison parked at once, healthy published",
			h: build().commit("producer-1", "e1", "p1").claim("relay-a", "e1", "p1").
				park("relay-a", "p1").publish("relay-a", "e1").mark("relay-a", "e1").h(),
			s:     State{Outbox: rows(processedRow("e1", t0), faultedRow("p1", 0))},
			cfg:   parks,
			valid: true,
		},
		{
			name: "undecodable poison parked after the attempt limit",
			h: build().commit("producer-1", "p1").
				claim("relay-a", "p1").retry("relay-a", "p1", att(1, false)).
				claim("relay-a", "p1").retry("relay-a", "p1", att(2, true)).h(),
			s:     State{Outbox: rows(faultedRow("p1", 2))},
			cfg:   Config{Poison: poison, MaxAttempts: 2, Features: Features{Stages: true, Parks: true}},
			valid: true,
		},
		{
			name:      "healthy row ended faulted",
			h:         build().commit("producer-1", "e1").h(),
			s:         State{Outbox: rows(faultedRow("e1", 5))},
			cfg:       parks,
			offending: []string{"e1"},
		},
		{
			name:      "healthy row parked by a relay, even if gone since",
			h:         build().commit("producer-1", "e1").claim("relay-a", "e1").park("relay-a", "e1").h(),
			offending: []string{"e1"},
		},
		{
			name:      "poison left pending",
			h:         build().commit("producer-1", "p1").h(),
			s:         State{Outbox: rows(pendingRow("p1", 1))},
			cfg:       parks,
			offending: []string{"p1"},
		},
		{
			name:  "poison left pending by a relay that does not promise parking",
			h:     build().commit("producer-1", "p1").h(),
			s:     State{Outbox: rows(pendingRow("p1", 1))},
			cfg:   Config{Poison: poison, Features: Features{Stages: true}},
			valid: true,
		},
		{
			name:      "poison published instead of parked",
			h:         build().commit("producer-1", "p1").relay("relay-a", "p1").h(),
			s:         State{Outbox: rows(processedRow("p1", t0))},
			cfg:       parks,
			offending: []string{"p1"},
		},
		{
			name:      "poison row gone",
			h:         build().commit("producer-1", "p1").h(),
			s:         State{Outbox: rows()},
			cfg:       parks,
			offending: []string{"p1"},
		},
		{
			name:  "poison of a rolled-back commit needs no parking",
			h:     build().commitFail("producer-1", "p1").h(),
			s:     State{Outbox: rows()},
			cfg:   parks,
			valid: true,
		},
		{
			name: "a broker outage consumed an attempt",
			h: build().commit("producer-1", "e1").claim("relay-a", "e1").fault("broker-down", history.ClassBroker).
				retry("relay-a", "e1", att(1, false)).heal("broker-down").relay("relay-a", "e1").h(),
			cfg:       Config{MaxAttempts: 5},
			offending: []string{"e1"},
		},
		{
			name: "a broker outage consumed an attempt of a relay that parks, with no limit declared",
			h: build().commit("producer-1", "e1").claim("relay-a", "e1").fault("broker-down", history.ClassBroker).
				retry("relay-a", "e1", att(1, false)).heal("broker-down").relay("relay-a", "e1").h(),
			cfg:       parks,
			offending: []string{"e1"},
		},
		{
			name: "an attempt in an outage has no consequence for a relay that neither parks nor declares a limit",
			h: build().commit("producer-1", "e1").claim("relay-a", "e1").fault("broker-down", history.ClassBroker).
				retry("relay-a", "e1", att(1, false)).heal("broker-down").relay("relay-a", "e1").h(),
			valid: true,
		},
		{
			name: "a relay->broker timeout consumed an attempt",
			h: build().commit("producer-1", "e1").fault("relay->broker timeout", history.ClassBroker).claim("relay-a", "e1").
				retry("relay-a", "e1", att(1, false)).h(),
			cfg:       Config{MaxAttempts: 5},
			offending: []string{"e1"},
		},
		{
			name: "a poison row may consume attempts during a broker outage",
			h: build().commit("producer-1", "p1").claim("relay-a", "p1").fault("broker-killed", history.ClassBroker).
				retry("relay-a", "p1", att(1, false)).heal("broker-killed").h(),
			cfg:   Config{Poison: poison},
			valid: true,
		},
		{
			name: "a database outage is no broker outage",
			h: build().commit("producer-1", "e1").claim("relay-a", "e1").fault("db-down", history.ClassDB).
				retry("relay-a", "e1", att(1, false)).heal("db-down").relay("relay-a", "e1").h(),
			valid: true,
		},
		{
			name:      "attempts above the limit",
			h:         build().commit("producer-1", "p1").claim("relay-a", "p1").retry("relay-a", "p1", att(6, false)).h(),
			cfg:       Config{Poison: poison, MaxAttempts: 5},
			offending: []string{"p1"},
		},
		{
			// A relay that declares no attempt limit is judged by no
			// one's: six attempts, and a row parked after nine, break
			// nothing it promised.
			name:  "no limit declared, attempts above another relay's",
			h:     build().commit("producer-1", "p1").claim("relay-a", "p1").retry("relay-a", "p1", att(6, false)).h(),
			s:     State{Outbox: rows(faultedRow("p1", 9))},
			cfg:   Config{Poison: poison, Features: Features{Stages: true, Parks: true}},
			valid: true,
		},
		{
			name:      "faulted with attempts above the limit",
			h:         build().commit("producer-1", "p1").h(),
			s:         State{Outbox: rows(faultedRow("p1", 9))},
			cfg:       Config{Poison: poison, MaxAttempts: 3},
			offending: []string{"p1"},
		},
		{
			name:      "reached the limit without parking",
			h:         build().commit("producer-1", "p1").claim("relay-a", "p1").retry("relay-a", "p1", att(5, false)).h(),
			cfg:       Config{Poison: poison, MaxAttempts: 5, Features: Features{Parks: true}},
			offending: []string{"p1"},
		},
		{
			name: "retries spaced by the backoff on the database clock",
			h: build().commit("producer-1", "p1").
				claim("relay-a", "p1").retry("relay-a", "p1", attAt(1, false, db(0))).
				claim("relay-b", "p1").retry("relay-b", "p1", attAt(2, false, db(61*time.Second))).h(),
			cfg:   withPoison(spaced, poison),
			valid: true,
		},
		{
			name: "retried before the backoff passed",
			h: build().commit("producer-1", "p1").
				claim("relay-a", "p1").retry("relay-a", "p1", attAt(1, false, db(0))).
				claim("relay-b", "p1").retry("relay-b", "p1", attAt(2, false, db(30*time.Second))).h(),
			cfg:       withPoison(spaced, poison),
			offending: []string{"p1"},
		},
		{
			name: "same relay, no database time: its own clock measures the spacing",
			h: build().commit("producer-1", "p1").
				claim("relay-a", "p1").retry("relay-a", "p1", att(1, false)).
				claim("relay-a", "p1").retry("relay-a", "p1", att(2, false)).h(),
			cfg:       withPoison(spaced, poison),
			offending: []string{"p1"},
		},
		{
			name: "same relay, its own clock, spaced enough",
			h: build().commit("producer-1", "p1").
				claim("relay-a", "p1").retry("relay-a", "p1", att(1, false)).wait(time.Minute).
				claim("relay-a", "p1").retry("relay-a", "p1", att(2, false)).h(),
			cfg:   withPoison(spaced, poison),
			valid: true,
		},
		{
			name: "two relays, no database time: not checkable",
			h: build().commit("producer-1", "p1").
				claim("relay-a", "p1").retry("relay-a", "p1", att(1, false)).
				claim("relay-b", "p1").retry("relay-b", "p1", att(2, false)).h(),
			cfg:   withPoison(spaced, poison),
			valid: true,
		},
		{
			name: "retried after it was parked",
			h: build().commit("producer-1", "p1").
				claim("relay-a", "p1").retry("relay-a", "p1", attAt(5, true, db(0))).
				claim("relay-a", "p1").retry("relay-a", "p1", attAt(6, true, db(time.Hour))).h(),
			cfg:       withPoison(spaced, poison),
			offending: []string{"p1"},
		},
	})
}

func withPoison(c Config, poison map[string]bool) Config {
	c.Poison = poison
	return c
}

func TestParkingBackoffCounts(t *testing.T) {
	h := build().commit("producer-1", "p1", "p2").
		claim("relay-a", "p1").retry("relay-a", "p1", att(1, false)).wait(time.Minute).
		claim("relay-a", "p1").retry("relay-a", "p1", att(2, false)).
		claim("relay-a", "p2").retry("relay-a", "p2", att(1, false)).
		claim("relay-b", "p2").retry("relay-b", "p2", att(2, false)).h()
	cfg := Config{Poison: map[string]bool{"p1": true, "p2": true}, Backoff: func(n int) time.Duration { return time.Second }}
	r := Parking(h, State{}, cfg)
	expect(t, r, true)
	if r.Counts["backoff_checked"] != 1 || r.Counts["backoff_unchecked"] != 1 {
		t.Errorf("backoff checked/unchecked = %d/%d, want 1/1", r.Counts["backoff_checked"], r.Counts["backoff_unchecked"])
	}
	if r.Counts["retries"] != 4 {
		t.Errorf("retries = %d, want 4", r.Counts["retries"])
	}
}

func TestParkingFaultScope(t *testing.T) {
	healthy := func(b *hb) *hb { return b.commit("producer-1", "e1").claim("relay-a", "e1").claim("relay-b", "e1") }
	runCases(t, Parking, []checkCase{
		{
			name:  "a cut of another relay's broker link does not excuse nor blame this relay",
			h:     healthy(build()).fault("cut relay-a->broker", history.ClassBroker, "relay-a").retry("relay-b", "e1", att(1, false)).h(),
			valid: true,
		},
		{
			name:      "a cut of this relay's broker link consumed an attempt",
			h:         healthy(build()).fault("cut relay-a->broker", history.ClassBroker, "relay-a").retry("relay-a", "e1", att(1, false)).h(),
			cfg:       Config{MaxAttempts: 5},
			offending: []string{"e1"},
		},
		{
			name: "a healthy event parked by nacks, every attempt inside a nack storm",
			h: healthy(build()).fault("nack-storm", history.ClassOther).retry("relay-a", "e1", att(1, false)).
				retry("relay-a", "e1", att(2, true)).heal("nack-storm").h(),
			s:     State{Outbox: rows(faultedRow("e1", 2))},
			cfg:   Config{MaxAttempts: 2},
			valid: true,
		},
		{
			name: "a healthy event parked with one attempt outside any refusal",
			h: healthy(build()).fault("nack-storm", history.ClassOther).retry("relay-a", "e1", att(1, false)).heal("nack-storm").
				retry("relay-a", "e1", att(2, true)).h(),
			s:         State{Outbox: rows(faultedRow("e1", 2))},
			cfg:       Config{MaxAttempts: 2},
			offending: []string{"e1"},
		},
	})
}

func TestFaultWindows(t *testing.T) {
	b := build()
	start := func(name string, done history.Type) {
		m := history.Meta{Fault: &history.Fault{Name: name, Class: history.ClassOther}}
		b.rec("nemesis", history.Invoke, history.FaultStart, m).rec("nemesis", done, history.FaultStart, m)
	}
	stop := func(name string, done history.Type) {
		m := history.Meta{Fault: &history.Fault{Name: name, Class: history.ClassOther}}
		b.rec("nemesis", history.Invoke, history.FaultStop, m).rec("nemesis", done, history.FaultStop, m)
	}
	start("a", history.OK)                                                                                                        // #0 opens a
	stop("a", history.Info)                                                                                                       // #2-3 heal failed: a stays open
	stop("a", history.OK)                                                                                                         // #4-5 closes a at #5
	start("b", history.Fail)                                                                                                      // #6-7 opens b at #6, closes at #7
	start("c", history.Info)                                                                                                      // #8-9 half applied: c opens at #8
	b.fault("d", history.ClassOther).heal("d")                                                                                    // #10-11 standalone records
	b.rec("nemesis", history.Fail, history.FaultStart, history.Meta{Fault: &history.Fault{Name: "e", Class: history.ClassOther}}) // #12 a failed standalone start opens nothing
	got := faultWindows(history.Pairs(b.h()))
	type span struct {
		name       string
		start, end int64
	}
	want := []span{{"a", 0, 5}, {"b", 6, 7}, {"c", 8, math.MaxInt64}, {"d", 10, 11}}
	var spans []span
	for _, w := range got {
		spans = append(spans, span{w.name, w.start, w.end})
	}
	if !slices.Equal(spans, want) {
		t.Errorf("faultWindows = %+v, want %+v", got, want)
	}
}

// TestParkingJudgesRowsOfARelayThatRecordsNothing gives the checker only
// the final rows of a relay that records no retries: attempts on a
// healthy row with no refusal in the run fail it.
func TestParkingJudgesRowsOfARelayThatRecordsNothing(t *testing.T) {
	parks := Config{Features: Features{Stages: true, Parks: true}}
	blackBox := func(b *hb) *hb { return b.commit("producer-1", "e1").consume("consumer-1", "e1") }
	at := t0
	processed := RowState{ID: "e1", Type: "t", ProcessedAt: &at, Attempts: 2, OccurredAt: t0}
	runCases(t, Parking, []checkCase{
		{
			name:      "a broker outage left attempts on a healthy row",
			h:         blackBox(build().fault("f1", history.ClassBroker).heal("f1")).h(),
			s:         State{Outbox: rows(processed)},
			cfg:       parks,
			offending: []string{"e1"},
		},
		{
			name:  "a refusal in the run may have consumed them",
			h:     blackBox(build().fault("f2", history.ClassOther).heal("f2")).h(),
			s:     State{Outbox: rows(processed)},
			cfg:   parks,
			valid: true,
		},
		{
			name:  "a relay that does not promise parking is not held to it",
			h:     blackBox(build().fault("f1", history.ClassBroker).heal("f1")).h(),
			s:     State{Outbox: rows(processed)},
			cfg:   Config{Features: Features{Stages: true}},
			valid: true,
		},
		{
			name:  "no attempts, nothing to explain",
			h:     blackBox(build().fault("f1", history.ClassBroker).heal("f1")).h(),
			s:     State{Outbox: rows(processedRow("e1", t0))},
			cfg:   parks,
			valid: true,
		},
	})
}

// TestFencingReadsLeasesFromTheRows gives the fencing checker rows whose
// last lease was taken on the database clock for the declared lease, and
// one whose lease shows a relay's own clock offset.
func TestFencingReadsLeasesFromTheRows(t *testing.T) {
	leased := func(id string, d time.Duration, attempts int) RowState {
		at, until := t0, t0.Add(d)
		done := t0.Add(time.Second)
		return RowState{ID: id, Type: "t", ProcessedAt: &done, Attempts: attempts, OccurredAt: t0, LockedAt: &at, LockedUntil: &until}
	}
	h := build().commit("producer-1", "e1", "e2", "e3").consume("consumer-1", "e1", "e2", "e3").h()
	cfg := Config{Lease: 20 * time.Second, Features: Features{Stages: true, Fenced: true}}
	runCases(t, Fencing, []checkCase{
		{
			name:  "leases of the declared length",
			h:     h,
			s:     State{Outbox: rows(leased("e1", 20*time.Second, 0), leased("e2", 20*time.Second+300*time.Millisecond, 0))},
			cfg:   cfg,
			valid: true,
		},
		{
			name:      "a lease that carries a five-minute clock offset",
			h:         h,
			s:         State{Outbox: rows(leased("e1", 20*time.Second, 0), leased("e2", 5*time.Minute+20*time.Second, 0))},
			cfg:       cfg,
			offending: []string{"e2"},
		},
		{
			name:  "a retried row's locked_until is its backoff, not a lease",
			h:     h,
			s:     State{Outbox: rows(leased("e3", time.Hour, 2))},
			cfg:   cfg,
			valid: true,
		},
		{
			name:  "no declared lease, nothing to compare",
			h:     h,
			s:     State{Outbox: rows(leased("e2", 5*time.Minute, 0))},
			cfg:   Config{Features: Features{Stages: true, Fenced: true}},
			valid: true,
		},
	})
}
