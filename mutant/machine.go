package mutant

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/outboxlab/outboxlab/checker"
	"github.com/outboxlab/outboxlab/sim"
)

// The state machine below drives a sim.World one action at a time, as the
// rapid state machine of package property does, and shrinks a failing
// sequence of actions to a minimal one. It is deterministic and needs no
// testing.T, so the command can print a counterexample's length too:
// every random choice comes from a math/rand/v2 source seeded by the
// matrix's seed, and a case is replayed in a fresh World. Shrinking
// removes actions (delta debugging: halves, then quarters, down to single
// actions) as long as the run still fails; since every action carries its
// own parameters, removing one leaves the others as they were.

// actKind is what one action does.
type actKind uint8

const (
	actCommit actKind = iota + 1
	actRollback
	actOpen
	actStep
	actTick
	actCrash
	actRestart
	actPause
	actResume
	actCut
	actHeal
	actBrokerDown
	actBrokerUp
	actBrokerRestart
	actConfirmLoss
	actConfirmsBack
	actAdvance
	actSkew
	actRedeliver
)

// action is one step of the machine, with its parameters.
type action struct {
	kind actKind
	proc string
	n    int
	link sim.Link
	d    time.Duration
}

func linkName(p string, l sim.Link) string {
	if l == sim.LinkBroker {
		return p + "->broker"
	}
	return p + "->db"
}

// String says what the action does, as a person reads it.
func (a action) String() string {
	switch a.kind {
	case actCommit:
		return fmt.Sprintf("%s commits %d event(s)", a.proc, a.n)
	case actRollback:
		return fmt.Sprintf("%s rolls back %d event(s)", a.proc, a.n)
	case actOpen:
		return fmt.Sprintf("%s begins a transaction of %d event(s) and holds it open", a.proc, a.n)
	case actStep:
		return fmt.Sprintf("%s takes %d step(s)", a.proc, a.n)
	case actTick:
		return a.proc + " ticks"
	case actCrash:
		return a.proc + " crashes"
	case actRestart:
		return a.proc + " restarts"
	case actPause:
		return a.proc + " pauses"
	case actResume:
		return a.proc + " resumes"
	case actCut:
		return "cut " + linkName(a.proc, a.link)
	case actHeal:
		return "heal " + linkName(a.proc, a.link)
	case actBrokerDown:
		return "broker goes down"
	case actBrokerUp:
		return "broker comes back"
	case actBrokerRestart:
		return "broker restarts"
	case actConfirmLoss:
		return "confirms start to get lost"
	case actConfirmsBack:
		return "confirms arrive again"
	case actAdvance:
		return "the clock advances " + a.d.String()
	case actSkew:
		return fmt.Sprintf("%s's clock is skewed by %s", a.proc, a.d)
	case actRedeliver:
		return "consumers drop their connections: unacked deliveries come back"
	}
	return "action(" + strconv.Itoa(int(a.kind)) + ")"
}

// machineCase is one test case: the world's parameters and the actions.
type machineCase struct {
	seed                               uint64
	replicas, consumers, batch, window int
	acts                               []action
}

// names of the world's processes, as sim names them.
func (c machineCase) producers() []string { return []string{"producer-1", "producer-2"} }

func (c machineCase) relays() []string {
	out := make([]string, c.replicas)
	for i := range out {
		out[i] = "relay-" + string(rune('a'+i))
	}
	return out
}

func (c machineCase) consumerNames() []string {
	out := make([]string, c.consumers)
	for i := range out {
		out[i] = "consumer-" + strconv.Itoa(i+1)
	}
	return out
}

// machine runs cases of one variant.
type machine struct {
	v    sim.Variant
	tune func(*sim.Swarm)
	// killedBy returns the checker that kills a run, "" when none does.
	killedBy func(sim.Result) string
}

func (m *machine) options(c machineCase) sim.Options {
	return sim.Options{Variant: m.v, Tune: func(sw *sim.Swarm) {
		if m.tune != nil {
			m.tune(sw)
		}
		sw.Producers, sw.Replicas, sw.Consumers = 2, c.replicas, c.consumers
		sw.BatchSize, sw.Window = c.batch, c.window
		sw.Faults = nil
	}}
}

// swarm returns the parameters of the world a case runs in (but for the
// bounds the world puts on its step time, which no action reads).
func (m *machine) swarm(c machineCase) sim.Swarm {
	sw := sim.DrawSwarm(c.seed)
	m.options(c).Tune(&sw)
	return sw
}

// run replays a case in a fresh world and returns the run's result and
// the actions that took effect (an action whose precondition does not
// hold, such as restarting a process that runs, is skipped).
func (m *machine) run(c machineCase) (sim.Result, []action) {
	w := sim.NewWorld(c.seed, m.options(c))
	var (
		crashed = map[string]bool{}
		paused  = map[string]bool{}
		cut     = map[string]bool{}
		down    bool
		lossy   bool
		applied = make([]action, 0, len(c.acts))
	)
	key := func(a action) string { return a.proc + "/" + strconv.Itoa(int(a.link)) }
	for _, a := range c.acts {
		ok := true
		switch a.kind {
		case actCommit:
			w.Commit(a.proc, a.n, false)
		case actRollback:
			w.Commit(a.proc, a.n, true)
		case actOpen:
			// The transaction is queued while the producer is paused, then
			// the producer gets the steps that begin it and stage its
			// first event: its ids are drawn and it stays open until a
			// later action (or the end of the run) lets it commit.
			if paused[a.proc] || crashed[a.proc] {
				ok = false
				break
			}
			w.Pause(a.proc)
			w.Commit(a.proc, a.n, false)
			w.Resume(a.proc)
			w.Step(a.proc)
			w.Step(a.proc)
		case actStep:
			for range a.n {
				w.Step(a.proc)
			}
		case actTick:
			w.Tick(a.proc)
		case actCrash:
			if ok = !crashed[a.proc]; ok {
				w.Crash(a.proc)
				crashed[a.proc] = true
			}
		case actRestart:
			if ok = crashed[a.proc]; ok {
				w.Restart(a.proc)
				crashed[a.proc] = false
			}
		case actPause:
			if ok = !paused[a.proc]; ok {
				w.Pause(a.proc)
				paused[a.proc] = true
			}
		case actResume:
			if ok = paused[a.proc]; ok {
				w.Resume(a.proc)
				paused[a.proc] = false
			}
		case actCut:
			if ok = !cut[key(a)]; ok {
				w.Cut(a.proc, a.link)
				cut[key(a)] = true
			}
		case actHeal:
			if ok = cut[key(a)]; ok {
				w.Heal(a.proc, a.link)
				cut[key(a)] = false
			}
		case actBrokerDown:
			if ok = !down; ok {
				w.BrokerDown()
				down = true
			}
		case actBrokerUp:
			if ok = down; ok {
				w.BrokerUp()
				down = false
			}
		case actBrokerRestart:
			w.BrokerRestart()
		case actConfirmLoss:
			if ok = !lossy; ok {
				w.ConfirmLoss()
				lossy = true
			}
		case actConfirmsBack:
			if ok = lossy; ok {
				w.ConfirmsBack()
				lossy = false
			}
		case actAdvance:
			w.Advance(a.d)
		case actSkew:
			w.Skew(a.proc, a.d)
		case actRedeliver:
			w.Redeliver()
		}
		if ok {
			applied = append(applied, a)
		}
	}
	return w.Finish(), applied
}

// generate draws a case: the world's parameters and up to maxActs
// actions.
func (m *machine) generate(r *rand.Rand, maxActs int) machineCase {
	c := machineCase{
		seed:      r.Uint64(),
		replicas:  2 + r.IntN(2),
		consumers: 1 + r.IntN(2),
		batch:     []int{1, 2, 5, 100}[r.IntN(4)],
		window:    []int{1, 2, 100}[r.IntN(3)],
	}
	sw := m.swarm(c)
	producers, relays, consumers := c.producers(), c.relays(), c.consumerNames()
	actors := append(append(append([]string(nil), producers...), relays...), consumers...)
	pick := func(xs []string) string { return xs[r.IntN(len(xs))] }
	durations := []time.Duration{time.Second, time.Minute, sw.BackoffBase, sw.BackoffMax, sw.Lease / 2, sw.Lease + time.Second}
	skews := []time.Duration{0, -2 * time.Hour, -time.Hour, -5 * time.Minute, 5 * time.Minute, time.Hour, 2 * time.Hour}
	// Weighted kinds: the workload and the relays' work most often.
	kinds := []struct {
		k actKind
		w int
	}{
		{actCommit, 6}, {actRollback, 1}, {actOpen, 1}, {actStep, 6}, {actTick, 5},
		{actCrash, 1}, {actRestart, 1}, {actPause, 1}, {actResume, 1}, {actCut, 1}, {actHeal, 1},
		{actBrokerDown, 1}, {actBrokerUp, 1}, {actBrokerRestart, 1}, {actConfirmLoss, 1}, {actConfirmsBack, 1},
		{actAdvance, 2}, {actSkew, 1}, {actRedeliver, 1},
	}
	total := 0
	for _, k := range kinds {
		total += k.w
	}
	n := 1 + r.IntN(maxActs)
	for range n {
		x := r.IntN(total)
		var k actKind
		for _, kw := range kinds {
			if x < kw.w {
				k = kw.k
				break
			}
			x -= kw.w
		}
		a := action{kind: k}
		switch k {
		case actCommit, actRollback, actOpen:
			a.proc, a.n = pick(producers), 1+r.IntN(3)
		case actStep:
			a.proc, a.n = pick(actors), 1+r.IntN(6)
		case actTick, actSkew:
			a.proc = pick(relays)
			if k == actSkew {
				a.d = skews[r.IntN(len(skews))]
			}
		case actCrash, actRestart, actCut, actHeal:
			a.proc = pick(append(append([]string(nil), relays...), consumers...))
			a.link = sim.Link(r.IntN(2))
		case actPause, actResume:
			a.proc = pick(actors)
		case actAdvance:
			a.d = durations[r.IntN(len(durations))]
		}
		c.acts = append(c.acts, a)
	}
	return c
}

// fails reports whether a case kills the variant, and by which checker.
func (m *machine) fails(c machineCase) (string, bool) {
	res, _ := m.run(c)
	if res.Err != nil {
		return "", false
	}
	name := m.killedBy(res)
	return name, name != ""
}

// shrink removes actions from a failing case while it keeps failing and
// returns the smallest case found within budget replays.
func (m *machine) shrink(c machineCase, budget int) machineCase {
	// Drop what did not take effect first: it changed nothing.
	if _, applied := m.run(c); len(applied) < len(c.acts) {
		d := c
		d.acts = applied
		if _, ok := m.fails(d); ok {
			c = d
		}
		budget--
	}
	try := func(acts []action) bool {
		if budget <= 0 {
			return false
		}
		budget--
		d := c
		d.acts = acts
		_, ok := m.fails(d)
		if ok {
			c = d
		}
		return ok
	}
	for chunk := max(len(c.acts)/2, 1); chunk >= 1 && budget > 0; {
		removed := false
		for start := 0; start < len(c.acts) && budget > 0; {
			end := min(start+chunk, len(c.acts))
			acts := append(append([]action(nil), c.acts[:start]...), c.acts[end:]...)
			if try(acts) {
				removed = true
				continue // the same start now holds the next chunk
			}
			start = end
		}
		if !removed {
			if chunk == 1 {
				break
			}
			chunk /= 2
		}
	}
	// Simpler parameters: fewer steps and events per action.
	for i := 0; i < len(c.acts) && budget > 0; i++ {
		for c.acts[i].n > 1 && budget > 0 {
			acts := append([]action(nil), c.acts...)
			acts[i].n--
			if !try(acts) {
				break
			}
		}
	}
	return c
}

// counterexample is a shrunk failing case.
type counterexample struct {
	found   bool
	checker string
	cases   int
	trace   []string
}

// search draws up to cases cases from seed, stops at the first that
// fails, and shrinks it.
func (m *machine) search(seed uint64, cases, maxActs, shrinkBudget int, deadline time.Time) counterexample {
	r := rand.New(rand.NewPCG(seed, 0x6d75_7461_6e74_0001))
	for i := range cases {
		if !deadline.IsZero() && time.Now().After(deadline) {
			return counterexample{cases: i}
		}
		c := m.generate(r, maxActs)
		if _, ok := m.fails(c); !ok {
			continue
		}
		c = m.shrink(c, shrinkBudget)
		res, applied := m.run(c)
		ce := counterexample{found: true, checker: m.killedBy(res), cases: i + 1}
		ce.trace = append(ce.trace, fmt.Sprintf("world seed %d, %d relays, %d consumer(s), batch %d, window %d",
			c.seed, c.replicas, c.consumers, c.batch, c.window))
		for _, a := range applied {
			ce.trace = append(ce.trace, a.String())
		}
		if ce.checker == "" {
			// Shrinking kept only failing cases; a replay that passes
			// means the world is not deterministic.
			ce.checker = "replay passed: " + summary(res.Report)
		}
		return ce
	}
	return counterexample{cases: cases}
}

// steps is the counterexample's length in actions.
func (ce counterexample) steps() int {
	if !ce.found {
		return 0
	}
	return len(ce.trace) - 1
}

func summary(r checker.Report) string {
	return strings.SplitN(r.Summary(), "\n", 2)[0]
}
