package bench

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxlab/outboxlab/internal/bench/result"
	"github.com/outboxlab/outboxlab/outbox"
	"github.com/outboxlab/outboxlab/relay"
)

// replica is one production relay running in this process with its own
// pool and its own broker connection, as a replica process would have.
type replica struct {
	id     string
	pool   *pgxpool.Pool
	amqp   *relay.AMQPPublisher
	store  *timedStore
	pub    *observedPublisher
	dec    *countingDecoder
	relay  *relay.Relay
	cancel context.CancelFunc
	done   chan error
}

// replicaSet is the replicas of one outbox table.
type replicaSet struct {
	reps    []*replica
	stopped bool
}

// replicaOptions says how to build the replicas of one phase.
type replicaOptions struct {
	table     outbox.Table
	count     int
	config    relay.Config // RelayID is set per replica
	notify    bool         // wake on LISTEN/NOTIFY
	onClaim   func(id string, started, at time.Time)
	onPublish func(id string, at time.Time)
	onConfirm func(id string, at time.Time)
}

// startReplicas builds and starts the replicas. Each one runs relay.Run
// until stop.
func startReplicas(ctx context.Context, in *infra, o replicaOptions) (*replicaSet, error) {
	rs := &replicaSet{}
	for i := range o.count {
		rep, err := startReplica(ctx, in, o, fmt.Sprintf("bench-%s-%c", o.table.Name(), 'a'+i))
		if err != nil {
			_ = rs.stop()
			return nil, err
		}
		rs.reps = append(rs.reps, rep)
	}
	return rs, nil
}

func startReplica(ctx context.Context, in *infra, o replicaOptions, id string) (*replica, error) {
	// Each replica's sessions carry its id as their application_name, and
	// its listener's that id with appListenSuffix, so that a latency run
	// can tell their PostgreSQL processes apart.
	pool, err := pgxpool.New(ctx, withApplicationName(in.dbURL, id))
	if err != nil {
		return nil, fmt.Errorf("replica %s: connecting to PostgreSQL: %w", id, relay.RedactError(err, in.dbURL))
	}
	pub, err := relay.NewAMQPPublisher(relay.AMQPConfig{URL: in.amqpURL, Exchange: in.exchange, Name: id})
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("replica %s: %w", id, err)
	}
	reg := newRegistry()
	rep := &replica{
		id:    id,
		pool:  pool,
		amqp:  pub,
		store: &timedStore{Store: relay.NewPGStore(pool, o.table)},
		pub:   &observedPublisher{Publisher: pub, onPublish: o.onPublish, onConfirm: o.onConfirm},
		dec:   &countingDecoder{Decoder: reg},
		done:  make(chan error, 1),
	}
	if o.onClaim != nil {
		rep.store.onClaim = func(id uuid.UUID, started, at time.Time) { o.onClaim(id.String(), started, at) }
	}
	cfg := o.config
	cfg.RelayID = id
	r, err := relay.New(cfg, rep.store, rep.pub, relay.Options{Decoder: rep.dec})
	if err != nil {
		rep.close()
		return nil, fmt.Errorf("replica %s: %w", id, err)
	}
	rep.relay = r
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	rep.cancel = cancel
	var wake <-chan struct{}
	if o.notify {
		if wake, err = relay.Listen(rctx, withApplicationName(in.dbURL, id+appListenSuffix), o.table, relay.ListenConfig{}); err != nil {
			cancel()
			rep.close()
			return nil, fmt.Errorf("replica %s: %w", id, err)
		}
	}
	go func() { rep.done <- r.Run(rctx, wake) }()
	return rep, nil
}

// newRegistry returns the decoder the replicas use: a registry that knows
// the benchmark's one message type.
func newRegistry() *outbox.Registry {
	reg := outbox.NewRegistry()
	reg.Register(MessageType, OrderPlaced{})
	return reg
}

func (r *replica) close() {
	_ = r.amqp.Close()
	r.pool.Close()
}

// published returns how many rows the replicas have marked published.
func (rs *replicaSet) published() int64 {
	var n int64
	for _, r := range rs.reps {
		n += r.relay.Totals().Published.Load()
	}
	return n
}

// lostLeases returns how many marks the replicas found without a lease.
func (rs *replicaSet) lostLeases() int64 {
	var n int64
	for _, r := range rs.reps {
		n += r.relay.Totals().LostLeases.Load()
	}
	return n
}

// stop ends every replica (the batch in flight finishes first) and closes
// its connections. Calls after the first do nothing; the totals stay
// readable.
func (rs *replicaSet) stop() error {
	if rs.stopped {
		return nil
	}
	rs.stopped = true
	for _, r := range rs.reps {
		r.cancel()
	}
	var errs []error
	for _, r := range rs.reps {
		select {
		case err := <-r.done:
			if err != nil {
				errs = append(errs, fmt.Errorf("replica %s: %w", r.id, err))
			}
		case <-time.After(time.Minute):
			errs = append(errs, fmt.Errorf("replica %s did not stop within a minute", r.id))
		}
		r.close()
	}
	return errors.Join(errs...)
}

// breakdown adds up where the replicas spent their time; window is the
// publish window of each replica.
func (rs *replicaSet) breakdown(wall time.Duration, window int) *result.Breakdown {
	var claim, mark, publish, wait, decode callClock
	var first, last time.Duration
	var open float64
	end := time.Now()
	for _, r := range rs.reps {
		open += r.pub.window.mean(end)
		for _, p := range []struct{ dst, src *callClock }{
			{&claim, &r.store.claim}, {&mark, &r.store.mark}, {&publish, &r.pub.publish},
			{&wait, &r.pub.wait}, {&decode, &r.dec.clock},
		} {
			p.dst.calls.Add(p.src.calls.Load())
			p.dst.nanos.Add(p.src.nanos.Load())
			p.dst.rows.Add(p.src.rows.Load())
		}
		f, l := r.store.claimTrend()
		first += f
		last += l
	}
	// Shares are of count x wall: each replica's loop is one goroutine.
	busy := wall * time.Duration(len(rs.reps))
	b := &result.Breakdown{
		Claim:       claim.report(busy),
		Mark:        mark.report(busy),
		Publish:     publish.report(busy),
		ConfirmWait: wait.report(busy),
		Decode:      decode.report(busy),
		LostLeases:  rs.lostLeases(),
	}
	if n := len(rs.reps); n > 0 && window > 0 {
		b.WindowFill = open / float64(n*window)
	}
	b.LoopOther = max(0, 1-b.Publish.ShareOfWall-b.ConfirmWait.ShareOfWall-b.Decode.ShareOfWall)
	if n := len(rs.reps); n > 0 {
		b.ClaimFirstTenthMs = float64(first/time.Duration(n)) / 1e6
		b.ClaimLastTenthMs = float64(last/time.Duration(n)) / 1e6
	}
	return b
}
