// Package bench measures the production relay side by side with the
// broker's own limit and with a peer relay, on the same PostgreSQL and
// RabbitMQ, in one run:
//
//  1. raw: amqp091 publishing the events straight from memory with
//     asynchronous publisher confirms, as many in flight as the relay's
//     publish window: the broker's limit for this workload. It runs before
//     and after the relay's drains (raw-after), and the higher rate is the
//     limit the relay is compared with;
//  2. relay: the production relay (relay.New over relay.PGStore and
//     relay.AMQPPublisher, in this process) draining a backlog of N staged
//     events, with one replica and with two, each replica with its own
//     pool and broker connection;
//  3. watermill: watermill's SQL forwarder (components/forwarder over
//     watermill-sql and watermill-amqp) draining the same backlog staged
//     through its own SQL publisher;
//  4. latency: one replica at half the measured capacity, polling only and
//     woken by LISTEN/NOTIFY: COMMIT -> confirmed publish and COMMIT ->
//     consumer delivery, p50, p99 and max; and, for comparison, with the
//     NOTIFY sent after the staging COMMIT instead of inside it.
//
// Every contender publishes the same payloads to the same exchange and
// queue. Each drain starts from the whole backlog and is bounded in time
// (Options.DrainTimeout); its rate counts the messages confirmed within
// the bound, and the queue must then hold every confirmed message exactly
// once. Throughput is stated as ratios measured side by side: machines are
// noisy and absolute figures move from run to run.
//
// What a run measured is a result.Result (package bench/result), the data
// model that the report of many runs reads too without this package.
package bench

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"time"

	"github.com/outboxlab/outboxlab/internal/bench/goal"
	"github.com/outboxlab/outboxlab/internal/bench/result"
)

// Run runs the benchmark on env and returns what it measured. It fails
// when a contender loses, duplicates or fails to deliver a message: a
// throughput figure is only reported for a drain that delivered every
// event exactly once to the queue.
func Run(ctx context.Context, env Env, opts Options) (result.Result, error) {
	if err := opts.Validate(); err != nil {
		return result.Result{}, fmt.Errorf("bench options: %w", err)
	}
	o := opts.withDefaults()
	began := time.Now()
	res := result.Result{Throughput: result.Throughput{Events: o.Events}}
	res.Config = result.RunConfig{
		Events: o.Events, PayloadBytes: o.PayloadBytes, Seed: o.Seed,
		BatchSize: o.Relay.BatchSize, PublishWindow: o.Relay.PublishWindow,
		PollIntervalMs: float64(o.Relay.PollInterval) / 1e6, Producers: o.Producers,
		WatermillConfig: "watermill v1.5.1 forwarder, watermill-sql v4.1.2 (pgx, default PostgreSQL schema and offsets adapters, batch 100), " +
			"watermill-amqp v3.0.2 publisher with ConfirmDelivery and ChannelPoolSize 1",
	}
	if o.ProfileDir == "" {
		dir, err := os.MkdirTemp("", "outboxlab-bench-")
		if err != nil {
			return res, fmt.Errorf("bench: profile directory: %w", err)
		}
		o.ProfileDir = dir
	} else if err := os.MkdirAll(o.ProfileDir, 0o755); err != nil {
		return res, fmt.Errorf("bench: profile directory: %w", err)
	}

	res.Config.Layout = result.LayoutShared
	if o.IsolateBroker {
		lift, err := isolateBroker(ctx, env)
		if err != nil {
			return res, fmt.Errorf("bench: %w", err)
		}
		defer lift()
		res.Config.Layout = result.LayoutIsolated
	}
	in, err := newInfra(ctx, env, o.Schema, o.Exchange, o.Queue)
	if err != nil {
		return res, err
	}
	defer in.close()
	res.Config.Addressing = in.addressing
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if cerr := in.cleanup(cctx); cerr != nil {
			o.Logf("bench: cleaning up: %v", cerr)
		}
	}()
	w, err := newWorkload(o.Events, o.PayloadBytes, o.Seed, time.Now().Truncate(time.Millisecond))
	if err != nil {
		return res, err
	}
	b := &runner{o: o, in: in, w: w, cpu: cpuClock{in: in}}

	// 0. warm-up, 1. raw, 2. the relay with one replica then two, raw
	// over two connections (raw-2), 1 again: raw-after.
	if err := b.warmUp(ctx, &res); err != nil {
		return res, err
	}
	if err := b.raw(ctx, &res, "raw"); err != nil {
		return res, err
	}
	for _, replicas := range []int{1, 2} {
		if err := b.relayDrain(ctx, &res, replicas); err != nil {
			return res, err
		}
	}
	if err := b.rawSplit(ctx, &res, 2); err != nil {
		return res, err
	}
	if err := b.raw(ctx, &res, "raw-after"); err != nil {
		return res, err
	}
	// 3. watermill
	if !o.SkipWatermill {
		if err := b.watermill(ctx, &res); err != nil {
			return res, err
		}
	}
	// 4. latency at half capacity
	if !o.SkipLatency {
		if err := b.latency(ctx, &res); err != nil {
			return res, err
		}
	}
	var busiest float64
	for _, ph := range res.Phases {
		busiest = max(busiest, ph.LoadAverage)
	}
	if cores := runtime.NumCPU(); busiest > float64(cores) {
		res.Notes = append(res.Notes, fmt.Sprintf(
			"the machine was busy with other work (load average up to %.1f on %d cores): the rates are noisy; compare the ratios of phases run close together", busiest, cores))
	}
	res.Seconds = time.Since(began).Seconds()
	return res, nil
}

// drainPoll is how often a drain's end is checked: a fiftieth of a second
// is noise on a drain of seconds, and the check costs the process little.
const drainPoll = 20 * time.Millisecond

// runner carries one run's state between phases.
type runner struct {
	o   Options
	in  *infra
	w   *workload
	cpu cpuClock
}

// Quiet is how busy PostgreSQL and RabbitMQ may be, together, for a phase
// to start: a tenth of a core over quietWindow. A purge of 100,000
// persistent messages or the vacuum after a load keeps them busy for
// seconds, which the next phase would otherwise pay for.
const (
	quietShare   = 0.10
	quietWindow  = 500 * time.Millisecond
	quietTimeout = 30 * time.Second
)

// quiesce waits until the service containers are quiet, so that every
// phase starts on a broker and a database that are not still finishing the
// previous one. Where their CPU time cannot be read it returns at once; when
// they do not settle within quietTimeout, result.Result.Notes says so.
func (b *runner) quiesce(ctx context.Context, res *result.Result, phase string) {
	began := time.Now()
	prev := b.cpu.sample()
	if len(prev.services) == 0 {
		return
	}
	timer := time.NewTimer(quietWindow)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		cur := b.cpu.sample()
		c := cpuBetween(prev, cur)
		busy := (c.PostgresSeconds + c.RabbitMQSeconds) / cur.wall.Sub(prev.wall).Seconds()
		if busy < quietShare {
			return
		}
		if time.Since(began) > quietTimeout {
			res.Notes = append(res.Notes, fmt.Sprintf(
				"%s started with PostgreSQL and RabbitMQ still busy (%.0f%% of a core after %s)", phase, 100*busy, quietTimeout))
			return
		}
		prev = cur
		timer.Reset(quietWindow)
	}
}

// warmUp publishes the backlog from memory once, unmeasured, and purges
// it: a fresh broker's first drain is slower than its later ones (the
// message store's files are new, its caches cold), and the phase that
// came first would pay for it.
func (b *runner) warmUp(ctx context.Context, res *result.Result) error {
	b.o.Logf("bench: warm-up: publishing %d messages, not measured", b.w.len())
	confirmed, elapsed, err := publishRaw(ctx, b.in, b.w, b.o.Relay.PublishWindow, b.o.DrainTimeout)
	if err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}
	if err := b.in.purge(ctx); err != nil {
		return err
	}
	res.Notes = append(res.Notes, fmt.Sprintf(
		"warm-up: the backlog was published from memory once before the first phase, not measured (%d messages at %.0f/s), and purged: a fresh broker's first drain is slower than its later ones",
		confirmed, float64(confirmed)/elapsed.Seconds()))
	return nil
}

// Goals of the benchmark (see package goal): the relay against the
// broker's limit, its tail latency against the broker's own, against its
// peer, and its CPU cost against the broker's.
const (
	GoalRatioToRaw        = goal.RatioToRaw
	GoalRatio2ToRaw       = goal.Ratio2ToRaw
	GoalNotifyOverBroker  = goal.NotifyOverBroker
	GoalRatioToWatermill  = goal.RatioToWatermill
	GoalCPUOverBrokerUpTo = goal.CPUOverBrokerUpTo
)
