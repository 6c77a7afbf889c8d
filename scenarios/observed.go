package scenarios

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/outboxlab/outboxlab/history"
	"github.com/outboxlab/outboxlab/internal/observe"
	"github.com/outboxlab/outboxlab/workload"
)

// observing reports whether the run observes its outbox tables: every
// run with a relay whose outbox could be observed.
func (r *run) observing() bool {
	return r.mode == workload.Outbox && r.unobserved == "" && !r.opts.Unobserved
}

// observeOutboxes puts the observation trigger on every outbox table of
// the run, through the relay's rows view when its outbox has columns of
// its own. An outbox that cannot be observed (its rows view does not
// read the table the harness names, say) leaves the whole run
// unobserved, judged as before from the relay's records, if it writes
// them, and the final rows: r.unobserved says why, and the run's
// unchecked notes repeat it.
func (r *run) observeOutboxes(ctx context.Context) {
	if !r.observing() {
		return
	}
	for _, bc := range r.contexts {
		if err := observe.InstallView(ctx, r.fx.Admin, bc.table, r.relay.Outbox.Rows); err != nil {
			r.unobserved = err.Error()
			r.logf("the outbox cannot be observed: %v", err)
			for _, done := range r.contexts {
				_ = observe.Uninstall(ctx, r.fx.Admin, done.table)
			}
			return
		}
	}
}

// createRole gives replica s a login role of its own over its context's
// outbox, which its database URL logs in as, so that the observation
// names it in every change it makes.
func (r *run) createRole(ctx context.Context, s *Replica) error {
	if !r.observing() {
		return nil
	}
	role, err := observe.NewRole(s.bc.table, s.name)
	if err != nil {
		return fmt.Errorf("setup: the role of relay %s: %w", s.name, err)
	}
	if err := observe.CreateRole(ctx, r.fx.Admin, s.bc.table, role); err != nil {
		return fmt.Errorf("setup: the role of relay %s: %w", s.name, err)
	}
	s.role = &role
	return nil
}

// dropRoles drops the replicas' roles once they have stopped.
func (r *run) dropRoles(ctx context.Context) error {
	var errs []error
	for _, bc := range r.contexts {
		for _, s := range bc.relays {
			if s.role != nil && r.fx != nil && r.fx.Admin != nil {
				errs = append(errs, observe.DropRole(ctx, r.fx.Admin, s.role.Name))
			}
		}
	}
	return errors.Join(errs...)
}

// readObserved reads what the trigger logged of every outbox table and
// returns the replicas' operations, one slice per context, with their
// events named by their own ids (nameEvents), and a summary.
func (r *run) readObserved(ctx context.Context) ([][]history.Op, history.ObservedSummary, error) {
	sum := history.ObservedSummary{Known: r.observing() && r.fx != nil, Unobserved: r.unobserved}
	if r.opts.Unobserved && r.mode == workload.Outbox {
		sum.Unobserved = "observation turned off (Options.Unobserved)"
	}
	if !sum.Known {
		return nil, sum, nil
	}
	var out [][]history.Op
	for _, bc := range r.contexts {
		processes := map[string]string{}
		for _, s := range bc.relays {
			if s.role != nil {
				processes[s.role.Name] = s.name
			}
		}
		ts, err := observe.Read(ctx, r.fx.Admin, bc.table, 0)
		if ve := (*observe.ViewError)(nil); errors.As(err, &ve) {
			// An incomplete log judges nothing: the run is unobserved.
			return nil, history.ObservedSummary{Unobserved: ve.Error()}, nil
		}
		if err != nil {
			return nil, sum, fmt.Errorf("reading what was observed of %s: %w", bc.table, err)
		}
		sum.Changes += len(ts)
		var mine []observe.Transition
		for _, t := range ts {
			switch {
			case processes[t.Session] != "":
				mine = append(mine, t)
			case t.Kind != observe.Inserted:
				sum.Others++
			}
		}
		ops := pairUp(observe.Ops(mine, processes))
		nameEvents(ops, bc.ids)
		sum.Ops += len(ops) / 2
		out = append(out, ops)
	}
	return out, sum, nil
}

// observedFuncs are the relay operations both a relay's records and the
// observation of its outbox show.
var observedFuncs = []history.Func{history.Claim, history.Mark, history.Retry, history.Park, history.Sweep}

// compareObserved compares the relays' recorded operations in h with
// those observed on the database, row by row, and returns each
// disagreement that nothing in the history explains, one line each. A
// record and an observation agree when they name the same replica,
// operation and row; a park is a park whether the attempt that made it
// was counted in the same change (a retry at the attempt limit) or not.
// Two differences are explained:
//
//   - recorded, not observed: a fault of the database (class db) began
//     at most undoneWithin after the record: asynchronous commits may
//     have been undone with the log rows of their changes;
//   - observed, not recorded: the replica crashed or restarted after the
//     change (its last records may not have been written out), or it
//     recorded that operation of that row with an unknown or failed
//     outcome, or left it open.
func compareObserved(h, observed []history.Op) []string {
	type key struct {
		process string
		f       string
		event   string
	}
	relays := map[string]bool{}
	for _, op := range observed {
		relays[op.Process] = true
	}
	count := func(ops []history.Op, keep func(history.Op) bool) (map[key]int, map[key]history.Op) {
		n, first := map[key]int{}, map[key]history.Op{}
		for _, op := range ops {
			if op.Type != history.OK || !slices.Contains(observedFuncs, op.F) || !keep(op) {
				continue
			}
			for _, e := range op.Events {
				k := key{op.Process, opName(op), e}
				if _, ok := first[k]; !ok {
					first[k] = op
				}
				n[k]++
			}
		}
		return n, first
	}
	recorded, recFirst := count(h, func(op history.Op) bool { return relays[op.Process] || op.Process == "" })
	seen, seenFirst := count(observed, func(history.Op) bool { return true })
	dbFaultAfter := func(t time.Time) bool {
		return slices.ContainsFunc(h, func(op history.Op) bool {
			return op.F == history.FaultStart && op.Fault != nil && op.Fault.Class == history.ClassDB &&
				!op.Time.Before(t) && op.Time.Sub(t) <= undoneWithin
		})
	}
	diedAfter := func(process string, t time.Time) bool {
		return slices.ContainsFunc(h, func(op history.Op) bool {
			return (op.F == history.Crash || op.F == history.Restart) && op.Process == process && !op.Time.Before(t)
		})
	}
	unsure := func(k key) bool {
		for _, p := range history.Pairs(h) {
			inv := p.Start()
			f := string(inv.F)
			if inv.F == history.Retry && k.f == "park" {
				f = "park" // a retry's invoke does not know it will park
			}
			if inv.Process == k.process && f == k.f && slices.Contains(inv.Events, k.event) && p.Outcome() != history.OK {
				return true
			}
		}
		return false
	}
	var out []string
	for k, n := range recorded {
		if m := seen[k]; m < n && !dbFaultAfter(recFirst[k].Time) {
			out = append(out, fmt.Sprintf("%s %s of %s: recorded %d times, observed %d", k.process, k.f, k.event, n, m))
		}
	}
	for k, m := range seen {
		if n := recorded[k]; n < m && !diedAfter(k.process, seenFirst[k].Time) && !unsure(k) {
			out = append(out, fmt.Sprintf("%s %s of %s: observed %d times, recorded %d", k.process, k.f, k.event, m, n))
		}
	}
	slices.Sort(out)
	return out
}

// opName names a relay operation for compareObserved: its function, but
// "park" for a retry that parked its rows.
func opName(op history.Op) string {
	if op.F == history.Retry && op.Parked {
		return "park"
	}
	return string(op.F)
}

// undoneWithin bounds how long before a database fault a recorded change
// may have been undone by it: a commit that does not wait for its flush
// (synchronous_commit off) is on disk within three WAL writer delays,
// 600 ms by default; the bound leaves room for a slow machine.
const undoneWithin = 5 * time.Second

// pairUp gives each observed operation, a single ok record, the invoke
// that opens it, at the same time and naming the same rows, as every
// operation of a history has one: the change was made by a statement
// that began before it.
func pairUp(ops []history.Op) []history.Op {
	out := make([]history.Op, 0, 2*len(ops))
	for _, op := range ops {
		op.Time = op.Time.Round(0)
		inv := history.Op{Time: op.Time, Process: op.Process, Type: history.Invoke, F: op.F, Events: op.Events}
		out = append(out, inv, op)
	}
	return out
}
