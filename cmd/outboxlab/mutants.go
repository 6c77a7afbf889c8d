package main

import (
	"context"
	"flag"
)

func mutantsVerb() verb {
	return verb{
		name:    "mutants",
		summary: "run the mutant catalogue and print which checker kills which mutant",
		args:    "[--tier sim|infra] [--mutant NAME]... [--seeds N] [--seed S] [--json] [--out DIR]",
		about: `Runs every mutant of the catalogue (realistic relay bugs: publish before
commit, mark before publish, no lease, ...) or the ones named by --mutant
under the harness, and prints the kill matrix: for each mutant, the checkers
that failed it and on how many seeds. --tier sim runs them in the
deterministic simulation (no Docker); --tier infra runs them as relay
containers under the chaos scenarios (a Docker engine and ` + "`make images`" + ` are
needed). A mutant that survives every seed makes the command exit 1.
--out DIR writes mutants.json.`,
		define: func(fs *flag.FlagSet) func(context.Context, *stdio) int {
			o := &mutantsOptions{}
			fs.StringVar(&o.tier, "tier", "sim", "where the mutants run: sim or infra")
			fs.Var(&o.mutants, "mutant", "a mutant `NAME` to run; repeat for several (default: the whole catalogue)")
			fs.IntVar(&o.seeds, "seeds", 100, "seeds per mutant")
			fs.Var(&o.seed, "seed", "the first `seed` (default: drawn from the clock and printed)")
			fs.BoolVar(&o.json, "json", false, "print the kill matrix as JSON")
			fs.StringVar(&o.out, "out", "", "write mutants.json to `DIR`")
			return o.run
		},
	}
}

type mutantsOptions struct {
	tier    string
	mutants stringList
	seeds   int
	seed    seedFlag
	json    bool
	out     string
}

func (o *mutantsOptions) run(ctx context.Context, std *stdio) int {
	if o.tier != "sim" && o.tier != "infra" {
		return usageErr(std, "mutants", "--tier must be sim or infra, not %q", o.tier)
	}
	if o.seeds < 1 {
		return usageErr(std, "mutants", "--seeds must be at least 1, not %d", o.seeds)
	}
	if o.tier == "infra" {
		if code := needDocker(ctx, std, "mutants"); code != exitOK {
			return code
		}
	}
	if !simMutants.built() {
		return unavailable(std, "mutants", "the mutant catalogue is not built in this version")
	}
	return unavailable(std, "mutants", "the kill matrix is not built in this version")
}
