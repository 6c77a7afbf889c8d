package property

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/outboxlab/outboxlab/chaos/inproc"
	"github.com/outboxlab/outboxlab/fixture"
	"github.com/outboxlab/outboxlab/internal/sim"

	"github.com/outboxlab/outboxlab/workload"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"pgregory.net/rapid"

	"github.com/outboxlab/outboxlab/chaos"
	"github.com/outboxlab/outboxlab/checker"
	"github.com/outboxlab/outboxlab/consumer"
	"github.com/outboxlab/outboxlab/history"
	"github.com/outboxlab/outboxlab/internal/mutant"
	"github.com/outboxlab/outboxlab/outbox"
	"github.com/outboxlab/outboxlab/relay"
	"github.com/outboxlab/outboxlab/scenarios"
	"github.com/outboxlab/outboxlab/testenv"
)

// Settings of the in-process relays of the infrastructure property: short
// enough that a lease expires within an action.
const (
	infraLease          = 2 * time.Second
	infraPublishTimeout = 500 * time.Millisecond
	infraMaxAttempts    = 3
)

var infraPolicy = relay.RetryPolicy{MaxAttempts: infraMaxAttempts, BackoffBase: 100 * time.Millisecond, BackoffMax: time.Second}

// infraCase is one test case: its own schema, table, exchange and queue,
// two producers, two in-process relays, one consumer, and the faults.
type infraCase struct {
	env *testenv.Env
	rec *history.Recorder
	// fx is the case's schema, tables, topology and pools; table,
	// exchange and queue are its one context's.
	fx       *fixture.Fixture
	table    outbox.Table
	exchange string
	queue    string
	nemesis  *chaos.Nemesis

	producers []*workload.Producer
	relays    []*infraRelay
	links     []string // fault names of the links
	skews     []string // fault names of the clock skews
	poison    map[string]bool
	events    int
	trace     []string

	consumerStop context.CancelFunc
	consumerDone sync.WaitGroup
	form         mutant.RelayForm
}

// infraRelay is one in-process relay replica whose store and publisher
// record into the history.
type infraRelay struct {
	name  string
	clock *chaos.Clock
	pool  *pgxpool.Pool
	pub   *relay.AMQPPublisher
	fp    *inproc.Failpoints
	r     *relay.Relay
	// paused is set while a tick holds its claims at after-claim.
	paused    bool
	pauseDone chan error
}

func (c *infraCase) log(t *rapid.T, format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	c.trace = append(c.trace, s)
	t.Log(s)
}

// runInfra runs one test case; form's store and publisher decorators (a
// relay-side mutant of the catalogue, none for the reference) decorate
// each relay's.
func runInfra(t *rapid.T, env *testenv.Env, form mutant.RelayForm) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := &infraCase{env: env, rec: &history.Recorder{}, poison: map[string]bool{}, form: form}
	defer c.cleanup()
	if err := c.setup(ctx, t); err != nil {
		t.Fatalf("setting up: %v", err)
	}
	chaos.RecordPhase(c.rec, history.PhaseSafety)
	t.Repeat(c.actions(ctx))
	rep, err := c.finish(ctx, t)
	if err != nil {
		failCase(t, c.trace, err.Error())
	}
	if !rep.Valid {
		failCase(t, c.trace, rep.Summary())
	}
}

func (c *infraCase) setup(ctx context.Context, t *rapid.T) error {
	var err error
	if c.fx, err = fixture.New(ctx, c.env, fixture.Options{Prefix: "prop_infra", AppConns: 6, ConsumerConns: 6}); err != nil {
		return err
	}
	ctx0 := c.fx.Contexts[0]
	c.table, c.exchange, c.queue = ctx0.Table, ctx0.Topology.Exchange, ctx0.Topology.Queue
	if c.nemesis, err = chaos.NewNemesis(c.rec); err != nil {
		return err
	}
	for _, l := range []struct {
		link, name string
		class      history.FaultClass
		targets    []string
	}{
		{testenv.LinkRelayDB, "relay->db down", history.ClassDB, nil},
		{testenv.LinkRelayBroker, "relay->broker down", history.ClassBroker, nil},
		{testenv.LinkConsumerBroker, "consumer-1->broker down", history.ClassBroker, []string{"consumer-1"}},
	} {
		link, err := chaos.LinkByName(ctx, c.env.ToxiproxyClient(), l.link, "")
		if err != nil {
			return err
		}
		link.WithClass(l.class).WithTargets(l.targets...)
		if err := c.nemesis.Add(chaos.Down(link).WithName(l.name)); err != nil {
			return err
		}
		c.links = append(c.links, l.name)
	}
	offsets := []time.Duration{-10 * time.Minute, -time.Minute, time.Minute, 10 * time.Minute}
	for i := range 2 {
		clk := chaos.NewClock(0)
		p := &workload.Producer{
			Name:  fmt.Sprintf("producer-%d", i+1),
			Store: workload.PG{DB: c.fx.App, Table: c.table, Business: c.fx.Business},
			Mode:  workload.Outbox,
			Rec:   c.rec, Now: clk.Now, StampOccurredAt: true,
		}
		c.producers = append(c.producers, p)
		skew := chaos.NewClockSkew(p.Name, clk, rapid.SampledFrom(offsets).Draw(t, p.Name+" offset"))
		if err := c.nemesis.Add(skew); err != nil {
			return err
		}
		c.skews = append(c.skews, skew.Name())
	}
	for _, name := range []string{"relay-a", "relay-b"} {
		ir := &infraRelay{name: name, clock: chaos.NewClock(0)}
		if ir.pool, err = fixture.Pool(ctx, c.env.DatabaseURL(testenv.LinkRelayDB), 6, ""); err != nil {
			return err
		}
		if err := c.build(ir); err != nil {
			return err
		}
		c.relays = append(c.relays, ir)
		skew := chaos.NewClockSkew(name, ir.clock, rapid.SampledFrom(offsets).Draw(t, name+" offset"))
		if err := c.nemesis.Add(skew); err != nil {
			return err
		}
		c.skews = append(c.skews, skew.Name())
		if err := c.nemesis.Add(c.pauseFault(ir)); err != nil {
			return err
		}
	}
	return c.startConsumer()
}

// build gives ir a fresh relay and publisher, as a restarted process has.
func (c *infraCase) build(ir *infraRelay) error {
	if ir.pub != nil {
		_ = ir.pub.Close()
	}
	pub, err := relay.NewAMQPPublisher(relay.AMQPConfig{
		URL: c.env.AMQPURL(testenv.LinkRelayBroker), Exchange: c.exchange, Name: ir.name, DialTimeout: time.Second,
	})
	if err != nil {
		return err
	}
	ir.pub = pub
	ir.fp = inproc.NewFailpoints()
	ir.fp.SetKill(func() {}) // the kill action returns ErrKilled: the tick ends there
	cfg := relay.Config{
		RelayID: ir.name, PollInterval: 100 * time.Millisecond, BatchSize: 5, Lease: infraLease,
		MaxAttempts: infraPolicy.MaxAttempts, BackoffBase: infraPolicy.BackoffBase, BackoffMax: infraPolicy.BackoffMax,
		PublishTimeout: infraPublishTimeout, StoreTimeout: time.Second, Now: ir.clock.Now,
	}
	base, bpub := c.form.Wrap(sim.NewPGRaw(ir.pool, c.table), pub, ir.clock.Now)
	store := &recStore{Store: base, rec: c.rec, process: ir.name, now: ir.clock.Now}
	ir.r, err = relay.New(cfg, store, &recPublisher{pub: bpub, rec: c.rec, process: ir.name, now: ir.clock.Now},
		relay.Options{Failpoints: ir.fp, Decoder: workload.Registry()})
	return err
}

// pauseFault freezes a relay in the middle of a tick, right after a
// claim, holding its rows; the heal lets the tick go on.
func (c *infraCase) pauseFault(ir *infraRelay) chaos.Fault {
	inject := func(ctx context.Context) error {
		before := ir.fp.Hits(relay.FailAfterClaim)
		if err := ir.fp.Set(relay.FailAfterClaim, "1*pause"); err != nil {
			return err
		}
		done := make(chan error, 1)
		go func() {
			tctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_, err := ir.r.Tick(tctx)
			done <- err
		}()
		held := false
		err := chaos.WaitFor(ctx, 10*time.Millisecond, func(context.Context) (bool, error) {
			if ir.fp.Hits(relay.FailAfterClaim) > before {
				held = true
				return true, nil
			}
			select {
			case <-done:
				return true, nil
			default:
				return false, nil
			}
		})
		if !held {
			ir.fp.Clear(relay.FailAfterClaim)
			return errors.Join(errNothingHeld, err)
		}
		ir.paused, ir.pauseDone = true, done
		return nil
	}
	heal := func(ctx context.Context) error {
		ir.fp.Clear(relay.FailAfterClaim)
		if !ir.paused {
			return nil
		}
		select {
		case <-ir.pauseDone:
		case <-ctx.Done():
			return fmt.Errorf("%s's tick did not end after its pause: %w", ir.name, ctx.Err())
		}
		ir.paused = false
		return nil
	}
	return chaos.NewFuncFault(ir.name+" pause", history.ClassProcess, chaos.KindPause, inject, heal)
}

var errNothingHeld = errors.New("the tick claimed nothing to hold")

// startConsumer runs the consumer in the background.
func (c *infraCase) startConsumer() error {
	cctx, cancel := context.WithCancel(context.Background())
	c.consumerStop = cancel
	in := &recInbox{rec: c.rec, process: "consumer-1"}
	pg, err := consumer.NewPGInbox(c.fx.Cons, fixture.DefaultContext, consumer.RecordEffect(fixture.DefaultContext))
	if err != nil {
		return err
	}
	in.inner = pg
	cons, err := consumer.New(consumer.Config{Name: "orders", MaxDeliveries: 1 << 30}, in, nil)
	if err != nil {
		return err
	}
	src := &consumer.AMQPSource{URL: c.env.AMQPURL(testenv.LinkConsumerBroker), Queue: c.queue, Prefetch: 4,
		HandleTimeout: 5 * time.Second, MinBackoff: 50 * time.Millisecond, MaxBackoff: 500 * time.Millisecond}
	c.consumerDone.Go(func() { _ = src.Run(cctx, cons) })
	return nil
}

// event makes the n-th event of the case: its id derives from the
// schema, its type is unknown (poison) or its payload undecodable when
// asked.
func (c *infraCase) event(kind int) uuid.UUID {
	c.events++
	return uuid.NewSHA1(uuid.NameSpaceOID, []byte(fmt.Sprintf("%s/%d/%d", c.fx.Schema, c.events, kind)))
}

func (c *infraCase) txn(t *rapid.T, rollback bool) workload.Txn {
	n := rapid.IntRange(1, 3).Draw(t, "events")
	var tx workload.Txn
	tx.Rollback = rollback
	for range n {
		kind := rapid.SampledFrom([]int{0, 0, 0, 0, 0, 0, 1, 2}).Draw(t, "kind") // 1 unknown type, 2 undecodable
		id := c.event(kind)
		e := outbox.Event{ID: id, Type: workload.TypeOrderPlaced, Payload: []byte(`{"order_id":"o","amount":1}`)}
		switch kind {
		case 1:
			e.Type = workload.TypeUnknown
			c.poison[id.String()] = true
		case 2:
			e.Payload = []byte(`{"order_id":"o","amount":"lots"}`)
			c.poison[id.String()] = true
		}
		tx.Events = append(tx.Events, e)
	}
	return tx
}

func (c *infraCase) live() []*infraRelay {
	var out []*infraRelay
	for _, r := range c.relays {
		if !r.paused {
			out = append(out, r)
		}
	}
	return out
}

func (c *infraCase) actions(ctx context.Context) map[string]func(*rapid.T) {
	return map[string]func(*rapid.T){
		"commit": func(t *rapid.T) {
			p := c.producers[rapid.IntRange(0, len(c.producers)-1).Draw(t, "producer")]
			tx := c.txn(t, false)
			err := p.Do(ctx, tx)
			c.log(t, "%s commits %d event(s): %v", p.Name, len(tx.Events), errOrOK(err))
		},
		"rollback": func(t *rapid.T) {
			p := c.producers[rapid.IntRange(0, len(c.producers)-1).Draw(t, "producer")]
			tx := c.txn(t, true)
			_ = p.Do(ctx, tx)
			c.log(t, "%s rolls back %d event(s)", p.Name, len(tx.Events))
		},
		"tick": func(t *rapid.T) {
			live := c.live()
			if len(live) == 0 {
				t.Skip("every relay is paused")
			}
			r := pick(t, live)
			tctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			res, err := r.r.Tick(tctx)
			cancel()
			c.log(t, "%s ticks: claimed %d, published %d, lost leases %d, parked %d: %v", r.name, res.Claimed, res.Published, res.LostLeases, res.Parked, errOrOK(err))
		},
		"crash": func(t *rapid.T) {
			live := c.live()
			if len(live) == 0 {
				t.Skip("every relay is paused")
			}
			r := pick(t, live)
			point := rapid.SampledFrom(relay.FailpointNames).Draw(t, "failpoint")
			before := r.fp.Hits(point)
			if err := r.fp.Set(point, "1*kill"); err != nil {
				t.Fatal(err)
			}
			tctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			_, err := r.r.Tick(tctx)
			cancel()
			r.fp.Clear(point)
			if r.fp.Hits(point) == before {
				c.log(t, "%s ticks past no %s: %v", r.name, point, errOrOK(err))
				return
			}
			c.rec.Record(history.Op{Process: r.name, Type: history.Info, F: history.Crash, Meta: history.Meta{Detail: "failpoint " + point}})
			if err := c.build(r); err != nil {
				t.Fatal(err)
			}
			c.rec.Record(history.Op{Process: r.name, Type: history.Info, F: history.Restart})
			c.log(t, "%s crashes at %s and restarts", r.name, point)
		},
		"pause": func(t *rapid.T) {
			live := c.live()
			if len(live) == 0 {
				t.Skip("every relay is paused")
			}
			r := pick(t, live)
			pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err := c.nemesis.Start(pctx, r.name+" pause")
			cancel()
			if err != nil {
				_ = c.nemesis.Stop(ctx, r.name+" pause")
				c.log(t, "%s would pause, but %v", r.name, err)
				return
			}
			c.log(t, "%s pauses holding its claims", r.name)
		},
		"expire": func(t *rapid.T) {
			var paused []string
			for _, r := range c.relays {
				if r.paused {
					paused = append(paused, r.name)
				}
			}
			if len(paused) == 0 {
				t.Skip("no relay is paused")
			}
			wctx, cancel := context.WithTimeout(ctx, infraLease+5*time.Second)
			err := chaos.WaitFor(wctx, 50*time.Millisecond, func(ctx context.Context) (bool, error) {
				var held int
				err := c.fx.Admin.QueryRow(ctx, `SELECT count(*) FROM `+c.table.Ident()+`
					WHERE locked_by = ANY($1) AND locked_until >= now() AND processed_at IS NULL AND faulted_at IS NULL`, paused).Scan(&held)
				return err == nil && held == 0, nil
			})
			cancel()
			if err != nil {
				t.Fatalf("leases of %v did not expire: %v", paused, err)
			}
			c.log(t, "the leases of %v expire", paused)
		},
		"resume": func(t *rapid.T) {
			var paused []*infraRelay
			for _, r := range c.relays {
				if r.paused {
					paused = append(paused, r)
				}
			}
			if len(paused) == 0 {
				t.Skip("no relay is paused")
			}
			r := pick(t, paused)
			if err := c.nemesis.Stop(ctx, r.name+" pause"); err != nil {
				t.Fatal(err)
			}
			c.log(t, "%s resumes", r.name)
		},
		"fault": func(t *rapid.T) {
			names := append(append([]string(nil), c.links...), c.skews...)
			name := rapid.SampledFrom(names).Draw(t, "fault")
			open := false
			for _, o := range c.nemesis.Open() {
				open = open || o == name
			}
			if open {
				_ = c.nemesis.Stop(ctx, name)
				c.log(t, "heal %s", name)
				return
			}
			_ = c.nemesis.Start(ctx, name)
			c.log(t, "inject %s", name)
		},
		"": func(t *rapid.T) { c.invariant(ctx, t) },
	}
}

// pick draws one of relays by name, so that rapid's log reads well.
func pick(t *rapid.T, relays []*infraRelay) *infraRelay {
	names := make([]string, len(relays))
	for i, r := range relays {
		names[i] = r.name
	}
	name := rapid.SampledFrom(names).Draw(t, "relay")
	for _, r := range relays {
		if r.name == name {
			return r
		}
	}
	return relays[0]
}

func errOrOK(err error) string {
	if err != nil {
		return err.Error()
	}
	return "ok"
}

// invariant checks, after every action, what must hold at every moment:
// no row of a transaction that definitely rolled back is in the outbox,
// and no effect was applied twice.
func (c *infraCase) invariant(ctx context.Context, t *rapid.T) {
	failed := map[string]bool{}
	for _, p := range history.Pairs(c.rec.Ops()) {
		if p.Invoke != nil && p.Invoke.F == history.Commit && p.Outcome() == history.Fail {
			for _, id := range p.Invoke.Events {
				failed[id] = true
			}
		}
	}
	rows, err := c.fx.Admin.Query(ctx, `SELECT id::text FROM `+c.table.Ident())
	if err != nil {
		t.Fatalf("reading the outbox: %v", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatalf("reading the outbox: %v", err)
	}
	for _, id := range ids {
		if failed[id] {
			failCase(t, c.trace, fmt.Sprintf("row %s of a rolled-back transaction is in the outbox", id))
		}
	}
	var dup int
	if err := c.fx.Admin.QueryRow(ctx, `SELECT count(*) FROM (SELECT message_id FROM `+pgx.Identifier{c.fx.Schema, "effects"}.Sanitize()+
		` GROUP BY message_id HAVING count(*) > 1) d`).Scan(&dup); err != nil {
		t.Fatalf("reading effects: %v", err)
	}
	if dup > 0 {
		failCase(t, c.trace, fmt.Sprintf("%d event(s) applied twice", dup))
	}
}

// finish heals every fault, drains the backlog with the relays ticking,
// and runs the checkers over the history and the final state.
func (c *infraCase) finish(ctx context.Context, t *rapid.T) (checker.Report, error) {
	if err := c.nemesis.HealAll(ctx); err != nil {
		return checker.Report{}, fmt.Errorf("healing: %w", err)
	}
	chaos.RecordPhase(c.rec, history.PhaseLiveness)
	dctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	// The wait ends when everything committed was applied, or when
	// nothing is left that could still be: no pending row and no message
	// ready in the queue, for settleQuiet. The checkers then say which
	// events were lost, which a relay that marks rows it never published
	// leaves behind; waiting out the minute would only delay that, once
	// per case rapid runs while it shrinks.
	var quietSince time.Time
	missing := 0
	err := chaos.WaitFor(dctx, 100*time.Millisecond, func(ctx context.Context) (bool, error) {
		for _, r := range c.relays {
			tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			_, _ = r.r.Tick(tctx)
			cancel()
		}
		st, n := c.drainState(ctx)
		switch {
		case st == drainDone:
			return true, nil
		case st == drainQuiet && quietSince.IsZero():
			quietSince = time.Now()
		case st == drainQuiet && time.Since(quietSince) >= settleQuiet:
			missing = n
			return true, nil
		case st == drainBusy:
			quietSince = time.Time{}
		}
		return false, nil
	})
	if err != nil {
		return checker.Report{}, fmt.Errorf("backlog not drained: %w", err)
	}
	if missing > 0 {
		c.log(t, "settled: no pending row and no message queued for %s, and %d committed event(s) never applied", settleQuiet, missing)
	}
	chaos.RecordPhase(c.rec, history.PhaseCheck)
	c.consumerStop()
	c.consumerDone.Wait()
	st, err := c.state(ctx)
	if err != nil {
		return checker.Report{}, err
	}
	// Backoff is not given: the store does not report the database time
	// of a retry, and the relay's clock around a statement is off by the
	// statement's latency, which on a loaded machine exceeds the short
	// backoffs used here. The simulation tier checks the spacing on its
	// exact clock.
	cfg := checker.Config{
		MaxAttempts:   infraMaxAttempts,
		Poison:        c.poison,
		LivenessBound: time.Minute,
		Features:      scenarios.OurFeatures,
	}
	rep := checker.Check(c.rec.Ops(), st, cfg)
	c.log(t, "checked: %d committed, %d delivered, %d duplicate deliveries, %d lost leases, %d parked",
		rep.Counts.Committed, rep.Counts.Delivered, rep.Counts.DuplicateDeliveries, rep.Counts.LostLeases, rep.Counts.Parked)
	return rep, nil
}

// drainState is how far the drain is.
type drainState int

const (
	// drainBusy: rows are pending or messages are queued.
	drainBusy drainState = iota
	// drainQuiet: nothing is pending or queued, and committed events
	// are still not applied.
	drainQuiet
	// drainDone: every committed healthy event is applied and the
	// queue is empty.
	drainDone
)

// settleQuiet is how long a drain stays quiet before the case is
// judged as it stands: a delivery in a consumer's hands is applied
// within it.
const settleQuiet = 3 * time.Second

// drainState reads the outbox, the inbox and the queue: how far the
// drain is, and how many committed healthy events are not applied.
func (c *infraCase) drainState(ctx context.Context) (drainState, int) {
	var pending int
	if err := c.fx.Admin.QueryRow(ctx, `SELECT count(*) FROM `+c.table.Ident()+` WHERE processed_at IS NULL AND faulted_at IS NULL`).Scan(&pending); err != nil {
		return drainBusy, 0
	}
	if pending > 0 {
		return drainBusy, 0
	}
	committed := map[string]bool{}
	for _, op := range c.rec.Ops() {
		if op.F == history.Commit && op.Type == history.OK {
			for _, id := range op.Events {
				if !c.poison[id] {
					committed[id] = true
				}
			}
		}
	}
	rows, err := c.fx.Admin.Query(ctx, `SELECT message_id FROM `+pgx.Identifier{c.fx.Schema, "inbox"}.Sanitize())
	if err != nil {
		return drainBusy, 0
	}
	applied, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return drainBusy, 0
	}
	got := map[string]bool{}
	for _, id := range applied {
		got[id] = true
	}
	missing := 0
	for id := range committed {
		if !got[id] {
			missing++
		}
	}
	ready, err := c.fx.QueueDepth(ctx)
	switch {
	case err != nil || ready > 0:
		return drainBusy, 0
	case missing > 0:
		return drainQuiet, missing
	}
	return drainDone, 0
}

// state takes what is left in the queue and reads the outbox rows and the
// effects.
func (c *infraCase) state(ctx context.Context) (checker.State, error) {
	queued, err := c.fx.TakeQueued(ctx)
	if err != nil {
		return checker.State{}, err
	}
	return c.fx.State(ctx, queued, true)
}

// cleanup releases paused ticks, heals, and removes what the case made.
func (c *infraCase) cleanup() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if c.nemesis != nil {
		_ = c.nemesis.HealAll(ctx)
	}
	if c.consumerStop != nil {
		c.consumerStop()
		c.consumerDone.Wait()
	}
	for _, r := range c.relays {
		if r.pub != nil {
			_ = r.pub.Close()
		}
		if r.pool != nil {
			r.pool.Close()
		}
	}
	if c.fx != nil {
		_ = c.fx.Close(ctx)
	}
}

// recStore records the relay's store calls as Claim, Mark, Retry and Park
// operations of its process, stamped by its own clock.
type recStore struct {
	relay.Store
	rec     *history.Recorder
	process string
	now     func() time.Time
}

func (s *recStore) record(op history.Op) {
	op.Process, op.Time = s.process, s.now()
	s.rec.Record(op)
}

func strs(ids []uuid.UUID) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = id.String()
	}
	return out
}

func (s *recStore) Claim(ctx context.Context, owner string, limit int, lease time.Duration) ([]relay.Row, error) {
	s.record(history.Op{Type: history.Invoke, F: history.Claim})
	rows, err := s.Store.Claim(ctx, owner, limit, lease)
	if err != nil {
		s.record(history.Op{Type: history.Fail, F: history.Claim, Error: err.Error()})
		return nil, err
	}
	ids := make([]string, len(rows))
	for i, r := range rows {
		ids[i] = r.ID.String()
	}
	s.record(history.Op{Type: history.OK, F: history.Claim, Events: ids})
	return rows, nil
}

func (s *recStore) Mark(ctx context.Context, owner string, ids []uuid.UUID) ([]uuid.UUID, error) {
	s.record(history.Op{Type: history.Invoke, F: history.Mark, Events: strs(ids)})
	marked, err := s.Store.Mark(ctx, owner, ids)
	if err != nil {
		// The statement may have committed before its reply was lost.
		s.record(history.Op{Type: history.Info, F: history.Mark, Error: err.Error()})
		return nil, err
	}
	s.record(history.Op{Type: history.OK, F: history.Mark, Events: strs(marked)})
	return marked, nil
}

func (s *recStore) Retry(ctx context.Context, owner string, id uuid.UUID, policy relay.RetryPolicy, cause string) (relay.RetryResult, error) {
	ev := []string{id.String()}
	s.record(history.Op{Type: history.Invoke, F: history.Retry, Events: ev})
	res, err := s.Store.Retry(ctx, owner, id, policy, cause)
	switch {
	case err != nil:
		s.record(history.Op{Type: history.Info, F: history.Retry, Events: ev, Error: err.Error()})
	case !res.Applied:
		s.record(history.Op{Type: history.Fail, F: history.Retry, Events: ev, Error: "lease lost"})
	default:
		s.record(history.Op{Type: history.OK, F: history.Retry, Events: ev, Meta: history.Meta{Attempts: res.Attempts, Parked: res.Parked}})
	}
	return res, err
}

func (s *recStore) Park(ctx context.Context, owner string, id uuid.UUID, cause string) (bool, error) {
	ev := []string{id.String()}
	s.record(history.Op{Type: history.Invoke, F: history.Park, Events: ev})
	ok, err := s.Store.Park(ctx, owner, id, cause)
	switch {
	case err != nil:
		s.record(history.Op{Type: history.Info, F: history.Park, Events: ev, Error: err.Error()})
	case !ok:
		s.record(history.Op{Type: history.Fail, F: history.Park, Events: ev, Error: "lease lost"})
	default:
		s.record(history.Op{Type: history.OK, F: history.Park, Events: ev})
	}
	return ok, err
}

// recPublisher records each publish: invoke, then ok once confirmed, fail
// when refused or nacked, info when the confirm never came.
type recPublisher struct {
	pub     relay.Publisher
	rec     *history.Recorder
	process string
	now     func() time.Time
}

func (p *recPublisher) record(op history.Op) {
	op.Process, op.Time = p.process, p.now()
	p.rec.Record(op)
}

func (p *recPublisher) Publish(ctx context.Context, m relay.Message) (relay.Confirmation, error) {
	ev := []string{m.ID}
	p.record(history.Op{Type: history.Invoke, F: history.Publish, Events: ev})
	conf, err := p.pub.Publish(ctx, m)
	if err != nil {
		p.record(history.Op{Type: history.Fail, F: history.Publish, Events: ev, Error: err.Error()})
		return nil, err
	}
	return &recConfirmation{Confirmation: conf, p: p, ev: ev}, nil
}

type recConfirmation struct {
	relay.Confirmation
	p  *recPublisher
	ev []string
}

func (c *recConfirmation) Wait(ctx context.Context) error {
	err := c.Confirmation.Wait(ctx)
	switch {
	case err == nil:
		c.p.record(history.Op{Type: history.OK, F: history.Publish, Events: c.ev})
	case errors.Is(err, relay.ErrNacked) || errors.Is(err, relay.ErrReturned):
		c.p.record(history.Op{Type: history.Fail, F: history.Publish, Events: c.ev, Error: err.Error()})
	default:
		c.p.record(history.Op{Type: history.Info, F: history.Publish, Events: c.ev, Error: err.Error()})
	}
	return err
}

// recInbox records the consumer's deliveries and applies around
// consumer.PGInbox.
type recInbox struct {
	inner   consumer.Inbox
	rec     *history.Recorder
	process string
}

func (in *recInbox) Apply(ctx context.Context, m consumer.Message) (bool, error) {
	ev := []string{m.ID}
	in.rec.Record(history.Op{Process: in.process, Type: history.OK, F: history.Deliver, Events: ev, Meta: history.Meta{Redelivered: m.Redelivered}})
	in.rec.Record(history.Op{Process: in.process, Type: history.Invoke, F: history.Apply, Events: ev})
	dup, err := in.inner.Apply(ctx, m)
	if err != nil {
		in.rec.Record(history.Op{Process: in.process, Type: history.Info, F: history.Apply, Events: ev, Error: err.Error()})
		return false, err
	}
	in.rec.Record(history.Op{Process: in.process, Type: history.OK, F: history.Apply, Events: ev, Meta: history.Meta{Duplicate: dup}})
	return dup, nil
}
