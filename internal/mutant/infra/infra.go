// Package infra runs the infrastructure tier of the mutant kill matrix:
// each mutant that has an infrastructure form runs under the chaos
// scenarios that expose it, on PostgreSQL, RabbitMQ and toxiproxy
// containers, with its relay replicas built from this repository's relay
// with the mutants tag (the image testenv.ImageRelayMutants, or a process)
// and OUTBOX_MUTANT naming the mutant; the reference runs the same
// scenarios without it, from the relay image itself. It lives apart from
// package mutant so that the relay built with the mutants tag, which
// imports mutant for its decorators, does not link the container
// machinery.
package infra

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxlab/outboxlab/consumer"
	"github.com/outboxlab/outboxlab/contract"
	"github.com/outboxlab/outboxlab/workload"

	"github.com/outboxlab/outboxlab/internal/mutant"
	"github.com/outboxlab/outboxlab/scenarios"
	"github.com/outboxlab/outboxlab/testenv"
)

// Options says where the infrastructure tier runs.
type Options struct {
	// Env is the environment the scenarios run in; nil starts one with
	// scenarios.EnvOptions and closes it when the tier is done.
	Env *testenv.Env
	// Image is the relay image for every run, mutants and reference
	// (default: testenv.ImageRelayMutants for the relay-side mutants and
	// testenv.ImageRelay for the others, both built by `make images`); it
	// must run the mutant OUTBOX_MUTANT names. Command, when set, runs the
	// relay as a process on the host instead, e.g. a binary freshly built
	// with `go build -tags mutants ./cmd/relay`.
	Image   string
	Command []string
	// Seeds is how many consecutive seeds each of a mutant's scenarios
	// may take to kill it (default DefaultSeeds).
	Seeds int
	// Log receives the scenario runs' lines; nil discards them.
	Log func(string)
}

// Tier returns the infrastructure tier as mutant.Options.Infra wants it.
func Tier(o Options) mutant.InfraTier {
	return func(ctx context.Context, ms []mutant.Mutant, mo mutant.Options) ([]mutant.Row, error) {
		return Run(ctx, ms, o, mo)
	}
}

// Plan returns the runs the tier makes for ms, by mutant: each mutant's
// scenarios, in order. A mutant without an infrastructure form has none.
// The reference runs every scenario a mutant ran, on the same seeds.
func Plan(ms []mutant.Mutant) map[string][]mutant.InfraRun {
	per := map[string][]mutant.InfraRun{}
	for _, m := range ms {
		per[m.Name] = append(per[m.Name], m.Infra...)
	}
	return per
}

// DefaultSeeds is how many seeds a mutant's scenario gets by default.
const DefaultSeeds = 4

// Run runs the infrastructure tier and returns the reference's row first,
// then one row per mutant with an infrastructure form, in catalogue
// order. Each of a mutant's scenarios runs on up to Options.Seeds
// consecutive seeds from mo.FirstSeed (a fault that only sometimes
// catches the broker holding messages, for instance, needs a few), and
// the mutant's runs stop at its first kill. The reference then runs every
// (scenario, seed) a mutant ran and must survive all of them. mo also
// supplies the checkers switched off.
func Run(ctx context.Context, ms []mutant.Mutant, o Options, mo mutant.Options) (rows []mutant.Row, err error) {
	first := mo.FirstSeed
	if first == 0 {
		first = 1
	}
	seeds := o.Seeds
	if seeds <= 0 {
		seeds = DefaultSeeds
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
	t := &tier{ctx: ctx, env: env, o: o, disabled: mo.Disable, logf: logf}
	per := Plan(ms)
	var (
		mrows []mutant.Row
		ran   []scenarioSeed
	)
	for _, m := range ms {
		runs := per[m.Name]
		if len(runs) == 0 {
			logf("%s [infra]: no infrastructure form; simulation only", m.Name)
			continue
		}
		if ctx.Err() != nil {
			return mrows, ctx.Err()
		}
		row, used := t.mutant(m, runs, first, seeds)
		mrows = append(mrows, row)
		for _, u := range used {
			if !slices.Contains(ran, u) {
				ran = append(ran, u)
			}
		}
	}
	return append([]mutant.Row{t.reference(ran, first)}, mrows...), nil
}

// consumerUnderTest runs the consumer-side form of m in every consumer of
// the scenario: its inbox decorated as in the simulation, with the
// effect applied in a transaction of its own for the forms that bypass
// the inbox.
func consumerUnderTest(m mutant.Mutant, r mutant.InfraRun, seed uint64) *scenarios.ConsumerUnderTest {
	return &scenarios.ConsumerUnderTest{
		Name: m.Name,
		Wrap: func(in consumer.Inbox, pool *pgxpool.Pool, effect consumer.Effect) consumer.Inbox {
			if pg, ok := in.(*consumer.PGInbox); ok {
				// The forms that key or check the inbox themselves do it
				// on the production inbox's statements.
				in = mutant.PGKeyed(pg)
			}
			return m.WrapInbox(in, mutant.PGEffect(pool, effect))
		},
		Replay: fmt.Sprintf("go run ./cmd/outboxlab mutants --tier infra --mutant %s --seed %d # scenario %s", m.Name, seed, describe(r)),
	}
}

// scenarioSeed is one scenario run as the reference repeats it: the
// scenario, with outbox producers and the relay settings the mutant's
// run had (env, as "K=V" sorted and joined by spaces), and the seed.
type scenarioSeed struct {
	scenario string
	env      string
	seed     uint64
}

// envKey is the canonical form of a run's relay settings.
func envKey(env map[string]string) string {
	kv := make([]string, 0, len(env))
	for _, k := range slices.Sorted(maps.Keys(env)) {
		kv = append(kv, k+"="+env[k])
	}
	return strings.Join(kv, " ")
}

// parseEnvKey is the inverse of envKey.
func parseEnvKey(s string) map[string]string {
	if s == "" {
		return nil
	}
	out := map[string]string{}
	for _, kv := range strings.Fields(s) {
		k, v, _ := strings.Cut(kv, "=")
		out[k] = v
	}
	return out
}

// tier is one run of the infrastructure tier.
type tier struct {
	ctx      context.Context
	env      *testenv.Env
	o        Options
	disabled []string
	logf     func(string, ...any)
}

// verdict is what one scenario run says.
type verdict struct {
	res     scenarios.Result
	killer  string
	unfired []string // faults of the plan that never fired
	other   []string // the scenario's own expectations that failed
}

func (t *tier) run(name string, relayEnv bool, r mutant.InfraRun, seed uint64) (verdict, error) {
	res, err := runOne(t.ctx, t.env, t.o, name, relayEnv, r, seed)
	if err != nil {
		return verdict{}, fmt.Errorf("%s seed %d: %w", describe(r), seed, err)
	}
	v := verdict{res: res, killer: mutant.Killer(res.Report, t.disabled)}
	v.unfired, v.other = problems(res)
	t.logf("%s [infra] %s seed %d: killer=%q unfired=%v other=%v drain=%s", name, describe(r), seed, v.killer,
		v.unfired, v.other, res.DrainTime.Round(time.Millisecond))
	return v, nil
}

// mutant runs one mutant's scenarios, each on up to seeds seeds, until a
// checker kills it; it returns its row and the runs it made.
func (t *tier) mutant(m mutant.Mutant, runs []mutant.InfraRun, first uint64, seeds int) (mutant.Row, []scenarioSeed) {
	start := time.Now()
	row := mutant.Row{Mutant: m.Name, Tier: mutant.TierInfra, Seed: first, StepsOf: notShrunk}
	var (
		used  []scenarioSeed
		names []string
		notes []string
	)
runs:
	for _, r := range runs {
		names = append(names, describe(r))
		for i := range seeds {
			seed := first + uint64(i)
			v, err := t.run(m.Name, m.HasRelayForm(), r, seed)
			row.Tried++
			if err != nil {
				row.Err = err
				break runs
			}
			used = append(used, scenarioSeed{r.Scenario, envKey(r.Env), seed})
			if v.killer != "" {
				row.Killed, row.Checker, row.Scenario, row.Seed = true, v.killer, describe(r), seed
				row.Replay = v.res.Replay
				if len(r.Env) > 0 {
					// The run verb cannot give the replicas the run's
					// settings; the tier's own command does.
					row.Replay = fmt.Sprintf("go run ./cmd/outboxlab mutants --tier infra --mutant %s --seed %d", m.Name, seed)
				}
				if cr, ok := v.res.Report.Result(v.killer); ok {
					row.Detail = cr.Detail
				}
				break runs
			}
			if len(v.unfired)+len(v.other) > 0 {
				notes = append(notes, fmt.Sprintf("%s seed %d: %s", describe(r), seed, strings.Join(append(v.unfired, v.other...), "; ")))
			}
		}
	}
	if row.Scenario == "" {
		row.Scenario = strings.Join(names, ", ")
		row.Detail = fmt.Sprintf("survived %d run(s) on seeds %d..%d", row.Tried, first, first+uint64(seeds)-1)
		if len(notes) > 0 {
			row.Detail += "; " + strings.Join(notes, " | ")
		}
	}
	row.Seconds = time.Since(start).Seconds()
	t.logf("%s [infra]: %s", row.Mutant, verdictLine(row))
	return row, used
}

// reference runs every (scenario, seed) a mutant ran. Any kill kills it.
// A run whose faults did not all fire is run once more; if it still
// proves nothing, or a scenario's own expectation failed, the row carries
// an error: the reference was not shown to survive.
func (t *tier) reference(ran []scenarioSeed, first uint64) mutant.Row {
	start := time.Now()
	row := mutant.Row{Mutant: mutant.Reference, Tier: mutant.TierInfra, Seed: first, StepsOf: notShrunk}
	var names, problems []string
	for _, ss := range ran {
		if !slices.Contains(names, ss.scenario) {
			names = append(names, ss.scenario)
		}
		r := mutant.InfraRun{Scenario: ss.scenario, Env: parseEnvKey(ss.env)}
		for attempt := 0; ; attempt++ {
			v, err := t.run(mutant.Reference, false, r, ss.seed)
			row.Tried++
			if err != nil {
				row.Err = err
				break
			}
			if v.killer != "" {
				row.Killed, row.Checker, row.Scenario, row.Seed = true, v.killer, ss.scenario, ss.seed
				row.Replay = v.res.Replay
				if cr, ok := v.res.Report.Result(v.killer); ok {
					row.Detail = cr.Detail
				}
				break
			}
			// A run whose fault did not fire, or could not bite, shows
			// nothing of the reference: it gets one more try, and then
			// the reference is not shown to survive.
			inconclusive := v.res.Verdict() == scenarios.VerdictInconclusive
			if (len(v.unfired) > 0 || inconclusive) && attempt == 0 {
				continue
			}
			if len(v.unfired)+len(v.other) > 0 {
				problems = append(problems, fmt.Sprintf("%s seed %d: %s", ss.scenario, ss.seed, strings.Join(append(v.unfired, v.other...), "; ")))
			} else if inconclusive {
				problems = append(problems, fmt.Sprintf("%s seed %d: inconclusive: %s", ss.scenario, ss.seed, strings.Join(v.res.Inconclusive, "; ")))
			}
			break
		}
		if row.Killed || row.Err != nil {
			break
		}
	}
	if row.Scenario == "" {
		row.Scenario = fmt.Sprintf("%s (%d runs: every scenario and seed a mutant ran)", strings.Join(names, ", "), len(ran))
	}
	if len(problems) > 0 && !row.Killed && row.Err == nil {
		row.Err = errors.New("not shown to survive: " + strings.Join(problems, " | "))
	}
	row.Seconds = time.Since(start).Seconds()
	t.logf("reference [infra]: %s", verdictLine(row))
	return row
}

// notShrunk is what an infrastructure row's Steps counts: nothing.
const notShrunk = "none: runs on infrastructure are not shrunk"

func verdictLine(r mutant.Row) string {
	switch {
	case r.Err != nil:
		return "could not run: " + r.Err.Error()
	case r.Killed:
		return fmt.Sprintf("killed by %s on %s seed %d (%.1fs)", r.Checker, r.Scenario, r.Seed, r.Seconds)
	}
	return fmt.Sprintf("survived %d run(s) of %s (%.1fs)", r.Tried, r.Scenario, r.Seconds)
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
	s := r.Scenario
	if r.Variant != "" && r.Variant != string(workload.Outbox) {
		s += " (producers " + r.Variant + ")"
	}
	if len(r.Env) > 0 {
		s += " with " + envKey(r.Env)
	}
	return s
}

// Relay returns the relay under test that runs the relay-side mutant name
// on containers: this repository's relay from the image built with the
// mutants tag (scenarios.RelayUnderTest.Mutants), OUTBOX_MUTANT naming the
// mutant. Its replay names it as the run verb's --relay takes it.
func Relay(name string) scenarios.RelayUnderTest {
	return scenarios.RelayUnderTest{Name: name, Mutants: true, Env: map[string]string{mutant.EnvVar: name}}
}

// runOne runs one scenario with the relay image or command, the mutant
// named in OUTBOX_MUTANT when relayEnv.
func runOne(ctx context.Context, env *testenv.Env, o Options, name string, relayEnv bool, r mutant.InfraRun, seed uint64) (scenarios.Result, error) {
	sc, ok := scenarios.Lookup(r.Scenario)
	if !ok {
		return scenarios.Result{}, fmt.Errorf("no scenario %q (known: %s)", r.Scenario, strings.Join(scenarios.Names(), ", "))
	}
	variant := workload.Outbox
	if r.Variant != "" {
		v, err := workload.ParseMode(r.Variant)
		if err != nil {
			return scenarios.Result{}, err
		}
		variant = v
	}
	// With no image or command given, the runner runs our image (the one
	// with the mutants for a relay-side mutant) with its features and
	// failpoints, and its replay names the relay as the run verb's --relay
	// takes it: ours, or the mutant.
	u := scenarios.RelayUnderTest{Name: "ours"}
	if relayEnv && name != mutant.Reference {
		u = Relay(name)
	}
	u.Env = maps.Clone(u.Env)
	if u.Env == nil {
		u.Env = map[string]string{}
	}
	maps.Copy(u.Env, r.Env)
	if relayEnv {
		u.Env[mutant.EnvVar] = name
	}
	if len(o.Command) > 0 || o.Image != "" {
		// A mutant keeps the promises of the relay it mutates: its
		// features and failpoints, and leases of rows, their length not
		// declared.
		u.Command, u.Image = slices.Clone(o.Command), o.Image
		u.Promises = contract.Promises{Parks: true, Fenced: true, Sweeps: true, Failpoints: true, Locking: contract.Lease(0)}
	}
	opts := scenarios.Options{Seed: seed, Relay: u, Mode: variant}
	if m, ok := mutant.Lookup(name); ok && m.Inbox != nil {
		opts.Consumer = consumerUnderTest(m, r, seed)
	}
	if o.Log != nil {
		opts.Log = o.Log
	}
	return scenarios.Run(ctx, env, sc, opts)
}
