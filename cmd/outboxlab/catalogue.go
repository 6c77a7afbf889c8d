package main

import (
	"strings"

	"github.com/outboxlab/outboxlab/internal/mutant"
	"github.com/outboxlab/outboxlab/internal/sim"
)

// mutantCatalogue is the mutant catalogue as the simulation verb uses it:
// the names it accepts for --mutant and the simulation of each.
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

// catalogueOfMutants returns package mutant's catalogue.
func catalogueOfMutants() mutantCatalogue {
	return mutantCatalogue{
		names: mutant.Names,
		simVariant: func(name string) (sim.Variant, bool) {
			m, ok := mutant.Lookup(name)
			if !ok {
				return sim.Variant{}, false
			}
			return m.Variant(), true
		},
		tune: func(name string) func(*sim.Swarm) {
			m, ok := mutant.Lookup(name)
			if !ok {
				return nil
			}
			return m.Exposure.Tune
		},
	}
}

// simOptions returns the simulation options that run a mutant: its
// variant and the swarm that exposes it.
func (c mutantCatalogue) simOptions(name string) (sim.Options, bool) {
	v, ok := c.simVariant(name)
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

// lookup resolves --mutant for verb: the simulation options of the mutant
// and exitOK, or the usage error of a name the catalogue does not know.
func (c mutantCatalogue) lookup(std *stdio, verb, name string) (sim.Options, int) {
	opts, ok := c.simOptions(name)
	if !ok {
		return sim.Options{}, usageErr(std, verb, "unknown mutant %q (known: %s)", name, strings.Join(c.names(), ", "))
	}
	return opts, exitOK
}
