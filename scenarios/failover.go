package scenarios

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxlab/outboxlab/chaos"
	"github.com/outboxlab/outboxlab/checker"
	"github.com/outboxlab/outboxlab/history"
	"github.com/outboxlab/outboxlab/testenv"
)

// Scenario names of the database's own faults.
const (
	FailoverAsync = "failover-async"
	FailoverSync  = "failover-sync"
)

// DatabaseCatalogue returns the scenarios that change the database under
// the relay: a failover to a standby that lags, with asynchronous
// replication (acknowledged commits may be undone) and with synchronous
// replication (none may be). They run on an environment of their own
// (EnvOptionsFor: a standby beside PostgreSQL).
func DatabaseCatalogue() []Scenario {
	return named(failover(FailoverAsync, testenv.ReplicationAsync), failover(FailoverSync, testenv.ReplicationSync))
}

// DatabaseNames returns the names of DatabaseCatalogue's scenarios.
func DatabaseNames() []string {
	var out []string
	for _, s := range DatabaseCatalogue() {
		out = append(out, s.Name)
	}
	return out
}

// failoverLag is how long the standby falls behind before the primary
// dies: the commits the primary acknowledges in that time are the ones
// an asynchronous failover undoes.
const failoverLag = 800 * time.Millisecond

func failover(name string, repl testenv.Replication) Scenario {
	summary := "the streaming standby falls behind (frozen) while the producers commit, the primary is killed, and the standby is promoted with every link moved to it; with asynchronous replication the commits it never received are gone after the failover (lost or phantom by the failover, counted apart); a relay must resume on the new primary and lose none of the rest"
	if repl == testenv.ReplicationSync {
		summary = "the failover of failover-async with a synchronous standby (synchronous_commit = remote_apply): the producers' commits wait while it is cut off, and the failover undoes no acknowledged commit: nothing lost, no phantom"
	}
	return Scenario{
		Name: name, Summary: summary, Workload: defaultWorkload(), Safety: 10 * time.Second,
		NeedsRelay: true, Standby: repl,
		Faults: func(s Stage, rng *rand.Rand, safety time.Duration) ([]chaos.Step, error) {
			env := s.Env()
			if env.Replication() != repl {
				return nil, fmt.Errorf("%s needs a PostgreSQL with a %s standby", name, repl)
			}
			// A failover of an earlier run promoted the standby: start a
			// new one of the new primary.
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := env.StartStandby(ctx); err != nil {
				return nil, err
			}
			f := &dbFailover{env: env, lag: failoverLag, cut: chaos.Down(s.Link(testenv.LinkStandbyDB))}
			if err := s.AddFault(f, ""); err != nil {
				return nil, err
			}
			// The heal is the promotion: the time a failover manager takes
			// to see the primary gone and promote.
			return []chaos.Step{Step(f, between(rng, 3*time.Second, 5*time.Second), between(rng, time.Second, 2*time.Second))}, nil
		},
	}
}

// dbFailover fails the database over to its standby: the standby's
// replication link is cut for lag (its WAL receiver falls behind, and a
// synchronous primary holds its commits), the primary is killed, and the
// link restored; the heal promotes the standby and moves every link to it
// (testenv.Env.Promote).
type dbFailover struct {
	faultState
	env *testenv.Env
	lag time.Duration
	cut chaos.Fault
}

func (f *dbFailover) Name() string              { return "database failover" }
func (f *dbFailover) Class() history.FaultClass { return history.ClassDB }
func (f *dbFailover) Targets() []string         { return nil }
func (f *dbFailover) Kind() string              { return checker.KindFailover }

// Inject lets the standby fall behind and kills the primary.
func (f *dbFailover) Inject(ctx context.Context) error {
	standby := f.env.Standby()
	if standby == nil {
		return fmt.Errorf("%s: no standby", f.Name())
	}
	f.active.Store(true)
	if err := f.cut.Inject(ctx); err != nil {
		return fmt.Errorf("%s: cutting the standby off: %w", f.Name(), err)
	}
	lagging := time.NewTimer(f.lag)
	defer lagging.Stop()
	select {
	case <-ctx.Done():
	case <-lagging.C:
	}
	killErr := f.env.KillPrimary(ctx)
	if err := f.cut.Heal(context.WithoutCancel(ctx)); err != nil {
		return fmt.Errorf("%s: restoring the standby's link: %w", f.Name(), err)
	}
	if killErr != nil {
		return fmt.Errorf("%s: %w", f.Name(), killErr)
	}
	f.hits.Add(1)
	return nil
}

// Heal promotes the standby and moves the links to it.
func (f *dbFailover) Heal(ctx context.Context) error {
	if !f.active.Swap(false) {
		return nil
	}
	return f.env.Promote(ctx)
}

// readBusiness reads which events' business rows exist, for a run whose
// database may have failed over (checker.State.Business).
func (r *run) readBusiness(ctx context.Context) (map[string]bool, error) {
	rows, err := r.fx.Admin.Query(ctx, `SELECT event_id::text FROM `+r.fx.Business)
	if err != nil {
		return nil, fmt.Errorf("reading the business rows: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("reading the business rows: %w", err)
	}
	out := make(map[string]bool, len(ids))
	for _, id := range ids {
		out[id] = true
	}
	return out, nil
}
