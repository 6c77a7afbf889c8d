package bench

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxlab/outboxlab/internal/bench/result"
	"github.com/outboxlab/outboxlab/outbox"
	"github.com/outboxlab/outboxlab/relay"
)

// Soak contenders.
const (
	SoakRelay     = "relay"
	SoakWatermill = "watermill"
)

// SoakOptions configures Soak. The zero value soaks this repository's
// relay with a million events.
type SoakOptions struct {
	// Contender is SoakRelay (default) or SoakWatermill.
	Contender string
	// Events is how many events the run pushes through. Default
	// 1,000,000.
	Events int
	// Backlog bounds the events staged and not yet published: the
	// producer stages a chunk whenever fewer are waiting, so that the
	// relay works at its own pace on a table that ages, not on one
	// backlog. Default 20,000.
	Backlog int
	// Chunk is how many events one COPY (one transaction of watermill's
	// publisher) stages. Default 5,000.
	Chunk int
	// Retention and SweepInterval are this repository's relay's:
	// processed rows are swept once Retention old, every SweepInterval.
	// Defaults 30 s and 5 s, so that the table churns many times over.
	Retention, SweepInterval time.Duration
	// Every is the sampling interval. Default 5 s.
	Every time.Duration
	// Timeout bounds the run. Default 30 minutes.
	Timeout time.Duration
	// Schema, Exchange and Queue are where the run works; all are
	// dropped first and removed at the end. Defaults "outboxlab_soak",
	// "outboxlab.soak" and "outboxlab.soak".
	Schema, Exchange, Queue string
	// Logf receives progress lines; nil discards them.
	Logf func(format string, args ...any)
}

// Defaults of SoakOptions.
const (
	DefaultSoakEvents  = 1_000_000
	DefaultSoakBacklog = 20_000
	DefaultSoakChunk   = 5_000
)

func (o SoakOptions) withDefaults() (SoakOptions, error) {
	if o.Contender == "" {
		o.Contender = SoakRelay
	}
	if o.Contender != SoakRelay && o.Contender != SoakWatermill {
		return o, fmt.Errorf("soak contender %q: want %s or %s", o.Contender, SoakRelay, SoakWatermill)
	}
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	defd := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	def(&o.Events, DefaultSoakEvents)
	def(&o.Backlog, DefaultSoakBacklog)
	def(&o.Chunk, DefaultSoakChunk)
	defd(&o.Retention, 30*time.Second)
	defd(&o.SweepInterval, 5*time.Second)
	defd(&o.Every, 5*time.Second)
	defd(&o.Timeout, 30*time.Minute)
	if o.Events < 0 || o.Backlog < 0 || o.Chunk < 0 || o.Retention < 0 || o.SweepInterval < 0 || o.Every < 0 || o.Timeout < 0 {
		return o, errors.New("soak options: every count and duration must be positive")
	}
	if o.Schema == "" {
		o.Schema = "outboxlab_soak"
	}
	if o.Exchange == "" {
		o.Exchange = "outboxlab.soak"
	}
	if o.Queue == "" {
		o.Queue = "outboxlab.soak"
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	return o, nil
}

// soakContender is the relay a soak runs: how it stages a chunk, how
// many events it has published, and how it stops.
type soakContender struct {
	table     outbox.Table
	stage     func(ctx context.Context, w *workload) error
	published func() int64
	stop      func() error
	// claim and sweep select the contender's statements in
	// pg_stat_statements (a WHERE clause on query, with claimArg or
	// sweepArg as $1); sweep is empty for a contender that sweeps
	// nothing.
	claim, sweep   string
	claimArg       string
	sweepArg       string
	claimStatement string
	config         string
	// note is what a reader of the run should know of the contender.
	note string
}

// Soak pushes o.Events events through one relay's outbox on env, staging
// them in chunks as the relay drains them, and samples every o.Every: the
// rate, the claim statement's mean execution time, the table's live and
// dead tuples and its size with its indexes, autovacuums and sweeps. A
// REPEATABLE READ transaction holds back vacuum from a third of the
// events published to two thirds. The queue the relay publishes to is
// purged at every sample: the soak measures the table's ageing, not
// delivery, which the chaos scenarios judge. It needs pg_stat_statements
// in the database (the harness's image loads it).
func Soak(ctx context.Context, env Env, opts SoakOptions) (result.Soak, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return result.Soak{}, err
	}
	res := result.Soak{Contender: o.Contender, Events: o.Events}
	in, err := newInfra(ctx, env, o.Schema, o.Exchange, o.Queue)
	if err != nil {
		return res, err
	}
	defer in.close()
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if cerr := in.cleanup(cctx); cerr != nil {
			o.Logf("soak: cleaning up: %v", cerr)
		}
	}()
	if _, err := in.admin.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_stat_statements`); err != nil {
		return res, fmt.Errorf("soak: pg_stat_statements: %w", err)
	}
	if _, err := in.admin.Exec(ctx, `SELECT pg_stat_statements_reset()`); err != nil {
		return res, fmt.Errorf("soak: pg_stat_statements (the database must load it: shared_preload_libraries): %w", err)
	}
	var c *soakContender
	if o.Contender == SoakRelay {
		c, err = soakRelay(ctx, in, o)
	} else {
		c, err = soakWatermill(ctx, in)
	}
	if err != nil {
		return res, err
	}
	res.Config, res.ClaimStatement = c.config, c.claimStatement
	if c.note != "" {
		res.Notes = append(res.Notes, c.note)
	}
	o.Logf("soak: %s: pushing %d events through %s, at most %d waiting", o.Contender, o.Events, c.table, o.Backlog)

	rctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	start := time.Now()
	var staged atomic.Int64
	var stageErr error
	var wg sync.WaitGroup
	wg.Go(func() {
		stageErr = soakStage(rctx, o, c, &staged)
	})
	hold := &vacuumHold{in: in}
	defer hold.release()
	s := soakSampler{in: in, c: c, start: start}
	if err := s.take(rctx, 0, 0, false); err != nil { // the baseline of the counters
		cancel()
		wg.Wait()
		_ = c.stop()
		return res, err
	}
	tick := time.NewTicker(o.Every)
	defer tick.Stop()
	done := false
	for !done {
		select {
		case <-rctx.Done():
			done = true
		case <-tick.C:
		}
		pub := c.published()
		switch {
		case !hold.began() && pub >= int64(o.Events)/3:
			if err := hold.begin(rctx); err != nil {
				res.Notes = append(res.Notes, "the vacuum-holding transaction could not begin: "+err.Error())
			}
			res.HoldFrom = time.Since(start).Seconds()
		case hold.open() && pub >= int64(o.Events)*2/3:
			hold.release()
			res.HoldTo = time.Since(start).Seconds()
		}
		if err := s.take(context.WithoutCancel(rctx), staged.Load(), pub, hold.open()); err != nil {
			res.Notes = append(res.Notes, "a sample was lost: "+err.Error())
		}
		if err := in.purge(context.WithoutCancel(rctx)); err != nil {
			res.Notes = append(res.Notes, "purging the queue: "+err.Error())
		}
		last := s.samples[len(s.samples)-1]
		o.Logf("soak: %s: %6.0fs %9d published (%6.0f/s), claim %.2f ms, %d dead tuples, %s table and indexes%s",
			o.Contender, last.At, last.Published, last.Rate, last.ClaimMs, last.DeadTuples, result.Bytes(last.TableBytes+last.IndexBytes),
			map[bool]string{true: ", vacuum held back", false: ""}[last.Holding])
		if pub >= int64(o.Events) {
			done = true
		}
	}
	res.Seconds = time.Since(start).Seconds()
	res.Published = c.published()
	res.TimedOut = res.Published < int64(o.Events)
	if hold.open() {
		hold.release()
		res.HoldTo = res.Seconds
	}
	cancel()
	wg.Wait()
	if err := c.stop(); err != nil {
		return res, err
	}
	res.Samples = s.samples[1:]
	if s.claimCalls == 0 {
		res.Notes = append(res.Notes, "the claim statement was not found in pg_stat_statements: "+s.topStatements(context.WithoutCancel(ctx)))
	}
	if stageErr != nil && !errors.Is(stageErr, context.Canceled) && !errors.Is(stageErr, context.DeadlineExceeded) {
		return res, fmt.Errorf("soak: staging: %w", stageErr)
	}
	if res.TimedOut {
		res.Notes = append(res.Notes, fmt.Sprintf("the run stopped at its timeout of %s with %d of %d events published", o.Timeout, res.Published, o.Events))
	}
	return res, nil
}

// soakStage stages chunks of events as the relay drains them, keeping
// at most o.Backlog waiting, until o.Events are staged.
func soakStage(ctx context.Context, o SoakOptions, c *soakContender, staged *atomic.Int64) error {
	for chunk := uint64(0); staged.Load() < int64(o.Events); chunk++ {
		for staged.Load()-c.published() > int64(o.Backlog-o.Chunk) {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(50 * time.Millisecond):
			}
		}
		n := min(o.Chunk, o.Events-int(staged.Load()))
		w, err := newWorkload(n, DefaultPayloadBytes, 1+chunk, time.Now().Truncate(time.Millisecond))
		if err != nil {
			return err
		}
		if err := c.stage(ctx, w); err != nil {
			return err
		}
		staged.Add(int64(n))
	}
	return nil
}

// soakPoll is the poll interval of the soak's relay: the producer stages
// without NOTIFY, so the relay finds each chunk by polling, and its
// default of 5 s would measure the wait rather than the table.
const soakPoll = 100 * time.Millisecond

// soakRelay starts one replica of this repository's relay on a table of
// its own, with its sweep on.
func soakRelay(ctx context.Context, in *infra, o SoakOptions) (*soakContender, error) {
	table, err := in.newOutbox(ctx, "outbox_soak")
	if err != nil {
		return nil, err
	}
	cfg := relay.Config{Retention: o.Retention, SweepInterval: o.SweepInterval, PollInterval: soakPoll}
	rs, err := startReplicas(ctx, in, replicaOptions{table: table, count: 1, config: cfg})
	if err != nil {
		return nil, err
	}
	q := rs.reps[0].store.Store.(*relay.PGStore).Statements()
	return &soakContender{
		table:          table,
		stage:          func(ctx context.Context, w *workload) error { return copyEvents(ctx, in.admin, table, w) },
		published:      rs.published,
		stop:           rs.stop,
		claim:          `left(query, length($1)) = $1`,
		claimArg:       beforeLiteral(q.Claim),
		sweep:          `left(query, length($1)) = $1`,
		sweepArg:       beforeLiteral(q.Sweep),
		claimStatement: q.Claim,
		config: fmt.Sprintf("this repository's relay, one replica in the process, its defaults (batch %d, publish window %d) but a poll interval of %s and a retention of %s swept every %s; events staged with COPY in chunks of %d, at most %d waiting",
			relay.DefaultBatchSize, relay.DefaultPublishWindow, soakPoll, o.Retention, o.SweepInterval, o.Chunk, o.Backlog),
	}, nil
}

// beforeLiteral is q up to its first string literal: pg_stat_statements
// keeps a statement with its constants made parameters, so the text
// before the first one is what it keeps of q as sent.
func beforeLiteral(q string) string {
	if i := strings.IndexByte(q, '\''); i >= 0 {
		return q[:i]
	}
	return q
}

// soakWatermill starts watermill's forwarder on its own tables.
func soakWatermill(ctx context.Context, in *infra) (*soakContender, error) {
	peer, err := newWatermillPeer(ctx, in)
	if err != nil {
		return nil, err
	}
	if err := peer.tables.Migrate(ctx, peer.pool); err != nil {
		peer.close()
		return nil, fmt.Errorf("watermill: %w", err)
	}
	run, err := peer.start(ctx)
	if err != nil {
		peer.close()
		return nil, err
	}
	fragment := `"offset", transaction_id, uuid, payload, metadata FROM ` + peer.tables.Messages.Ident()
	return &soakContender{
		table:     peer.tables.Messages,
		stage:     peer.stageEvents,
		published: run.forwarded.Load,
		stop: func() error {
			err := run.stop()
			peer.close()
			return err
		},
		claim:          `query LIKE '%' || $1 || '%'`,
		claimArg:       fragment,
		claimStatement: "the SQL subscriber's SELECT (watermill-sql's PostgreSQL schema adapter): ... " + fragment + " ... FOR UPDATE",
		config:         "watermill v1.5.1 forwarder, watermill-sql v4.1.2 (pgx, default PostgreSQL schema and offsets adapters, batch 100), watermill-amqp v3.0.2 publisher with confirms; events staged through the SQL publisher in transactions of 5,000",
		note:           "watermill's SQL outbox deletes nothing: its messages table keeps every event, and its subscriber reads past the acknowledged offset",
	}, nil
}

// vacuumHold is a transaction that holds back vacuum: REPEATABLE READ,
// with the snapshot its first statement takes kept until release.
type vacuumHold struct {
	in      *infra
	mu      sync.Mutex
	tx      pgx.Tx
	started bool
}

func (h *vacuumHold) began() bool { h.mu.Lock(); defer h.mu.Unlock(); return h.started }
func (h *vacuumHold) open() bool  { h.mu.Lock(); defer h.mu.Unlock(); return h.tx != nil }

func (h *vacuumHold) begin(ctx context.Context) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.started = true
	tx, err := h.in.admin.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `SELECT txid_current_snapshot()`); err != nil {
		_ = tx.Rollback(context.WithoutCancel(ctx))
		return err
	}
	h.tx = tx
	return nil
}

func (h *vacuumHold) release() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.tx != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = h.tx.Rollback(ctx)
		h.tx = nil
	}
}

// soakSampler takes the samples of a soak run.
type soakSampler struct {
	in      *infra
	c       *soakContender
	start   time.Time
	samples []result.SoakSample
	// the counters of the sample before
	at                            time.Time
	claimCalls, sweepCalls, swept int64
	claimMs, sweepMs              float64
	published                     int64
}

// statements reads the calls, total time and rows of the statements
// where selects.
func (s *soakSampler) statements(ctx context.Context, where, arg string) (calls int64, ms float64, rows int64, err error) {
	if where == "" {
		return 0, 0, 0, nil
	}
	err = s.in.admin.QueryRow(ctx, `SELECT coalesce(sum(calls), 0)::bigint, coalesce(sum(total_exec_time), 0)::float8, coalesce(sum(rows), 0)::bigint
FROM pg_stat_statements WHERE `+where, arg).Scan(&calls, &ms, &rows)
	return calls, ms, rows, err
}

// topStatements names the statements that ran most, for a run whose
// claim statement was not found.
func (s *soakSampler) topStatements(ctx context.Context) string {
	rows, err := s.in.admin.Query(ctx, `SELECT left(regexp_replace(query, '\s+', ' ', 'g'), 160), calls FROM pg_stat_statements ORDER BY calls DESC LIMIT 5`)
	if err != nil {
		return err.Error()
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var q string
		var n int64
		if err := rows.Scan(&q, &n); err != nil {
			return err.Error()
		}
		out = append(out, fmt.Sprintf("%q (%d calls)", q, n))
	}
	return "the statements that ran most: " + strings.Join(out, "; ")
}

// take takes one sample; the first (at the start) only sets the
// counters' baseline.
func (s *soakSampler) take(ctx context.Context, staged, published int64, holding bool) error {
	now := time.Now()
	cc, cms, _, err := s.statements(ctx, s.c.claim, s.c.claimArg)
	if err != nil {
		return fmt.Errorf("reading the claim statement's figures: %w", err)
	}
	sc, sms, srows, err := s.statements(ctx, s.c.sweep, s.c.sweepArg)
	if err != nil {
		return fmt.Errorf("reading the sweep statement's figures: %w", err)
	}
	st, err := tableStats(ctx, s.in, s.c.table, "")
	if err != nil {
		return err
	}
	var autovacuums int64
	if err := s.in.admin.QueryRow(ctx, `SELECT autovacuum_count FROM pg_stat_user_tables WHERE relid = $1::regclass`, s.c.table.Ident()).Scan(&autovacuums); err != nil {
		return fmt.Errorf("reading autovacuums of %s: %w", s.c.table, err)
	}
	x := result.SoakSample{
		At: now.Sub(s.start).Seconds(), Staged: staged, Published: published,
		LiveTuples: st.LiveTuples, DeadTuples: st.DeadTuples, TableBytes: st.TableBytes, IndexBytes: st.IndexBytes,
		Autovacuums: autovacuums, Holding: holding,
		ClaimCalls: cc - s.claimCalls, SweepCalls: sc - s.sweepCalls, SweptRows: srows - s.swept, SweepMs: sms - s.sweepMs,
	}
	if x.ClaimCalls > 0 {
		x.ClaimMs = (cms - s.claimMs) / float64(x.ClaimCalls)
	}
	if !s.at.IsZero() {
		x.Rate = float64(published-s.published) / now.Sub(s.at).Seconds()
	}
	s.samples = append(s.samples, x)
	s.at, s.published = now, published
	s.claimCalls, s.claimMs, s.sweepCalls, s.sweepMs, s.swept = cc, cms, sc, sms, srows
	return nil
}
