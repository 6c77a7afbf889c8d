package mutant

import (
	"math/rand/v2"
	"strings"
	"time"

	"github.com/outboxlab/outboxlab/checker"
	"github.com/outboxlab/outboxlab/internal/sim"
	seedpkg "github.com/outboxlab/outboxlab/seed"
)

// The search below drives a sim.World one action at a time, as the rapid
// state machine of package property does, through the same sim.Machine
// and sim.Action, and shrinks a failing sequence of actions to a minimal
// one. It is deterministic and needs no testing.T, so the command can
// print a counterexample's length too: every random choice comes from a
// math/rand/v2 source seeded by the matrix's seed, and a case is replayed
// in a fresh World. Shrinking removes actions (delta debugging: halves,
// then quarters, down to single actions) as long as the run still fails;
// since every action carries its own parameters, removing one leaves the
// others as they were.

// machineCase is one test case: the world's setup and the actions.
type machineCase struct {
	setup sim.Setup
	acts  []sim.Action
}

// machine runs cases of one variant.
type machine struct {
	v    sim.Variant
	tune func(*sim.Swarm)
	// killedBy returns the checker that kills a run, "" when none does.
	killedBy func(sim.Result) string
}

// run replays a case in a fresh world and returns the run's result and
// the machine that ran it, which knows the actions that took effect (an
// action whose precondition does not hold, such as restarting a process
// that runs, is skipped).
func (m *machine) run(c machineCase) (sim.Result, *sim.Machine) {
	sm := sim.NewMachine(c.setup, m.v, m.tune)
	for _, a := range c.acts {
		sm.Apply(a)
	}
	return sm.Finish(), sm
}

// kindWeights are the kinds of action generate draws, weighted: the
// workload and the relays' work most often.
var kindWeights = []struct {
	k sim.ActionKind
	w int
}{
	{sim.ActCommit, 6}, {sim.ActRollback, 1}, {sim.ActOpen, 1}, {sim.ActStep, 6}, {sim.ActTick, 5},
	{sim.ActCrash, 1}, {sim.ActRestart, 1}, {sim.ActPause, 1}, {sim.ActResume, 1}, {sim.ActCut, 1}, {sim.ActHeal, 1},
	{sim.ActBrokerDown, 1}, {sim.ActBrokerUp, 1}, {sim.ActBrokerRestart, 1}, {sim.ActConfirmLoss, 1}, {sim.ActConfirmsBack, 1},
	{sim.ActAdvance, 2}, {sim.ActSkew, 1}, {sim.ActRedeliver, 1},
}

// generate draws a case: the world's setup and up to maxActs actions.
func (m *machine) generate(r *rand.Rand, maxActs int) machineCase {
	c := machineCase{setup: sim.DrawSetup(r.Uint64(), func(_ string, xs []int) int { return xs[r.IntN(len(xs))] })}
	producers, relays, consumers := c.setup.Names()
	actors := append(append(append([]string(nil), producers...), relays...), consumers...)
	pick := func(xs []string) string { return xs[r.IntN(len(xs))] }
	durations := sim.AdvanceChoices(c.setup.Swarm(m.tune))
	skews := sim.SkewChoices()
	total := 0
	for _, k := range kindWeights {
		total += k.w
	}
	n := 1 + r.IntN(maxActs)
	for range n {
		x := r.IntN(total)
		var k sim.ActionKind
		for _, kw := range kindWeights {
			if x < kw.w {
				k = kw.k
				break
			}
			x -= kw.w
		}
		a := sim.Action{Kind: k}
		switch k {
		case sim.ActCommit, sim.ActRollback, sim.ActOpen:
			a.Proc, a.N = pick(producers), 1+r.IntN(3)
		case sim.ActStep:
			a.Proc, a.N = pick(actors), 1+r.IntN(6)
		case sim.ActTick, sim.ActSkew:
			a.Proc = pick(relays)
			if k == sim.ActSkew {
				a.By = skews[r.IntN(len(skews))]
			}
		case sim.ActCrash, sim.ActRestart, sim.ActCut, sim.ActHeal:
			a.Proc = pick(append(append([]string(nil), relays...), consumers...))
			a.Link = sim.Link(r.IntN(2))
		case sim.ActPause, sim.ActResume:
			a.Proc = pick(actors)
		case sim.ActAdvance:
			a.By = durations[r.IntN(len(durations))]
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
	if _, sm := m.run(c); len(sm.Applied()) < len(c.acts) {
		d := c
		d.acts = sm.Applied()
		if _, ok := m.fails(d); ok {
			c = d
		}
		budget--
	}
	try := func(acts []sim.Action) bool {
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
			acts := append(append([]sim.Action(nil), c.acts[:start]...), c.acts[end:]...)
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
		for c.acts[i].N > 1 && budget > 0 {
			acts := append([]sim.Action(nil), c.acts...)
			acts[i].N--
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
	r := seedpkg.Rand(seed, seedpkg.Search)
	for i := range cases {
		if !deadline.IsZero() && time.Now().After(deadline) {
			return counterexample{cases: i}
		}
		c := m.generate(r, maxActs)
		if _, ok := m.fails(c); !ok {
			continue
		}
		c = m.shrink(c, shrinkBudget)
		res, sm := m.run(c)
		ce := counterexample{found: true, checker: m.killedBy(res), cases: i + 1}
		ce.trace = append([]string{c.setup.String()}, sm.Trace()...)
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
