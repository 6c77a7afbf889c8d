package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"time"

	"github.com/outboxlab/outboxlab/internal/bench"
	"github.com/outboxlab/outboxlab/internal/bench/result"
	"github.com/outboxlab/outboxlab/scenarios"
	"github.com/outboxlab/outboxlab/testenv"
)

// deps is everything the verbs reach beyond their flags and their output:
// the scenario runner on containers, the mutant catalogue, the benchmark
// and the Docker engine. main passes production(); the command's tests
// pass the same struct with fakes in place of the containers. Every field
// is set: no verb checks for a missing part.
type deps struct {
	// scenarioNames lists the scenarios of the catalogue, the ones the
	// run verb runs without --scenario.
	scenarioNames func() []string
	// runScenarios starts the environment once, runs every spec in order,
	// reporting progress, and removes the environment. It hands each
	// outcome to done as soon as its spec finished, before the next one
	// starts, and stops when done returns an error; it returns the
	// outcomes of the specs that finished, in order. An error means the
	// environment could not run them (a verdict is never an error); status
	// receives lines about the environment (containers starting).
	runScenarios func(ctx context.Context, specs []runSpec, progress func(i int, p scenarios.Progress), status func(string),
		done func(i int, o runOutcome) error) ([]runOutcome, error)
	// mutants is the mutant catalogue.
	mutants mutantCatalogue
	// bench runs the benchmark on a fresh environment.
	bench func(ctx context.Context, opts bench.Options, status func(string)) (result.Result, error)
	// soak runs a soak on a fresh environment.
	soak func(ctx context.Context, opts bench.SoakOptions, status func(string)) (result.Soak, error)
	// dockerAvailable reports whether a Docker engine answers, and why not.
	dockerAvailable func(ctx context.Context) error
	// imageExists reports whether an image is in the local Docker engine
	// (nothing is ever pulled).
	imageExists func(ctx context.Context, ref string) (bool, error)
	// lookPath resolves a relay command's program as exec.LookPath does:
	// on PATH, or as a path when it holds a slash.
	lookPath func(file string) (string, error)
	// getenv reads the command's environment (the shard of a campaign).
	getenv func(string) string
}

// production returns the dependencies of the command as it ships: the
// catalogues of packages scenarios and mutant, containers from testenv.
func production() deps {
	return deps{
		scenarioNames:   scenarios.Names,
		runScenarios:    runOnContainers,
		mutants:         catalogueOfMutants(),
		bench:           benchOnContainers,
		soak:            soakOnContainers,
		dockerAvailable: testenv.DockerAvailable,
		imageExists:     testenv.ImageExists,
		lookPath:        exec.LookPath,
		getenv:          os.Getenv,
	}
}

// closeTimeout bounds the removal of the environment.
const closeTimeout = 2 * time.Minute

// lookupScenario returns a scenario of the catalogue, or the demo's.
func lookupScenario(name string) (scenarios.Scenario, error) {
	sc, ok := scenarios.Lookup(name)
	if !ok {
		return sc, fmt.Errorf("unknown scenario %q", name)
	}
	return sc, nil
}

// runOnContainers starts the environment, runs specs one after another on
// it, and removes it.
func runOnContainers(ctx context.Context, specs []runSpec, progress func(int, scenarios.Progress), status func(string),
	done func(int, runOutcome) error) (_ []runOutcome, err error) {
	scs := make([]scenarios.Scenario, len(specs))
	for i, s := range specs {
		if scs[i], err = lookupScenario(s.Scenario); err != nil {
			return nil, err
		}
	}
	// One environment per kind the specs need (the single broker, or a
	// cluster of some size), started when a spec first needs it.
	envs := map[string]*testenv.Env{}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), closeTimeout)
		defer cancel()
		for _, env := range envs {
			if cerr := env.Close(cctx); cerr != nil && err == nil {
				err = fmt.Errorf("removing the environment: %w", cerr)
			}
		}
	}()
	envFor := func(sc scenarios.Scenario) (*testenv.Env, error) {
		opts := scenarios.EnvOptionsFor(sc)
		if env, ok := envs[scenarios.EnvKey(opts)]; ok {
			return env, nil
		}
		opts.Logf = func(format string, args ...any) { status("environment: " + fmt.Sprintf(format, args...)) }
		switch {
		case opts.BrokerNodes > 1:
			status(fmt.Sprintf("environment: starting PostgreSQL, a %d-node RabbitMQ cluster and toxiproxy", opts.BrokerNodes))
		case opts.Standby != "":
			status(fmt.Sprintf("environment: starting PostgreSQL with a %s standby, RabbitMQ and toxiproxy", opts.Standby))
		default:
			status("environment: starting PostgreSQL, RabbitMQ and toxiproxy")
		}
		env, err := testenv.Start(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("starting the environment: %w", err)
		}
		envs[scenarios.EnvKey(opts)] = env
		return env, nil
	}
	out := make([]runOutcome, 0, len(specs))
	for i, s := range specs {
		relay := s.Relay
		if relay.Name == "ours" && relay.Image == "" && len(relay.Command) == 0 {
			relay = scenarios.Ours()
		}
		env, err := envFor(scs[i])
		if err != nil {
			return out, err
		}
		res, err := scenarios.Run(ctx, env, scs[i], scenarios.Options{
			Seed: s.Seed, Relay: relay, Mode: s.Variant, Events: s.Events, Duration: s.Duration, QueueType: s.QueueType, Consumer: s.Consumer,
			Progress: func(p scenarios.Progress) { progress(i, p) },
		})
		var o runOutcome
		switch {
		case errors.Is(err, scenarios.ErrNotApplicable):
			o = runOutcome{Result: res, NotApplicable: err.Error()}
		case err != nil:
			return out, fmt.Errorf("scenario %s, seed %d: %w", s.Scenario, s.Seed, err)
		default:
			o = runOutcome{Result: res}
		}
		out = append(out, o)
		if err := done(i, o); err != nil {
			return out, err
		}
	}
	return out, nil
}
