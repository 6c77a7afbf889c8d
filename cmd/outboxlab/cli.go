package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// Exit codes, the same on every verb.
const (
	exitOK   = 0
	exitFail = 1 // a verdict failed
	// exitUsage is bad usage, or an environment that cannot run the verb
	// (no Docker engine, missing images), or a run that was interrupted
	// (SIGINT, SIGTERM) before its verdict: one that had found a failure
	// exits exitFail.
	exitUsage = 2
	// exitInconclusive is a run whose fault could not bite what it claims
	// to test: neither a pass nor a failure of the relay.
	exitInconclusive = 3
)

// replayPrefix starts every replay command the command prints.
const replayPrefix = "go run ./cmd/outboxlab"

// verb is one subcommand.
type verb struct {
	name    string
	summary string
	// args is the synopsis after the verb's name.
	args string
	// about is the help paragraph; it may mention only the verb's own
	// flags (a test checks).
	about string
	// define declares the verb's flags on fs and returns its runner, which
	// reaches containers, the mutant catalogue and the Docker engine only
	// through the deps it is given.
	define func(fs *flag.FlagSet) func(ctx context.Context, std *stdio, d deps) int
}

// stdio is where a verb writes.
type stdio struct {
	out, err io.Writer
	// now is the wall clock, for progress and meta.
	now func() time.Time
	// tty reports whether err is a terminal (progress updates in place).
	tty bool
	// interruptShown is set once a verb has said it was interrupted.
	interruptShown bool
}

// verbs returns the verbs in the order usage lists them.
func verbs() []verb {
	return []verb{demoVerb(), runVerb(), validateVerb(), simVerb(), mutantsVerb(), benchVerb(), soakVerb(), reportVerb()}
}

// helpVerb is the help verb: it is run by run itself, and listed last.
func helpVerb() verb {
	return verb{
		name:    "help",
		summary: "this text, or a verb's usage: outboxlab help VERB",
		args:    "[VERB]",
		about: `Prints the list of verbs, or with a VERB (help itself included) the
verb's usage: its synopsis, what it does and every flag with its default.
` + "`outboxlab VERB --help`" + ` prints the same.`,
		define: func(*flag.FlagSet) func(context.Context, *stdio, deps) int { return nil },
	}
}

// findVerb returns the verb called name, help included.
func findVerb(name string) (verb, bool) {
	for _, v := range append(verbs(), helpVerb()) {
		if v.name == name {
			return v, true
		}
	}
	return verb{}, false
}

// newFlagSet returns v's flag set, its flags declared, and its runner.
func (v verb) newFlagSet(errOut io.Writer) (*flag.FlagSet, func(context.Context, *stdio, deps) int) {
	fs := flag.NewFlagSet("outboxlab "+v.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	runner := v.define(fs)
	return fs, runner
}

// run runs the command line args with the dependencies d and returns the
// exit code.
func run(ctx context.Context, d deps, args []string, out, errOut io.Writer) int {
	std := &stdio{out: out, err: errOut, now: time.Now, tty: isTerminal(errOut)}
	if len(args) == 0 {
		writeUsage(errOut)
		return exitUsage
	}
	name := args[0]
	switch name {
	case "help", "-h", "-help", "--help":
		if len(args) == 2 && (args[1] == "-h" || args[1] == "-help" || args[1] == "--help") {
			writeVerbHelp(out, helpVerb())
			return exitOK
		}
		if len(args) > 2 {
			fmt.Fprintf(errOut, "outboxlab help: too many arguments: %s\n", strings.Join(args[1:], " "))
			return exitUsage
		}
		if len(args) == 2 {
			v, ok := findVerb(args[1])
			if !ok {
				fmt.Fprintf(errOut, "outboxlab help: unknown verb %q\n\n", args[1])
				writeUsage(errOut)
				return exitUsage
			}
			writeVerbHelp(out, v)
			return exitOK
		}
		writeUsage(out)
		return exitOK
	}
	v, ok := findVerb(name)
	if !ok {
		fmt.Fprintf(errOut, "outboxlab: unknown verb %q\n\n", name)
		writeUsage(errOut)
		return exitUsage
	}
	fs, runner := v.newFlagSet(errOut)
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			writeVerbHelp(out, v)
			return exitOK
		}
		fmt.Fprintf(errOut, "outboxlab %s: %v\nRun `outboxlab help %s` for usage.\n", v.name, err, v.name)
		return exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(errOut, "outboxlab %s: unexpected argument %q\nRun `outboxlab help %s` for usage.\n", v.name, fs.Arg(0), v.name)
		return exitUsage
	}
	if ctx.Err() != nil {
		return interrupted(std, ctx, v.name, "before it started")
	}
	code := runner(ctx, std, d)
	if ctx.Err() != nil {
		if !std.interruptShown {
			interrupted(std, ctx, v.name, "its results are incomplete")
		}
		// A failure found before the signal is a verdict, and stands (the
		// verb printed it); otherwise a run cut short has none.
		if code == exitFail {
			return exitFail
		}
		return exitUsage
	}
	return code
}

// errInterrupted is the cause of the command's context when a signal
// (SIGINT, SIGTERM) stopped it.
var errInterrupted = errors.New("interrupted")

// interrupted reports that ctx ended (a signal) before verb reached a
// verdict, with what happened, and returns exitUsage: an interrupted run
// is neither a pass nor a failure.
func interrupted(std *stdio, ctx context.Context, verb, what string) int {
	std.interruptShown = true
	cause := context.Cause(ctx)
	if cause == nil {
		cause = ctx.Err()
	}
	if errors.Is(cause, errInterrupted) {
		fmt.Fprintf(std.err, "outboxlab %s: %v: %s\n", verb, cause, what)
	} else {
		fmt.Fprintf(std.err, "outboxlab %s: interrupted (%v): %s\n", verb, cause, what)
	}
	return exitUsage
}

// usageErr reports a bad flag value found after parsing.
func usageErr(std *stdio, verb, format string, args ...any) int {
	fmt.Fprintf(std.err, "outboxlab %s: %s\nRun `outboxlab help %s` for usage.\n", verb, fmt.Sprintf(format, args...), verb)
	return exitUsage
}

// unavailable reports that the environment cannot run the verb.
func unavailable(std *stdio, verb, format string, args ...any) int {
	fmt.Fprintf(std.err, "outboxlab %s: %s\n", verb, fmt.Sprintf(format, args...))
	return exitUsage
}

func writeUsage(w io.Writer) {
	fmt.Fprint(w, `outboxlab: a fault-injection harness for the transactional outbox.

Usage:
  outboxlab VERB [flags]

Verbs:
`)
	for _, v := range verbs() {
		fmt.Fprintf(w, "  %-9s %s\n", v.name, v.summary)
	}
	fmt.Fprintf(w, "  %-9s %s\n", helpVerb().name, helpVerb().summary)
	fmt.Fprint(w, `
Run `+"`outboxlab help VERB`"+` or `+"`outboxlab VERB --help`"+` for a verb's flags.
Exit codes, the same on every verb: 0 every verdict passed; 1 a verdict
failed (also when the run was interrupted after it found the failure);
2 bad usage, an environment that cannot run the verb (no Docker engine,
missing images) or a run interrupted (SIGINT, SIGTERM) before any
verdict; 3 inconclusive (a fault could not bite what the run claims to
test).
`)
}

// writeVerbHelp prints a verb's usage: synopsis, paragraph, and every flag
// of its FlagSet with its default.
func writeVerbHelp(w io.Writer, v verb) {
	fs, _ := v.newFlagSet(io.Discard)
	fmt.Fprintf(w, "Usage: outboxlab %s %s\n\n%s\n", v.name, v.args, strings.TrimSpace(v.about))
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	if n == 0 {
		return
	}
	fmt.Fprint(w, "\nFlags:\n")
	fs.VisitAll(func(f *flag.Flag) {
		arg, usage := flag.UnquoteUsage(f)
		head := "--" + f.Name
		if arg != "" {
			head += " " + arg
		}
		fmt.Fprintf(w, "  %-22s %s", head, usage)
		if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" && f.DefValue != "[]" {
			fmt.Fprintf(w, " (default %s)", f.DefValue)
		}
		fmt.Fprintln(w)
	})
}

// isTerminal reports whether w is a character device.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// stringList is a repeatable flag.
type stringList []string

func (l *stringList) String() string { return strings.Join(*l, ",") }

func (l *stringList) Set(s string) error {
	if s == "" {
		return errors.New("empty value")
	}
	*l = append(*l, s)
	return nil
}

// seedFlag is a seed that remembers whether it was given.
type seedFlag struct {
	v   uint64
	set bool
}

func (s *seedFlag) String() string {
	if !s.set {
		return ""
	}
	return fmt.Sprint(s.v)
}

func (s *seedFlag) Set(v string) error {
	var n uint64
	if _, err := fmt.Sscan(v, &n); err != nil || fmt.Sprint(n) != strings.TrimSpace(v) {
		return fmt.Errorf("not a seed (an unsigned integer): %q", v)
	}
	s.v, s.set = n, true
	return nil
}

// orRandom returns the seed, or a fresh one from the clock when none was
// given (the run prints it first, so it can be replayed).
func (s *seedFlag) orRandom(now time.Time) uint64 {
	if s.set {
		return s.v
	}
	x := uint64(now.UnixNano())
	// splitmix64, so that close clocks give unrelated seeds.
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return (x ^ (x >> 31)) % 1_000_000_000
}
