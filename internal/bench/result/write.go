package result

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/outboxlab/outboxlab/internal/bench/goal"
)

// WriteJSON writes the summary as one JSON object, or the whole result
// when full is true.
func (r Result) WriteJSON(w io.Writer, full bool) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if full {
		return enc.Encode(r)
	}
	return enc.Encode(r.Summary())
}

// WriteTable writes the result as the tables REPORT.md shows.
func (r Result) WriteTable(out io.Writer) error {
	lim := r.Limits()
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(out, "Throughput: draining %d events (batch %d, window %d, payload ~%d B; layout %s, servers reached at %s)\n\n",
		r.Events, r.Config.BatchSize, r.Config.PublishWindow, r.Config.PayloadBytes, orValue(r.Config.Layout, LayoutShared), orValue(r.Config.Addressing, AddressPublished))
	fmt.Fprintln(tw, "contender\tmsgs/s\tseconds\tvs raw\tCPU s (proc/pg/rmq)\tCPU us/msg\tload\t")
	for _, ph := range r.Phases {
		fmt.Fprintf(tw, "%s\t%.0f\t%.2f\t%.2f\t%.1f/%.1f/%.1f\t%.0f\t%.1f\t\n", ph.Name, ph.MsgsPerSec, ph.Seconds,
			ratio(ph.MsgsPerSec, r.RawMsgsPerSec), ph.CPU.ProcessSeconds, ph.CPU.PostgresSeconds, ph.CPU.RabbitMQSeconds,
			ph.CPUMicrosPerMsg, ph.LoadAverage)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(out, "\nTargets\n\n")
	for _, t := range r.Targets() {
		op := ">="
		if t.AtMost {
			op = "<="
		}
		met := "no"
		switch {
		case !t.Ran:
			met = "not run"
		case t.Met:
			met = "yes"
		}
		fmt.Fprintf(out, "  %-50s %6.2f  (goal %s %g)  met: %s\n", t.Figure, t.Measured, op, t.Goal, met)
	}
	if r.CPUMicrosPerMsgBroker > 0 {
		fmt.Fprintf(out, "  CPU per message in relay-1: relay + PostgreSQL %.1f us, RabbitMQ %.1f us; raw's process (amqp091 publishing alone) %.1f us\n",
			r.CPUMicrosPerMsgRelayPlusDB, r.CPUMicrosPerMsgBroker, r.CPUMicrosPerMsgRawProcess)
	}
	if lim.CPUCeilingRatioToRaw > 0 && lim.CoresBound {
		fmt.Fprintf(out, "  the cores were the limit of every phase: CPU ceiling of relay-1 / raw (raw's CPU per message over relay-1's) %.2f, relay-1 at %.0f%% of it; relay-2's ceiling %.2f\n",
			lim.CPUCeilingRatioToRaw, 100*ratio(r.RatioToRaw(), lim.CPUCeilingRatioToRaw), lim.CPUCeiling2RatioToRaw)
		fmt.Fprintf(out, "  relay + PostgreSQL CPU per message that a ceiling of %g needs: %.1f us (measured %.1f us)\n",
			goal.RatioToRaw, lim.CPUBudgetRelayPlusDB, r.CPUMicrosPerMsgRelayPlusDB)
	}
	if lim.BrokerBusyRatio > 0 {
		fmt.Fprintf(out, "  RabbitMQ kept %.2f cores busy in raw; relay-1 / raw %.2f = RabbitMQ's busy cores, relay-1 / raw, %.2f x its CPU per message, raw / relay-1, %.2f\n",
			lim.BrokerBusyRaw, r.RatioToRaw(), lim.BrokerBusyRatio, lim.BrokerCostRatio)
	}
	if lim.RawSelfRatio > 0 {
		fmt.Fprintf(out, "  raw's slower phase / its faster (raw publishing itself against the broker's limit): %.2f\n", lim.RawSelfRatio)
	}
	if lim.Raw2RatioToRaw > 0 {
		fmt.Fprintf(out, "  raw over two connections / raw (relay-2 / raw of a two-replica relay as fast as raw; below %g, no two-replica relay meets that goal here): %.2f\n",
			goal.Ratio2ToRaw, lim.Raw2RatioToRaw)
	}
	if lim.Broker2BusyRatio > 0 {
		fmt.Fprintf(out, "  relay-2 / raw %.2f = RabbitMQ's busy cores, relay-2 / raw, %.2f x its CPU per message, raw / relay-2, %.2f\n",
			r.Ratio2ToRaw(), lim.Broker2BusyRatio, lim.Broker2CostRatio)
	}
	if r.ClaimCallOverBrokerP99() > 0 {
		fmt.Fprintf(out, "  the notify run's claim statements, p99 over its events / broker-alone p99: %.2f (%.1f ms; every event's commit -> confirm holds its claim)\n",
			r.ClaimCallOverBrokerP99(), r.LatencyClaimCallP99Ms)
	}
	if r.RawOverWatermill() > 0 {
		fmt.Fprintf(out, "  raw / watermill (relay-1 / watermill of a relay as fast as raw; below %g, no relay meets that goal here): %.2f\n",
			goal.RatioToWatermill, r.RawOverWatermill())
	}
	if r.InlineOverBrokerP99() > 0 {
		fmt.Fprintf(out, "  inline p99 / broker-alone p99 (no relay at all): %.2f\n", r.InlineOverBrokerP99())
	}
	if r.KeyedOverBrokerP99() > 0 {
		fmt.Fprintf(out, "  keyed lease p99 / broker-alone p99 (a row leased by its key after its NOTIFY, then published; above %g, no relay that leases after the NOTIFY meets that goal here, unless the relay beat it): %.2f%s\n",
			goal.NotifyOverBroker, r.KeyedOverBrokerP99(), r.keyedNoFloor())
	}
	if r.NotifyRelayStatementMeanMs > 0 && r.NotifyRelayStatementCPUWaitMs > 0 {
		fmt.Fprintf(out, "  the notify run's claims and marks: %.2f ms mean, of which their PostgreSQL processes waited %.2f ms for a core (%.0f%%), %.2f of the cores busy\n",
			r.NotifyRelayStatementMeanMs, r.NotifyRelayStatementCPUWaitMs, 100*r.StatementWaitShare(), r.NotifyBusyCores)
	}
	if len(r.Latency) > 0 {
		fmt.Fprintf(out, "\nLatency at %s (%d events at %.0f/s per mode from %d producers after a %s warm-up, one replica)\n\n",
			r.LatencyRateText(), r.Config.LatencyEvents, r.Config.LatencyRate, r.Config.Producers, time.Duration(r.Config.LatencyWarmupMs*1e6))
		tw = tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "mode\trate/s\tconfirm p50\tp99\tmax\tdelivery p50\tp99\tmax\t")
		for _, l := range r.Latency {
			fmt.Fprintf(tw, "%s\t%.0f\t%.1f ms\t%.1f ms\t%.1f ms\t%.1f ms\t%.1f ms\t%.1f ms\t\n", l.Mode, l.Rate,
				l.Confirm.P50, l.Confirm.P99, l.Confirm.Max, l.Delivery.P50, l.Delivery.P99, l.Delivery.Max)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		fmt.Fprintf(out, "\nNOTIFY p99 commit -> confirm %.1f ms; the broker alone, publish -> confirm at that rate: p99 %.1f ms (x%.1f)\n",
			r.LatencyNotifyP99Ms, r.LatencyBrokerP99Ms, r.NotifyOverBrokerP99())
		if r.LatencyInlineP99Ms > 0 {
			fmt.Fprintf(out, "no relay, each event published as its COMMIT returns (inline): p99 %.1f ms (the relay's NOTIFY p99 is x%.1f that floor)\n",
				r.LatencyInlineP99Ms, r.NotifyOverInlineP99())
		}
		if r.LatencyKeyedP99Ms > 0 {
			fmt.Fprintf(out, "each row leased by its key after its NOTIFY, then published (keyed): p99 %.1f ms (the relay's NOTIFY p99 is x%.2f that floor)\n",
				r.LatencyKeyedP99Ms, r.NotifyOverKeyedP99())
		}
		if err := writeSched(out, r.Latency); err != nil {
			return err
		}
		for _, l := range r.Latency {
			if st := l.Stages; st != nil {
				fmt.Fprintf(out, "  %s stages, p50 / p99 ms: commit -> claim %.1f / %.1f (the claim statement %.1f / %.1f), claim -> publish %.1f / %.1f, publish -> confirm %.1f / %.1f\n",
					l.Mode, st.CommitToClaim.P50, st.CommitToClaim.P99, st.ClaimCall.P50, st.ClaimCall.P99, st.ClaimToPublish.P50, st.ClaimToPublish.P99,
					st.PublishToConfirm.P50, st.PublishToConfirm.P99)
			}
		}
	}
	for _, ph := range r.Phases {
		if b := ph.Breakdown; b != nil {
			fmt.Fprintf(out, "\nWhere %s spent its time (share of the replicas' wall time)\n", ph.Name)
			fmt.Fprintf(out, "  claim %4.1f%% (%d calls, %.2f ms mean; first tenth %.2f ms, last tenth %.2f ms)\n",
				100*b.Claim.ShareOfWall, b.Claim.Calls, b.Claim.MeanMs, b.ClaimFirstTenthMs, b.ClaimLastTenthMs)
			fmt.Fprintf(out, "  publish %4.1f%%, confirm wait %4.1f%%, mark %4.1f%% (%.2f ms mean), decode %4.1f%%, lost leases %d\n",
				100*b.Publish.ShareOfWall, 100*b.ConfirmWait.ShareOfWall, 100*b.Mark.ShareOfWall, b.Mark.MeanMs,
				100*b.Decode.ShareOfWall, b.LostLeases)
			fmt.Fprintf(out, "  loop waiting for claims and marks or on its own bookkeeping %4.1f%%; publish window %.0f%% full on average\n",
				100*b.LoopOther, 100*b.WindowFill)
		}
	}
	header := false
	for _, ph := range r.Phases {
		if c := ph.Resources; c != nil {
			if !header {
				header = true
				fmt.Fprintf(out, "\nCores busy during each phase (of %d): this process / PostgreSQL / RabbitMQ / other work / idle; the busiest disk's busy share, flushes/s; threads waiting for a core on average: this process / PostgreSQL / RabbitMQ\n", c.Cores)
			}
			fmt.Fprintf(out, "  %-10s %.2f / %.2f / %.2f / %.2f / %.2f; disk %.0f%%, %.0f flushes/s; waiting %.2f / %.2f / %.2f\n", ph.Name, c.Process, c.Postgres, c.RabbitMQ, c.Other, c.Idle,
				100*c.DiskBusy, c.FlushesPerSec, c.ProcessWaiting, c.PostgresWaiting, c.RabbitMQWaiting)
		}
	}
	if p := r.Profile; p != nil {
		fmt.Fprintf(out, "\nCPU profile of the one-replica drain: %s (%.1f s sampled)\n", p.Path, p.SampledSeconds)
		for _, e := range p.TopCum[:min(10, len(p.TopCum))] {
			fmt.Fprintf(out, "  cum %5.1f%%  flat %5.1f%%  %s\n", 100*e.CumShare, 100*e.FlatShare, e.Func)
		}
	}
	if len(r.Hygiene) > 0 {
		how := "estimated by pg_stat_user_tables"
		if r.Hygiene[0].Exact {
			how = "counted by pgstattuple"
		}
		fmt.Fprintf(out, "\nOutbox table hygiene (one-replica table, tuples %s; claim uses the pending index: %v)\n\n",
			how, r.ClaimUsesPendingIndex)
		tw = tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "moment\tlive\tdead\ttable\tindexes\tupdates\tHOT\t")
		for _, s := range r.Hygiene {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%d\t%d\t\n", s.Moment, s.LiveTuples, s.DeadTuples,
				bytesString(s.TableBytes), bytesString(s.IndexBytes), s.Updates, s.HOTUpdates)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	for _, n := range r.Notes {
		fmt.Fprintf(out, "\nnote: %s\n", n)
	}
	return nil
}

// writeSched writes, for each latency run that read them, how long each
// group of threads ran and waited for a core.
func writeSched(out io.Writer, runs []Latency) error {
	header := false
	for _, l := range runs {
		if len(l.Sched) == 0 {
			continue
		}
		if !header {
			header = true
			fmt.Fprintf(out, "\nThreads on a core / waiting for one, ms over each latency run (Linux schedstat), and the cores busy\n")
		}
		parts := make([]string, 0, len(l.Sched))
		for _, g := range l.Sched {
			parts = append(parts, fmt.Sprintf("%s %.0f / %.0f", g.Name, g.OnCPUMs, g.RunQueueMs))
		}
		fmt.Fprintf(out, "  %-20s %s; %.2f cores busy\n", l.Mode, strings.Join(parts, ", "), l.BusyCores)
		if l.RelayStatements > 0 {
			fmt.Fprintf(out, "  %-20s the relay's %d claims and marks: %.2f ms mean, of which %.2f ms waiting for a core\n",
				"", l.RelayStatements, l.RelayStatementMeanMs, l.RelayStatementCPUWaitMs)
		}
	}
	return nil
}

func bytesString(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.0f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// orValue returns s, or def when s is empty (a result from before the
// field existed).
func orValue(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
