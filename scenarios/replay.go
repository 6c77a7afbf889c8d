package scenarios

import (
	"fmt"
	"strings"
	"time"

	"github.com/outboxlab/outboxlab/chaos"
	"github.com/outboxlab/outboxlab/history"
)

// replay returns the commands that run the same schedule again.
func (r *run) replay() (cmd, test string) {
	cmd = fmt.Sprintf("go run ./cmd/outboxlab run --scenario %s --seed %d", r.sc.Name, r.opts.Seed)
	if r.relay.Name != "ours" {
		switch {
		case len(r.opts.Relay.Command) > 0:
			cmd += " --relay 'cmd:" + strings.Join(r.opts.Relay.Command, " ") + "'"
		case r.opts.Relay.Image != "":
			cmd += " --relay image:" + r.opts.Relay.Image
		default:
			cmd += " --relay " + r.relay.Name
		}
	}
	if r.opts.Events > 0 {
		cmd += fmt.Sprintf(" --events %d", r.opts.Events)
	}
	if r.opts.Duration > 0 {
		cmd += fmt.Sprintf(" --duration %s", r.opts.Duration)
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
