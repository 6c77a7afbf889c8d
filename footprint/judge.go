package footprint

import (
	"fmt"
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
	if b.ProducerP99 > 0 && p.Unjudged == "" && p.Control.P99 > 0 &&
		float64(p.Run.P99) > b.ProducerP99*float64(p.Control.P99) && p.Run.P99-p.Control.P99 > contract.ProducerMargin {
		why := ""
		if p.LockWaitSamples > 0 {
			why = fmt.Sprintf("; the producers' sessions waited for locks in %d samples (about %s)", p.LockWaitSamples, p.LockWait.Round(time.Millisecond))
		}
		out = append(out, fmt.Sprintf("producer budget: the producers' transactions took %s at the 99th percentile (%d committed) while the relay ran, against %s in the control phase without it (%d committed), %.1f times as long, over its budget of %s=%gx%s",
			p.Run.P99.Round(time.Millisecond), p.Run.Count, p.Control.P99.Round(time.Millisecond), p.Control.Count, p.Ratio, contract.CapProducerP99, b.ProducerP99, why))
	}
	for _, o := range f.Outages {
		where := fmt.Sprintf("%s (%s down %s, until %s after the heal)", strings.Join(o.Faults, ", "), o.Class,
			o.To.Sub(o.From).Round(time.Millisecond), contract.OutageAfter)
		for _, r := range o.Replicas {
			over := func(v *float64, limit float64, what, capName, unit string) {
				if limit > 0 && v != nil && *v > limit {
					out = append(out, fmt.Sprintf("outage budget: %s %s %.2f%s over %s, over its budget of %s=%g", r.Replica, what, *v, unit, where, capName, limit))
				}
			}
			over(r.CPU, b.OutageCPU, "used", contract.CapOutageCPU, " cores")
			over(r.Logs, b.OutageLogs, "wrote", contract.CapOutageLogs, " lines of output a second")
			over(r.Statements, b.OutageStatements, "ran", contract.CapOutageStatements, " statements a second")
			over(r.Connects, b.OutageConnects, "opened", contract.CapOutageConnects, " TCP connections a second")
			switch {
			case b.Resume <= 0:
			case r.Never:
				out = append(out, fmt.Sprintf("outage budget: %s published nothing after %s healed at %s, while another replica did, over its budget of %s=%s",
					r.Replica, strings.Join(o.Faults, ", "), o.To.UTC().Format("15:04:05.000"), contract.CapResume, b.Resume))
			case r.Resume != nil && *r.Resume > b.Resume:
				out = append(out, fmt.Sprintf("outage budget: %s first published %s after %s healed, over its budget of %s=%s",
					r.Replica, r.Resume.Round(time.Millisecond), strings.Join(o.Faults, ", "), contract.CapResume, b.Resume))
			}
		}
	}
	return out
}

// Summary renders f in a few lines for people: the producers' p99 with
// the relay against the control, and each outage's figures per replica.
func Summary(f Footprint) []string {
	p := f.Producers
	line := fmt.Sprintf("producers: p99 %s with the relay (%d committed), %s in the control phase (%d)",
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
			num(r.Connects, "conns %.1f/s")
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
