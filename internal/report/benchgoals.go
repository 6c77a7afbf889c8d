package report

import (
	"fmt"
	"slices"
	"strings"

	"github.com/outboxlab/outboxlab/internal/bench/goal"
	"github.com/outboxlab/outboxlab/internal/bench/result"
)

// spread is a set of one figure's values over runs.
type spread []float64

// String is "min / median / max" of the values ("-" for none; the one
// value alone).
func (s spread) String() string {
	if len(s) == 0 {
		return "-"
	}
	v := slices.Clone(s)
	slices.Sort(v)
	if len(v) == 1 {
		return fmt.Sprintf("%.2f", v[0])
	}
	med := v[len(v)/2]
	if len(v)%2 == 0 {
		med = (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	return fmt.Sprintf("%.2f / %.2f / %.2f", v[0], med, v[len(v)-1])
}

// goalBounds are, for each goal in goal.Judge's order, the figures of a
// run that bound it: what it would take, on that machine, to meet it.
func goalBounds(r result.Result) [][]namedFigure {
	lim := r.Limits()
	self := func(bound float64) namedFigure {
		return namedFigure{name: "raw's slower phase / its faster (raw publishing itself)", value: lim.RawSelfRatio,
			missed: func(v float64) bool { return v < bound }, reach: fmt.Sprintf("below %g", bound), who: "raw itself missed the goal"}
	}
	return [][]namedFigure{
		{self(goal.RatioToRaw), {name: "RabbitMQ's busy cores, relay-1 / raw", value: lim.BrokerBusyRatio},
			{name: "its CPU per message, raw / relay-1", value: lim.BrokerCostRatio}},
		{self(goal.Ratio2ToRaw), {name: "raw over two connections / raw (a two-replica relay as fast as raw)", value: lim.Raw2RatioToRaw,
			missed: func(v float64) bool { return v < goal.Ratio2ToRaw }, reach: fmt.Sprintf("below %g", goal.Ratio2ToRaw), who: "out of reach of any two-replica relay"},
			{name: "RabbitMQ's busy cores, relay-2 / raw", value: lim.Broker2BusyRatio},
			{name: "its CPU per message, raw / relay-2", value: lim.Broker2CostRatio}},
		{{name: "inline p99 / broker p99 (the same commits, no relay)", value: r.InlineOverBrokerP99(),
			missed: func(v float64) bool { return v > goal.NotifyOverBroker }, reach: fmt.Sprintf("above %g", goal.NotifyOverBroker), who: "out of reach of any relay"},
			// The keyed lease is a floor only where the relay did not
			// beat it: where it did, the lease queued behind cores the
			// run saturated, and says nothing of what is in reach.
			{name: "keyed lease p99 / broker p99 (the same commits, each row leased by its key after its NOTIFY, then published: the three hops and nothing else)", value: r.KeyedOverBrokerP99(),
				missed: func(v float64) bool { return v > goal.NotifyOverBroker && r.NotifyOverKeyedP99() >= 1 },
				reach:  fmt.Sprintf("above %g, the relay's p99 not below it", goal.NotifyOverBroker),
				who:    "out of reach of a relay that leases after the NOTIFY"},
			{name: "NOTIFY p99 / keyed lease p99 (how far the relay is from that floor)", value: r.NotifyOverKeyedP99()},
			{name: "claim statement p99 / broker p99 (every event's commit -> confirm holds the claim that leased its row)", value: r.ClaimCallOverBrokerP99(),
				missed: func(v float64) bool { return v > goal.NotifyOverBroker }, reach: fmt.Sprintf("above %g", goal.NotifyOverBroker),
				who: "beyond a relay whose claims take as long"},
			{name: "share of the notify run's claims and marks spent waiting for a core", value: r.StatementWaitShare()}},
		{{name: "raw / watermill (a relay as fast as raw)", value: r.RawOverWatermill(),
			missed: func(v float64) bool { return v < goal.RatioToWatermill }, reach: fmt.Sprintf("below %g", goal.RatioToWatermill), who: "out of reach of any relay"}},
		nil,
	}
}

// namedFigure is one figure of a run with what it is. Where missed holds
// for its value, the goal it bounds was beyond what who names in that
// run (any relay, or raw publishing itself); reach says that condition
// ("below 10").
type namedFigure struct {
	name   string
	value  float64
	missed func(float64) bool
	reach  string
	who    string
}

// writeBenchGoals writes, per goal and layout, in how many runs the goal
// was met, the spread of its figure and of the figures that bound it:
// the verdict of the benchmark over every run, not the luck of one. Where
// the runs span commits, the same table follows over the runs at the
// commit of the newest run: what the relay as it stands met, apart from
// the runs of the code it replaced.
func writeBenchGoals(s *strings.Builder, runs []*BenchFile, intro string) {
	if !writeGoalsTable(s, runs, intro) {
		return
	}
	newest := runs[0]
	for _, f := range runs[1:] {
		if f.Meta.Date > newest.Meta.Date {
			newest = f
		}
	}
	var at []*BenchFile
	for _, f := range runs {
		if f.Meta.Commit == newest.Meta.Commit {
			at = append(at, f)
		}
	}
	if len(at) < len(runs) && newest.Meta.Commit != "" {
		writeGoalsTable(s, at, fmt.Sprintf("The same goals over the %d runs at commit %s, the newest run's", len(at), cell(newest.Meta.Commit)))
	}
}

// writeGoalsTable writes the goals' table over runs, introduced by
// intro; false when no goal ran in them.
func writeGoalsTable(s *strings.Builder, runs []*BenchFile, intro string) bool {
	type key struct {
		goal   int
		layout string
	}
	type cellOf struct {
		target  goal.Target
		runs    int
		met     int
		figures spread
		bounds  []spread
		// missed counts, per bound, the runs in which it was missed,
		// each judged with its own run's figures.
		missed []int
	}
	cells := map[key]*cellOf{}
	var layouts []string
	for _, f := range runs {
		r := f.result()
		layout := orValue(r.Config.Layout, "shared")
		if !slices.Contains(layouts, layout) {
			layouts = append(layouts, layout)
		}
		bounds := goalBounds(r)
		for i, t := range r.Targets() {
			if !t.Ran {
				continue
			}
			k := key{i, layout}
			c := cells[k]
			if c == nil {
				c = &cellOf{target: t, bounds: make([]spread, len(bounds[i])), missed: make([]int, len(bounds[i]))}
				cells[k] = c
			}
			c.runs++
			if t.Met {
				c.met++
			}
			c.figures = append(c.figures, t.Measured)
			for j, b := range bounds[i] {
				if b.value > 0 {
					c.bounds[j] = append(c.bounds[j], b.value)
					if b.missed != nil && b.missed(b.value) {
						c.missed[j]++
					}
				}
			}
		}
	}
	if len(cells) == 0 {
		return false
	}
	s.WriteString(intro + ": in how many runs each was met, the spread of its figure, and the spread of the figures that bound it (where raw / watermill is below the watermill goal, or inline / broker above the NOTIFY goal, no relay meets that goal in that run, whatever it does; where the keyed lease / broker is above it, no relay that leases a row after its NOTIFY and before it publishes it, as the design asks, meets it; where raw over two connections is below the relay-2 goal, no two-replica relay meets it; where raw's slower phase over its faster is below a goal on the ratio to raw, raw publishing itself, the same messages the same way, missed that goal against the broker's limit: the broker's own noise from one phase to the next).\n\n")
	s.WriteString("| goal | layout | met in | measured, min / median / max | what bounds it, min / median / max |\n")
	s.WriteString("|---|---|--:|--:|---|\n")
	// The names of the bounds, one list per goal in goal.Judge's order.
	names := goalBounds(result.Result{})
	for i := range names {
		for _, layout := range layouts {
			c := cells[key{i, layout}]
			if c == nil {
				continue
			}
			var parts []string
			for j, b := range c.bounds {
				if len(b) == 0 {
					continue
				}
				n := names[i][j]
				part := fmt.Sprintf("%s: %s", n.name, b)
				if n.missed != nil {
					part += fmt.Sprintf(" (%s, %s, in %d of %d runs)", n.reach, n.who, c.missed[j], len(b))
				}
				parts = append(parts, part)
			}
			bound := "-"
			if len(parts) > 0 {
				bound = strings.Join(parts, "; ")
			}
			fmt.Fprintf(s, "| %s %s | %s | %d of %d | %s | %s |\n", cell(c.target.Figure), c.target.Bound(), cell(layout), c.met, c.runs, c.figures, cell(bound))
		}
	}
	s.WriteString("\n")
	return true
}
