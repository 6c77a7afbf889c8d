// Package infra runs the infrastructure tier of the mutant kill matrix:
// each mutant that has an infrastructure form runs under the chaos
// scenarios that expose it, on PostgreSQL, RabbitMQ and toxiproxy
// containers, with its relay replicas built from this repository's relay
// (image or process) and OUTBOX_MUTANT naming the mutant; the reference
// runs the same scenarios without it. It lives apart from package mutant
// so that the relay process, which imports mutant for its decorators,
// does not link the container machinery.
package infra

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/outboxlab/outboxlab/internal/testenv"
	"github.com/outboxlab/outboxlab/mutant"
	"github.com/outboxlab/outboxlab/scenarios"
)

// Options says where the infrastructure tier runs.
type Options struct {
	// Env is the environment the scenarios run in; nil starts one with
	// scenarios.EnvOptions and closes it when the tier is done.
	Env *testenv.Env
	// Image is the relay image (default testenv.ImageRelay, built by
	// `make images`). Command, when set, runs the relay as a process on
	// the host instead, e.g. a binary freshly built from ./cmd/relay.
	Image   string
	Command []string
	// Log receives the scenario runs' lines; nil discards them.
	Log func(string)
}

// Tier returns the infrastructure tier as mutant.Options.Infra wants it.
func Tier(o Options) mutant.InfraTier {
	return func(ctx context.Context, ms []mutant.Mutant, mo mutant.Options) ([]mutant.Row, error) {
		return Run(ctx, ms, o, mo)
	}
}

// plan is one scenario run of a mutant or of the reference.
type plan struct {
	mutant   string
	relayEnv bool // OUTBOX_MUTANT is set
	run      mutant.InfraRun
}

// Plan returns the runs the tier makes for ms: first the reference, once
// on every scenario some mutant runs on (with the outbox producers), then
// each mutant's own runs. A mutant without an infrastructure form has no
// run.
func Plan(ms []mutant.Mutant) (reference []mutant.InfraRun, perMutant map[string][]mutant.InfraRun) {
	perMutant = map[string][]mutant.InfraRun{}
	seen := map[string]bool{}
	for _, m := range ms {
		for _, r := range m.Infra {
			perMutant[m.Name] = append(perMutant[m.Name], r)
			if !seen[r.Scenario] {
				seen[r.Scenario] = true
				reference = append(reference, mutant.InfraRun{Scenario: r.Scenario})
			}
		}
	}
	return reference, perMutant
}

// Run runs the infrastructure tier: the reference's row first, then one
// row per mutant with an infrastructure form, in catalogue order. A
// mutant's runs stop at its first kill. mo supplies the seed (FirstSeed)
// and the checkers switched off.
func Run(ctx context.Context, ms []mutant.Mutant, o Options, mo mutant.Options) (rows []mutant.Row, err error) {
	seed := mo.FirstSeed
	if seed == 0 {
		seed = 1
	}
	logf := func(format string, args ...any) {
		if mo.Log != nil {
			mo.Log(fmt.Sprintf(format, args...))
		}
	}
	env := o.Env
	if env == nil {
		opts := scenarios.EnvOptions()
		if o.Log != nil {
			opts.Logf = func(format string, args ...any) { o.Log(fmt.Sprintf(format, args...)) }
		}
		env, err = testenv.Start(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("starting the environment: %w", err)
		}
		defer func() {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
			defer cancel()
			err = errors.Join(err, env.Close(cctx))
		}()
	}
	refRuns, perMutant := Plan(ms)
	ref := runAll(ctx, env, o, mutant.Reference, false, refRuns, seed, mo.Disable, logf)
	rows = append(rows, ref)
	for _, m := range ms {
		runs := perMutant[m.Name]
		if len(runs) == 0 {
			logf("%s [infra]: no infrastructure form; simulation only", m.Name)
			continue
		}
		if ctx.Err() != nil {
			return rows, ctx.Err()
		}
		rows = append(rows, runAll(ctx, env, o, m.Name, m.HasRelayForm(), runs, seed, mo.Disable, logf))
	}
	return rows, nil
}

// inconclusiveRetries is how many more seeds a scenario gets when a run's
// intended faults did not all fire.
const inconclusiveRetries = 1

// runAll runs one row's scenarios in order. A mutant's row stops at its
// first kill; the reference's runs all of them, and is killed if any run
// kills it.
func runAll(ctx context.Context, env *testenv.Env, o Options, name string, relayEnv bool, runs []mutant.InfraRun, seed uint64,
	disabled []string, logf func(string, ...any)) mutant.Row {
	start := time.Now()
	row := mutant.Row{Mutant: name, Tier: mutant.TierInfra, Seed: seed, StepsOf: "none: runs on infrastructure are not shrunk"}
	var names, inconclusive, others []string
runs:
	for _, r := range runs {
		names = append(names, describe(r))
		// A run whose checkers pass but whose intended faults did not all
		// fire proves nothing; the next seed draws another schedule.
		for attempt := range inconclusiveRetries + 1 {
			s := seed + uint64(attempt)
			res, err := runOne(ctx, env, o, name, relayEnv, r, s)
			row.Tried++
			if err != nil {
				row.Err = fmt.Errorf("%s: %w", describe(r), err)
				break runs
			}
			killer := mutant.Killer(res.Report, disabled)
			logf("%s [infra] %s seed %d: valid=%v killer=%q drain=%s problems=%v", name, describe(r), s, res.Valid, killer,
				res.DrainTime.Round(time.Millisecond), res.Problems)
			if killer != "" {
				row.Killed, row.Checker, row.Scenario, row.Seed = true, killer, describe(r), s
				row.Replay = res.Replay
				if cr, ok := res.Report.Result(killer); ok {
					row.Detail = cr.Detail
				}
				break runs
			}
			unfired, other := problems(res)
			if len(other) > 0 {
				others = append(others, fmt.Sprintf("%s seed %d: %s", describe(r), s, strings.Join(other, "; ")))
			}
			if len(unfired) == 0 {
				continue runs
			}
			if attempt == inconclusiveRetries {
				inconclusive = append(inconclusive, fmt.Sprintf("%s seed %d: %s", describe(r), s, strings.Join(unfired, "; ")))
			}
		}
	}
	if len(others) > 0 && !row.Killed {
		// A scenario's own expectation failed with every checker passing:
		// the reference must not do that; for a mutant it is a symptom
		// but not a kill, which is a checker's to make.
		row.Detail = "scenario checks: " + strings.Join(others, " | ")
		if name == mutant.Reference && row.Err == nil {
			row.Err = errors.New(row.Detail)
		}
	}
	if len(inconclusive) > 0 && !row.Killed {
		// For the reference that is an error: it was not shown to
		// survive.
		row.Detail = strings.TrimPrefix(row.Detail+" | inconclusive: "+strings.Join(inconclusive, " | "), " | ")
		if name == mutant.Reference && row.Err == nil {
			row.Err = errors.New(row.Detail)
		}
	}
	if row.Scenario == "" {
		row.Scenario = strings.Join(names, ", ")
	}
	row.Seconds = time.Since(start).Seconds()
	return row
}

// problems splits a run's problems that are not checker violations into
// faults that never fired (the run proves nothing) and the scenario's own
// expectations that failed.
func problems(res scenarios.Result) (unfired, other []string) {
	failed := map[string]bool{}
	for _, f := range res.Report.Failed() {
		failed[f.Checker] = true
	}
	for _, p := range res.Problems {
		name, _, _ := strings.Cut(p, ": ")
		switch {
		case failed[name]:
		case strings.HasPrefix(p, "fault ") && strings.HasSuffix(p, " never fired"):
			unfired = append(unfired, p)
		default:
			other = append(other, p)
		}
	}
	return unfired, other
}

func describe(r mutant.InfraRun) string {
	if r.Variant != "" && r.Variant != string(scenarios.Outbox) {
		return r.Scenario + " (producers " + r.Variant + ")"
	}
	return r.Scenario
}

// runOne runs one scenario with the relay image or command, the mutant
// named in OUTBOX_MUTANT when relayEnv.
func runOne(ctx context.Context, env *testenv.Env, o Options, name string, relayEnv bool, r mutant.InfraRun, seed uint64) (scenarios.Result, error) {
	sc, ok := scenarios.Lookup(r.Scenario)
	if !ok {
		return scenarios.Result{}, fmt.Errorf("no scenario %q (known: %s)", r.Scenario, strings.Join(scenarios.Names(), ", "))
	}
	variant := scenarios.Outbox
	if r.Variant != "" {
		v, err := scenarios.ParseVariant(r.Variant)
		if err != nil {
			return scenarios.Result{}, err
		}
		variant = v
	}
	u := scenarios.RelayUnderTest{
		Name:       name,
		Env:        maps.Clone(r.Env),
		Features:   scenarios.OurFeatures, // a mutant keeps the promises of the relay it mutates
		Failpoints: true,
	}
	if len(o.Command) > 0 {
		u.Command = slices.Clone(o.Command)
	} else {
		u.Image = o.Image
		if u.Image == "" {
			u.Image = testenv.ImageRelay
		}
	}
	if relayEnv {
		if u.Env == nil {
			u.Env = map[string]string{}
		}
		u.Env[mutant.EnvVar] = name
	}
	opts := scenarios.Options{Seed: seed, Relay: u, Variant: variant}
	if o.Log != nil {
		opts.Log = o.Log
	}
	return scenarios.Run(ctx, env, sc, opts)
}
