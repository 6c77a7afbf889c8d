package bench

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/outboxlab/outboxlab/internal/bench/result"
	"github.com/outboxlab/outboxlab/relay"
	"github.com/outboxlab/outboxlab/testenv"
)

// raw publishes the backlog from memory with a sliding window of the
// relay's size: the broker's limit. It runs twice, before and after the
// relay's drains, and the higher rate counts as the limit: a broker that
// was slower in one of the runs (a cold start, a purge still settling)
// would otherwise flatter the relay.
func (b *runner) raw(ctx context.Context, res *result.Result, name string) error {
	b.quiesce(ctx, res, name)
	b.o.Logf("bench: %s: publishing %d messages, window %d", name, b.w.len(), b.o.Relay.PublishWindow)
	c0 := b.cpu.sample()
	confirmed, elapsed, err := publishRaw(ctx, b.in, b.w, b.o.Relay.PublishWindow, b.o.DrainTimeout)
	c1 := b.cpu.sample()
	if err != nil {
		return err
	}
	b.partial(res, name, confirmed, b.o.DrainTimeout)
	ph, err := b.finishPhase(ctx, name, confirmed, confirmed, elapsed, c0, c1)
	if err != nil {
		return err
	}
	res.Phases = append(res.Phases, ph)
	if ph.MsgsPerSec > res.RawMsgsPerSec && ph.Events > 0 {
		res.CPUMicrosPerMsgRawProcess = ph.CPU.ProcessSeconds * 1e6 / float64(ph.Events)
	}
	res.RawMsgsPerSec = max(res.RawMsgsPerSec, ph.MsgsPerSec)
	return nil
}

// rawSplit publishes the backlog from memory over parts connections at
// once (publishRawSplit), each with the relay's window: the broker's
// limit for a relay of that many replicas, each on a connection of its
// own. It is not the broker's limit for the ratios to raw; its ratio to
// raw bounds relay-2's (result.Limits.Raw2RatioToRaw).
func (b *runner) rawSplit(ctx context.Context, res *result.Result, parts int) error {
	name := fmt.Sprintf("raw-%d", parts)
	b.quiesce(ctx, res, name)
	b.o.Logf("bench: %s: publishing %d messages over %d connections, window %d each", name, b.w.len(), parts, b.o.Relay.PublishWindow)
	c0 := b.cpu.sample()
	confirmed, elapsed, err := publishRawSplit(ctx, b.in, b.w, parts, b.o.Relay.PublishWindow, b.o.DrainTimeout)
	c1 := b.cpu.sample()
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	b.partial(res, name, confirmed, b.o.DrainTimeout)
	ph, err := b.finishPhase(ctx, name, confirmed, confirmed, elapsed, c0, c1)
	if err != nil {
		return err
	}
	res.Phases = append(res.Phases, ph)
	return nil
}

// partial notes a phase that did not get through the whole backlog within
// its bound.
func (b *runner) partial(res *result.Result, name string, done int, bound time.Duration) {
	if done < b.w.len() {
		res.Notes = append(res.Notes, fmt.Sprintf(
			"%s got %d of %d events confirmed within its bound of %s; its rate is over those %d",
			name, done, b.w.len(), bound, done))
	}
}

// finishPhase checks that the queue holds every confirmed message once,
// empties it and returns the phase's figures: the rate is timed events
// over elapsed; total counts the ones confirmed after the bound too.
func (b *runner) finishPhase(ctx context.Context, name string, timed, total int, elapsed time.Duration, c0, c1 cpuSample) (result.Phase, error) {
	ph := result.Phase{Name: name, Events: timed, Complete: timed == b.w.len(), Seconds: elapsed.Seconds(), CPU: cpuBetween(c0, c1),
		LoadAverage: loadAverage()}
	if elapsed > 0 {
		ph.MsgsPerSec = float64(timed) / elapsed.Seconds()
	}
	if timed > 0 {
		ph.CPUMicrosPerMsg = (ph.CPU.ProcessSeconds + ph.CPU.PostgresSeconds + ph.CPU.RabbitMQSeconds) * 1e6 / float64(timed)
	}
	ph.Resources = resourcesOf(ph.CPU, elapsed)
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err := b.in.waitQueueDepth(wctx, total)
	cancel()
	if err != nil {
		return ph, fmt.Errorf("%s: %w", name, err)
	}
	depth, err := b.in.queueDepth(ctx)
	if err != nil {
		return ph, err
	}
	ph.QueueDepth = depth
	if depth != total {
		return ph, fmt.Errorf("%s: queue holds %d messages after %d confirmed publishes: duplicates", name, depth, total)
	}
	if err := b.in.purge(ctx); err != nil {
		return ph, err
	}
	b.o.Logf("bench: %s: %d messages in %s: %.0f msgs/s", name, timed, elapsed.Round(time.Millisecond), ph.MsgsPerSec)
	return ph, nil
}

// resourcesOf returns the result.Resources of a phase, or nil when the
// machine's CPU time could not be read.
func resourcesOf(c result.CPU, wall time.Duration) *result.Resources {
	if c.MachineSeconds == 0 || wall <= 0 {
		return nil
	}
	w := wall.Seconds()
	r := &result.Resources{Cores: runtime.NumCPU(), Process: c.ProcessSeconds / w, Postgres: c.PostgresSeconds / w, RabbitMQ: c.RabbitMQSeconds / w}
	r.Other = max(0, c.MachineSeconds/w-r.Process-r.Postgres-r.RabbitMQ)
	r.Idle = max(0, float64(r.Cores)-c.MachineSeconds/w)
	r.DiskBusy = min(1, c.DiskBusySeconds/w)
	r.FlushesPerSec = float64(c.DiskFlushes) / w
	r.ProcessWaiting, r.PostgresWaiting, r.RabbitMQWaiting = c.ProcessWaitSeconds/w, c.PostgresWaitSeconds/w, c.RabbitMQWaitSeconds/w
	return r
}

func (b *runner) relayDrain(ctx context.Context, res *result.Result, replicas int) error {
	name := fmt.Sprintf("relay-%d", replicas)
	table, err := b.in.newOutbox(ctx, fmt.Sprintf("outbox_drain_%d", replicas))
	if err != nil {
		return err
	}
	b.o.Logf("bench: %s: staging %d events", name, b.w.len())
	staged := time.Now()
	if err := b.in.stageCopy(ctx, table, b.w); err != nil {
		return err
	}
	b.o.Logf("bench: %s: staged %d events in %s (COPY, not timed)", name, b.w.len(), time.Since(staged).Round(time.Millisecond))
	var store *relay.PGStore
	if replicas == 1 {
		store = relay.NewPGStore(b.in.admin, table)
		plan, err := explain(ctx, b.in, store)
		if err != nil {
			return err
		}
		res.ClaimPlan = plan
		res.ClaimUsesPendingIndex = strings.Contains(plan, "Index Scan using "+table.PendingIndex()) &&
			!strings.Contains(plan, "Seq Scan")
	}
	if err := b.in.purge(ctx); err != nil {
		return err
	}
	b.quiesce(ctx, res, name)
	var prof *cpuProfile
	if replicas == 1 {
		if prof, err = startCPUProfile(filepath.Join(b.o.ProfileDir, "relay-cpu.pprof")); err != nil {
			return err
		}
	}
	b.o.Logf("bench: %s: draining", name)
	c0 := b.cpu.sample()
	start := time.Now()
	rs, err := startReplicas(ctx, b.in, replicaOptions{table: table, count: replicas, config: b.o.Relay})
	if err != nil {
		if prof != nil {
			_, _ = prof.stop(0)
		}
		return err
	}
	want := int64(b.w.len())
	wctx, cancel := context.WithTimeout(ctx, b.o.DrainTimeout)
	err = testenv.WaitUntil(wctx, drainPoll, func(context.Context) error {
		if n := rs.published(); n < want {
			return fmt.Errorf("%d of %d published", n, want)
		}
		return nil
	})
	if err != nil && wctx.Err() != nil && ctx.Err() == nil {
		err = nil // bounded: the rate is over what was published
	}
	cancel()
	elapsed := time.Since(start)
	timed := rs.published()
	c1 := b.cpu.sample()
	if prof != nil {
		p, perr := prof.stop(15)
		if perr != nil && err == nil {
			err = perr
		}
		res.Profile = p
	}
	breakdown := rs.breakdown(elapsed, b.o.Relay.PublishWindow)
	if serr := rs.stop(); serr != nil && err == nil {
		err = serr
	}
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	// Every replica finished its batch in flight before it stopped.
	total := int(rs.published())
	pending, processed, faulted, err := b.in.outboxCounts(ctx, table)
	if err != nil {
		return err
	}
	if faulted != 0 || processed != int64(total) || pending != want-int64(total) {
		return fmt.Errorf("%s: after the drain %d rows pending, %d processed, %d faulted; the relay marked %d of %d",
			name, pending, processed, faulted, total, want)
	}
	b.partial(res, name, int(timed), b.o.DrainTimeout)
	ph, err := b.finishPhase(ctx, name, int(timed), total, elapsed, c0, c1)
	if err != nil {
		return err
	}
	ph.Breakdown = breakdown
	res.Phases = append(res.Phases, ph)
	if replicas == 1 {
		res.RelayMsgsPerSec = ph.MsgsPerSec
		if ph.Events > 0 {
			res.CPUMicrosPerMsgRelayPlusDB = (ph.CPU.ProcessSeconds + ph.CPU.PostgresSeconds) * 1e6 / float64(ph.Events)
			res.CPUMicrosPerMsgBroker = ph.CPU.RabbitMQSeconds * 1e6 / float64(ph.Events)
		}
		if res.Hygiene, err = hygiene(ctx, b.in, store); err != nil {
			return err
		}
	} else {
		res.Relay2MsgsPerSec = ph.MsgsPerSec
	}
	if _, err := b.in.admin.Exec(ctx, `DROP TABLE `+table.Ident()); err != nil {
		return fmt.Errorf("%s: dropping %s: %w", name, table, err)
	}
	return nil
}

func (b *runner) watermill(ctx context.Context, res *result.Result) error {
	peer, err := newWatermillPeer(ctx, b.in)
	if err != nil {
		return err
	}
	defer peer.close()
	b.o.Logf("bench: watermill: staging %d events", b.w.len())
	staged := time.Now()
	if err := peer.stage(ctx, b.w); err != nil {
		return err
	}
	b.o.Logf("bench: watermill: staged %d events in %s (SQL publisher, %d per transaction, not timed)",
		b.w.len(), time.Since(staged).Round(time.Millisecond), watermillStageChunk)
	if err := b.in.purge(ctx); err != nil {
		return err
	}
	b.quiesce(ctx, res, "watermill")
	b.o.Logf("bench: watermill: draining (at most %s)", b.o.WatermillTimeout)
	c0 := b.cpu.sample()
	start := time.Now()
	run, err := peer.start(ctx)
	if err != nil {
		return err
	}
	want := int64(b.w.len())
	wctx, cancel := context.WithTimeout(ctx, b.o.WatermillTimeout)
	err = testenv.WaitUntil(wctx, drainPoll, func(context.Context) error {
		if n := run.forwarded.Load(); n < want {
			return fmt.Errorf("%d of %d forwarded", n, want)
		}
		return nil
	})
	timedOut := err != nil && wctx.Err() != nil && ctx.Err() == nil
	cancel()
	elapsed := time.Since(start)
	forwarded := run.forwarded.Load()
	c1 := b.cpu.sample()
	// Errors while stopping (a query cut by the close) are not the
	// drain's.
	nerr, firstErr := peer.logger.summary()
	if serr := run.stop(); serr != nil && err == nil {
		err = serr
	}
	if err != nil && !timedOut {
		return fmt.Errorf("watermill: %w", err)
	}
	// A message forwarded after the count was read is in the queue too.
	final := int(run.forwarded.Load())
	if nerr > 0 {
		res.Notes = append(res.Notes, fmt.Sprintf("watermill logged %d errors during the drain; the first: %s", nerr, firstErr))
	}
	if timedOut && forwarded == 0 {
		return fmt.Errorf("watermill: forwarded nothing within %s: %w", b.o.WatermillTimeout, err)
	}
	b.partial(res, "watermill", int(forwarded), b.o.WatermillTimeout)
	ph, err := b.finishPhase(ctx, "watermill", int(forwarded), final, elapsed, c0, c1)
	if err != nil {
		return err
	}
	res.Phases = append(res.Phases, ph)
	res.WatermillMsgsPerSec = ph.MsgsPerSec
	return nil
}
