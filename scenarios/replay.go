package scenarios

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"time"

	"github.com/outboxlab/outboxlab/chaos"
	"github.com/outboxlab/outboxlab/contract"
	"github.com/outboxlab/outboxlab/history"
	"github.com/outboxlab/outboxlab/internal/argv"
	"github.com/outboxlab/outboxlab/testenv"
)

// ReplayCommand is the outboxlab command that runs scenario on seed
// again against relay (its Name alone for ours and the mutants; an image
// or command with the capabilities it declared), with the
// workload size or safety phase that was given (0: the scenario's own).
// Every argument is quoted so that a POSIX shell hands the run verb the
// same values, a cmd: relay's arguments included. For a relay that the
// run verb cannot name (Unnamed), it is no command but a shell comment
// that says so, and how to run it again: never a command that would run
// something else.
func ReplayCommand(scenario string, seed uint64, relay RelayUnderTest, events int, duration time.Duration) string {
	if why := Unnamed(relay); why != "" {
		return fmt.Sprintf("# outboxlab run cannot name relay %s (%s): run the Go test that ran %s again, on seed %d", relay.Name, why, scenario, seed)
	}
	cmd := fmt.Sprintf("go run ./cmd/outboxlab run --scenario %s --seed %d", argv.QuoteArg(scenario), seed)
	ours := isOurs(relay)
	switch {
	case ours:
		// Our relay runs by default.
	case relay.Replay != "":
		// A target file or a named target declares its own capabilities.
		return cmd + " " + relay.Replay + sizeArgs(events, duration)
	case len(relay.Command) > 0:
		cmd += " --relay " + argv.QuoteArg("cmd:"+argv.JoinCommand(relay.Command))
	case relay.Image != "":
		cmd += " --relay " + argv.QuoteArg("image:"+relay.Image)
	case relay.Name != "":
		cmd += " --relay " + argv.QuoteArg(relay.Name)
	}
	if !ours && (len(relay.Command) > 0 || relay.Image != "") && relay.Promises != (contract.Promises{}) {
		cmd += " --capabilities " + argv.QuoteArg(relay.Promises.String())
	}
	return cmd + sizeArgs(events, duration)
}

// Unnamed returns why the run verb cannot name relay, so that no
// outboxlab command runs it again, or "" when it can: an outbox schema in
// Go code (outbox.Schema's functions) that no target file or --relay
// names, or a program in the temporary directory, which is gone once the
// test or the tool that built it ends. Such a relay is run again by the
// Go code that ran it: suite.Run prints its subtest's go test command.
func Unnamed(relay RelayUnderTest) string {
	switch {
	case relay.Replay != "":
		return ""
	case relay.Outbox.Own():
		name := relay.Outbox.Name
		if name == "" {
			name = "of its own"
		}
		return fmt.Sprintf("its outbox schema %s is Go code", name)
	case len(relay.Command) > 0 && inTempDir(relay.Command[0]):
		return fmt.Sprintf("its program %s is in the temporary directory, gone once what built it ends", relay.Command[0])
	}
	return ""
}

// inTempDir reports whether path is in the temporary directory.
func inTempDir(path string) bool {
	if !filepath.IsAbs(path) {
		return false
	}
	rel, err := filepath.Rel(os.TempDir(), path)
	return err == nil && rel != "." && !strings.HasPrefix(rel, "..")
}

// isOurs reports whether relay is this repository's relay from its
// image, the one the catalogue's tests run.
func isOurs(relay RelayUnderTest) bool {
	return relay.Name == "ours" && len(relay.Command) == 0 && (relay.Image == "" || relay.Image == testenv.ImageRelay)
}

// sizeArgs are the run verb's arguments for a workload size or safety
// phase that was given.
func sizeArgs(events int, duration time.Duration) string {
	s := ""
	if events > 0 {
		s += fmt.Sprintf(" --events %d", events)
	}
	if duration > 0 {
		s += fmt.Sprintf(" --duration %s", duration)
	}
	return s
}

// QueueArg is the run verb's argument that gives a broker cluster's queue
// type, "" for the default.
func QueueArg(queueType string) string {
	if queueType == "" {
		return ""
	}
	return " --queue " + argv.QuoteArg(queueType)
}

// catalogued reports whether sc is the scenario Lookup returns for its
// name, which the run verb and the catalogue's tests can name: the same
// settings and the same hooks. A scenario built elsewhere, or one of the
// catalogue's changed after Lookup (another Check, another workload), is
// not, whatever its name: a run of it replays only from the Go code that
// built it.
func catalogued(sc Scenario) bool {
	ref, ok := Lookup(sc.Name)
	if !ok || sc.hooks == nil || *sc.hooks != hookPointers(sc) {
		return false
	}
	// The hooks are the ones built with sc; its settings must be
	// those of the catalogue's.
	sc.Prepare, sc.Faults, sc.Check, sc.hooks = nil, nil, nil, nil
	ref.Prepare, ref.Faults, ref.Check, ref.hooks = nil, nil, nil, nil
	return reflect.DeepEqual(sc, ref)
}

// named marks scs as the catalogue's: it keeps the code pointers of
// their hooks as built, which a hook replaced later does not have. (Two
// builds of one scenario need not have the same pointers: the compiler
// copies a closure where it inlines the function that makes it.)
func named(scs ...Scenario) []Scenario {
	for i := range scs {
		p := hookPointers(scs[i])
		scs[i].hooks = &p
	}
	return scs
}

// hookPointers returns the code pointers of sc's hooks, 0 for none.
func hookPointers(sc Scenario) [3]uintptr {
	var out [3]uintptr
	for i, f := range []any{sc.Prepare, sc.Faults, sc.Check} {
		if v := reflect.ValueOf(f); !v.IsNil() {
			out[i] = v.Pointer()
		}
	}
	return out
}

// replay returns the commands that run the same schedule again: the run
// verb's, and the go test command of the catalogue's tests, which run our
// relay (for another relay, the run verb's again; for one the run verb
// cannot name, what ReplayCommand says instead). A scenario that is not
// the catalogue's (catalogued) gets a comment for both that says how to
// run it again.
func (r *run) replay() (cmd, test string) {
	if !catalogued(r.sc) {
		// Only the Go code that built the scenario runs it again.
		cmd = fmt.Sprintf("# outboxlab run cannot name scenario %s (it is built in Go code, not taken from the catalogue): run the Go test that ran it again, on seed %d",
			r.sc.Name, r.opts.Seed)
		return cmd, cmd
	}
	u := r.opts.Relay
	u.Name = r.relay.Name
	cmd = ReplayCommand(r.sc.Name, r.opts.Seed, u, r.opts.Events, r.opts.Duration)
	unnamed := Unnamed(u) != ""
	if !unnamed {
		cmd += QueueArg(r.opts.QueueType)
	}
	long := ""
	if r.long {
		long = LongEnv + "=1 "
	}
	if r.mode.Unsafe() {
		test = fmt.Sprintf("%sgo test ./scenarios -run 'TestUnsafeVariants/%s/%s$' -args -seed=%d", long, r.mode, r.sc.Name, r.opts.Seed)
		return test, test
	}
	test = fmt.Sprintf("%sgo test ./scenarios -run 'TestCatalogue/%s$' -args -seed=%d", long, r.sc.Name, r.opts.Seed)
	if cu := r.opts.Consumer; cu != nil {
		// The catalogue test runs our consumer: only the consumer's own
		// replay command repeats this run.
		return cu.Replay, cu.Replay
	}
	switch {
	case unnamed:
		return cmd, cmd
	case !isOurs(u):
		// The catalogue test runs our relay, not this one.
		return long + cmd, long + cmd
	}
	return long + cmd, test
}

// faultRecords renders the nemesis's and the relays' records, timed from
// the start of the safety phase, for a failed run's printout.
func (r *run) faultRecords() string {
	var b strings.Builder
	var start time.Time
	for _, op := range r.rec.Ops() {
		if op.F == history.Phase && op.Phase == history.PhaseSafety {
			start = op.Time
		}
		if op.Process != chaos.NemesisProcess && !strings.HasPrefix(op.Process, "relay-") && op.F != history.Phase {
			continue
		}
		fmt.Fprintf(&b, "  %8s %s\n", op.Time.Sub(start).Round(time.Millisecond), op)
	}
	return b.String()
}
