package property

import (
	"pgregory.net/rapid"

	"github.com/outboxlab/outboxlab/internal/sim"
)

// simCase is one case of the rapid state machine over the simulation:
// rapid draws sim.Actions, the sim.Machine (the same one the mutant
// matrix's own search runs) applies them and keeps the trace.
type simCase struct {
	m      *sim.Machine
	relays []string
	actors []string // relays and consumers
}

// apply applies a, or skips the step when a's precondition does not hold
// (why says which).
func (c *simCase) apply(t *rapid.T, a sim.Action, why string) {
	if !c.m.Apply(a) {
		t.Skip(why)
	}
	t.Log(a.String())
}

// drawFrom draws one of xs, or skips the step when there is none (why
// says so).
func drawFrom[T any](t *rapid.T, xs []T, label, why string) T {
	if len(xs) == 0 {
		t.Skip(why)
	}
	return rapid.SampledFrom(xs).Draw(t, label)
}

// actions are the state machine's actions, drawn from the state the
// machine keeps, so that few of them are skipped.
func (c *simCase) actions() map[string]func(*rapid.T) {
	w := c.m.World()
	sw := w.Swarm()
	return map[string]func(*rapid.T){
		"commit": func(t *rapid.T) {
			p := rapid.SampledFrom(w.Producers()).Draw(t, "producer")
			c.apply(t, sim.Action{Kind: sim.ActCommit, Proc: p, N: rapid.IntRange(1, 3).Draw(t, "events")}, "")
		},
		"rollback": func(t *rapid.T) {
			p := rapid.SampledFrom(w.Producers()).Draw(t, "producer")
			c.apply(t, sim.Action{Kind: sim.ActRollback, Proc: p, N: rapid.IntRange(1, 3).Draw(t, "events")}, "")
		},
		"step": func(t *rapid.T) {
			p := rapid.SampledFrom(c.actors).Draw(t, "process")
			c.apply(t, sim.Action{Kind: sim.ActStep, Proc: p, N: rapid.IntRange(1, 6).Draw(t, "steps")}, "")
		},
		"tick": func(t *rapid.T) {
			c.apply(t, sim.Action{Kind: sim.ActTick, Proc: rapid.SampledFrom(c.relays).Draw(t, "relay")}, "")
		},
		"crash": func(t *rapid.T) {
			c.apply(t, sim.Action{Kind: sim.ActCrash, Proc: rapid.SampledFrom(c.actors).Draw(t, "process")}, "already crashed")
		},
		"restart": func(t *rapid.T) {
			c.apply(t, sim.Action{Kind: sim.ActRestart, Proc: drawFrom(t, c.m.Crashed(), "process", "nothing crashed")}, "")
		},
		"pause": func(t *rapid.T) {
			c.apply(t, sim.Action{Kind: sim.ActPause, Proc: rapid.SampledFrom(c.relays).Draw(t, "relay")}, "already paused")
		},
		"resume": func(t *rapid.T) {
			c.apply(t, sim.Action{Kind: sim.ActResume, Proc: drawFrom(t, c.m.Paused(), "relay", "nothing paused")}, "")
		},
		"cut": func(t *rapid.T) {
			p := rapid.SampledFrom(c.actors).Draw(t, "process")
			l := rapid.SampledFrom([]sim.Link{sim.LinkDB, sim.LinkBroker}).Draw(t, "link")
			c.apply(t, sim.Action{Kind: sim.ActCut, Proc: p, Link: l}, "already cut")
		},
		"heal": func(t *rapid.T) {
			l := drawFrom(t, c.m.Cuts(), "link", "nothing cut")
			c.apply(t, sim.Action{Kind: sim.ActHeal, Proc: l.Proc, Link: l.Link}, "")
		},
		"broker-down": func(t *rapid.T) { c.apply(t, sim.Action{Kind: sim.ActBrokerDown}, "already down") },
		"broker-up":   func(t *rapid.T) { c.apply(t, sim.Action{Kind: sim.ActBrokerUp}, "broker is up") },
		"broker-restart": func(t *rapid.T) {
			c.apply(t, sim.Action{Kind: sim.ActBrokerRestart}, "")
		},
		"confirm-loss": func(t *rapid.T) {
			if c.m.ConfirmsLost() {
				c.apply(t, sim.Action{Kind: sim.ActConfirmsBack}, "")
			} else {
				c.apply(t, sim.Action{Kind: sim.ActConfirmLoss}, "")
			}
		},
		"advance": func(t *rapid.T) {
			d := rapid.SampledFrom(sim.AdvanceChoices(sw)).Draw(t, "by")
			c.apply(t, sim.Action{Kind: sim.ActAdvance, By: d}, "")
		},
		"skew": func(t *rapid.T) {
			r := rapid.SampledFrom(c.relays).Draw(t, "relay")
			d := rapid.SampledFrom(sim.SkewChoices()).Draw(t, "by")
			c.apply(t, sim.Action{Kind: sim.ActSkew, Proc: r, By: d}, "")
		},
		"redeliver": func(t *rapid.T) { c.apply(t, sim.Action{Kind: sim.ActRedeliver}, "") },
	}
}

// runSim runs one test case of the state machine over variant v: a world
// drawn by rapid, a sequence of actions, then heal, drain and the
// checkers. started receives the case as soon as it exists, so a caller
// can read the trace of the case rapid ran last.
func runSim(t *rapid.T, v sim.Variant, started func(*simCase)) {
	seed := rapid.Uint64().Draw(t, "seed")
	s := sim.DrawSetup(seed, func(label string, choices []int) int { return rapid.SampledFrom(choices).Draw(t, label) })
	m := sim.NewMachine(s, v, nil)
	c := &simCase{m: m, relays: m.World().Relays()}
	c.actors = append(append([]string(nil), c.relays...), m.World().Consumers()...)
	if started != nil {
		started(c)
	}
	t.Repeat(c.actions())
	if res := m.Finish(); !res.Valid {
		failCase(t, m.Trace(), s.String()+"\n"+res.Report.Summary())
	}
}
