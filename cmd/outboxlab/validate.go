package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/outboxlab/outboxlab/fixture"
	"github.com/outboxlab/outboxlab/internal/argv"
	"github.com/outboxlab/outboxlab/scenarios"
	"github.com/outboxlab/outboxlab/testenv"
)

func validateVerb() verb {
	return verb{
		name:    "validate",
		summary: "check a target file without containers (with --probe, on them)",
		args:    "--target FILE [--probe]",
		about: `Checks a target file without starting anything: its YAML and its
fields (an unknown field is refused), the placeholders of its statements,
the named parameters of its stage statements (and that one keeps the
event's :id, or ends in RETURNING one column, the id the database gives
the row), its relay (an image reference, or a command whose program
exists and is executable, found as the run verb finds it: a relative path
from the target file's directory, a bare name on PATH), its capabilities,
its delivery identity, and the columns its rows SELECT gives, as far as
the text tells: the names after AS and the bare column names of its first
select list must hold id, message_type, processed_at, faulted_at,
attempts, occurred_at, locked_by, locked_at and locked_until. When the
text cannot tell (a *, an expression without AS), it says so and does not
refuse. It prints one line of what the target declares and exits 0, or
prints every problem, each naming its field, and exits 2. --probe then
runs the setup probe on containers (a Docker engine, ` + "`make images`" + ` and
the relay's image or program are needed): on PostgreSQL, RabbitMQ and
toxiproxy it starts, it stages one event through the target's stage,
reads it back through its rows view and waits for its delivery with one
replica of the relay running; a rows view or a delivery that names the
event otherwise exits 2 naming the column or delivery field, and the
containers are removed either way.`,
		define: func(fs *flag.FlagSet) func(context.Context, *stdio, deps) int {
			o := &validateOptions{}
			fs.StringVar(&o.target, "target", "", "the target `FILE` (YAML) to check (required)")
			fs.BoolVar(&o.probe, "probe", false, "also run the setup probe on containers: stage one event, read it back through the rows view, wait for its delivery")
			return o.run
		},
	}
}

type validateOptions struct {
	target string
	probe  bool
}

// probeTarget runs the setup probe of relay on an environment of its own,
// which it removes, sending what it does to status; tests replace it.
var probeTarget = probeOnContainers

func (o *validateOptions) run(ctx context.Context, std *stdio, d deps) int {
	if o.target == "" {
		return usageErr(std, "validate", "--target FILE is required")
	}
	c, err := scenarios.CheckTarget(o.target)
	var te *scenarios.TargetError
	var problems []string
	switch {
	case errors.As(err, &te):
		for _, p := range te.Problems {
			problems = append(problems, p.Error())
		}
	case err != nil:
		return unavailable(std, "validate", "%v", err)
	}
	if len(c.Relay.Command) > 0 {
		if p := programProblem(d, c.Relay.Command[0]); p != "" {
			problems = append(problems, p)
		}
	}
	// In the order of the file's parts.
	slices.SortStableFunc(problems, func(a, b string) int { return fieldRank(a) - fieldRank(b) })
	if len(problems) > 0 {
		fmt.Fprintf(std.err, "outboxlab validate: target file %s: %s:\n", o.target, plural(len(problems), "problem"))
		for _, p := range problems {
			fmt.Fprintf(std.err, "  %s\n", strings.ReplaceAll(p, "\n", "\n  "))
		}
		return exitUsage
	}
	if c.RowsUnsure != "" {
		fmt.Fprintf(std.err, "outboxlab validate: outbox.rows: cannot tell from the text whether the SELECT gives every column the harness reads: %s (PostgreSQL tells when a run sets up, or with --probe)\n", c.RowsUnsure)
	}
	if !o.probe {
		fmt.Fprintln(std.out, targetSummary(o.target, c))
		return exitOK
	}

	cctx, cancel := context.WithTimeout(ctx, dockerCheckTimeout)
	err = d.dockerAvailable(cctx)
	cancel()
	if err != nil {
		return unavailable(std, "validate", "--probe starts containers, and the Docker engine cannot be reached (%v): start it, or validate without --probe", err)
	}
	if code := d.needRelay(ctx, std, "validate", c.Relay); code != exitOK {
		return code
	}
	err = probeTarget(ctx, c.Relay, func(line string) { fmt.Fprintf(std.err, "probe: %s\n", line) })
	switch {
	case ctx.Err() != nil:
		// run says the verb was interrupted.
		return exitUsage
	case errors.Is(err, scenarios.ErrMapping):
		fmt.Fprintf(std.err, "outboxlab validate: target file %s: the setup probe on containers: %v\n", o.target, err)
		return exitUsage
	case err != nil:
		if code := environmentErr(std, "validate", err); code != 0 {
			return code
		}
		return unavailable(std, "validate", "the setup probe: %v", err)
	}
	fmt.Fprintln(std.out, targetSummary(o.target, c)+"; the setup probe on containers found no disagreement")
	return exitOK
}

// programProblem says why the relay command's program cannot run, as the
// run verb looks for it (deps.lookPath), or "" when it can.
func programProblem(d deps, prog string) string {
	_, err := d.lookPath(prog)
	switch {
	case err == nil:
		return ""
	case strings.Contains(prog, "/"):
		return fmt.Sprintf("relay.command: the program %s is not an executable file (%v); a relative program path is taken relative to the target file's directory", argv.QuoteArg(prog), err)
	}
	return fmt.Sprintf("relay.command: the program %s is not on PATH (%v): give its path, such as ./bin/%s, relative to the target file's directory", argv.QuoteArg(prog), err, prog)
}

// targetParts are the parts of a target file, in their order.
var targetParts = []string{"name", "relay", "capabilities", "outbox", "delivery"}

// fieldRank is the rank among targetParts of the part a problem names
// first, -1 for none (a problem of the YAML as a whole).
func fieldRank(problem string) int {
	i := strings.IndexAny(problem, ".[: ")
	if i < 0 {
		return -1
	}
	return slices.Index(targetParts, problem[:i])
}

// targetSummary is the one line that says what a valid target file
// declares.
func targetSummary(path string, c scenarios.TargetCheck) string {
	u := c.Relay
	var b strings.Builder
	fmt.Fprintf(&b, "target %s (%s) is valid: relay ", u.Name, path)
	if len(u.Command) > 0 {
		b.WriteString("command " + argv.JoinCommand(u.Command))
	} else {
		b.WriteString("image " + u.Image)
	}
	if len(u.Env) > 0 {
		b.WriteString(" with " + strings.Join(slices.Sorted(maps.Keys(u.Env)), ", "))
	}
	fmt.Fprintf(&b, "; capabilities %s; stage %s (", u.Promises, plural(len(c.Stage), "statement"))
	for i, ps := range c.Stage {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(":" + strings.Join(ps, " :"))
	}
	b.WriteString(")")
	if c.Returns != "" {
		fmt.Fprintf(&b, " returning the row's id %s", c.Returns)
	}
	b.WriteString("; rows ")
	if c.RowsUnsure != "" {
		b.WriteString("unchecked without a database")
	} else {
		fmt.Fprintf(&b, "give the %d columns", len(fixture.RowColumns))
	}
	fmt.Fprintf(&b, "; delivery id %s", u.Identity)
	return b.String()
}

// plural is n things, with an s when n is not 1.
func plural(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}

// probeOnContainers starts the environment the catalogue runs in, runs
// the setup probe of relay on it and removes it.
func probeOnContainers(ctx context.Context, relay scenarios.RelayUnderTest, status func(string)) (err error) {
	opts := scenarios.EnvOptions()
	opts.Logf = func(format string, args ...any) { status("environment: " + fmt.Sprintf(format, args...)) }
	status("environment: starting PostgreSQL, RabbitMQ and toxiproxy")
	env, err := testenv.Start(ctx, opts)
	if err != nil {
		return fmt.Errorf("starting the environment: %w", err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), closeTimeout)
		defer cancel()
		if cerr := env.Close(cctx); cerr != nil && err == nil {
			err = fmt.Errorf("removing the environment: %w", cerr)
		}
	}()
	return scenarios.Probe(ctx, env, relay, status)
}
