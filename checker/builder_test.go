package checker

import (
	"slices"
	"testing"
	"time"

	"github.com/outboxlab/outboxlab/history"
)

// t0 is the start of every built history.
var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// hb builds a history one record at a time; every record advances the clock
// by step.
type hb struct {
	ops    []history.Op
	now    time.Time
	step   time.Duration
	faults map[string]history.Fault
}

func build() *hb {
	return &hb{now: t0, step: 10 * time.Millisecond, faults: map[string]history.Fault{}}
}

func (b *hb) rec(p string, typ history.Type, f history.Func, m history.Meta, ids ...string) *hb {
	b.ops = append(b.ops, history.Op{
		Index: int64(len(b.ops)), Time: b.now, Process: p, Type: typ, F: f,
		Events: slices.Clone(ids), Meta: m,
	})
	b.now = b.now.Add(b.step)
	return b
}

func (b *hb) h() []history.Op { return b.ops }

// wait advances the clock.
func (b *hb) wait(d time.Duration) *hb { b.now = b.now.Add(d); return b }

func (b *hb) invoke(p string, f history.Func, ids ...string) *hb {
	return b.rec(p, history.Invoke, f, history.Meta{}, ids...)
}
func (b *hb) ok(p string, f history.Func, ids ...string) *hb {
	return b.rec(p, history.OK, f, history.Meta{}, ids...)
}
func (b *hb) fail(p string, f history.Func, ids ...string) *hb {
	return b.rec(p, history.Fail, f, history.Meta{}, ids...)
}
func (b *hb) info(p string, f history.Func, ids ...string) *hb {
	return b.rec(p, history.Info, f, history.Meta{}, ids...)
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
	return b.rec(p, history.Invoke, history.Commit, history.Meta{CausedBy: []string{cause}}, ids...).ok(p, history.Commit, ids...)
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
	return b.invoke(p, history.Mark, ids...).rec(p, history.OK, history.Mark, history.Meta{DBTime: db}, ids...)
}

// markLost records a mark of asked that marked only got.
func (b *hb) markLost(p string, asked []string, got ...string) *hb {
	return b.invoke(p, history.Mark, asked...).ok(p, history.Mark, got...)
}
func (b *hb) retry(p, id string, m history.Meta) *hb {
	return b.invoke(p, history.Retry, id).rec(p, history.OK, history.Retry, m, id)
}
func (b *hb) park(p, id string) *hb {
	return b.invoke(p, history.Park, id).ok(p, history.Park, id)
}
func (b *hb) sweep(p string, m history.Meta, ids ...string) *hb {
	return b.invoke(p, history.Sweep).rec(p, history.OK, history.Sweep, m, ids...)
}

// relay claims, publishes and marks ids.
func (b *hb) relay(p string, ids ...string) *hb {
	b.claim(p, ids...)
	for _, id := range ids {
		b.publish(p, id)
	}
	return b.mark(p, ids...)
}

func (b *hb) deliver(p, id string, m ...history.Meta) *hb {
	var meta history.Meta
	if len(m) > 0 {
		meta = m[0]
	}
	return b.rec(p, history.OK, history.Deliver, meta, id)
}
func (b *hb) apply(p, id string) *hb {
	return b.invoke(p, history.Apply, id).ok(p, history.Apply, id)
}
func (b *hb) applyDup(p, id string) *hb {
	return b.invoke(p, history.Apply, id).rec(p, history.OK, history.Apply, history.Meta{Duplicate: true}, id)
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

// fault opens a fault window of the given class on targets (none: every
// process); its name is only its identity.
func (b *hb) fault(name string, class history.FaultClass, targets ...string) *hb {
	f := history.Fault{Name: name, Class: class, Targets: targets}
	b.faults[name] = f
	return b.rec("nemesis", history.Info, history.FaultStart, history.Meta{Fault: &f})
}

// dbKill opens a window of a database kill (class db, kind kill) on
// every process.
func (b *hb) dbKill(name string) *hb {
	f := history.Fault{Name: name, Kind: "kill", Class: history.ClassDB}
	b.faults[name] = f
	return b.rec("nemesis", history.Info, history.FaultStart, history.Meta{Fault: &f})
}

// dbKillInvoke begins a database kill whose effect dbKillTook records
// later: what the harness acknowledges in between the kill may undo.
func (b *hb) dbKillInvoke(name string) *hb {
	f := history.Fault{Name: name, Kind: "kill", Class: history.ClassDB}
	b.faults[name] = f
	return b.rec("nemesis", history.Invoke, history.FaultStart, history.Meta{Fault: &f})
}

// dbKillTook records that the kill dbKillInvoke began took effect.
func (b *hb) dbKillTook(name string) *hb {
	f := b.faults[name]
	return b.rec("nemesis", history.OK, history.FaultStart, history.Meta{Fault: &f})
}

// heal closes the window fault opened under name.
func (b *hb) heal(name string) *hb {
	f, ok := b.faults[name]
	if !ok {
		f = history.Fault{Name: name, Class: history.ClassOther}
	}
	return b.rec("nemesis", history.Info, history.FaultStop, history.Meta{Fault: &f})
}
func (b *hb) crash(p string) *hb   { return b.rec(p, history.Info, history.Crash, history.Meta{}) }
func (b *hb) restart(p string) *hb { return b.rec(p, history.Info, history.Restart, history.Meta{}) }
func (b *hb) phase(v string) *hb {
	return b.rec("runner", history.Info, history.Phase, history.Meta{Phase: v})
}

// att is the Meta of a Retry ok that left a row at n attempts.
func att(n int, parked bool) history.Meta { return history.Meta{Attempts: n, Parked: parked} }

// attAt is att with the database time of the retry.
func attAt(n int, parked bool, db time.Time) history.Meta {
	return history.Meta{Attempts: n, Parked: parked, DBTime: db}
}

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
