package scenarios

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
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
	s.mu.Lock()
	settings := maps.Clone(s.settings)
	s.mu.Unlock()
	for _, name := range slices.Sorted(maps.Keys(settings)) {
		if err := observe.SetRoleSetting(ctx, r.fx.Admin, role.Name, name, settings[name]); err != nil {
			_ = observe.DropRole(ctx, r.fx.Admin, role.Name)
			return fmt.Errorf("setup: the role of relay %s: %w", s.name, err)
		}
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
		ops := observe.Ops(mine, processes)
		if r.relay.Promises.Deletes {
			deletesAsMarks(ops)
		}
		ops = pairUp(ops)
		nameEvents(ops, bc.ids)
		sum.Ops += len(ops) / 2
		out = append(out, ops)
	}
	return out, sum, nil
}

// deletesAsMarks makes each observed delete of pending rows a mark of
// them, for a relay that declares it deletes a row once published
// (contract.Promises.Deletes): that delete is how it marks.
func deletesAsMarks(ops []history.Op) {
	for i, op := range ops {
		if op.F == history.Sweep && op.Detail == "deleted "+string(observe.StatePending) {
			ops[i].F, ops[i].Detail = history.Mark, "deleted while pending (this relay's mark: published, or discarded)"
		}
	}
}

// observedFuncs are the relay operations both a relay's records and the
// observation of its outbox (claims, marks, retries, parks, sweeps) and
// of the broker (publishes the broker routed to a queue) show.
var observedFuncs = []history.Func{history.Claim, history.Mark, history.Retry, history.Park, history.Sweep, history.Publish}

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
//     have been undone with the log rows of their changes; or, for a
//     publish, the broker's tap was away (unseen reports the time in one
//     of its gaps);
//   - observed, not recorded: the replica crashed or restarted after the
//     change (its last records may not have been written out), or it
//     recorded that operation of that row with an unknown or failed
//     outcome, or left it open; for claims, whose record names no rows
//     until they return, each claim of the replica with an unknown
//     outcome explains one observed claim of each row.
func compareObserved(h, observed []history.Op, unseen func(time.Time) bool) []string {
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
	// A claim cut short (a shutdown cancelled it, or its link broke) may
	// have committed, and its record cannot name the rows it leased:
	// each such claim of a replica explains one more observed claim of
	// any row by that replica.
	// A sweep cut short in the same way (its DELETE may have committed
	// as the relay stopped) cannot name the rows it deleted, up to a
	// batch of them: it explains every observed sweep of that replica.
	blindClaims, blindSweeps := map[string]int{}, map[string]bool{}
	for _, p := range history.Pairs(h) {
		inv := p.Start()
		if len(inv.Events) > 0 || p.Outcome() == history.OK {
			continue
		}
		switch inv.F {
		case history.Claim:
			blindClaims[inv.Process]++
		case history.Sweep:
			blindSweeps[inv.Process] = true
		}
	}
	unsure := func(k key, surplus int) bool {
		if k.f == string(history.Claim) && surplus <= blindClaims[k.process] {
			return true
		}
		if k.f == string(history.Sweep) && blindSweeps[k.process] {
			return true
		}
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
		if m := seen[k]; m < n && !dbFaultAfter(recFirst[k].Time) && (k.f != string(history.Publish) || unseen == nil || !unseen(recFirst[k].Time)) {
			out = append(out, fmt.Sprintf("%s %s of %s: recorded %d times, observed %d", k.process, k.f, k.event, n, m))
		}
	}
	for k, m := range seen {
		if n := recorded[k]; n < m && !diedAfter(k.process, seenFirst[k].Time) && !unsure(k, m-n) {
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

// observeBroker gives every replica of slots a broker user of its own
// (named and keyed like its database role) and taps the broker's
// firehose for the publishes to the run's exchanges, before the
// replicas start: every message the broker accepts from a replica is
// then seen with the replica's name. A broker that cannot be observed
// (a cluster; users that cannot be added) leaves r.tap nil, and
// r.brokerUnobserved says why.
func (r *run) observeBroker(ctx context.Context, slots []*Replica) {
	if !r.observing() {
		return
	}
	rabbit := r.env.RabbitMQ()
	if rabbit == nil {
		r.brokerUnobserved = "the broker is a cluster, whose publishes the harness does not tap"
		return
	}
	var roles []observe.Role
	for _, s := range slots {
		if s.role != nil {
			roles = append(roles, *s.role)
		}
	}
	if len(roles) == 0 {
		r.brokerUnobserved = "no replica has a role of its own"
		return
	}
	fail := func(err error) { r.brokerUnobserved = err.Error(); r.logf("the broker cannot be observed: %v", err) }
	expr, err := observe.AddBrokerUsersExpr(roles)
	if err != nil {
		fail(err)
		return
	}
	if code, out, err := rabbit.Exec(ctx, "rabbitmqctl", "eval", expr); err != nil || code != 0 {
		fail(fmt.Errorf("adding the replicas' broker users: exit %d: %v %s", code, err, strings.TrimSpace(out)))
		return
	}
	r.brokerUsers = roles
	var exchanges []string
	for _, bc := range r.contexts {
		exchanges = append(exchanges, bc.exchange)
	}
	tap, err := observe.StartTap(ctx, r.env.DirectAMQPURL(), exchanges)
	if err != nil {
		fail(err)
		return
	}
	r.tap = tap
}

// unobserveBroker stops the tap and deletes the replicas' broker users,
// once the replicas have stopped.
func (r *run) unobserveBroker(ctx context.Context) error {
	if r.tap != nil {
		_ = r.tap.Close()
	}
	if len(r.brokerUsers) == 0 || r.env.RabbitMQ() == nil {
		return nil
	}
	expr, err := observe.DeleteBrokerUsersExpr(r.brokerUsers)
	if err != nil {
		return err
	}
	if code, out, err := r.env.RabbitMQ().Exec(ctx, "rabbitmqctl", "eval", expr); err != nil || code != 0 {
		return fmt.Errorf("deleting the replicas' broker users: exit %d: %v %s", code, err, strings.TrimSpace(out))
	}
	r.brokerUsers = nil
	return nil
}

// publishedEvent names the event a publish the tap saw carries, and the
// replica that made it: the context of its exchange, the relay's
// identity of its deliveries (id, the database's, and event, the
// harness's), the replica of its broker user; ok false
// for a publish of no replica or no event of the run.
func (r *run) publishedEvent(p observe.Published) (bc *boundedCtx, replica, id, event string, ok bool) {
	for _, c := range r.contexts {
		if c.exchange != p.Exchange {
			continue
		}
		for _, s := range c.relays {
			if s.role != nil && s.role.Name == p.User {
				id := r.relay.Identity.ID(p.Message)
				if id == "" {
					return nil, "", "", "", false
				}
				return c, s.name, id, c.ids.Event(id), true
			}
		}
	}
	return nil, "", "", "", false
}

// brokerOps turns what the tap saw into the replicas' publishes, one
// invoke and one completion each at the time the tap saw it: ok when the
// broker routed the message to a queue, fail when it routed it to none
// (a mandatory publish it returned). sum counts them.
func (r *run) brokerOps() ([]history.Op, history.BrokerObserved) {
	sum := history.BrokerObserved{Known: r.tap != nil, Unobserved: r.brokerUnobserved}
	if r.tap == nil {
		return nil, sum
	}
	sum.Gaps = len(r.tap.Gaps())
	times := map[string]int{}
	var out []history.Op
	for _, p := range r.tap.Published() {
		_, replica, _, event, ok := r.publishedEvent(p)
		if !ok {
			sum.Others++
			continue
		}
		sum.Publishes++
		at := p.Seen.Round(0)
		done := history.Op{Time: at, Process: replica, Type: history.OK, F: history.Publish, Events: []string{event}}
		if len(p.Routed) == 0 {
			sum.Unroutable++
			done.Type = history.Fail
			done.Meta.Detail = "observed at the broker: routed to no queue"
		} else if times[event]++; times[event] == 2 {
			sum.Republished++
		}
		out = append(out, history.Op{Time: at, Process: replica, Type: history.Invoke, F: history.Publish, Events: []string{event}}, done)
	}
	return out, sum
}

// tapAway reports whether the broker's tap was away at t, or within a
// second after it came back: a publish then may have gone unseen.
func (r *run) tapAway(t time.Time) bool {
	if r.tap == nil {
		return true
	}
	for _, g := range r.tap.Gaps() {
		if !t.Before(g.From) && (g.To.IsZero() || !t.After(g.To.Add(time.Second))) {
			return true
		}
	}
	return false
}
