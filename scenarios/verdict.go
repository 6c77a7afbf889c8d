package scenarios

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxlab/outboxlab/contract"
	"github.com/outboxlab/outboxlab/workload"

	"github.com/outboxlab/outboxlab/chaos"
	"github.com/outboxlab/outboxlab/checker"
	"github.com/outboxlab/outboxlab/footprint"
	"github.com/outboxlab/outboxlab/history"
	"github.com/outboxlab/outboxlab/relay"
	"github.com/outboxlab/outboxlab/testenv"
)

// readState reads the final state: the outbox rows, the effects, and what
// was left in the queues. A server that a fault restarted may refuse a
// new connection for a moment after the heal: a failure to connect is
// tried again for up to stateWithin; any other error is the run's.
func (r *run) readState(ctx context.Context, queued []string) (checker.State, error) {
	deadline := time.Now().Add(stateWithin)
	for {
		st, err := r.fx.State(ctx, queued, r.mode == workload.Outbox)
		if err == nil || !connectFailure(err) || time.Now().After(deadline) || ctx.Err() != nil {
			return st, err
		}
		r.logf("reading the final state: %v; trying again", err)
		select {
		case <-ctx.Done():
			return st, err
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// stateWithin bounds the retries of the final state's read.
const stateWithin = 20 * time.Second

// connectFailure reports whether err is a failure to reach PostgreSQL
// (a connection refused or closed while it was being made), not an
// error of a statement.
func connectFailure(err error) bool {
	var connect *pgconn.ConnectError
	var netErr net.Error
	return errors.As(err, &connect) || errors.As(err, &netErr) || errors.Is(err, io.ErrUnexpectedEOF) || pgconn.SafeToRetry(err)
}

// checkerConfig states what the run promises.
func (r *run) checkerConfig() checker.Config {
	// The retention the replicas got, unless the relay declares its own.
	cfg := checker.Config{Retention: relay.DefaultRetention, LivenessBound: DrainWithin}
	if d, err := time.ParseDuration(r.setting(contract.EnvRetention)); err == nil && d > 0 {
		cfg.Retention = d
	}
	// What the relay declares, and nothing else, is judged: its attempt
	// limit, its backoff (on the retries it records with their database
	// times), its lease and its features.
	cfg = cfg.WithPromises(r.relay.Promises)
	cfg.SyncReplication = r.sc.Standby == testenv.ReplicationSync
	for _, bc := range r.contexts {
		for _, s := range bc.relays {
			cfg.Relays = append(cfg.Relays, s.name)
		}
	}
	if r.mode == workload.Outbox {
		cfg.Features.Stages = true
		cfg.Poison = maps.Clone(r.plan.Poison)
		cfg.Versions = r.plan.Versions
	} else {
		// No relay runs: no promise of one is judged.
		cfg.Features = checker.Features{}
	}
	return cfg
}

// unchecked says what the checkers judge the relays by, and what they
// cannot judge without relay records or observations.
func (r *run) unchecked(rep checker.Report, obs history.ObservedSummary, h []history.Op) []string {
	var out []string
	if r.mode == workload.Outbox && obs.Unobserved != "" {
		out = append(out, "observation: the outbox was not observed: "+obs.Unobserved)
	}
	if r.mode == workload.Outbox && obs.Known && !obs.Broker.Known && obs.Broker.Unobserved != "" {
		out = append(out, "observation: the broker was not observed: "+obs.Broker.Unobserved)
	}
	switch {
	case r.mode != workload.Outbox:
	case r.recordsDir != "":
		out = append(out, "relays: judged from their own records (claims, publishes, confirms, marks, retries, parks, sweeps) merged into the history, and from the final rows")
	case obs.Merged:
		line := "relays: judged from what the outbox table showed of them (their claims, marks, retries, parks and sweeps, logged by a trigger on the database clock, each replica logged in as a role of its own)"
		if obs.Broker.Known {
			line += " and what the broker showed of them (every message it accepted from each, through RabbitMQ's firehose, each replica publishing as a broker user of its own)"
		}
		out = append(out, line+" merged into the history, and from the final rows")
		switch {
		case !observedClaims(h) && obs.Broker.Known:
			out = append(out, "duplicate-deliveries: no claim of a row was observed (a relay that holds row locks, or takes no lock, leaves no trace of its claims in the table); a replica held a row from its observed publish of it to its observed mark, and a second publish is explained by a crash, restart or fault of that replica then")
		case !observedClaims(h):
			out = append(out, "duplicate-deliveries: no claim of a row was observed (a relay that holds row locks, or takes no lock, leaves no trace of its claims in the table), and publishes are not observed; a duplicate delivery is explained by a requeue or a consumer fault, or, as a second publish, by a fault (not clock) that hit a relay while the event was in flight")
		}
	default:
		out = append(out,
			"fencing: the relays run outside the harness's process and record no claims or marks; lease-expiry judges fencing on the rows a paused replica held",
			"parking: attempts consumed during broker outages and the spacing of retries need relay retry records; the final rows are judged (poison parked within the attempt limit, healthy rows never parked)",
			"retention: no sweep records; the final rows are judged (no committed row gone within retention)",
			"duplicate-deliveries: publishes are not recorded; a duplicate delivery is explained by a requeue or a consumer fault, or, as a second publish, by a fault (not clock) that hit a relay while the event was in flight; which replica published it and why is not known",
		)
	}
	if r.mode == workload.Outbox && r.relay.Promises.Locking.Style == contract.LockingNone {
		out = append(out, "duplicate-deliveries: the relay declares that it takes no lock of a row (locking=none), so a row published by two of its replicas is explained by that declaration (unlocked)")
	}
	if r.mode == workload.Outbox && r.relay.Promises.Deletes {
		out = append(out, "retention: the relay declares that it deletes a row once published (deletes): its observed deletes of pending rows are its marks, and whether each event got out is judged by lost")
	}
	for _, res := range rep.Results {
		if res.Skipped {
			out = append(out, res.Checker+": skipped, "+res.Detail)
		}
	}
	return out
}

// verdict runs the checkers and the scenario's own checks and fills the
// result.
func (r *run) verdict(ctx context.Context, st checker.State, drain time.Duration, steps []chaos.Step) Result {
	res := r.baseResult()
	h, recs, obs, observedOps := r.history(ctx)
	res.History, res.Records, res.Observed, res.ObservedOps = h, recs, obs, observedOps
	if recs.Known && obs.Known {
		res.Observed.Disagreements = compareObserved(h, observedOps, r.tapAway)
	}
	cfg := r.checkerConfig()
	rep := checker.Check(h, st, cfg)
	res.Report, res.Counts = rep, rep.Counts
	res.DrainTime = drain
	res.Unchecked = r.unchecked(rep, obs, h)
	res.Problems = append(res.Problems, r.problems...)
	for _, f := range rep.Failed() {
		line := fmt.Sprintf("%s: %s", f.Checker, f.Detail)
		if len(f.Offending) > 0 {
			line += fmt.Sprintf(" (first %s: %s)", f.Offending[0], f.Reasons[f.Offending[0]])
		}
		res.Problems = append(res.Problems, line)
	}
	if r.usage != nil {
		res.Footprint = r.measureFootprint(ctx, h)
		res.Problems = append(res.Problems, footprint.Judge(*res.Footprint, r.relay.Promises.Budgets)...)
		res.Unchecked = append(res.Unchecked, r.usage.notes()...)
	}

	// Every fault of the plan must have fired.
	planned := map[string]bool{}
	for _, s := range steps {
		planned[s.Fault] = true
	}
	unbitten := map[string]bool{}
	for _, nb := range r.noBite {
		unbitten[nb.Fault] = true
		res.Inconclusive = append(res.Inconclusive, nb.Error())
	}
	for _, f := range r.nemesis.Faults() {
		res.Faults = append(res.Faults, FaultHits{Name: f.Name(), Class: string(f.Class()), Hits: f.Hits()})
		if planned[f.Name()] && f.Hits() == 0 && !unbitten[f.Name()] {
			res.Problems = append(res.Problems, fmt.Sprintf("fault %s never fired", f.Name()))
		}
	}
	wl := r.workloadHits(h)
	for _, name := range []string{WorkloadPoison, WorkloadHeld, WorkloadProducerCrash} {
		if n := wl[name]; n > 0 || slices.Contains(r.sc.WorkloadFaults, name) {
			res.Faults = append(res.Faults, FaultHits{Name: name, Class: "workload", Hits: int64(n)})
		}
	}
	for _, name := range r.sc.WorkloadFaults {
		if wl[name] == 0 {
			res.Problems = append(res.Problems, fmt.Sprintf("fault %s never fired", name))
		}
	}
	if r.sc.Check != nil {
		r.sc.Check(ctx, runStage{r}, &res)
	}
	res.Valid = rep.Valid && len(res.Problems) == 0 && len(res.Inconclusive) == 0
	return res
}

// workloadHits counts the workload's own faults in the history: poison
// events that committed, held transactions that committed after a
// transaction begun later, and producer crashes.
func (r *run) workloadHits(h []history.Op) map[string]int {
	out := map[string]int{}
	held := map[string]bool{}
	for _, txns := range r.plan.Txns {
		for _, t := range txns {
			if t.Hold > 0 && len(t.Events) > 0 {
				held[t.Events[0].ID.String()] = true
			}
		}
	}
	type commit struct{ invoke, ok int64 }
	var commits []commit
	var heldCommits []commit
	for _, p := range history.Pairs(h) {
		if p.Invoke == nil || p.Invoke.F != history.Commit || p.Done == nil || p.Done.Type != history.OK {
			continue
		}
		c := commit{p.Invoke.Index, p.Done.Index}
		commits = append(commits, c)
		if len(p.Invoke.Events) > 0 && held[p.Invoke.Events[0]] {
			heldCommits = append(heldCommits, c)
		}
		if !strings.HasPrefix(p.Invoke.Process, "producer-") {
			continue
		}
		for _, id := range p.Invoke.Events {
			if r.plan.Poison[id] {
				out[WorkloadPoison]++
			}
		}
	}
	for _, hc := range heldCommits {
		for _, c := range commits {
			if c.invoke > hc.invoke && c.ok < hc.ok {
				out[WorkloadHeld]++
				break
			}
		}
	}
	for _, op := range h {
		if op.F == history.Crash && strings.HasPrefix(op.Process, "producer-") {
			out[WorkloadProducerCrash]++
		}
	}
	return out
}

// observedClaims reports whether h has a claim of a relay.
func observedClaims(h []history.Op) bool {
	return slices.ContainsFunc(h, func(op history.Op) bool { return op.F == history.Claim && op.Type == history.OK })
}
