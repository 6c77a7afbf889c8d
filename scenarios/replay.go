package scenarios

import (
	"fmt"
	"strings"
	"time"

	"github.com/outboxlab/outboxlab/chaos"
	"github.com/outboxlab/outboxlab/history"
	"github.com/outboxlab/outboxlab/testenv"
)

// ReplayCommand is the outboxlab command that runs scenario on seed
// again against relay (its Name alone for ours and the mutants; an image
// or command with the capabilities it declared), with the
// workload size or safety phase that was given (0: the scenario's own).
// Every argument is quoted so that a POSIX shell hands the run verb the
// same values, a cmd: relay's arguments included.
func ReplayCommand(scenario string, seed uint64, relay RelayUnderTest, events int, duration time.Duration) string {
	cmd := fmt.Sprintf("go run ./cmd/outboxlab run --scenario %s --seed %d", QuoteArg(scenario), seed)
	ours := relay.Name == "ours" && len(relay.Command) == 0 && (relay.Image == "" || relay.Image == testenv.ImageRelay)
	switch {
	case ours:
		// Our relay runs by default.
	case relay.Replay != "":
		// A target file or a named target declares its own capabilities.
		return cmd + " " + relay.Replay + sizeArgs(events, duration)
	case len(relay.Command) > 0:
		cmd += " --relay " + QuoteArg("cmd:"+JoinCommand(relay.Command))
	case relay.Image != "":
		cmd += " --relay " + QuoteArg("image:"+relay.Image)
	case relay.Name != "":
		cmd += " --relay " + QuoteArg(relay.Name)
	}
	if !ours && (len(relay.Command) > 0 || relay.Image != "") && relay.CapabilitiesString() != "none" {
		cmd += " --capabilities " + QuoteArg(relay.CapabilitiesString())
	}
	return cmd + sizeArgs(events, duration)
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
	return " --queue " + QuoteArg(queueType)
}

// replay returns the commands that run the same schedule again.
func (r *run) replay() (cmd, test string) {
	u := r.opts.Relay
	u.Name = r.relay.Name
	cmd = ReplayCommand(r.sc.Name, r.opts.Seed, u, r.opts.Events, r.opts.Duration) + QueueArg(r.opts.QueueType)
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
