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

// lookupSimMutant resolves --mutant for verb, or reports why it cannot.
func lookupSimMutant(std *stdio, verb, name string) (sim.Variant, int) {
	if !simMutants.built() {
		return sim.Variant{}, unavailable(std, verb, "the mutant catalogue is not built in this version")
	}
	v, ok := simMutants.lookup(name)
	if !ok {
		return sim.Variant{}, usageErr(std, verb, "unknown mutant %q (known: %s)", name, strings.Join(simMutants.names(), ", "))
	}
	if v.Name == "" {
		v.Name = name
	}
	return v, exitOK
}

// mutantNames renders the catalogue for help and errors.
func mutantNames() string {
	if !simMutants.built() {
		return "(the mutant catalogue is not built in this version)"
	}
	return fmt.Sprint(simMutants.names())
}
