package checker

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/outboxlab/outboxlab/history"
)

// t0 is the start of every built history.
var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// hb builds a history one record at a time; every record advances the clock
// by step.
type hb struct {
	ops  []history.Op
	now  time.Time
	step time.Duration
}

func build() *hb { return &hb{now: t0, step: 10 * time.Millisecond} }

func (b *hb) rec(p string, typ history.Type, f history.Func, value string, ids ...string) *hb {
	b.ops = append(b.ops, history.Op{
		Index: int64(len(b.ops)), Time: b.now, Process: p, Type: typ, F: f,
		Events: slices.Clone(ids), Value: value,
	})
	b.now = b.now.Add(b.step)
	return b
}

func (b *hb) h() []history.Op { return b.ops }

// wait advances the clock.
func (b *hb) wait(d time.Duration) *hb { b.now = b.now.Add(d); return b }

func (b *hb) invoke(p string, f history.Func, ids ...string) *hb {
	return b.rec(p, history.Invoke, f, "", ids...)
}
func (b *hb) ok(p string, f history.Func, ids ...string) *hb {
	return b.rec(p, history.OK, f, "", ids...)
}
func (b *hb) fail(p string, f history.Func, ids ...string) *hb {
	return b.rec(p, history.Fail, f, "", ids...)
}
func (b *hb) info(p string, f history.Func, ids ...string) *hb {
	return b.rec(p, history.Info, f, "", ids...)
}

func (b *hb) commit(p string, ids ...string) *hb {
	return b.invoke(p, history.Commit, ids...).ok(p, history.Commit, ids...)
}
func (b *hb) commitFail(p string, ids ...string) *hb {
	return b.invoke(p, history.Commit, ids...).fail(p, history.Commit, ids...)
}
func (b *hb) commitInfo(p string, ids ...string) *hb {
	return b.invoke(p, history.Commit, ids...).info(p, history.Commit, ids...)
}
func (b *hb) causedCommit(p, cause string, ids ...string) *hb {
	return b.rec(p, history.Invoke, history.Commit, CausedByValue(cause), ids...).ok(p, history.Commit, ids...)
}

func (b *hb) claim(p string, ids ...string) *hb {
	return b.invoke(p, history.Claim).ok(p, history.Claim, ids...)
}
func (b *hb) publish(p, id string) *hb {
	return b.invoke(p, history.Publish, id).ok(p, history.Publish, id)
}
func (b *hb) publishInfo(p, id string) *hb {
	return b.invoke(p, history.Publish, id).info(p, history.Publish, id)
}
func (b *hb) mark(p string, ids ...string) *hb {
	return b.invoke(p, history.Mark, ids...).ok(p, history.Mark, ids...)
}
func (b *hb) markAt(p string, db time.Time, ids ...string) *hb {
	return b.invoke(p, history.Mark, ids...).rec(p, history.OK, history.Mark, WithDBTime("", db), ids...)
}

// markLost records a mark of asked that marked only got.
func (b *hb) markLost(p string, asked []string, got ...string) *hb {
	return b.invoke(p, history.Mark, asked...).ok(p, history.Mark, got...)
}
func (b *hb) retry(p, id, value string) *hb {
	return b.invoke(p, history.Retry, id).rec(p, history.OK, history.Retry, value, id)
}
func (b *hb) park(p, id string) *hb {
	return b.invoke(p, history.Park, id).ok(p, history.Park, id)
}
func (b *hb) sweep(p, value string, ids ...string) *hb {
	return b.invoke(p, history.Sweep).rec(p, history.OK, history.Sweep, value, ids...)
}

// relay claims, publishes and marks ids.
func (b *hb) relay(p string, ids ...string) *hb {
	b.claim(p, ids...)
	for _, id := range ids {
		b.publish(p, id)
	}
	return b.mark(p, ids...)
}

func (b *hb) deliver(p, id string, value ...string) *hb {
	return b.rec(p, history.OK, history.Deliver, strings.Join(value, " "), id)
}
func (b *hb) apply(p, id string) *hb {
	return b.invoke(p, history.Apply, id).ok(p, history.Apply, id)
}
func (b *hb) applyDup(p, id string) *hb {
	return b.invoke(p, history.Apply, id).rec(p, history.OK, history.Apply, FlagDuplicate, id)
}
func (b *hb) applyFail(p, id string) *hb {
	return b.invoke(p, history.Apply, id).fail(p, history.Apply, id)
}

// consume delivers and applies each id.
func (b *hb) consume(p string, ids ...string) *hb {
	for _, id := range ids {
		b.deliver(p, id).apply(p, id)
	}
	return b
}

func (b *hb) fault(name string) *hb {
	return b.rec("nemesis", history.Info, history.FaultStart, name)
}
func (b *hb) heal(name string) *hb {
	return b.rec("nemesis", history.Info, history.FaultStop, name)
}
func (b *hb) crash(p string) *hb   { return b.rec(p, history.Info, history.Crash, "") }
func (b *hb) restart(p string) *hb { return b.rec(p, history.Info, history.Restart, "") }
func (b *hb) phase(v string) *hb   { return b.rec("runner", history.Info, history.Phase, v) }

// Final-state helpers.

func rows(rs ...RowState) map[string]RowState {
	m := map[string]RowState{}
	for _, r := range rs {
		m[r.ID] = r
	}
	return m
}

func pendingRow(id string, attempts int) RowState {
	return RowState{ID: id, Type: "t", Attempts: attempts, OccurredAt: t0}
}

func processedRow(id string, at time.Time) RowState {
	return RowState{ID: id, Type: "t", ProcessedAt: &at, OccurredAt: t0}
}

func faultedRow(id string, attempts int) RowState {
	at := t0
	return RowState{ID: id, Type: "t", FaultedAt: &at, Attempts: attempts, OccurredAt: t0}
}

// expect checks a Result: its validity and exactly which events offend.
func expect(t *testing.T, r Result, valid bool, offending ...string) {
	t.Helper()
	if r.Valid != valid {
		t.Errorf("%s: Valid = %v, want %v (%s; reasons %v)", r.Checker, r.Valid, valid, r.Detail, r.Reasons)
	}
	if !slices.Equal(r.Offending, offending) && !(len(r.Offending) == 0 && len(offending) == 0) {
		t.Errorf("%s: Offending = %v, want %v (reasons %v)", r.Checker, r.Offending, offending, r.Reasons)
	}
	for _, id := range r.Offending {
		if r.Reasons[id] == "" {
			t.Errorf("%s: offending %s has no reason", r.Checker, id)
		}
	}
}

// checkCase is one table row shared by the checker tests.
type checkCase struct {
	name      string
	h         []history.Op
	s         State
	cfg       Config
	valid     bool
	offending []string
}

func runCases(t *testing.T, check func([]history.Op, State, Config) Result, cases []checkCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := check(c.h, c.s, c.cfg)
			expect(t, r, c.valid, c.offending...)
			if t.Failed() {
				for _, op := range c.h {
					t.Log(op)
				}
			}
		})
	}
}
