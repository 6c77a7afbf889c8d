package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxlab/outboxlab/internal/bench/result"
	"github.com/outboxlab/outboxlab/outbox"
	"github.com/outboxlab/outboxlab/relay"
	"github.com/outboxlab/outboxlab/testenv"
)

// percentiles computes nearest-rank percentiles of ds.
func percentiles(ds []time.Duration) result.Percentiles {
	if len(ds) == 0 {
		return result.Percentiles{}
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	rank := func(p float64) time.Duration {
		i := int(math.Ceil(p*float64(len(s)))) - 1
		return s[max(0, min(i, len(s)-1))]
	}
	ms := func(d time.Duration) float64 { return float64(d) / 1e6 }
	return result.Percentiles{P50: ms(rank(0.50)), P99: ms(rank(0.99)), Max: ms(s[len(s)-1])}
}

// latencyOptions configures one latency run.
type latencyOptions struct {
	name   string
	notify bool
	// afterCommit sends the NOTIFY after the staging COMMIT, in a
	// transaction of its own that does not wait for its WAL flush.
	afterCommit bool
	// inline runs no relay: each producer publishes its event itself as
	// soon as its COMMIT returned (the dual write the outbox replaces),
	// the floor of any relay's commit -> confirm at the same commits.
	inline bool
	// keyed runs no relay: the keyed lease floor (keyedLeaser) leases and
	// publishes each event, whose staging transaction sends its id as
	// the NOTIFY's payload.
	keyed     bool
	rate      float64
	producers int
	config    relay.Config
	// settle bounds the wait for the last confirm and delivery after the
	// last COMMIT.
	settle time.Duration
	// produceFor bounds the producers after the warm-up: when they fall
	// behind the schedule, the run measures the events they committed
	// within it.
	produceFor time.Duration
	// warm is how many of the first events are the warm-up
	// (result.Latency.WarmupEvents).
	warm int
}

// measureLatency stages every event of w, one per transaction, from
// o.producers connections on an open-loop schedule of o.rate events per
// second, with one relay replica draining and a consumer on the queue,
// and records for each event when its COMMIT returned, when the relay saw
// its confirm and when the consumer received it.
func measureLatency(ctx context.Context, in *infra, w *workload, o latencyOptions) (result.Latency, error) {
	res := result.Latency{Mode: o.name, TargetRate: o.rate, PollIntervalMs: float64(o.config.WithDefaults().PollInterval) / 1e6, WarmupEvents: o.warm}
	table, err := in.newOutbox(ctx, "outbox_latency_"+strings.ReplaceAll(o.name, "-", "_"))
	if err != nil {
		return res, err
	}
	if err := in.purge(ctx); err != nil {
		return res, err
	}
	n := w.len()
	commitAt := make([]atomic.Int64, n)
	claimAt := make([]atomic.Int64, n)
	claimStart := make([]atomic.Int64, n)
	publishAt := make([]atomic.Int64, n)
	confirmAt := make([]atomic.Int64, n)
	deliverAt := make([]atomic.Int64, n)
	var confirmed, delivered, duplicates atomic.Int64

	cons, err := startConsumer(ctx, in, func(id string, at time.Time) {
		i, ok := w.index[id]
		if !ok {
			return
		}
		if deliverAt[i].CompareAndSwap(0, at.UnixNano()) {
			delivered.Add(1)
		} else {
			duplicates.Add(1)
		}
	})
	if err != nil {
		return res, err
	}
	defer cons.stop()

	onConfirm := func(id string, at time.Time) {
		if i, ok := w.index[id]; ok && confirmAt[i].CompareAndSwap(0, at.UnixNano()) {
			confirmed.Add(1)
		}
	}
	var (
		rs     *replicaSet
		inline *inlinePublisher
		keyed  *keyedLeaser
	)
	switch {
	case o.inline:
		if inline, err = startInline(ctx, in, w, onConfirm); err != nil {
			return res, err
		}
		defer inline.stop()
	case o.keyed:
		if keyed, err = startKeyed(ctx, in, w, table, claimStart, claimAt, publishAt, onConfirm); err != nil {
			return res, err
		}
		defer keyed.stop()
	default:
		if rs, err = startLatencyRelay(ctx, in, w, o, table, claimStart, claimAt, publishAt, onConfirm); err != nil {
			return res, err
		}
		defer rs.stop()
	}

	pcfg, err := pgxpool.ParseConfig(withApplicationName(in.dbURL, appProducers))
	if err != nil {
		return res, fmt.Errorf("latency %s: %w", o.name, err)
	}
	pcfg.MaxConns = int32(o.producers)
	pcfg.MinConns = int32(o.producers)
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return res, fmt.Errorf("latency %s: producer pool: %w", o.name, err)
	}
	defer pool.Close()
	// Open every producer connection before the clock starts.
	if err := warmPool(ctx, pool, o.producers); err != nil {
		return res, fmt.Errorf("latency %s: %w", o.name, err)
	}

	interval := time.Duration(float64(time.Second) / o.rate)
	t0 := time.Now().Add(20 * time.Millisecond)
	// The scheduler's times and the relay's statements are counted from
	// the end of the warm-up, as the latencies are.
	type start struct {
		sched        schedSample
		calls, nanos int64
	}
	started, quit := make(chan start, 1), make(chan struct{})
	defer close(quit)
	go func() {
		timer := time.NewTimer(time.Until(t0.Add(time.Duration(o.warm) * interval)))
		defer timer.Stop()
		select {
		case <-timer.C:
		case <-ctx.Done():
		case <-quit:
			return
		}
		st := start{sched: in.sampleSched(true)}
		switch {
		case rs != nil:
			st.calls, st.nanos = rs.reps[0].store.statements()
		case keyed != nil:
			st.calls, st.nanos = keyed.statements()
		}
		started <- st
	}()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, o.producers)
	for p := range o.producers {
		wg.Go(func() {
			timer := time.NewTimer(0)
			defer timer.Stop()
			<-timer.C
			for {
				// Past the bound no event is taken any more, so the
				// events produced are always the first ones.
				if o.produceFor > 0 && time.Since(t0) > time.Duration(o.warm)*interval+o.produceFor {
					return
				}
				k := int(next.Add(1) - 1)
				if k >= n || ctx.Err() != nil {
					return
				}
				// Open loop: event k is due at t0 + k x interval whatever
				// the earlier ones took.
				if wait := time.Until(t0.Add(time.Duration(k) * interval)); wait > 0 {
					timer.Reset(wait)
					select {
					case <-timer.C:
					case <-ctx.Done():
						return
					}
				}
				err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
					err := outbox.Stage(ctx, tx, table, outbox.Event{
						ID: w.ids[k], Type: MessageType, Payload: w.payloads[k],
					}, outbox.StageOptions{Notify: o.notify && !o.afterCommit && !o.keyed})
					if err == nil && o.keyed {
						// The same NOTIFY as Stage's, naming the row.
						_, err = tx.Exec(ctx, `SELECT pg_notify($1, $2)`, table.Channel(), w.idStr[k])
					}
					return err
				})
				if err != nil {
					errs[p] = fmt.Errorf("producer %d: event %d: %w", p, k, err)
					return
				}
				commitAt[k].Store(time.Now().UnixNano())
				if inline != nil {
					if err := inline.publish(ctx, k); err != nil {
						errs[p] = fmt.Errorf("producer %d: %w", p, err)
						return
					}
				}
				if o.afterCommit {
					// The wake-up is a hint (the poll stays the safety
					// net), so its transaction need not wait for the
					// disk: PostgreSQL serialises notifying commits
					// through their WAL flush.
					err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
						if _, err := tx.Exec(ctx, `SET LOCAL synchronous_commit = off`); err != nil {
							return err
						}
						_, err := tx.Exec(ctx, `SELECT pg_notify($1, '')`, table.Channel())
						return err
					})
					if err != nil {
						errs[p] = fmt.Errorf("producer %d: notifying after event %d: %w", p, k, err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return res, fmt.Errorf("latency %s: %w", o.name, err)
	}
	first, last := int64(math.MaxInt64), int64(0)
	produced, measured := 0, 0
	for i := range commitAt {
		c := commitAt[i].Load()
		if c == 0 {
			continue
		}
		produced++
		if i < o.warm {
			continue
		}
		measured++
		first, last = min(first, c), max(last, c)
	}
	if measured == 0 {
		return res, fmt.Errorf("latency %s: the producers committed no event within %s of the warm-up", o.name, o.produceFor)
	}
	res.Events = measured
	if last > first {
		res.Rate = float64(measured-1) / (float64(last-first) / 1e9)
	}

	wctx, cancel := context.WithTimeout(ctx, o.settle)
	err = testenv.WaitUntil(wctx, 10*time.Millisecond, func(context.Context) error {
		if keyed != nil {
			if err := keyed.failure(); err != nil {
				cancel() // it publishes nothing more
				return err
			}
		}
		if c, d := confirmed.Load(), delivered.Load(); c < int64(produced) || d < int64(produced) {
			return fmt.Errorf("%d of %d events confirmed, %d delivered", c, produced, d)
		}
		return nil
	})
	cancel()
	if err != nil {
		return res, fmt.Errorf("latency %s: waiting for every event: %w", o.name, err)
	}
	// Every session is still open: read the scheduler's times before any
	// of them closes.
	sched1 := in.sampleSched(true)
	st := <-started
	sched0, calls0, nanos0 := st.sched, st.calls, st.nanos
	relayID := ""
	var calls1, nanos1 int64
	switch {
	case rs != nil:
		relayID = rs.reps[0].id
		calls1, nanos1 = rs.reps[0].store.statements()
	case keyed != nil:
		// The leaser's sessions are told apart as a relay's are: they
		// are in its place.
		relayID = appKeyed
		calls1, nanos1 = keyed.statements()
	}
	if relayID != "" {
		if n := calls1 - calls0; n > 0 {
			res.RelayStatements = n
			res.RelayStatementMeanMs = float64(nanos1-nanos0) / 1e6 / float64(n)
		}
	}
	if res.Sched, err = in.schedGroups(ctx, sched0, sched1, relayID); err != nil {
		return res, fmt.Errorf("latency %s: %w", o.name, err)
	}
	for _, g := range res.Sched {
		if g.Name == "relay sessions" && res.RelayStatements > 0 {
			res.RelayStatementCPUWaitMs = g.RunQueueMs / float64(res.RelayStatements)
		}
	}
	if wall := sched1.wall.Sub(sched0.wall); wall > 0 && sched0.machine > 0 && sched1.machine > sched0.machine {
		res.BusyCores = (sched1.machine - sched0.machine).Seconds() / wall.Seconds()
	}
	switch {
	case rs != nil:
		err = rs.stop()
	case keyed != nil:
		err = keyed.stop()
	default:
		err = inline.stop()
	}
	if err != nil {
		return res, fmt.Errorf("latency %s: %w", o.name, err)
	}
	cons.stop()
	res.Duplicates = int(duplicates.Load())

	conf := make([]time.Duration, 0, measured)
	del := make([]time.Duration, 0, measured)
	var toClaim, toPublish, toConfirm, claimCall []time.Duration
	for i := o.warm; i < n; i++ {
		c := commitAt[i].Load()
		if c == 0 {
			continue
		}
		conf = append(conf, time.Duration(confirmAt[i].Load()-c))
		del = append(del, time.Duration(deliverAt[i].Load()-c))
		cl, pu, co := claimAt[i].Load(), publishAt[i].Load(), confirmAt[i].Load()
		if cl > 0 && pu > 0 && co > 0 {
			toClaim = append(toClaim, time.Duration(cl-c))
			toPublish = append(toPublish, time.Duration(pu-cl))
			toConfirm = append(toConfirm, time.Duration(co-pu))
			claimCall = append(claimCall, time.Duration(cl-claimStart[i].Load()))
		}
	}
	res.Confirm = percentiles(conf)
	res.Delivery = percentiles(del)
	if len(toClaim) > 0 {
		res.Stages = &result.LatencyStages{CommitToClaim: percentiles(toClaim), ClaimToPublish: percentiles(toPublish), PublishToConfirm: percentiles(toConfirm),
			ClaimCall: percentiles(claimCall)}
	}
	if err := in.purge(ctx); err != nil {
		return res, err
	}
	return res, nil
}

// warmPool opens n connections of pool.
func warmPool(ctx context.Context, pool *pgxpool.Pool, n int) error {
	conns := make([]*pgxpool.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Release()
		}
	}()
	for range n {
		c, err := pool.Acquire(ctx)
		if err != nil {
			return fmt.Errorf("opening producer connections: %w", err)
		}
		conns = append(conns, c)
	}
	return nil
}

// consumer receives every message of the queue and reports its arrival.
type consumer struct {
	conn interface{ Close() error }
	done chan struct{}
	once sync.Once
}

func startConsumer(ctx context.Context, in *infra, onDelivery func(id string, at time.Time)) (*consumer, error) {
	conn, err := dialAMQP(ctx, in.amqpURL, "outboxlab-bench-consumer")
	if err != nil {
		return nil, err
	}
	ch, err := conn.Channel()
	if err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("consumer: opening channel: %w", err)
	}
	deliveries, err := ch.Consume(in.queue, "outboxlab-bench", true, true, false, false, nil)
	if err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("consumer: consuming %s: %w", in.queue, err)
	}
	c := &consumer{conn: conn, done: make(chan struct{})}
	go func() {
		defer close(c.done)
		for d := range deliveries {
			onDelivery(d.MessageId, time.Now())
		}
	}()
	return c, nil
}

// stop closes the consumer's connection and waits for its loop.
func (c *consumer) stop() {
	c.once.Do(func() {
		_ = c.conn.Close()
		<-c.done
	})
}

// startLatencyRelay starts the one replica of a latency run, reporting
// when each event's row was claimed, published and confirmed, and returns
// once it is ready: it ticks once at start, and a listening one ticks
// again once its LISTEN is in place, so that no NOTIFY of the run is
// missed.
func startLatencyRelay(ctx context.Context, in *infra, w *workload, o latencyOptions, table outbox.Table,
	claimStart, claimAt, publishAt []atomic.Int64, onConfirm func(id string, at time.Time)) (*replicaSet, error) {
	rs, err := startReplicas(ctx, in, replicaOptions{
		table: table, count: 1, config: o.config, notify: o.notify,
		onClaim: func(id string, started, at time.Time) {
			if i, ok := w.index[id]; ok && claimAt[i].CompareAndSwap(0, at.UnixNano()) {
				claimStart[i].Store(started.UnixNano())
			}
		},
		onPublish: func(id string, at time.Time) {
			if i, ok := w.index[id]; ok {
				publishAt[i].CompareAndSwap(0, at.UnixNano())
			}
		},
		onConfirm: onConfirm,
	})
	if err != nil {
		return nil, err
	}
	wantTicks := int64(1)
	if o.notify {
		wantTicks = 2
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err = testenv.WaitUntil(wctx, 5*time.Millisecond, func(context.Context) error {
		if t := rs.reps[0].relay.Totals().Ticks.Load(); t < wantTicks {
			return fmt.Errorf("relay ticked %d times, want %d", t, wantTicks)
		}
		return nil
	})
	cancel()
	if err != nil {
		_ = rs.stop()
		return nil, fmt.Errorf("latency %s: waiting for the relay to start: %w", o.name, err)
	}
	return rs, nil
}

// inlinePublisher publishes each event from the producer that committed
// it, on one channel with confirms: the latency run without a relay.
type inlinePublisher struct {
	in       *infra
	w        *workload
	conn     interface{ Close() error }
	mu       sync.Mutex
	ch       *amqp.Channel
	confirms *confirmTaker
	stopped  bool
}

// startInline opens the inline publisher's channel; onConfirm is told of
// each confirm, by message id, as it comes.
func startInline(ctx context.Context, in *infra, w *workload, onConfirm func(id string, at time.Time)) (*inlinePublisher, error) {
	conn, err := dialAMQP(ctx, in.amqpURL, "outboxlab-bench-inline")
	if err != nil {
		return nil, err
	}
	ch, err := conn.Channel()
	if err == nil {
		err = ch.Confirm(false)
	}
	if err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("inline publisher: opening a channel with confirms: %w", err)
	}
	p := &inlinePublisher{in: in, w: w, conn: conn, ch: ch}
	p.confirms = takeConfirms(ctx, w.len(), "inline publisher", func(i int, at time.Time) { onConfirm(w.idStr[i], at) })
	return p, nil
}

// publish sends event k. The channel's publishes and the taker's queue
// keep one order under the lock.
func (p *inlinePublisher) publish(ctx context.Context, k int) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	dc, err := p.ch.PublishWithDeferredConfirmWithContext(ctx, p.in.exchange, MessageType, true, false, p.w.publishing(k))
	if err != nil {
		return fmt.Errorf("inline publisher: publishing event %d: %w", k, err)
	}
	p.confirms.add(k, dc)
	return nil
}

// stop waits for every confirm and closes the connection; it returns
// the first failure of a confirm.
func (p *inlinePublisher) stop() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped {
		return nil
	}
	p.stopped = true
	err := p.confirms.close()
	_ = p.conn.Close()
	return err
}
