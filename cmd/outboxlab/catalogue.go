package main

import (
	"fmt"
	"strings"

	"github.com/outboxlab/outboxlab/sim"
)

// mutantCatalogue is the mutant catalogue as the command uses it. Its zero
// value is a catalogue that is not built: the verbs that need one say so
// and exit 2.
type mutantCatalogue struct {
	// names lists the mutants in catalogue order.
	names func() []string
	// simVariant returns the simulation variant of a mutant.
	simVariant func(name string) (sim.Variant, bool)
	// tune, when set, returns the swarm adjustment that exposes a mutant
	// (sim.Options.Tune), so that a simulation of it runs the swarm the
	// kill matrix ran.
	tune func(name string) func(*sim.Swarm)
}

// simMutants is the catalogue the command runs.
var simMutants mutantCatalogue

func (c mutantCatalogue) built() bool { return c.names != nil && c.simVariant != nil }

func (c mutantCatalogue) lookup(name string) (sim.Variant, bool) {
	if !c.built() {
		return sim.Variant{}, false
	}
	return c.simVariant(name)
}

// simOptions returns the simulation options that run a mutant: its
// variant and the swarm that exposes it.
func (c mutantCatalogue) simOptions(name string) (sim.Options, bool) {
	v, ok := c.lookup(name)
	if !ok {
		return sim.Options{}, false
	}
	if v.Name == "" {
		v.Name = name
	}
	opts := sim.Options{Variant: v}
	if c.tune != nil {
		opts.Tune = c.tune(name)
	}
	return opts, true
}

// lookupSimMutant resolves --mutant for verb, or reports why it cannot.
func lookupSimMutant(std *stdio, verb, name string) (sim.Options, int) {
	if !simMutants.built() {
		return sim.Options{}, unavailable(std, verb, "the mutant catalogue is not built in this version")
	}
	opts, ok := simMutants.simOptions(name)
	if !ok {
		return sim.Options{}, usageErr(std, verb, "unknown mutant %q (known: %s)", name, strings.Join(simMutants.names(), ", "))
	}
	return opts, exitOK
}

// mutantNames renders the catalogue for help and errors.
func mutantNames() string {
	if !simMutants.built() {
		return "(the mutant catalogue is not built in this version)"
	}
	return fmt.Sprint(simMutants.names())
}
