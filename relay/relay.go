// Package relay publishes staged outbox rows to the broker: claim a batch
// under a lease, publish each row with a confirm, mark it processed only
// while the lease still holds, back off or park what fails, sweep what is
// old. Its two seams are Store (the outbox table) and Publisher (the broker);
// PostgreSQL and RabbitMQ implementations live here too.
package relay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
)

// Options carries a relay's optional collaborators. The zero value is
// valid: no metrics, no failpoints, logs discarded, every message type known.
type Options struct {
	Logger     *slog.Logger
	Metrics    *Metrics
	Failpoints Failpoints
	// Decoder resolves message types; nil accepts every type and payload.
	Decoder Decoder
}

// Relay drains one outbox table. Several relays with distinct RelayIDs may
// drain the same table at once.
type Relay struct {
	cfg    Config
	store  Store
	pub    Publisher
	dec    Decoder
	log    *slog.Logger
	m      *Metrics
	fp     Failpoints
	totals Totals

	lastSweep  time.Time
	lastReport time.Time
}

// Totals are a relay's running counts since it was built.
type Totals struct {
	Ticks, Claimed, Published, LostLeases, Attempts, Parked, Swept, BrokerFailures atomic.Int64
}

// TickResult counts what one tick did.
type TickResult struct {
	Batches    int
	Claimed    int
	Published  int
	LostLeases int
	Attempts   int
	Parked     int
	Swept      int
}

func (t *TickResult) add(o TickResult) {
	t.Batches += o.Batches
	t.Claimed += o.Claimed
	t.Published += o.Published
	t.LostLeases += o.LostLeases
	t.Attempts += o.Attempts
	t.Parked += o.Parked
	t.Swept += o.Swept
}

// New builds a relay. cfg gets its defaults, then must validate.
func New(cfg Config, store Store, pub Publisher, opts Options) (*Relay, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("relay config: %w", err)
	}
	if store == nil || pub == nil {
		return nil, errors.New("relay: store and publisher are required")
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return &Relay{
		cfg:   cfg,
		store: store,
		pub:   pub,
		dec:   opts.Decoder,
		log:   log.With("relay", cfg.RelayID),
		m:     opts.Metrics,
		fp:    opts.Failpoints,
	}, nil
}

// Config returns the relay's configuration with defaults applied.
func (r *Relay) Config() Config { return r.cfg }

// Totals returns the relay's running counts.
func (r *Relay) Totals() *Totals { return &r.totals }

// Run ticks until ctx ends: drain everything eligible, then sleep until the
// poll interval passes or wake fires (wake may be nil: polling only). A
// failed tick is logged and the loop goes on. When ctx ends, the batch in
// flight is finished (every call in it is bounded by its timeout) and Run
// returns nil.
func (r *Relay) Run(ctx context.Context, wake <-chan struct{}) error {
	work := context.WithoutCancel(ctx)
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
		case <-wake:
			if !timer.Stop() {
				select {
				case <-timer.C:
				default:
				}
			}
		}
		start := r.cfg.Now()
		res, err := r.tick(work, ctx.Done())
		if err != nil {
			if r.m != nil {
				r.m.TickFailures.Inc()
			}
			r.log.Error("tick failed", "err", err, "published", res.Published)
		} else if res.Published > 0 || res.Parked > 0 || res.LostLeases > 0 {
			r.log.Debug("tick", "published", res.Published, "parked", res.Parked,
				"lost_leases", res.LostLeases, "batches", res.Batches)
		}
		if r.m != nil {
			r.m.TickDuration.Observe(r.cfg.Now().Sub(start).Seconds())
		}
		timer.Reset(r.cfg.PollInterval)
	}
}

// Tick drains every eligible row, batch by batch, sweeps when the sweep is
// due, and refreshes the backlog metrics. It stops at the first failed
// batch and returns the error; what that batch got confirmed is marked.
func (r *Relay) Tick(ctx context.Context) (TickResult, error) {
	return r.tick(ctx, nil)
}

func (r *Relay) tick(ctx context.Context, stop <-chan struct{}) (TickResult, error) {
	r.totals.Ticks.Add(1)
	var total TickResult
	for {
		res, err := r.batch(ctx)
		total.add(res)
		if err != nil {
			return total, err
		}
		if res.Claimed < r.cfg.BatchSize {
			break
		}
		select {
		case <-stop:
			return total, nil
		default:
		}
	}
	if now := r.cfg.Now(); r.lastSweep.IsZero() || now.Sub(r.lastSweep) >= r.cfg.SweepInterval {
		n, err := r.sweep(ctx)
		total.Swept += n
		if err != nil {
			return total, err
		}
		r.lastSweep = now
	}
	// The backlog statistics count the whole table: refresh them once per
	// poll interval, not on every wake-up.
	if now := r.cfg.Now(); r.m != nil && (r.lastReport.IsZero() || now.Sub(r.lastReport) >= r.cfg.PollInterval) {
		if err := r.report(ctx); err != nil {
			return total, err
		}
		r.lastReport = now
	}
	return total, nil
}

// inflight is a publish awaiting its confirm.
type inflight struct {
	row    Row
	conf   Confirmation
	ctx    context.Context
	cancel context.CancelFunc
}

// batch claims, publishes and marks one batch.
func (r *Relay) batch(ctx context.Context) (res TickResult, err error) {
	cctx, cancel := context.WithTimeout(ctx, r.cfg.StoreTimeout)
	rows, err := r.store.Claim(cctx, r.cfg.RelayID, r.cfg.BatchSize, r.cfg.Lease)
	cancel()
	if err != nil {
		return res, fmt.Errorf("claiming outbox rows: %w", err)
	}
	res.Batches = 1
	res.Claimed = len(rows)
	r.totals.Claimed.Add(int64(len(rows)))
	if len(rows) == 0 {
		return res, nil
	}
	if err := r.failpoint(ctx, FailAfterClaim); err != nil {
		return res, err
	}

	var (
		confirmed []uuid.UUID
		brokerErr error
		pending   = make([]inflight, 0, min(len(rows), r.cfg.PublishWindow))
	)
	// settle waits for the oldest publish in flight and files its outcome.
	settle := func() {
		p := pending[0]
		pending = pending[1:]
		werr := p.conf.Wait(p.ctx)
		p.cancel()
		if werr == nil {
			confirmed = append(confirmed, p.row.ID)
			return
		}
		r.confirmFailed(werr)
		if Classify(werr) == ClassBroker {
			if brokerErr == nil {
				brokerErr = fmt.Errorf("confirming %s: %w", p.row.ID, werr)
			}
			return
		}
		r.rowFailed(ctx, p.row, werr, &res)
	}

	for _, row := range rows {
		if brokerErr != nil {
			break
		}
		if r.dec != nil {
			if _, derr := r.dec.Decode(row.Type, row.Payload); derr != nil {
				r.rowFailed(ctx, row, derr, &res)
				continue
			}
		}
		if len(pending) == r.cfg.PublishWindow {
			settle()
			if brokerErr != nil {
				break
			}
		}
		pctx, pcancel := context.WithTimeout(ctx, r.cfg.PublishTimeout)
		conf, perr := r.pub.Publish(pctx, MessageOf(row))
		if perr != nil {
			pcancel()
			r.confirmFailed(perr)
			if Classify(perr) == ClassBroker {
				brokerErr = fmt.Errorf("publishing %s: %w", row.ID, perr)
				break
			}
			r.rowFailed(ctx, row, perr, &res)
			continue
		}
		pending = append(pending, inflight{row: row, conf: conf, ctx: pctx, cancel: pcancel})
		if err := r.failpoint(ctx, FailAfterPublishBeforeConfirm); err != nil {
			for _, p := range pending {
				p.cancel()
			}
			return res, err
		}
	}
	for len(pending) > 0 {
		settle()
	}
	if brokerErr != nil {
		r.totals.BrokerFailures.Add(1)
	}
	if len(confirmed) > 0 {
		if err := r.failpoint(ctx, FailAfterConfirmBeforeMark); err != nil {
			return res, err
		}
		if err := r.mark(ctx, confirmed, &res); err != nil {
			return res, errors.Join(err, brokerErr)
		}
		if err := r.failpoint(ctx, FailAfterMark); err != nil {
			return res, err
		}
	}
	if brokerErr != nil {
		return res, brokerErr
	}
	return res, nil
}

// mark marks the confirmed rows and counts those whose lease was lost.
func (r *Relay) mark(ctx context.Context, ids []uuid.UUID, res *TickResult) error {
	mctx, cancel := context.WithTimeout(ctx, r.cfg.StoreTimeout)
	marked, err := r.store.Mark(mctx, r.cfg.RelayID, ids)
	cancel()
	if err != nil {
		return fmt.Errorf("marking %d confirmed rows: %w", len(ids), err)
	}
	res.Published += len(marked)
	r.totals.Published.Add(int64(len(marked)))
	if r.m != nil {
		r.m.Published.Add(float64(len(marked)))
	}
	if lost := len(ids) - len(marked); lost > 0 {
		res.LostLeases += lost
		r.totals.LostLeases.Add(int64(lost))
		if r.m != nil {
			r.m.LostLeases.Add(float64(lost))
		}
		r.log.Warn("lease lost before mark: rows published but left to their new holder",
			"lost", lost, "ids", missing(ids, marked))
	}
	return nil
}

// rowFailed files a row-level failure: park poison at once, otherwise one
// attempt and a backoff (parking at the limit). Store errors here are
// logged, not returned: the lease runs out and the row comes back.
func (r *Relay) rowFailed(ctx context.Context, row Row, cause error, res *TickResult) {
	sctx, cancel := context.WithTimeout(ctx, r.cfg.StoreTimeout)
	defer cancel()
	if Classify(cause) == ClassPoison {
		ok, err := r.store.Park(sctx, r.cfg.RelayID, row.ID, cause.Error())
		switch {
		case err != nil:
			r.log.Error("parking row", "id", row.ID, "cause", cause, "err", err)
		case !ok:
			r.lostLease(row.ID, "park", res)
		default:
			res.Parked++
			r.totals.Parked.Add(1)
			if r.m != nil {
				r.m.Parked.Inc()
			}
			r.log.Warn("row parked", "id", row.ID, "type", row.Type, "cause", cause)
		}
		return
	}
	out, err := r.store.Retry(sctx, r.cfg.RelayID, row.ID, r.cfg.Policy(), cause.Error())
	switch {
	case err != nil:
		r.log.Error("recording attempt", "id", row.ID, "cause", cause, "err", err)
	case !out.Applied:
		r.lostLease(row.ID, "retry", res)
	default:
		res.Attempts++
		r.totals.Attempts.Add(1)
		if r.m != nil {
			r.m.Attempts.Inc()
		}
		if out.Parked {
			res.Parked++
			r.totals.Parked.Add(1)
			if r.m != nil {
				r.m.Parked.Inc()
			}
			r.log.Warn("row parked after attempts", "id", row.ID, "attempts", out.Attempts, "cause", cause)
		} else {
			r.log.Info("row failed, backing off", "id", row.ID, "attempts", out.Attempts, "cause", cause)
		}
	}
}

func (r *Relay) lostLease(id uuid.UUID, op string, res *TickResult) {
	res.LostLeases++
	r.totals.LostLeases.Add(1)
	if r.m != nil {
		r.m.LostLeases.Inc()
	}
	r.log.Warn("lease lost", "id", id, "op", op)
}

func (r *Relay) confirmFailed(err error) {
	if r.m != nil {
		r.m.ConfirmsFailed.WithLabelValues(Classify(err).String()).Inc()
	}
}

// sweep deletes processed rows past retention in small batches.
func (r *Relay) sweep(ctx context.Context) (int, error) {
	total := 0
	for {
		sctx, cancel := context.WithTimeout(ctx, r.cfg.StoreTimeout)
		n, err := r.store.Sweep(sctx, r.cfg.Retention, r.cfg.SweepBatch)
		cancel()
		total += n
		if err != nil {
			return total, fmt.Errorf("sweeping processed rows: %w", err)
		}
		if n < r.cfg.SweepBatch {
			break
		}
	}
	r.totals.Swept.Add(int64(total))
	if r.m != nil {
		r.m.Swept.Add(float64(total))
	}
	return total, nil
}

func (r *Relay) report(ctx context.Context) error {
	sctx, cancel := context.WithTimeout(ctx, r.cfg.StoreTimeout)
	st, err := r.store.Stats(sctx)
	cancel()
	if err != nil {
		return fmt.Errorf("reading backlog stats: %w", err)
	}
	r.m.Backlog.Set(float64(st.Pending))
	r.m.Faulted.Set(float64(st.Faulted))
	r.m.OldestEligible.Set(st.OldestEligibleAge.Seconds())
	return nil
}

func (r *Relay) failpoint(ctx context.Context, name string) error {
	if r.fp == nil {
		return nil
	}
	if err := r.fp.Inject(ctx, name); err != nil {
		return fmt.Errorf("failpoint %s: %w", name, err)
	}
	return nil
}

// missing returns the ids of want not in got.
func missing(want, got []uuid.UUID) []uuid.UUID {
	seen := make(map[uuid.UUID]bool, len(got))
	for _, id := range got {
		seen[id] = true
	}
	var out []uuid.UUID
	for _, id := range want {
		if !seen[id] {
			out = append(out, id)
		}
	}
	return out
}
