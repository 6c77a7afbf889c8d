package property

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"pgregory.net/rapid"

	"github.com/outboxlab/outboxlab/relay"
	"github.com/outboxlab/outboxlab/sim"
)

// machine is the state machine over one driven simulation.
type machine struct {
	w       *sim.World
	relays  []string
	actors  []string // relays and consumers
	crashed map[string]bool
	paused  map[string]bool
	cut     map[string]bool
	down    bool
	lossy   bool
	// trace lists the actions run so far, as a person reads them.
	trace []string
}

func (m *machine) log(t *rapid.T, format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	m.trace = append(m.trace, s)
	t.Log(s)
}

func sorted(set map[string]bool) []string {
	var out []string
	for k, v := range set {
		if v {
			out = append(out, k)
		}
	}
	// Deterministic order for rapid's draws.
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && out[j] < out[j-1]; j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}

func (m *machine) actions() map[string]func(*rapid.T) {
	sw := m.w.Swarm()
	return map[string]func(*rapid.T){
		"commit": func(t *rapid.T) {
			p := rapid.SampledFrom(m.w.Producers()).Draw(t, "producer")
			n := rapid.IntRange(1, 3).Draw(t, "events")
			m.w.Commit(p, n, false)
			m.log(t, "%s commits %d event(s)", p, n)
		},
		"rollback": func(t *rapid.T) {
			p := rapid.SampledFrom(m.w.Producers()).Draw(t, "producer")
			n := rapid.IntRange(1, 3).Draw(t, "events")
			m.w.Commit(p, n, true)
			m.log(t, "%s rolls back %d event(s)", p, n)
		},
		"step": func(t *rapid.T) {
			p := rapid.SampledFrom(m.actors).Draw(t, "process")
			n := rapid.IntRange(1, 6).Draw(t, "steps")
			for range n {
				m.w.Step(p)
			}
			m.log(t, "%s takes %d step(s)", p, n)
		},
		"tick": func(t *rapid.T) {
			r := rapid.SampledFrom(m.relays).Draw(t, "relay")
			m.w.Tick(r)
			m.log(t, "%s ticks", r)
		},
		"crash": func(t *rapid.T) {
			p := rapid.SampledFrom(m.actors).Draw(t, "process")
			if m.crashed[p] {
				t.Skip("already crashed")
			}
			m.w.Crash(p)
			m.crashed[p] = true
			m.log(t, "%s crashes", p)
		},
		"restart": func(t *rapid.T) {
			down := sorted(m.crashed)
			if len(down) == 0 {
				t.Skip("nothing crashed")
			}
			p := rapid.SampledFrom(down).Draw(t, "process")
			m.w.Restart(p)
			m.crashed[p] = false
			m.log(t, "%s restarts", p)
		},
		"pause": func(t *rapid.T) {
			r := rapid.SampledFrom(m.relays).Draw(t, "relay")
			if m.paused[r] {
				t.Skip("already paused")
			}
			m.w.Pause(r)
			m.paused[r] = true
			m.log(t, "%s pauses", r)
		},
		"resume": func(t *rapid.T) {
			ps := sorted(m.paused)
			if len(ps) == 0 {
				t.Skip("nothing paused")
			}
			r := rapid.SampledFrom(ps).Draw(t, "relay")
			m.w.Resume(r)
			m.paused[r] = false
			m.log(t, "%s resumes", r)
		},
		"cut": func(t *rapid.T) {
			p := rapid.SampledFrom(m.actors).Draw(t, "process")
			l := rapid.SampledFrom([]sim.Link{sim.LinkDB, sim.LinkBroker}).Draw(t, "link")
			key := fmt.Sprintf("%s/%d", p, l)
			if m.cut[key] {
				t.Skip("already cut")
			}
			m.w.Cut(p, l)
			m.cut[key] = true
			m.log(t, "cut %s", linkName(p, l))
		},
		"heal": func(t *rapid.T) {
			cuts := sorted(m.cut)
			if len(cuts) == 0 {
				t.Skip("nothing cut")
			}
			key := rapid.SampledFrom(cuts).Draw(t, "link")
			var (
				p string
				l sim.Link
			)
			fmt.Sscanf(strings.Replace(key, "/", " ", 1), "%s %d", &p, &l)
			m.w.Heal(p, l)
			m.cut[key] = false
			m.log(t, "heal %s", linkName(p, l))
		},
		"broker-down": func(t *rapid.T) {
			if m.down {
				t.Skip("already down")
			}
			m.w.BrokerDown()
			m.down = true
			m.log(t, "broker goes down")
		},
		"broker-up": func(t *rapid.T) {
			if !m.down {
				t.Skip("broker is up")
			}
			m.w.BrokerUp()
			m.down = false
			m.log(t, "broker comes back")
		},
		"broker-restart": func(t *rapid.T) {
			m.w.BrokerRestart()
			m.log(t, "broker restarts")
		},
		"confirm-loss": func(t *rapid.T) {
			if m.lossy {
				m.w.ConfirmsBack()
				m.log(t, "confirms arrive again")
			} else {
				m.w.ConfirmLoss()
				m.log(t, "confirms start to get lost")
			}
			m.lossy = !m.lossy
		},
		"advance": func(t *rapid.T) {
			d := rapid.SampledFrom([]time.Duration{time.Second, time.Minute, sw.BackoffBase, sw.BackoffMax, sw.Lease / 2, sw.Lease + time.Second}).Draw(t, "by")
			m.w.Advance(d)
			m.log(t, "the clock advances %s", d)
		},
		"skew": func(t *rapid.T) {
			r := rapid.SampledFrom(m.relays).Draw(t, "relay")
			d := rapid.SampledFrom([]time.Duration{0, -time.Hour, -5 * time.Minute, 5 * time.Minute, time.Hour}).Draw(t, "by")
			m.w.Skew(r, d)
			m.log(t, "%s's clock is skewed by %s", r, d)
		},
		"redeliver": func(t *rapid.T) {
			m.w.Redeliver()
			m.log(t, "consumers drop their connections: unacked deliveries come back")
		},
	}
}

func linkName(p string, l sim.Link) string {
	if l == sim.LinkBroker {
		return p + "->broker"
	}
	return p + "->db"
}

// run runs one test case of the state machine over variant v: a world
// drawn by rapid, a sequence of actions, then heal, drain and the
// checkers. started receives the machine as soon as it exists, so a
// caller can read the trace of the case rapid ran last.
func run(t *rapid.T, v sim.Variant, started func(*machine)) {
	seed := rapid.Uint64().Draw(t, "seed")
	replicas := rapid.IntRange(2, 3).Draw(t, "replicas")
	consumers := rapid.IntRange(1, 2).Draw(t, "consumers")
	batch := rapid.SampledFrom([]int{1, 2, 5, 100}).Draw(t, "batch")
	window := rapid.SampledFrom([]int{1, 2, 100}).Draw(t, "window")
	w := sim.NewWorld(seed, sim.Options{Variant: v, Tune: func(sw *sim.Swarm) {
		sw.Producers, sw.Replicas, sw.Consumers = 2, replicas, consumers
		sw.BatchSize, sw.Window = batch, window
		sw.Faults = nil
	}})
	m := &machine{w: w, relays: w.Relays(), crashed: map[string]bool{}, paused: map[string]bool{}, cut: map[string]bool{}}
	m.actors = append(append([]string(nil), w.Relays()...), w.Consumers()...)
	if started != nil {
		started(m)
	}
	t.Repeat(m.actions())
	res := w.Finish()
	if !res.Valid {
		t.Fatalf("after %d action(s):\n  %s\n%s", len(m.trace), strings.Join(m.trace, "\n  "), res.Report.Summary())
	}
}

// TestSimProperty: whatever the actions, the production relay and
// consumer lose nothing, invent nothing and apply nothing twice.
func TestSimProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) { run(t, sim.Variant{}, nil) })
}

// markOnClaim is the mark-before-publish bug: a store decorator whose
// Claim marks the rows processed as soon as it has them.
type markOnClaim struct{ relay.Store }

func (s markOnClaim) Claim(ctx context.Context, owner string, limit int, lease time.Duration) ([]relay.Row, error) {
	rows, err := s.Store.Claim(ctx, owner, limit, lease)
	if err != nil || len(rows) == 0 {
		return rows, err
	}
	ids := make([]uuid.UUID, len(rows))
	for i, r := range rows {
		ids[i] = r.ID
	}
	if _, err := s.Store.Mark(ctx, owner, ids); err != nil {
		return nil, err
	}
	return rows, nil
}

// recorder is a rapid.TB that keeps what rapid reports instead of failing
// the test that runs it: it lets a test run rapid on a property that must
// fail and look at the counterexample.
type recorder struct {
	name   string
	mu     sync.Mutex
	failed bool
	logs   []string
}

func (r *recorder) Helper()      {}
func (r *recorder) Name() string { return r.name }
func (r *recorder) Logf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.logs = append(r.logs, fmt.Sprintf(format, args...))
}
func (r *recorder) Log(args ...any)                  { r.Logf("%s", fmt.Sprint(args...)) }
func (r *recorder) Skipf(format string, args ...any) { r.Logf("skip: "+format, args...) }
func (r *recorder) Skip(args ...any)                 { r.Log(args...) }
func (r *recorder) SkipNow()                         {}
func (r *recorder) Errorf(format string, args ...any) {
	r.Logf(format, args...)
	r.Fail()
}
func (r *recorder) Error(args ...any) { r.Errorf("%s", fmt.Sprint(args...)) }
func (r *recorder) Fatalf(format string, args ...any) {
	r.Errorf(format, args...)
}
func (r *recorder) Fatal(args ...any) { r.Error(args...) }
func (r *recorder) FailNow()          { r.Fail() }
func (r *recorder) Fail() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failed = true
}
func (r *recorder) Failed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.failed
}

// setFlag sets a rapid flag for the rest of the test.
func setFlag(t *testing.T, name, value string) {
	t.Helper()
	f := flag.Lookup(name)
	if f == nil {
		t.Fatalf("no flag %s", name)
	}
	prev := f.Value.String()
	if err := f.Value.Set(value); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Value.Set(prev) })
}

// TestMarkBeforePublishIsCaught runs the property over a relay that marks
// rows processed before it publishes them. The property must fail, and
// rapid must shrink the failure to a counterexample of at most 15 actions.
//
// rapid.Check takes a rapid.TB, so the check runs on a recorder that keeps
// its verdict instead of failing this test. After a failure rapid replays
// the shrunk case once more, last, to print it; the machine of the last
// case run is therefore the counterexample, and its trace is what rapid
// shrank.
func TestMarkBeforePublishIsCaught(t *testing.T) {
	setFlag(t, "rapid.nofailfile", "true") // no fail file for a failure we want
	setFlag(t, "rapid.checks", "200")
	v := sim.Variant{Name: "mark-before-publish", WrapStore: func(_ sim.Process, s relay.Store) relay.Store { return markOnClaim{s} }}
	rec := &recorder{name: t.Name()}
	var last *machine
	rapid.Check(rec, func(rt *rapid.T) { run(rt, v, func(m *machine) { last = m }) })
	if !rec.Failed() {
		t.Fatal("the property passed a relay that marks rows before publishing them")
	}
	if last == nil {
		t.Fatal("no case ran")
	}
	t.Logf("shrunk counterexample, %d action(s):\n  %s", len(last.trace), strings.Join(last.trace, "\n  "))
	t.Logf("rapid said:\n%s", strings.Join(rec.logs, "\n"))
	if len(last.trace) == 0 || len(last.trace) > 15 {
		t.Fatalf("counterexample has %d actions, want 1 to 15; rapid said:\n%s", len(last.trace), strings.Join(rec.logs, "\n"))
	}
}
