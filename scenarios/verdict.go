package scenarios

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/outboxlab/outboxlab/workload"

	"github.com/outboxlab/outboxlab/chaos"
	"github.com/outboxlab/outboxlab/checker"
	"github.com/outboxlab/outboxlab/history"
	"github.com/outboxlab/outboxlab/relay"
)

// readState reads the final state: the outbox rows, the effects, and what
// was left in the queues.
func (r *run) readState(ctx context.Context, queued []string) (checker.State, error) {
	return r.fx.State(ctx, queued, r.mode == workload.Outbox)
}

// checkerConfig states what the run promises.
func (r *run) checkerConfig() checker.Config {
	cfg := checker.Config{
		Retention:     relay.DefaultRetention,
		MaxAttempts:   MaxAttempts,
		LivenessBound: DrainWithin,
		Lease:         r.relay.Lease,
	}
	if d, err := time.ParseDuration(r.setting("OUTBOX_RETENTION")); err == nil && d > 0 {
		cfg.Retention = d
	}
	if n, err := strconv.Atoi(r.setting("OUTBOX_MAX_ATTEMPTS")); err == nil && n > 0 {
		cfg.MaxAttempts = n
	}
	if r.mode == workload.Outbox {
		cfg.Features = r.relay.Features
		cfg.Features.Stages = true
		cfg.Poison = maps.Clone(r.plan.Poison)
	}
	return cfg
}

// unchecked says what the checkers cannot judge without relay records.
func (r *run) unchecked(rep checker.Report) []string {
	var out []string
	if r.mode == workload.Outbox {
		out = append(out,
			"fencing: the relays run outside the harness's process and record no claims or marks; lease-expiry judges fencing on the rows a paused replica held",
			"parking: attempts consumed during broker outages and the spacing of retries need relay retry records; the final rows are judged (poison parked within the attempt limit, healthy rows never parked)",
			"retention: no sweep records; the final rows are judged (no committed row gone within retention)",
			"duplicate-deliveries: publishes are not recorded; duplicates are judged at delivery, each event's journey starting at its commit",
		)
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
	h := r.rec.Ops()
	res.History = h
	cfg := r.checkerConfig()
	rep := checker.Check(h, st, cfg)
	res.Report, res.Counts = rep, rep.Counts
	res.DrainTime = drain
	res.Unchecked = r.unchecked(rep)
	res.RelayLog = r.relayLog(ctx)
	res.Problems = append(res.Problems, r.problems...)
	for _, f := range rep.Failed() {
		line := fmt.Sprintf("%s: %s", f.Checker, f.Detail)
		if len(f.Offending) > 0 {
			line += fmt.Sprintf(" (first %s: %s)", f.Offending[0], f.Reasons[f.Offending[0]])
		}
		res.Problems = append(res.Problems, line)
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
	if r.sc.check != nil {
		r.sc.check(ctx, runStage{r}, &res)
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

// relayLog sums up the replicas' logs.
func (r *run) relayLog(ctx context.Context) RelayLog {
	var out RelayLog
	for _, bc := range r.contexts {
		for _, s := range bc.relays {
			l := parseRelayLog(s.logs(ctx))
			out.Known = out.Known || l.Known
			out.LostLeases += l.LostLeases
			out.Parked += l.Parked
			out.TickFailures += l.TickFailures
		}
	}
	return out
}

// parseRelayLog reads the JSON log lines of ./cmd/relay: "lease lost"
// lines (with the number of rows lost when the relay says), parked rows
// and failed ticks. Other lines are ignored.
func parseRelayLog(logs string) RelayLog {
	var out RelayLog
	sc := bufio.NewScanner(strings.NewReader(logs))
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if !strings.HasPrefix(line, "{") {
			continue
		}
		var rec struct {
			Msg     string          `json:"msg"`
			RelayID string          `json:"relay_id"`
			Lost    json.RawMessage `json:"lost"`
		}
		if json.Unmarshal([]byte(line), &rec) != nil || rec.Msg == "" || rec.RelayID == "" {
			continue
		}
		out.Known = true
		switch {
		case strings.HasPrefix(rec.Msg, "lease lost before mark"):
			n, err := strconv.Atoi(string(rec.Lost))
			if err != nil || n < 1 {
				n = 1
			}
			out.LostLeases += n
		case rec.Msg == "lease lost":
			out.LostLeases++
		case strings.HasPrefix(rec.Msg, "row parked"):
			out.Parked++
		case rec.Msg == "tick failed":
			out.TickFailures++
		}
	}
	return out
}
