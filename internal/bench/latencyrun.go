package bench

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/outboxlab/outboxlab/internal/bench/result"
)

func (b *runner) latency(ctx context.Context, res *result.Result) error {
	if res.RelayMsgsPerSec <= 0 {
		return errors.New("latency: no measured capacity")
	}
	rate := res.RelayMsgsPerSec / 2
	if b.o.LatencyRate > 0 {
		rate = b.o.LatencyRate
	}
	// warm is the warm-up of a run at rate r that times count events: its
	// first events, at most half the workload and within what it holds
	// beside the count.
	warm := func(r float64, count int) int {
		return max(0, min(int(r*b.o.LatencyWarmup.Seconds()), b.w.len()/2, b.w.len()-count))
	}
	count := min(b.w.len()-warm(rate, 0), max(100, int(rate*b.o.LatencyDuration.Seconds())))
	res.Config.LatencyEvents = count
	res.Config.LatencyRate = rate
	res.Config.LatencyWarmupMs = float64(b.o.LatencyWarmup) / 1e6
	settle := 2*b.o.Relay.PollInterval + time.Minute
	for _, mode := range []struct {
		name                               string
		notify, afterCommit, inline, keyed bool
	}{
		{name: "poll"}, {name: "notify", notify: true}, {name: "notify-after-commit", notify: true, afterCommit: true},
		{name: "inline", notify: true, inline: true}, {name: "keyed", notify: true, keyed: true},
	} {
		rate, count := rate, count
		if mode.inline || mode.keyed {
			// The floor of the notify run: the rate its producers reached.
			rate = notifyRate(res.Latency, rate)
			count = min(count, max(100, int(rate*b.o.LatencyDuration.Seconds())))
		}
		b.quiesce(ctx, res, "latency "+mode.name)
		b.o.Logf("bench: latency %s: %d events at %.0f/s", mode.name, count, rate)
		wn := warm(rate, count)
		l, err := measureLatency(ctx, b.in, b.w.slice(wn+count), latencyOptions{
			name: mode.name, notify: mode.notify, afterCommit: mode.afterCommit, inline: mode.inline, keyed: mode.keyed, rate: rate, producers: b.o.Producers,
			config: b.o.Relay, settle: settle, produceFor: 2 * b.o.LatencyDuration, warm: wn,
		})
		if err != nil {
			return err
		}
		b.o.Logf("bench: latency %s: commit->confirm p50 %.1f ms, p99 %.1f ms, max %.1f ms (rate %.0f/s)",
			mode.name, l.Confirm.P50, l.Confirm.P99, l.Confirm.Max, l.Rate)
		if l.Rate < 0.9*rate || l.Events < count {
			res.Notes = append(res.Notes, fmt.Sprintf(
				"latency %s: the producers reached %.0f of the %.0f events/s scheduled (%d of %d events committed)",
				mode.name, l.Rate, rate, l.Events, count))
		}
		res.Latency = append(res.Latency, l)
		switch {
		case mode.inline:
			res.LatencyInlineP99Ms = l.Confirm.P99
		case mode.keyed:
			res.LatencyKeyedP99Ms = l.Confirm.P99
		case !mode.notify:
			res.LatencyPollP50Ms, res.LatencyPollP99Ms, res.LatencyPollMaxMs = l.Confirm.P50, l.Confirm.P99, l.Confirm.Max
		case !mode.afterCommit:
			res.LatencyNotifyP50Ms, res.LatencyNotifyP99Ms, res.LatencyNotifyMaxMs = l.Confirm.P50, l.Confirm.P99, l.Confirm.Max
			if l.Stages != nil {
				res.LatencyClaimCallP99Ms = l.Stages.ClaimCall.P99
			}
			res.NotifyRelayStatementMeanMs, res.NotifyRelayStatementCPUWaitMs = l.RelayStatementMeanMs, l.RelayStatementCPUWaitMs
			res.NotifyBusyCores = l.BusyCores
		}
	}
	res.Notes = append(res.Notes, fmt.Sprintf(
		"latency: each run first sent for %s at its rate to warm up (connections opened, statements prepared); those events were delivered and checked like the rest, and left out of the figures",
		b.o.LatencyWarmup))
	res.Notes = append(res.Notes, "latency inline: no relay; each producer stages its event as in notify (with the NOTIFY), at the rate the notify producers reached, and publishes it itself the moment its COMMIT returns, the dual write the outbox replaces: the floor of a relay's commit -> confirm at these commits on this machine")
	res.Notes = append(res.Notes, "latency keyed: no relay; each producer stages its event as in notify, its NOTIFY naming the row, at the rate the notify producers reached; a leaser LISTENs, leases the rows named by their key in one statement (asynchronous commit, as the relay's claim) and publishes them: the NOTIFY's delivery, one round trip to the database and publish -> confirm, the floor of a relay that leases a row after its NOTIFY and before it publishes it (no scan, no order, no mark)")
	// The broker's own share: the same messages at the rate the NOTIFY
	// producers reached, published from memory.
	brate := notifyRate(res.Latency, rate)
	bcount := min(count, max(100, int(brate*b.o.LatencyDuration.Seconds())))
	b.quiesce(ctx, res, "latency broker")
	b.o.Logf("bench: latency broker: %d messages at %.0f/s, no database", bcount, brate)
	bwarm := warm(brate, bcount)
	l, err := measureBrokerLatency(ctx, b.in, b.w.slice(bwarm+bcount), brate, bwarm)
	if err != nil {
		return err
	}
	b.o.Logf("bench: latency broker: publish->confirm p50 %.1f ms, p99 %.1f ms, max %.1f ms (rate %.0f/s)",
		l.Confirm.P50, l.Confirm.P99, l.Confirm.Max, l.Rate)
	res.Latency = append(res.Latency, l)
	res.LatencyBrokerP50Ms, res.LatencyBrokerP99Ms = l.Confirm.P50, l.Confirm.P99
	res.Notes = append(res.Notes, fmt.Sprintf(
		"latency broker: no relay and no database; %d messages published from memory at %.0f/s (the rate the notify producers reached), timed from each publish: the broker's own share of every other mode's latency",
		l.Events, brate))
	return nil
}

// notifyRate is the rate the notify run's producers reached, at most
// scheduled; scheduled when there is no notify run yet.
func notifyRate(runs []result.Latency, scheduled float64) float64 {
	for _, l := range runs {
		if l.Mode == "notify" && l.Rate > 0 {
			return min(scheduled, l.Rate)
		}
	}
	return scheduled
}
