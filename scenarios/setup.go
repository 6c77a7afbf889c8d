package scenarios

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxlab/outboxlab/contract"
	"github.com/outboxlab/outboxlab/fixture"
	"github.com/outboxlab/outboxlab/outbox"
	"github.com/outboxlab/outboxlab/workload"

	"github.com/outboxlab/outboxlab/chaos"
	"github.com/outboxlab/outboxlab/consumer"
	"github.com/outboxlab/outboxlab/relay"
	"github.com/outboxlab/outboxlab/testenv"
)

// contextNames returns the names of the run's bounded contexts.
func (r *run) contextNames() []string {
	if len(r.sc.Contexts) == 0 {
		return []string{defaultContext}
	}
	return r.sc.Contexts
}

// schemaPrefix starts the name of the run's schema: its scenario's name.
func (r *run) schemaPrefix() string {
	short := strings.NewReplacer("-", "_").Replace(r.sc.Name)
	if len(short) > 24 {
		short = short[:24]
	}
	return "sc_" + short
}

// setup creates the run's schema, tables and topology, makes the
// producers and runs the control phase with them, and starts the relays
// and the consumers.
func (r *run) setup(ctx context.Context) error {
	sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	var err error
	r.fx, err = fixture.New(sctx, r.env, fixture.Options{
		Prefix: r.schemaPrefix(), Contexts: r.contextNames(), AppConns: int32(2*r.workload.Producers + 4),
		QueueType: r.queueType(), Outbox: r.relay.Outbox, Identity: r.relay.Identity, Create: r.createOutbox(),
	})
	if err != nil {
		return err
	}
	for _, c := range r.fx.Contexts {
		r.contexts = append(r.contexts, &boundedCtx{
			name: c.Name, table: c.Table, rows: c.Rows, ids: c.IDs, exchange: c.Topology.Exchange, queue: c.Topology.Queue, inbox: c.Name, topology: c.Topology,
		})
	}
	for i := 0; i+1 < len(r.contexts) && !r.sc.Independent; i++ {
		r.contexts[i].next = r.contexts[i+1]
	}
	for _, l := range r.env.Links() {
		if r.links[l.Name], err = chaos.LinkByName(sctx, r.env.ToxiproxyClient(), l.Name, ""); err != nil {
			return fmt.Errorf("link %s: %w", l.Name, err)
		}
	}
	if r.nemesis, err = chaos.NewNemesis(r.rec); err != nil {
		return err
	}
	if r.relay.Promises.Records && r.mode == workload.Outbox {
		if err := r.makeRecordsDir(); err != nil {
			return err
		}
	}
	r.observeOutboxes(sctx)
	if err := r.makeProducers(); err != nil {
		return err
	}
	r.runControl(sctx)
	if err := r.startRelays(sctx); err != nil {
		return err
	}
	if r.mode == workload.Outbox {
		r.usage = r.startUsage(ctx)
	}
	if err := r.startConsumers(); err != nil {
		return err
	}
	r.scopeLinks()
	return nil
}

// scopeLinks gives every link's faults their class, from the service at
// the link's far end, and their targets: the processes of the run that
// connect through it.
func (r *run) scopeLinks() {
	var relays, producers []string
	for _, bc := range r.contexts {
		for _, s := range bc.relays {
			relays = append(relays, s.name)
		}
	}
	consumers := r.consumerNames
	for _, p := range r.producers {
		producers = append(producers, p.Name)
	}
	users := map[string][]string{
		testenv.LinkAppDB:          producers,
		testenv.LinkRelayDB:        relays,
		testenv.LinkRelayBroker:    relays,
		testenv.LinkConsumerBroker: consumers,
		testenv.LinkConsumerDB:     consumers,
	}
	if r.publishes() {
		pb := r.publisherBrokerLink()
		users[pb] = append(slices.Clone(users[pb]), producers...)
	}
	for _, l := range r.env.Links() {
		cl, ok := r.links[l.Name]
		if !ok {
			continue
		}
		cl.WithClass(l.Service.FaultClass())
		targets := users[l.Name]
		if len(targets) == 0 {
			// No process of this run uses the link: its faults hit the
			// link alone, which is no process, rather than everyone.
			targets = []string{"link " + l.Name}
		}
		cl.WithTargets(targets...)
	}
}

// makeRecordsDir makes the directory of the relays' records files,
// writable by the user a relay container runs as.
func (r *run) makeRecordsDir() error {
	dir, err := os.MkdirTemp("", "outboxlab-records-")
	if err != nil {
		return fmt.Errorf("records directory: %w", err)
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		return fmt.Errorf("records directory: %w", err)
	}
	r.recordsDir = dir
	return nil
}

// startRelays starts every replica of every context at once.
func (r *run) startRelays(ctx context.Context) error {
	if r.mode.Unsafe() {
		return nil
	}
	replicas := r.sc.Replicas
	if replicas == 0 {
		replicas = defaultReplicaCount
	}
	var slots []*Replica
	for _, bc := range r.contexts {
		for i := range replicas {
			name := "relay-" + string(rune('a'+i))
			if len(r.contexts) > 1 {
				name = "relay-" + bc.name
				if replicas > 1 {
					name += "-" + string(rune('a'+i))
				}
			}
			base := map[string]string{
				contract.EnvTable:       bc.table.String(),
				contract.EnvExchange:    bc.exchange,
				contract.EnvClockOffset: chaos.FormatClockOffset(0),
			}
			for k, v := range TimingEnv() {
				base[k] = v
			}
			for k, v := range r.sc.RelayEnv {
				base[k] = v
			}
			for k, v := range r.sc.ContextEnv[bc.name] {
				base[k] = v
			}
			pre := maps.Clone(base)
			for k, v := range r.relay.Env {
				base[k] = v
			}
			s := &Replica{r: r, name: name, bc: bc, base: base, pre: pre}
			bc.relays = append(bc.relays, s)
			slots = append(slots, s)
		}
	}
	for _, s := range slots {
		if r.sc.Prepare != nil {
			r.sc.Prepare(runStage{r}, s)
		}
		if err := r.createRole(ctx, s); err != nil {
			return err
		}
		// A replica left behind by an interrupted run would hold the name.
		for _, c := range r.env.Containers() {
			if c.Name() == s.name {
				_ = c.Remove(ctx)
			}
		}
	}
	r.observeBroker(ctx, slots)
	errs := make([]error, len(slots))
	var wg sync.WaitGroup
	for i, s := range slots {
		wg.Go(func() { errs[i] = s.start(ctx, nil) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// startConsumers runs the consumer processes: two competing ones on a
// single context's queue, one per hop in a pipeline.
func (r *run) startConsumers() error {
	cctx, cancel := context.WithCancel(context.Background())
	r.consumersStop = cancel
	per := 2
	if len(r.contexts) > 1 {
		per = 1
	}
	n := 0
	for _, bc := range r.contexts {
		for range per {
			n++
			in := &recordingInbox{r: r, process: fmt.Sprintf("consumer-%d", n), bc: bc, dialer: &chaos.Dialer{}}
			r.consumerNames = append(r.consumerNames, in.process)
			r.consumers = append(r.consumers, in)
			if len(r.contexts) > 1 {
				in.queue = bc.queue
			}
			eff := in.effect()
			pg, err := consumer.NewPGInbox(r.fx.Cons, bc.inbox, eff)
			if err != nil {
				return err
			}
			in.inner = pg
			if cu := r.opts.Consumer; cu != nil && cu.Wrap != nil {
				in.inner = cu.Wrap(pg, r.fx.Cons, eff)
			}
			c, err := consumer.New(consumer.Config{Name: bc.inbox, MaxDeliveries: 1 << 30}, in, nil)
			if err != nil {
				return err
			}
			prefetch := 8
			if r.sc.ConsumerPrefetch > 0 {
				prefetch = r.sc.ConsumerPrefetch
			}
			src := &consumer.AMQPSource{
				URL: r.env.AMQPURL(testenv.LinkConsumerBroker), Queue: bc.queue, Prefetch: prefetch,
				HandleTimeout: 5 * time.Second, MinBackoff: 100 * time.Millisecond, MaxBackoff: time.Second,
				Topology: &bc.topology, Identity: r.relay.Identity, Dial: in.dialer.DialContext,
			}
			r.consumersDone.Go(func() { _ = src.Run(cctx, c) })
		}
	}
	return nil
}

// producerStore is where the producers stage: bc's outbox, or, for
// independent contexts, the outbox of the context the workload gives each
// event, in the same transaction.
func (r *run) producerStore(bc *boundedCtx) workload.PG {
	pg := func(bc *boundedCtx) workload.PG {
		return workload.PG{DB: r.fx.App, Table: bc.table, Business: r.fx.Business, Notify: true, Schema: r.relay.Outbox, IDs: bc.ids}
	}
	st := pg(bc)
	if r.sc.Independent && r.plan.Contexts != nil {
		st.Route = func(e outbox.Event) workload.PG {
			return pg(r.contexts[r.plan.Contexts[e.ID.String()]%len(r.contexts)])
		}
	}
	return st
}

// publishes reports whether the producers publish: the unsafe variants
// inline, and the producers of an outbox whose own writer publishes
// after COMMIT (outbox.Schema.Commit), through the relays' link to the
// broker.
func (r *run) publishes() bool {
	return r.mode.Unsafe() || (r.mode == workload.Outbox && r.relay.Outbox.Commit != nil)
}

// makeProducers builds the producers; those that publish (publishes)
// get a publisher each.
func (r *run) makeProducers() error {
	bc := r.contexts[0]
	for i := range max(r.workload.Producers, 1) {
		clk := chaos.NewClock(0)
		p := &workload.Producer{
			Name:  fmt.Sprintf("producer-%d", i+1),
			Store: r.producerStore(bc),
			Mode:  r.mode, PublishTimeout: 2 * PublishTimeout, Rec: r.rec, Now: clk.Now,
			StampOccurredAt: true,
		}
		if r.publishes() {
			pub, err := relay.NewAMQPPublisher(relay.AMQPConfig{
				URL: r.env.AMQPURL(r.publisherBrokerLink()), Exchange: bc.exchange, Name: p.Name, DialTimeout: time.Second,
			})
			if err != nil {
				return err
			}
			p.Publisher = pub
			r.publishers = append(r.publishers, pub)
		}
		if r.relay.Outbox.Commit != nil {
			st := p.Store.(workload.PG)
			st.Producer = p
			p.Store = st
		}
		r.producers = append(r.producers, p)
		r.clocks = append(r.clocks, clk)
	}
	return nil
}

// createOutbox returns how the run creates its outbox tables when that is
// not as the relay under test's outbox does: as the version a rolling
// upgrade starts from has them (Upgrade.Before).
func (r *run) createOutbox() func(ctx context.Context, db *pgxpool.Pool, table outbox.Table) error {
	if !r.sc.upgrades || r.mode != workload.Outbox {
		return nil
	}
	if up := r.relay.PlannedUpgrade(); up != nil {
		return up.Before
	}
	return nil
}
