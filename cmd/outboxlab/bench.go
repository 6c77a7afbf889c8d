package main

import (
	"context"
	"flag"
	"fmt"
	"math"
	"path/filepath"
	"time"

	"github.com/outboxlab/outboxlab/internal/bench"
	"github.com/outboxlab/outboxlab/internal/bench/result"
	"github.com/outboxlab/outboxlab/internal/report"
	"github.com/outboxlab/outboxlab/relay"
	"github.com/outboxlab/outboxlab/testenv"
)

// benchOnContainers runs the benchmark on a fresh environment.
func benchOnContainers(ctx context.Context, opts bench.Options, status func(string)) (result.Result, error) {
	eopts := testenv.Options{Logf: func(format string, args ...any) { status("environment: " + fmt.Sprintf(format, args...)) }}
	status("environment: starting PostgreSQL, RabbitMQ and toxiproxy")
	env, err := testenv.Start(ctx, eopts)
	if err != nil {
		return result.Result{}, fmt.Errorf("starting the environment: %w", err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), closeTimeout)
		defer cancel()
		_ = env.Close(cctx)
	}()
	return bench.Run(ctx, env, opts)
}

func benchVerb() verb {
	return verb{
		name:    "bench",
		summary: "measure the relay's throughput and latency on containers",
		args:    "[--events N] [--batch N] [--window N] [--duration D] [--latency-rate R] [--producers N] [--seed S] [--isolate-broker] [--skip-watermill] [--skip-latency] [--json] [--out DIR]",
		about: `Measures this repository's relay on real PostgreSQL and RabbitMQ containers
(built by ` + "`make images`" + `; a Docker engine is needed), with no fault injected:
the rate at which one and two replicas drain a backlog of --events staged
events, side by side with amqp091 publishing the same messages straight from
memory (the broker's limit) and with watermill's SQL forwarder; then the
latency from COMMIT to the broker's confirm and to the consumer, at half
the measured capacity (or --latency-rate events/s) for --duration, from
--producers connections, polling and with LISTEN/NOTIFY, beside
its floors: the broker alone at that rate, and the same commits with no
relay, each event published as its COMMIT returns (inline). Every contender
reaches the containers at their own addresses where the host can (no port
proxy). --isolate-broker confines RabbitMQ to the first core and
PostgreSQL and this process to the others, as on separate machines, so
that the relay is measured against the broker's limit rather than against
its share of the cores (the default layout shares every core). A
drain that loses or duplicates a message fails the run (exit 1). --batch
and --window set the relay's batch size and publish window (the raw
publisher uses the same window), so that a change of either can be
measured against the defaults. --json
prints the summary as one JSON object; --out DIR writes bench.json, the
tables REPORT.md shows.`,
		define: func(fs *flag.FlagSet) func(context.Context, *stdio, deps) int {
			o := &benchOptions{}
			fs.IntVar(&o.events, "events", bench.DefaultEvents, "the backlog each drain starts from (`N` events)")
			fs.IntVar(&o.batch, "batch", relay.DefaultBatchSize, "the relay's batch size (`N` rows per claim)")
			fs.IntVar(&o.window, "window", relay.DefaultPublishWindow, "the publish window: at most `N` publishes awaiting confirms")
			fs.DurationVar(&o.duration, "duration", bench.DefaultLatencyDuration, "how long each latency run sends")
			fs.Float64Var(&o.latencyRate, "latency-rate", 0, "schedule the latency runs at `R` events/s (default half the one-replica drain rate)")
			fs.IntVar(&o.producers, "producers", bench.DefaultProducers, "how many connections stage events in the latency runs (`N`)")
			fs.Var(&o.seed, "seed", "the `seed` of the payloads and ids (default 1)")
			fs.BoolVar(&o.isolateBroker, "isolate-broker", false, "give RabbitMQ the first core, PostgreSQL and the relay the others")
			fs.BoolVar(&o.skipWatermill, "skip-watermill", false, "leave out the watermill forwarder")
			fs.BoolVar(&o.skipLatency, "skip-latency", false, "leave out the latency runs")
			fs.BoolVar(&o.json, "json", false, "print the summary as JSON")
			fs.StringVar(&o.out, "out", "", "write bench.json to `DIR`")
			return o.run
		},
	}
}

type benchOptions struct {
	events        int
	batch         int
	window        int
	duration      time.Duration
	latencyRate   float64
	producers     int
	seed          seedFlag
	skipWatermill bool
	skipLatency   bool
	isolateBroker bool
	json          bool
	out           string
}

func (o *benchOptions) run(ctx context.Context, std *stdio, d deps) int {
	if o.events < 1 {
		return usageErr(std, "bench", "--events must be at least 1, not %d", o.events)
	}
	if o.duration <= 0 {
		return usageErr(std, "bench", "--duration must be positive")
	}
	if o.latencyRate < 0 || math.IsNaN(o.latencyRate) || math.IsInf(o.latencyRate, 0) {
		return usageErr(std, "bench", "--latency-rate must be a positive number of events per second, not %v", o.latencyRate)
	}
	if o.producers < 1 {
		return usageErr(std, "bench", "--producers must be at least 1, not %d", o.producers)
	}
	if o.batch < 1 || o.window < 1 {
		return usageErr(std, "bench", "--batch and --window must be at least 1, not %d and %d", o.batch, o.window)
	}
	opts := bench.Options{
		Events: o.events, LatencyDuration: o.duration, LatencyRate: o.latencyRate, Producers: o.producers, Seed: 1,
		Relay:         relay.Config{BatchSize: o.batch, PublishWindow: o.window},
		SkipWatermill: o.skipWatermill, SkipLatency: o.skipLatency, IsolateBroker: o.isolateBroker,
	}
	if o.seed.set {
		opts.Seed = o.seed.v
	}
	if err := opts.Validate(); err != nil {
		return usageErr(std, "bench", "%v", err)
	}
	if o.out != "" {
		if err := checkOutDir(o.out); err != nil {
			return unavailable(std, "bench", "--out %s: %v", o.out, err)
		}
	}
	if code := d.needDocker(ctx, std, "bench"); code != exitOK {
		return code
	}
	start := std.now()
	w := std.out
	if o.json {
		w = std.err
	}
	fmt.Fprintf(w, "SEED=%d events=%d\n", opts.Seed, opts.Events)
	pr := newProgress(std, false)
	opts.Logf = func(format string, args ...any) { pr.Update(fmt.Sprintf(format, args...)) }
	res, err := d.bench(ctx, opts, func(line string) { pr.Update(line) })
	pr.Clear()
	if ctx.Err() != nil {
		// A drain cut short is no failure of the relay.
		return interrupted(std, ctx, "bench", "the benchmark did not finish, no figures")
	}
	if err != nil {
		if code := environmentErr(std, "bench", err); code != 0 {
			return code
		}
		fmt.Fprintf(std.err, "outboxlab bench: FAIL: %v\n", err)
		return exitFail
	}
	if o.json {
		if err := res.WriteJSON(std.out, false); err != nil {
			return unavailable(std, "bench", "writing the summary: %v", err)
		}
	} else if err := res.WriteTable(std.out); err != nil {
		return unavailable(std, "bench", "writing the tables: %v", err)
	}
	if o.out != "" {
		if err := report.WriteFile(o.out, report.FileBench, benchFile(report.CollectMeta(ctx, start), res)); err != nil {
			return unavailable(std, "bench", "%v", err)
		}
		fmt.Fprintf(w, "results: %s\n", filepath.Join(o.out, report.FileBench))
	}
	return exitOK
}

// benchFile turns a benchmark result into the tables of bench.json.
func benchFile(meta report.Meta, r result.Result) report.BenchFile {
	f := report.BenchFile{Meta: meta, Notes: r.Notes, Result: &r}
	lim := r.Limits()
	tp := report.Table{
		Title: fmt.Sprintf("Throughput: draining %d events (batch %d, publish window %d, payload ~%d B; layout %s: %s; servers reached at %s)",
			r.Events, r.Config.BatchSize, r.Config.PublishWindow, r.Config.PayloadBytes, r.Config.Layout, layoutText(r.Config.Layout), r.Config.Addressing),
		Columns: []string{"contender", "msgs/s", "seconds", "vs raw", "complete", "CPU s (process / PostgreSQL / RabbitMQ)"},
	}
	for _, ph := range r.Phases {
		vs := "-"
		if r.RawMsgsPerSec > 0 {
			vs = fmt.Sprintf("%.2f", ph.MsgsPerSec/r.RawMsgsPerSec)
		}
		tp.Rows = append(tp.Rows, []string{ph.Name, fmt.Sprintf("%.0f", ph.MsgsPerSec), fmt.Sprintf("%.2f", ph.Seconds), vs,
			yesNo(ph.Complete), fmt.Sprintf("%.1f / %.1f / %.1f", ph.CPU.ProcessSeconds, ph.CPU.PostgresSeconds, ph.CPU.RabbitMQSeconds)})
	}
	f.Tables = append(f.Tables, tp)
	if len(r.Latency) > 0 {
		lt := report.Table{
			Title: fmt.Sprintf("Latency at %s (%d events at %.0f/s per mode from %d producers after a %s warm-up, one replica), in ms",
				r.LatencyRateText(), r.Config.LatencyEvents, r.Config.LatencyRate, r.Config.Producers, time.Duration(r.Config.LatencyWarmupMs*1e6)),
			Columns: []string{"mode", "rate/s", "confirm p50", "confirm p99", "confirm max", "delivery p50", "delivery p99", "delivery max", "duplicates"},
		}
		for _, l := range r.Latency {
			lt.Rows = append(lt.Rows, []string{l.Mode, fmt.Sprintf("%.0f", l.Rate),
				fmt.Sprintf("%.1f", l.Confirm.P50), fmt.Sprintf("%.1f", l.Confirm.P99), fmt.Sprintf("%.1f", l.Confirm.Max),
				fmt.Sprintf("%.1f", l.Delivery.P50), fmt.Sprintf("%.1f", l.Delivery.P99), fmt.Sprintf("%.1f", l.Delivery.Max),
				fmt.Sprint(l.Duplicates)})
		}
		f.Tables = append(f.Tables, lt)
	}
	tt := report.Table{
		Title:   "Targets (ratios within this run)",
		Columns: []string{"figure", "measured", "goal", "met"},
	}
	for _, t := range r.Targets() {
		op, met := ">=", "no"
		if t.AtMost {
			op = "<="
		}
		switch {
		case !t.Ran:
			met = "not run"
		case t.Met:
			met = "yes"
		}
		tt.Rows = append(tt.Rows, []string{t.Figure, fmt.Sprintf("%.2f", t.Measured), fmt.Sprintf("%s %g", op, t.Goal), met})
	}
	if r.LatencyInlineP99Ms > 0 {
		tt.Rows = append(tt.Rows,
			[]string{"NOTIFY p99 / inline p99 (no relay: each event published as its COMMIT returns), commit -> confirm",
				fmt.Sprintf("%.2f", r.NotifyOverInlineP99()), "no goal: what the relay adds to the floor", "-"},
			[]string{"inline p99 / broker-alone p99, commit -> confirm with no relay at all",
				fmt.Sprintf("%.2f", r.InlineOverBrokerP99()), fmt.Sprintf("no goal: above %g, no relay meets the NOTIFY goal here", bench.GoalNotifyOverBroker), "-"})
	}
	if lim.Raw2RatioToRaw > 0 {
		tt.Rows = append(tt.Rows, []string{"raw over two connections / raw, msgs/s: relay-2 / raw of a two-replica relay as fast as publishing from memory",
			fmt.Sprintf("%.2f", lim.Raw2RatioToRaw),
			fmt.Sprintf("no goal: below %g, no two-replica relay through this broker meets the relay-2 goal here", bench.GoalRatio2ToRaw), "-"})
	}
	if r.LatencyKeyedP99Ms > 0 {
		tt.Rows = append(tt.Rows,
			[]string{"NOTIFY p99 / keyed lease p99 (no relay: each row leased by its key after its NOTIFY, then published), commit -> confirm",
				fmt.Sprintf("%.2f", r.NotifyOverKeyedP99()), "no goal: how far the relay is from a relay that leases after the NOTIFY and does nothing else", "-"},
			[]string{"keyed lease p99 / broker-alone p99, commit -> confirm",
				fmt.Sprintf("%.2f", r.KeyedOverBrokerP99()), fmt.Sprintf("no goal: above %g, no relay that leases a row after its NOTIFY meets the NOTIFY goal here, unless the relay's p99 was below the keyed lease's (then the lease queued: no floor)", bench.GoalNotifyOverBroker), "-"})
	}
	if r.RawOverWatermill() > 0 {
		tt.Rows = append(tt.Rows, []string{"raw / watermill, msgs/s: relay-1 / watermill of a relay as fast as publishing from memory",
			fmt.Sprintf("%.2f", r.RawOverWatermill()),
			fmt.Sprintf("no goal: below %g, no relay through this broker meets the watermill goal here", bench.GoalRatioToWatermill), "-"})
	}
	if r.ClaimCallOverBrokerP99() > 0 {
		tt.Rows = append(tt.Rows, []string{"claim statement p99 (the notify run's, per event) / broker-alone p99: a part of every event's commit -> confirm",
			fmt.Sprintf("%.2f", r.ClaimCallOverBrokerP99()),
			fmt.Sprintf("no goal: above %g, no relay that leases a row with claims as long before it publishes it meets the NOTIFY goal here", bench.GoalNotifyOverBroker), "-"})
	}
	if r.NotifyRelayStatementMeanMs > 0 && r.NotifyRelayStatementCPUWaitMs > 0 {
		tt.Rows = append(tt.Rows, []string{fmt.Sprintf("the notify run's claims and marks (%.2f ms mean): share of it their PostgreSQL processes waited for a core (%.2f of the cores busy)",
			r.NotifyRelayStatementMeanMs, r.NotifyBusyCores),
			fmt.Sprintf("%.2f", r.StatementWaitShare()),
			"no goal: near 1, the cores the run shares, not the statements' own work, set their time", "-"})
	}
	if lim.CPUCeilingRatioToRaw > 0 && lim.CoresBound {
		tt.Rows = append(tt.Rows,
			[]string{"CPU ceiling of relay-1 / raw: raw's CPU per message / relay-1's (the cores bound every phase)", fmt.Sprintf("%.2f", lim.CPUCeilingRatioToRaw),
				"no goal: the ratio the cores allow relay-1", "-"},
			[]string{"CPU per message, relay + PostgreSQL, us: the budget of a CPU ceiling at the relay-1 goal",
				fmt.Sprintf("%.1f", lim.CPUBudgetRelayPlusDB), fmt.Sprintf("no goal: measured %.1f us", r.CPUMicrosPerMsgRelayPlusDB), "-"})
	}
	if lim.BrokerBusyRatio > 0 {
		tt.Rows = append(tt.Rows,
			[]string{"RabbitMQ's busy cores in raw", fmt.Sprintf("%.2f", lim.BrokerBusyRaw), "no goal: about 1 with cores idle, the broker is the limit", "-"},
			[]string{"relay-1 / raw, factor 1: RabbitMQ's busy cores, relay-1 / raw", fmt.Sprintf("%.2f", lim.BrokerBusyRatio),
				"no goal: how fully relay-1 kept the broker busy", "-"},
			[]string{"relay-1 / raw, factor 2: RabbitMQ's CPU per message, raw / relay-1", fmt.Sprintf("%.2f", lim.BrokerCostRatio),
				"no goal: the broker's work per message of relay-1 against raw's", "-"})
	}
	if lim.RawSelfRatio > 0 {
		tt.Rows = append(tt.Rows, []string{"raw's slower phase / its faster, msgs/s: raw publishing itself against the broker's limit",
			fmt.Sprintf("%.2f", lim.RawSelfRatio),
			fmt.Sprintf("no goal: the broker's own noise from one phase to the next; below %g or %g, raw itself missed the relay-1 or relay-2 goal", bench.GoalRatioToRaw, bench.GoalRatio2ToRaw), "-"})
	}
	if lim.Broker2BusyRatio > 0 {
		tt.Rows = append(tt.Rows,
			[]string{"relay-2 / raw, factor 1: RabbitMQ's busy cores, relay-2 / raw", fmt.Sprintf("%.2f", lim.Broker2BusyRatio),
				"no goal: how fully the two replicas kept the broker busy", "-"},
			[]string{"relay-2 / raw, factor 2: RabbitMQ's CPU per message, raw / relay-2", fmt.Sprintf("%.2f", lim.Broker2CostRatio),
				"no goal: the broker's work per message of relay-2 against raw's", "-"})
	}
	if r.CPUMicrosPerMsgBroker > 0 && r.CPUMicrosPerMsgRawProcess > 0 {
		tt.Rows = append(tt.Rows, []string{"CPU per message, raw's process (amqp091 publishing alone) / RabbitMQ",
			fmt.Sprintf("%.2f", r.CPURawProcessOverBroker()), "no goal: the part of the CPU goal's budget publishing alone takes", "-"})
	}
	f.Tables = append(f.Tables, tt)
	if len(r.Latency) > 0 {
		st := report.Table{
			Title:   "Latency stages: where commit -> confirm went, in ms (p50 / p99 of each stage)",
			Columns: []string{"mode", "commit -> claim", "of which the claim statement", "claim -> publish", "publish -> confirm"},
		}
		for _, l := range r.Latency {
			if g := l.Stages; g != nil {
				pp := func(p result.Percentiles) string { return fmt.Sprintf("%.1f / %.1f", p.P50, p.P99) }
				st.Rows = append(st.Rows, []string{l.Mode, pp(g.CommitToClaim), pp(g.ClaimCall), pp(g.ClaimToPublish), pp(g.PublishToConfirm)})
			}
		}
		if len(st.Rows) > 0 {
			f.Tables = append(f.Tables, st)
		}
	}
	ct := report.Table{
		Title: "Cores busy during each phase (CPU seconds per second; idle near 0: the cores were the limit)",
		Columns: []string{"phase", "this process", "PostgreSQL", "RabbitMQ", "other work", "idle", "cores", "disk busy", "flushes/s",
			"threads waiting for a core: this process / PostgreSQL / RabbitMQ"},
	}
	for _, ph := range r.Phases {
		if c := ph.Resources; c != nil {
			ct.Rows = append(ct.Rows, []string{ph.Name, fmt.Sprintf("%.2f", c.Process), fmt.Sprintf("%.2f", c.Postgres),
				fmt.Sprintf("%.2f", c.RabbitMQ), fmt.Sprintf("%.2f", c.Other), fmt.Sprintf("%.2f", c.Idle), fmt.Sprint(c.Cores),
				fmt.Sprintf("%.0f%%", 100*c.DiskBusy), fmt.Sprintf("%.0f", c.FlushesPerSec),
				fmt.Sprintf("%.2f / %.2f / %.2f", c.ProcessWaiting, c.PostgresWaiting, c.RabbitMQWaiting)})
		}
	}
	if len(ct.Rows) > 0 {
		f.Tables = append(f.Tables, ct)
	}
	if wt := schedTable(r.Latency); len(wt.Rows) > 0 {
		f.Tables = append(f.Tables, wt)
	}
	bt := report.Table{
		Title:   "Where the relay spent each drain (share of the replicas' wall time; claims and marks run beside the loop, so their shares overlap the rest)",
		Columns: []string{"drain", "claim", "claim mean ms", "mark", "mark mean ms", "publish", "confirm wait", "decode", "loop other", "window full", "lost leases"},
	}
	pct := func(x float64) string { return fmt.Sprintf("%.1f%%", 100*x) }
	for _, ph := range r.Phases {
		if b := ph.Breakdown; b != nil {
			bt.Rows = append(bt.Rows, []string{ph.Name, pct(b.Claim.ShareOfWall), fmt.Sprintf("%.2f", b.Claim.MeanMs),
				pct(b.Mark.ShareOfWall), fmt.Sprintf("%.2f", b.Mark.MeanMs), pct(b.Publish.ShareOfWall),
				pct(b.ConfirmWait.ShareOfWall), pct(b.Decode.ShareOfWall), pct(b.LoopOther), pct(b.WindowFill), fmt.Sprint(b.LostLeases)})
		}
	}
	if len(bt.Rows) > 0 {
		f.Tables = append(f.Tables, bt)
	}
	if p := r.Profile; p != nil && len(p.TopFlat) > 0 {
		pt := report.Table{
			Title:   fmt.Sprintf("CPU profile of the one-replica drain, this process (%.1f s sampled): functions with the most time of their own", p.SampledSeconds),
			Columns: []string{"function", "flat", "cum"},
		}
		for _, e := range p.TopFlat[:min(12, len(p.TopFlat))] {
			pt.Rows = append(pt.Rows, []string{e.Func, pct(e.FlatShare), pct(e.CumShare)})
		}
		f.Tables = append(f.Tables, pt)
	}
	if len(r.Hygiene) > 0 {
		ht := report.Table{
			Title:   "Outbox table hygiene (the one-replica table; claim uses the pending index: " + yesNo(r.ClaimUsesPendingIndex) + ")",
			Columns: []string{"moment", "live tuples", "dead tuples", "table bytes", "index bytes", "updates", "HOT updates"},
		}
		for _, h := range r.Hygiene {
			ht.Rows = append(ht.Rows, []string{h.Moment, fmt.Sprint(h.LiveTuples), fmt.Sprint(h.DeadTuples),
				fmt.Sprint(h.TableBytes), fmt.Sprint(h.IndexBytes), fmt.Sprint(h.Updates), fmt.Sprint(h.HOTUpdates)})
		}
		f.Tables = append(f.Tables, ht)
	}
	return f
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// layoutText says what a benchmark layout means, for the report.
func layoutText(layout string) string {
	if layout == result.LayoutIsolated {
		return "RabbitMQ alone on the first core, PostgreSQL and the relay on the others"
	}
	return "every process free to run on every core"
}

// schedTable is, for each latency run that read them, how long each group
// of threads ran on a core and waited for one.
func schedTable(runs []result.Latency) report.Table {
	groups := []string{"relay sessions", "relay listener", "producer sessions", "PostgreSQL", "RabbitMQ", "this process"}
	t := report.Table{
		Title:   "Latency runs: threads on a core / waiting for one, ms over each run (Linux schedstat); the relay's claims and marks: count, mean ms, of which waiting for a core",
		Columns: append(append([]string{"mode", "cores busy"}, groups...), "relay statements"),
	}
	for _, l := range runs {
		if len(l.Sched) == 0 {
			continue
		}
		byName := map[string]result.SchedGroup{}
		for _, g := range l.Sched {
			byName[g.Name] = g
		}
		row := []string{l.Mode, fmt.Sprintf("%.2f", l.BusyCores)}
		for _, name := range groups {
			g, ok := byName[name]
			if !ok {
				row = append(row, "-")
				continue
			}
			row = append(row, fmt.Sprintf("%.0f / %.0f", g.OnCPUMs, g.RunQueueMs))
		}
		st := "-"
		if l.RelayStatements > 0 {
			st = fmt.Sprintf("%d, %.2f, %.2f", l.RelayStatements, l.RelayStatementMeanMs, l.RelayStatementCPUWaitMs)
		}
		t.Rows = append(t.Rows, append(row, st))
	}
	return t
}
