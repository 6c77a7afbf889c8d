package sim

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"time"
)

// This file is the one vocabulary of the state machines that drive a
// World: the rapid state machine of package property and the mutant
// matrix's own generator and shrinker (package mutant) draw their cases
// as a Setup and a sequence of Actions, and a Machine applies them. How a
// case is drawn is each state machine's own business; what an action is,
// how it reads and what it does to the world is here, once.

// ActionKind is what one Action does.
type ActionKind uint8

// Kinds of action.
const (
	// ActCommit has Proc (a producer) commit a transaction of N events.
	ActCommit ActionKind = iota + 1
	// ActRollback has Proc (a producer) roll back a transaction of N
	// events.
	ActRollback
	// ActOpen has Proc (a producer) begin a transaction of N events, stage
	// its first event and hold it open until a later action lets the
	// producer go on.
	ActOpen
	// ActStep gives Proc N scheduler steps.
	ActStep
	// ActTick lets Proc (a relay) run until it is between ticks again.
	ActTick
	// ActCrash kills Proc at its pending call.
	ActCrash
	// ActRestart brings a crashed Proc back.
	ActRestart
	// ActPause stops giving Proc steps.
	ActPause
	// ActResume ends Proc's pause.
	ActResume
	// ActCut cuts Proc's Link.
	ActCut
	// ActHeal restores Proc's Link.
	ActHeal
	// ActBrokerDown takes the broker away from everyone.
	ActBrokerDown
	// ActBrokerUp ends a broker outage.
	ActBrokerUp
	// ActBrokerRestart restarts the broker.
	ActBrokerRestart
	// ActConfirmLoss makes confirms get lost.
	ActConfirmLoss
	// ActConfirmsBack ends a confirm loss.
	ActConfirmsBack
	// ActAdvance moves the database clock forward By.
	ActAdvance
	// ActSkew offsets Proc's (a relay's) clock By; zero ends the skew.
	ActSkew
	// ActRedeliver drops every consumer's broker connection for a moment.
	ActRedeliver
)

// Action is one step of a state machine over a World, with its
// parameters; a kind reads only the fields its documentation names.
type Action struct {
	Kind ActionKind
	// Proc names the process the action is about.
	Proc string
	// N counts events (ActCommit, ActRollback, ActOpen) or steps
	// (ActStep).
	N int
	// Link is the link ActCut and ActHeal cut and restore.
	Link Link
	// By is how far ActAdvance moves the clock and ActSkew offsets one.
	By time.Duration
}

// String says what the action does, as a person reads it.
func (a Action) String() string {
	switch a.Kind {
	case ActCommit:
		return fmt.Sprintf("%s commits %d event(s)", a.Proc, a.N)
	case ActRollback:
		return fmt.Sprintf("%s rolls back %d event(s)", a.Proc, a.N)
	case ActOpen:
		return fmt.Sprintf("%s begins a transaction of %d event(s) and holds it open", a.Proc, a.N)
	case ActStep:
		return fmt.Sprintf("%s takes %d step(s)", a.Proc, a.N)
	case ActTick:
		return a.Proc + " ticks"
	case ActCrash:
		return a.Proc + " crashes"
	case ActRestart:
		return a.Proc + " restarts"
	case ActPause:
		return a.Proc + " pauses"
	case ActResume:
		return a.Proc + " resumes"
	case ActCut:
		return "cut " + ProcLink{a.Proc, a.Link}.String()
	case ActHeal:
		return "heal " + ProcLink{a.Proc, a.Link}.String()
	case ActBrokerDown:
		return "broker goes down"
	case ActBrokerUp:
		return "broker comes back"
	case ActBrokerRestart:
		return "broker restarts"
	case ActConfirmLoss:
		return "confirms start to get lost"
	case ActConfirmsBack:
		return "confirms arrive again"
	case ActAdvance:
		return "the clock advances " + a.By.String()
	case ActSkew:
		return fmt.Sprintf("%s's clock is skewed by %s", a.Proc, a.By)
	case ActRedeliver:
		return "consumers drop their connections: unacked deliveries come back"
	}
	return "action(" + strconv.Itoa(int(a.Kind)) + ")"
}

// ProcLink is one link of one process.
type ProcLink struct {
	Proc string
	Link Link
}

// String names the link as a person reads it: "relay-a->db".
func (l ProcLink) String() string {
	if l.Link == LinkBroker {
		return l.Proc + "->broker"
	}
	return l.Proc + "->db"
}

// Setup is the world a state machine drives: the world's seed (which
// draws the rest of the swarm and the outcomes the fakes decide) and the
// parameters a case draws itself. Its world has setupProducers producers
// and no fault but those the actions inject.
type Setup struct {
	Seed                               uint64
	Replicas, Consumers, Batch, Window int
}

const setupProducers = 2

// DrawSetup draws a Setup: the world's seed is seed, and pick(label,
// choices) returns one of choices for the parameter label, in this order:
// replicas, consumers, batch, window. A math/rand source picks an index,
// rapid samples from choices.
func DrawSetup(seed uint64, pick func(label string, choices []int) int) Setup {
	s := Setup{Seed: seed}
	s.Replicas = pick("replicas", []int{2, 3})
	s.Consumers = pick("consumers", []int{1, 2})
	s.Batch = pick("batch", []int{1, 2, 5, 100})
	s.Window = pick("window", []int{1, 2, 100})
	return s
}

// String renders the setup on one line, as a counterexample's first.
func (s Setup) String() string {
	return fmt.Sprintf("world seed %d, %d relays, %d consumer(s), batch %d, window %d",
		s.Seed, s.Replicas, s.Consumers, s.Batch, s.Window)
}

// Options returns the options of the setup's world running v: tune (when
// set) adjusts the swarm first, then the setup fixes the processes, the
// batch and the window, and switches the swarm's own faults off.
func (s Setup) Options(v Variant, tune func(*Swarm)) Options {
	return Options{Variant: v, Tune: func(sw *Swarm) {
		if tune != nil {
			tune(sw)
		}
		sw.Producers, sw.Replicas, sw.Consumers = setupProducers, s.Replicas, s.Consumers
		sw.BatchSize, sw.Window = s.Batch, s.Window
		sw.Faults = nil
	}}
}

// Swarm returns the parameters of the setup's world, for a generator that
// draws actions before the world exists (durations of the lease and
// backoffs).
func (s Setup) Swarm(tune func(*Swarm)) Swarm {
	return swarmOf(s.Seed, s.Options(Variant{}, tune))
}

// Names names the setup's producers, relay replicas and consumers, as its
// World does (World.Producers, Relays and Consumers), for a generator
// that draws actions before the world exists.
func (s Setup) Names() (producers, relays, consumers []string) {
	relays = make([]string, s.Replicas)
	for i := range relays {
		relays[i] = "relay-" + string(rune('a'+i))
	}
	return numbered("producer-", setupProducers), relays, numbered("consumer-", s.Consumers)
}

func numbered(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = prefix + strconv.Itoa(i+1)
	}
	return out
}

// AdvanceChoices are the durations a state machine advances the clock
// by in a world of swarm sw: around a second, a minute, the backoffs and
// the lease.
func AdvanceChoices(sw Swarm) []time.Duration {
	return []time.Duration{time.Second, time.Minute, sw.BackoffBase, sw.BackoffMax, sw.Lease / 2, sw.Lease + time.Second}
}

// SkewChoices are the offsets a state machine skews a relay's clock by;
// zero ends a skew.
func SkewChoices() []time.Duration {
	return []time.Duration{0, -2 * time.Hour, -time.Hour, -5 * time.Minute, 5 * time.Minute, time.Hour, 2 * time.Hour}
}

// Machine applies Actions to a World and keeps the state their
// preconditions read: which processes are crashed or paused, which links
// are cut, whether the broker is down and confirms are lost. An action
// whose precondition does not hold (restarting a process that runs,
// healing a link that is not cut) is skipped, so that any sequence of
// actions is a valid case and a shrinker may remove any of them.
type Machine struct {
	w       *World
	crashed map[string]bool
	paused  map[string]bool
	cut     map[ProcLink]bool
	world   map[worldFault]bool
	applied []Action
}

// worldFault is a fault of the whole world, not of one process.
type worldFault uint8

const (
	brokerDown worldFault = iota + 1
	confirmLoss
)

// NewMachine builds the world of s running v (tune, when set, adjusts its
// swarm as Setup.Options says) and a machine over it.
func NewMachine(s Setup, v Variant, tune func(*Swarm)) *Machine {
	return &Machine{
		w:       NewWorld(s.Seed, s.Options(v, tune)),
		crashed: map[string]bool{},
		paused:  map[string]bool{},
		cut:     map[ProcLink]bool{},
		world:   map[worldFault]bool{},
	}
}

// World returns the world the machine drives.
func (m *Machine) World() *World { return m.w }

// Apply applies a if its precondition holds and reports whether it did.
func (m *Machine) Apply(a Action) bool {
	w := m.w
	ok := true
	switch a.Kind {
	case ActCommit:
		w.Commit(a.Proc, a.N, false)
	case ActRollback:
		w.Commit(a.Proc, a.N, true)
	case ActOpen:
		// The transaction is queued while the producer is paused, then
		// the producer gets the steps that begin it and stage its first
		// event: its ids are drawn and it stays open until a later action
		// (or the end of the run) lets it commit.
		if ok = !m.paused[a.Proc] && !m.crashed[a.Proc]; ok {
			w.Pause(a.Proc)
			w.Commit(a.Proc, a.N, false)
			w.Resume(a.Proc)
			w.Step(a.Proc)
			w.Step(a.Proc)
		}
	case ActStep:
		for range a.N {
			w.Step(a.Proc)
		}
	case ActTick:
		w.Tick(a.Proc)
	case ActCrash:
		ok = flip(m.crashed, a.Proc, true, func() { w.Crash(a.Proc) })
	case ActRestart:
		ok = flip(m.crashed, a.Proc, false, func() { w.Restart(a.Proc) })
	case ActPause:
		ok = flip(m.paused, a.Proc, true, func() { w.Pause(a.Proc) })
	case ActResume:
		ok = flip(m.paused, a.Proc, false, func() { w.Resume(a.Proc) })
	case ActCut:
		ok = flip(m.cut, ProcLink{a.Proc, a.Link}, true, func() { w.Cut(a.Proc, a.Link) })
	case ActHeal:
		ok = flip(m.cut, ProcLink{a.Proc, a.Link}, false, func() { w.Heal(a.Proc, a.Link) })
	case ActBrokerDown:
		ok = flip(m.world, brokerDown, true, w.BrokerDown)
	case ActBrokerUp:
		ok = flip(m.world, brokerDown, false, w.BrokerUp)
	case ActBrokerRestart:
		w.BrokerRestart()
	case ActConfirmLoss:
		ok = flip(m.world, confirmLoss, true, w.ConfirmLoss)
	case ActConfirmsBack:
		ok = flip(m.world, confirmLoss, false, w.ConfirmsBack)
	case ActAdvance:
		w.Advance(a.By)
	case ActSkew:
		w.Skew(a.Proc, a.By)
	case ActRedeliver:
		w.Redeliver()
	default:
		ok = false
	}
	if ok {
		m.applied = append(m.applied, a)
	}
	return ok
}

// Applied returns the actions that took effect, in order.
func (m *Machine) Applied() []Action { return slices.Clone(m.applied) }

// Trace returns the applied actions as a person reads them, one a line.
func (m *Machine) Trace() []string {
	out := make([]string, len(m.applied))
	for i, a := range m.applied {
		out[i] = a.String()
	}
	return out
}

// Crashed returns the crashed processes, sorted.
func (m *Machine) Crashed() []string { return setOf(m.crashed, cmp.Compare[string]) }

// Paused returns the paused processes, sorted.
func (m *Machine) Paused() []string { return setOf(m.paused, cmp.Compare[string]) }

// Cuts returns the cut links, sorted.
func (m *Machine) Cuts() []ProcLink {
	return setOf(m.cut, func(a, b ProcLink) int {
		return cmp.Or(cmp.Compare(a.Proc, b.Proc), cmp.Compare(a.Link, b.Link))
	})
}

// BrokerIsDown reports whether an ActBrokerDown is in force.
func (m *Machine) BrokerIsDown() bool { return m.world[brokerDown] }

// ConfirmsLost reports whether an ActConfirmLoss is in force.
func (m *Machine) ConfirmsLost() bool { return m.world[confirmLoss] }

// flip is an action that sets state[k] to to: it does it and reports true
// unless state[k] is to already.
func flip[K comparable](state map[K]bool, k K, to bool, do func()) bool {
	if state[k] == to {
		return false
	}
	do()
	state[k] = to
	return true
}

// Finish ends the run (World.Finish): heal, drain and check.
func (m *Machine) Finish() Result { return m.w.Finish() }

// setOf returns the keys of set that are true, in order, so that
// a draw from them is deterministic.
func setOf[K comparable](set map[K]bool, order func(a, b K) int) []K {
	var out []K
	for k, v := range set {
		if v {
			out = append(out, k)
		}
	}
	slices.SortFunc(out, order)
	return out
}
