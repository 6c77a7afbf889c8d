package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/outboxlab/outboxlab/checker"
	"github.com/outboxlab/outboxlab/workload"

	"github.com/outboxlab/outboxlab/internal/argv"
	"github.com/outboxlab/outboxlab/internal/mutant"
	"github.com/outboxlab/outboxlab/internal/mutant/infra"
	"github.com/outboxlab/outboxlab/internal/report"
	"github.com/outboxlab/outboxlab/scenarios"
	oatarget "github.com/outboxlab/outboxlab/target/oagudo"
	rvtarget "github.com/outboxlab/outboxlab/target/river"
	wmtarget "github.com/outboxlab/outboxlab/target/watermill"
	"github.com/outboxlab/outboxlab/testenv"
)

// runSpec is one scenario run the command asks for.
type runSpec struct {
	Scenario string
	Seed     uint64
	Relay    scenarios.RelayUnderTest
	Variant  workload.Mode
	// Events and Duration override the scenario's workload size; zero
	// keeps its default.
	Events   int
	Duration time.Duration
	// QueueType is a broker cluster's queue type (scenarios.Options).
	QueueType string
	// Consumer, when set, replaces our consumers' inbox
	// (scenarios.Options).
	Consumer *scenarios.ConsumerUnderTest
}

// runOutcome is what became of one spec.
type runOutcome struct {
	Result scenarios.Result
	// NotApplicable says why the spec did not run: the scenario cannot
	// run with this relay or producer variant (the text of the
	// scenarios.ErrNotApplicable that said so).
	NotApplicable string
}

// skipped says why the spec did not run, "" when it ran: the result's
// reason (scenarios.Result.NotApplicable), else the outcome's, without
// the "scenario not applicable: " that opens the error's text.
func (o runOutcome) skipped() string {
	if o.Result.NotApplicable != "" {
		return o.Result.NotApplicable
	}
	return strings.TrimPrefix(o.NotApplicable, scenarios.ErrNotApplicable.Error()+": ")
}

// result is the outcome's result, with why it did not run, if it did
// not: its verdict is then N/A whichever field of the outcome said so.
func (o runOutcome) result() scenarios.Result {
	r := o.Result
	r.NotApplicable = o.skipped()
	return r
}

// parseRelay reads --relay: "ours", "watermill" for watermill's SQL
// forwarder with its own outbox (package wmtarget), "river" for River used
// as an outbox (package rvtarget, its relay the binary riverRelay that
// `make build` writes), "image:REF" for a relay image that
// follows the black-box contract, "cmd:COMMAND ARGS..." for a relay run as
// a host process (split as a shell splits words, quotes included, by
// splitArgs; no shell runs it), or the name of a relay-side mutant of the
// catalogue (the relay built with the mutants tag, OUTBOX_MUTANT set: see
// infra.Relay).
func parseRelay(s string) (scenarios.RelayUnderTest, error) {
	switch {
	case s == "" || s == "ours":
		return scenarios.RelayUnderTest{Name: "ours"}, nil
	case s == wmtarget.Name:
		return wmtarget.Target(), nil
	case s == rvtarget.Name:
		return rvtarget.Target(riverRelay), nil
	case s == rvtarget.RetryName:
		return rvtarget.RetryTarget(riverRelay), nil
	case s == oatarget.OptimisticName:
		return oatarget.OptimisticTarget(oagudoRelay), nil
	case strings.HasPrefix(s, "image:"):
		ref := strings.TrimPrefix(s, "image:")
		if ref == "" || strings.ContainsAny(ref, " \t") {
			return scenarios.RelayUnderTest{}, fmt.Errorf("--relay image:REF needs an image reference, got %q", ref)
		}
		return scenarios.RelayUnderTest{Name: ref, Image: ref}, nil
	case strings.HasPrefix(s, "cmd:"):
		args, err := argv.SplitCommand(strings.TrimPrefix(s, "cmd:"))
		if err != nil {
			return scenarios.RelayUnderTest{}, fmt.Errorf("--relay %s: %w", s, err)
		}
		if len(args) == 0 || args[0] == "" {
			return scenarios.RelayUnderTest{}, errors.New("--relay cmd:COMMAND needs a command")
		}
		return scenarios.RelayUnderTest{Name: argv.JoinCommand(args), Command: args}, nil
	}
	m, ok := mutant.Lookup(s)
	if !ok {
		return scenarios.RelayUnderTest{}, fmt.Errorf("--relay %q is not ours, watermill, river, river-retry, oagudo-optimistic, image:REF, cmd:COMMAND or a mutant of the catalogue (%s)", s, strings.Join(mutant.Names(), ", "))
	}
	if !m.HasRelayForm() {
		return scenarios.RelayUnderTest{}, fmt.Errorf("mutant %s breaks the %s, not the relay process, so it cannot run as --relay: run `outboxlab mutants --mutant %s`", s, m.Side, s)
	}
	// The mutants image runs the mutant that OUTBOX_MUTANT names, with our
	// relay's features and failpoints; the run replays as --relay NAME.
	return infra.Relay(s), nil
}

// riverRelay and oagudoRelay are the binaries of River's relay and of
// oagudo/outbox's reader that `make build` writes, relative to the
// repository, where outboxlab runs from.
const (
	riverRelay  = ".build/bin/river-relay"
	oagudoRelay = ".build/bin/oagudo-relay"
)

// builtRelays names, by the replay of the relay that runs it, each
// binary `make build` writes for a --relay name, with the package it
// builds.
var builtRelays = map[string][2]string{
	"--relay " + rvtarget.Name:           {riverRelay, "./cmd/river-relay"},
	"--relay " + rvtarget.RetryName:      {riverRelay, "./cmd/river-relay"},
	"--relay " + oatarget.OptimisticName: {oagudoRelay, "./cmd/oagudo-relay"},
}

// needRelay checks, before any container starts, that the relay under
// test can start: its image is in the local engine, or its command's
// program is found. It returns exitOK, or says what to do and returns
// exitUsage.
func (d deps) needRelay(ctx context.Context, std *stdio, verb string, u scenarios.RelayUnderTest) int {
	if len(u.Command) > 0 {
		prog := u.Command[0]
		if built, ok := builtRelays[u.Replay]; ok {
			if _, err := d.lookPath(prog); err != nil {
				return unavailable(std, verb, "the relay of %s, %s, is not built: run `make build` in the repository (it writes %s from %s)", u.Name, prog, built[0], built[1])
			}
		}
		if _, err := d.lookPath(prog); err != nil {
			if file, ok := strings.CutPrefix(u.Replay, "--target "); ok {
				// The command is the target file's: that is what to fix.
				return unavailable(std, verb, "target file %s: %s: fix the target's relay.command (outboxlab validate --target %s checks it)", file, programProblem(d, prog), file)
			}
			if strings.Contains(prog, "/") {
				return unavailable(std, verb, "relay command %s: %v: give the path of an executable file (build ours with `go build -o bin/relay ./cmd/relay`, then --relay cmd:./bin/relay)", argv.QuoteArg(prog), err)
			}
			return unavailable(std, verb, "relay command %s is not on PATH (%v): give its path instead, e.g. --relay 'cmd:./bin/%s ...', or add its directory to PATH", argv.QuoteArg(prog), err, prog)
		}
		return exitOK
	}
	img := u.ImageRef()
	cctx, cancel := context.WithTimeout(ctx, dockerCheckTimeout)
	defer cancel()
	ok, err := d.imageExists(cctx, img)
	switch {
	case err != nil:
		return unavailable(std, verb, "cannot look for the relay image %s: %v", img, err)
	case ok:
		return exitOK
	case img == testenv.ImageRelay || img == testenv.ImageRelayMutants || img == testenv.ImageRelayPrev || img == testenv.ImageWatermillRelay:
		// relay-prev is built from the commit RELAY_PREV of the Makefile.
		return unavailable(std, verb, "the relay image %s is not in the local Docker engine: build it with `make images` (nothing is pulled from a registry)", img)
	}
	return unavailable(std, verb, "the relay image %s is not in the local Docker engine: build it (docker build -t %s ...) or load it (docker load); nothing is pulled from a registry", img, img)
}

// runScenarios runs specs with a live progress line, handing each
// outcome to done (when not nil) as soon as its spec finished, in order,
// before the next one starts. It returns the results of the specs that
// ran, with the specs they ran, and exitOK; or, with why the run stopped,
// the exit code of an interrupt or of an environment that could not run
// them (the outcomes done had by then stand). Specs that are not
// applicable are reported and left out. An error from done stops the run.
func runScenarios(ctx context.Context, std *stdio, d deps, verb string, specs []runSpec, quiet bool,
	done func(i int, o runOutcome) error) (ran []runSpec, results []scenarios.Result, code int, stopped string) {
	pr := newProgress(std, quiet)
	label := func(i int) string {
		s := specs[i]
		l := fmt.Sprintf("[%d/%d] %s", i+1, len(specs), s.Scenario)
		if s.Variant != "" && s.Variant != workload.Outbox {
			l += " " + string(s.Variant)
		}
		if s.Relay.Name != "" && s.Relay.Name != "ours" {
			l += " relay=" + s.Relay.Name
		}
		if len(specs) > 1 && specs[0].Seed != specs[len(specs)-1].Seed {
			l += fmt.Sprintf(" seed %d", s.Seed)
		}
		return l
	}
	handed := 0
	var doneErr error
	hand := func(i int, o runOutcome) error {
		if i != handed {
			return fmt.Errorf("the runner finished run %d out of order (run %d was next)", i+1, handed+1)
		}
		handed++
		if why := o.skipped(); why != "" {
			pr.Clear()
			fmt.Fprintf(std.err, "skip %s: not applicable: %s\n", label(i), why)
		} else {
			ran = append(ran, specs[i])
			results = append(results, o.Result)
		}
		if done != nil {
			if err := done(i, o); err != nil {
				doneErr = err
				return err
			}
		}
		return nil
	}
	outcomes, err := d.runScenarios(ctx, specs,
		func(i int, p scenarios.Progress) { pr.Update(scenarioLine(label(i), p)) },
		func(line string) { pr.Update(line) },
		hand)
	pr.Clear()
	// A runner that hands back its outcomes only at the end has them
	// handed here, the ones it finished after an error included.
	for i := handed; i < len(outcomes) && i < len(specs) && doneErr == nil && ctx.Err() == nil; i++ {
		if herr := hand(i, outcomes[i]); herr != nil {
			err = herr
		}
	}
	if ctx.Err() != nil {
		cause := context.Cause(ctx)
		if cause == nil {
			cause = ctx.Err()
		}
		return ran, results, interrupted(std, ctx, verb, fmt.Sprintf("%d of %d runs finished, no verdict", handed, len(specs))), cause.Error()
	}
	if doneErr != nil {
		err = doneErr
	}
	if err != nil {
		if code := environmentErr(std, verb, err); code != 0 {
			return ran, results, code, err.Error()
		}
		return ran, results, unavailable(std, verb, "%v", err), err.Error()
	}
	if handed != len(specs) {
		msg := fmt.Sprintf("the runner returned %d outcomes for %d runs", handed, len(specs))
		return ran, results, unavailable(std, verb, "%s", msg), msg
	}
	return ran, results, exitOK, ""
}

// toRun converts a scenario result for the HTML report.
func toRun(res scenarios.Result, title string) report.Run {
	run := report.Run{
		Title: title, Scenario: res.Scenario, Relay: res.Relay, Variant: res.Variant, Seed: res.Seed,
		Valid: res.Valid, Problems: res.Problems, Inconclusive: res.Inconclusive, Report: res.Report, Replay: res.Replay, History: res.History,
		ExpectFail: workload.Mode(res.Variant).Unsafe(), Footprint: res.Footprint,
	}
	for _, f := range res.Faults {
		run.Faults = append(run.Faults, report.FaultHits{Name: f.Name, Class: f.Class, Hits: f.Hits})
	}
	run.Note = report.Explain(run)
	return run
}

// toBundle converts a scenario result for the results bundle, writing its
// history under dir.
func toBundle(dir string, i int, res scenarios.Result, note string) (report.ScenarioRun, error) {
	r := report.ScenarioRun{
		Scenario: res.Scenario, Relay: res.Relay, Variant: res.Variant, Seed: res.Seed, Valid: res.Valid,
		Problems: res.Problems, Inconclusive: res.Inconclusive, Counts: res.Counts, Checkers: report.Verdicts(res.Report),
		DrainTime: res.DrainTime, Duration: res.Duration, Replay: res.Replay, Note: note,
		Queue: res.Queue, Database: res.Database, ConfirmStall: res.ConfirmStall, Unchecked: res.Unchecked, Subject: res.Subject,
		Footprint: res.Footprint,
	}
	for _, f := range res.Faults {
		r.Faults = append(r.Faults, report.FaultHits{Name: f.Name, Class: f.Class, Hits: f.Hits})
	}
	if res.Records.Known {
		rr := res.Records
		r.RelayRecords = &rr
	}
	if res.Observed.Known || res.Observed.Unobserved != "" {
		o := res.Observed
		r.Observed = &o
	}
	if len(res.History) > 0 {
		name := fmt.Sprintf("%02d-%s-%s-%d.jsonl", i+1, safeName(res.Scenario), safeName(res.Variant), res.Seed)
		rel, err := report.WriteHistory(dir, name, res.History)
		if err != nil {
			return r, err
		}
		r.History = rel
	}
	return r, nil
}

func safeName(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' {
			return r
		}
		return '-'
	}, s)
}

// countsTable prints results side by side: the first column left-aligned,
// the counts right-aligned under their headings, and last what explained
// the duplicate deliveries and publishes (the causes that touched their
// rows) and, for the unexplained ones, the fault windows they were near.
func countsTable(w io.Writer, rows []scenarios.Result, first func(int, scenarios.Result) string, head string) {
	cols := []string{"verdict", "committed", "delivered", "lost", "phantom", "dup deliveries", "unexplained", "dup effects"}
	// A failover of the database undoes commits, counted apart.
	failover := slices.ContainsFunc(rows, func(r scenarios.Result) bool {
		return slices.ContainsFunc(r.Report.Results, func(c checker.Result) bool { return c.Checker == checker.NameFailover && !c.Skipped })
	})
	if failover {
		cols = append(cols, "failover lost", "failover phantom")
	}
	width := len(head)
	for i, r := range rows {
		width = max(width, len(first(i, r)))
	}
	fmt.Fprintf(w, "%-*s", width, head)
	for _, c := range cols {
		fmt.Fprintf(w, "  %s", c)
	}
	fmt.Fprintln(w, "  duplicate causes")
	for i, r := range rows {
		c := r.Counts
		v := r.Verdict()
		fmt.Fprintf(w, "%-*s", width, first(i, r))
		cells := []string{v, fmt.Sprint(c.Committed), fmt.Sprint(c.Delivered), fmt.Sprint(c.Lost), fmt.Sprint(c.Phantom),
			fmt.Sprint(c.DuplicateDeliveries), fmt.Sprint(c.UnexplainedDuplicates), fmt.Sprint(c.DuplicateEffects)}
		if failover {
			cells = append(cells, fmt.Sprint(c.FailoverLost), fmt.Sprint(c.FailoverPhantom))
		}
		causes := duplicateCauses(c)
		if v == scenarios.VerdictNotApplicable {
			// Nothing ran: no count is a zero.
			for i := 1; i < len(cells); i++ {
				cells[i] = "-"
			}
			causes = "not applicable: " + r.NotApplicable
		}
		for i, x := range cells {
			fmt.Fprintf(w, "  %*s", len(cols[i]), x)
		}
		fmt.Fprintf(w, "  %s\n", causes)
	}
}

// writeHTML writes the HTML report of runs to dir/name and returns its
// path.
func writeHTML(dir, name string, page report.Page) (string, error) {
	path := filepath.Join(dir, name)
	if err := report.WriteHTMLFile(path, page); err != nil {
		return "", err
	}
	return path, nil
}

// duplicateCauses renders what explained a run's duplicates, and what
// the unexplained ones were near; "-" when there were none.
func duplicateCauses(c checker.Counts) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(c.DuplicatesBy)) {
		parts = append(parts, fmt.Sprintf("%s=%d", k, c.DuplicatesBy[k]))
	}
	for _, k := range slices.Sorted(maps.Keys(c.UnexplainedBy)) {
		parts = append(parts, fmt.Sprintf("UNEXPLAINED near %s=%d", k, c.UnexplainedBy[k]))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}
