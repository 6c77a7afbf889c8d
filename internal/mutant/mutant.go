// Package mutant is the mutant catalogue and its kill matrix: realistic
// relay, consumer and producer bugs, each a small decorator on the seams
// the production code is built on (relay.Store, relay.Publisher,
// consumer.Inbox) or a producer mode, never a branch inside the production
// relay. A mutant runs in the simulation as a sim.Variant and, for the
// relay-side ones, in the relay process of cmd/relay when OUTBOX_MUTANT
// names it, over sim.PGRaw, the PostgreSQL form of the statements a correct
// relay never issues.
//
// RunMatrix runs the harness against the reference system and every
// mutant and reports, per mutant, whether some checker killed it, which
// one, on which seed, how long that took, and how many actions the
// shrunk counterexample has. The reference must never be killed; every
// mutant must be.
package mutant

import (
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/outboxlab/outboxlab/contract"
	"github.com/outboxlab/outboxlab/workload"

	"github.com/outboxlab/outboxlab/consumer"
	"github.com/outboxlab/outboxlab/internal/sim"
	"github.com/outboxlab/outboxlab/relay"
)

// Reference is the name of the unmutated system in the kill matrix.
const Reference = "reference"

// Side is the part of the system a mutant breaks.
type Side string

// Sides.
const (
	SideProducer Side = "producer"
	SideRelay    Side = "relay"
	SideConsumer Side = "consumer"
)

// Mutant is one realistic bug.
type Mutant struct {
	// Name selects the mutant (OUTBOX_MUTANT, --mutant).
	Name string
	// Description says in one sentence what the bug is.
	Description string
	// Side is the part of the system it breaks.
	Side Side
	// Relay is the relay-side form: decorators on the relay's seams.
	Relay RelayForm
	// Inbox is the consumer-side form, nil for the others.
	Inbox InboxForm
	// Producer is the producers' mode in the simulation; workload.Outbox but
	// for publish-before-commit.
	Producer workload.Mode
	// Exposure is the simulation swarm that exposes the mutant: the
	// faults that make its bug matter (added to the swarm each seed
	// draws) and the workload it needs.
	Exposure Exposure
	// Infra lists the chaos scenarios that kill the mutant on real
	// infrastructure; empty when none of the catalogue's scenarios can
	// tell (the bug only shows in records a relay container does not
	// write).
	Infra []InfraRun
}

// InfraRun is one run of the infrastructure tier.
type InfraRun struct {
	// Scenario names a scenario of the chaos catalogue.
	Scenario string
	// Variant is the producers' mode (a workload.Mode's name);
	// empty for the outbox.
	Variant string
	// Env is the relay replicas' extra environment; OUTBOX_MUTANT is
	// added for relay-side mutants.
	Env map[string]string
}

// EnvVar is the relay process's environment variable that selects a
// relay-side mutant.
const EnvVar = contract.EnvMutant

// Variant returns the simulation variant that runs the mutant.
func (m Mutant) Variant() sim.Variant {
	v := sim.Variant{Name: m.Name, Producer: m.Producer}
	f := m.Relay
	if f.Store != nil || f.Publisher != nil {
		// WrapStore and WrapPublisher are called one after the other for
		// the same process as it boots; the raw store is handed from
		// the first to the second through stash. RunMany runs worlds in
		// parallel, hence the lock.
		var (
			mu    sync.Mutex
			stash = map[sim.Process]sim.RawStore{}
		)
		v.WrapStore = func(p sim.Process, s relay.Store) relay.Store {
			raw := s.(sim.RawStore)
			if f.Publisher != nil {
				mu.Lock()
				stash[p] = raw
				mu.Unlock()
			}
			if f.Store == nil {
				return s
			}
			return f.Store(raw, p.Now)
		}
		if f.Publisher != nil {
			v.WrapPublisher = func(p sim.Process, pub relay.Publisher) relay.Publisher {
				mu.Lock()
				raw := stash[p]
				delete(stash, p)
				mu.Unlock()
				return f.Publisher(pub, raw)
			}
		}
	}
	v.RelayConfig = f.Config
	if f.PublishOptions != nil {
		o := *f.PublishOptions
		v.PublishOptions = &o
	}
	if m.Inbox != nil {
		form := m.Inbox
		v.WrapInbox = func(_ sim.Process, in consumer.Inbox) consumer.Inbox {
			return form(in, in.(sim.RawInbox).Effect)
		}
	}
	return v
}

// HasRelayForm reports whether the mutant changes the relay process, so
// that OUTBOX_MUTANT selects it in cmd/relay.
func (m Mutant) HasRelayForm() bool {
	f := m.Relay
	return f.Store != nil || f.Publisher != nil || f.Config != nil || f.PublishOptions != nil
}

// All returns the catalogue, in the order the kill matrix lists it.
func All() []Mutant {
	out := slices.Clone(catalogue)
	for i := range out {
		out[i].Infra = slices.Clone(out[i].Infra)
	}
	return out
}

// Names returns the names of the catalogue's mutants, in order.
func Names() []string {
	out := make([]string, len(catalogue))
	for i, m := range catalogue {
		out[i] = m.Name
	}
	return out
}

// Lookup returns the mutant named name.
func Lookup(name string) (Mutant, bool) {
	for _, m := range All() {
		if m.Name == name {
			return m, true
		}
	}
	return Mutant{}, false
}

// LookupRelay returns the relay-side mutant named name, for the relay
// process: an unknown name, or one whose bug is not in the relay, is an
// error that lists the relay-side mutants.
func LookupRelay(name string) (Mutant, error) {
	m, ok := Lookup(name)
	if ok && m.HasRelayForm() {
		return m, nil
	}
	var names []string
	for _, m := range catalogue {
		if m.HasRelayForm() {
			names = append(names, m.Name)
		}
	}
	if ok {
		return Mutant{}, fmt.Errorf("%q is a %s-side mutant, not one the relay runs (relay-side: %s)",
			name, m.Side, strings.Join(names, ", "))
	}
	return Mutant{}, fmt.Errorf("%q: unknown mutant (relay-side: %s)", name, strings.Join(names, ", "))
}
