package footprint

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/outboxlab/outboxlab/contract"
)

// Judge holds f to the budgets b declares and returns one problem per
// budget exceeded, with its evidence; a budget b does not declare is not
// judged, and neither is a figure that was not measured.
func Judge(f Footprint, b contract.Budgets) []string {
	var out []string
	p := f.Producers
	if b.ProducerP99 > 0 && OverProducerBudget(p, b.ProducerP99) {
		out = append(out, fmt.Sprintf("producer budget: the producers' transactions took %s at the 99th percentile (%d transactions) while the relay ran, against %s in the control phase without it (%d), %.1f times as long, over its budget of %s=%gx; %s",
			p.Run.P99.Round(time.Millisecond), p.Run.Count, p.Control.P99.Round(time.Millisecond), p.Control.Count, p.Ratio, contract.CapProducerP99, b.ProducerP99, waits(p)))
	}
	for _, o := range f.Outages {
		where := fmt.Sprintf("%s (%s down %s, until %s after the heal)", strings.Join(o.Faults, ", "), o.Class,
			o.To.Sub(o.From).Round(time.Millisecond), contract.OutageAfter)
		if b.Resume > 0 && o.Resume != nil && *o.Resume > b.Resume {
			out = append(out, fmt.Sprintf("outage budget: no replica published until %s after %s healed, over its budget of %s=%s",
				o.Resume.Round(time.Millisecond), strings.Join(o.Faults, ", "), contract.CapResume, b.Resume))
		}
		for _, r := range o.Replicas {
			over := func(v *float64, limit float64, what, capName, unit string) {
				if limit > 0 && v != nil && *v > limit {
					out = append(out, fmt.Sprintf("outage budget: %s %s %.2f%s over %s, over its budget of %s=%g", r.Replica, what, *v, unit, where, capName, limit))
				}
			}
			over(r.CPU, b.OutageCPU, "used", contract.CapOutageCPU, " cores")
			over(r.Logs, b.OutageLogs, "wrote", contract.CapOutageLogs, " lines of output a second")
			over(r.Statements, b.OutageStatements, "ran", contract.CapOutageStatements, " statements a second")
			if len(r.ConnectsTo) > 0 {
				for _, service := range slices.Sorted(maps.Keys(r.ConnectsTo)) {
					v := r.ConnectsTo[service]
					over(&v, b.OutageConnects, "sent", contract.CapOutageConnects, " TCP connection attempts a second to the "+service)
				}
			} else {
				over(r.Connects, b.OutageConnects, "opened", contract.CapOutageConnects, " TCP connections a second")
			}
			if b.Resume > 0 && r.Never && r.OthersUntil > b.Resume {
				out = append(out, fmt.Sprintf("outage budget: %s published nothing after %s healed at %s, while another replica went on publishing for %s, over its budget of %s=%s",
					r.Replica, strings.Join(o.Faults, ", "), o.To.UTC().Format("15:04:05.000"), r.OthersUntil.Round(time.Millisecond), contract.CapResume, b.Resume))
			}
		}
	}
	return out
}

// OverProducerBudget reports whether the producers' p99 exceeds factor
// times the control's, by more than contract.ProducerMargin, with the
// database showing that they waited on the relay (Producers.Waited): a
// slowdown without a lock wait or an abort is the machine's (the
// harness's faults restarting containers, say), and not the relay's to
// answer for.
func OverProducerBudget(p Producers, factor float64) bool {
	return p.Unjudged == "" && p.Control.P99 > 0 && p.Waited() &&
		float64(p.Run.P99) > factor*float64(p.Control.P99) && p.Run.P99-p.Control.P99 > contract.ProducerMargin
}

// waits renders what the database showed of the producers' waits.
func waits(p Producers) string {
	var parts []string
	if p.LockWaitSamples > 0 {
		parts = append(parts, fmt.Sprintf("their sessions waited for locks in %d samples (about %s)", p.LockWaitSamples, p.LockWait.Round(time.Millisecond)))
	}
	if p.SerializationFailures > 0 {
		parts = append(parts, fmt.Sprintf("%d were aborted by serialization failures", p.SerializationFailures))
	}
	if p.Deadlocks > 0 {
		parts = append(parts, fmt.Sprintf("%d by deadlocks", p.Deadlocks))
	}
	return strings.Join(parts, ", ")
}

// Summary renders f in a few lines for people: the producers' p99 with
// the relay against the control, and each outage's figures per replica.
func Summary(f Footprint) []string {
	p := f.Producers
	line := fmt.Sprintf("producers: p99 %s with the relay (%d transactions), %s in the control phase (%d)",
		p.Run.P99.Round(time.Millisecond), p.Run.Count, p.Control.P99.Round(time.Millisecond), p.Control.Count)
	if p.Ratio > 0 {
		line += fmt.Sprintf(", %.1f×", p.Ratio)
	}
	if p.LockWaitSamples > 0 {
		line += fmt.Sprintf("; lock waits in %d samples", p.LockWaitSamples)
	}
	if p.SerializationFailures+p.Deadlocks > 0 {
		line += fmt.Sprintf("; %d serialization failures, %d deadlocks", p.SerializationFailures, p.Deadlocks)
	}
	out := []string{line}
	for _, o := range f.Outages {
		var parts []string
		for _, r := range o.Replicas {
			s := r.Replica + ":"
			num := func(v *float64, format string) {
				if v != nil {
					s += " " + fmt.Sprintf(format, *v)
				}
			}
			num(r.CPU, "cpu %.2f")
			num(r.Logs, "logs %.1f/s")
			num(r.Statements, "stmts %.1f/s")
			if len(r.ConnectsTo) > 0 {
				for _, service := range slices.Sorted(maps.Keys(r.ConnectsTo)) {
					s += fmt.Sprintf(" conns to %s %.1f/s", service, r.ConnectsTo[service])
				}
			} else {
				num(r.Connects, "conns %.1f/s")
			}
			switch {
			case r.Resume != nil:
				s += " resumed " + r.Resume.Round(time.Millisecond).String()
			case r.Never:
				s += " never resumed"
			}
			parts = append(parts, s)
		}
		out = append(out, fmt.Sprintf("outage %s (%s, %s): %s", strings.Join(o.Faults, ", "), o.Class, o.To.Sub(o.From).Round(time.Millisecond), strings.Join(parts, "; ")))
	}
	return out
}
