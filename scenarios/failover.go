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
	Restore       = "restore"
)

// DatabaseCatalogue returns the scenarios that change the database under
// the relay: a failover to a standby that lags, with asynchronous
// replication (acknowledged commits may be undone) and with synchronous
// replication (none may be), each on an environment of its own
// (EnvOptionsFor: a standby beside PostgreSQL); and a restore of the
// database into a new server, on the catalogue's environment.
func DatabaseCatalogue() []Scenario {
	return named(failover(FailoverAsync, testenv.ReplicationAsync), failover(FailoverSync, testenv.ReplicationSync), restore(), rollingUpgrade())
}

// KindRestore is the kind of the restore fault.
const KindRestore = "restore"

func restore() Scenario {
	return Scenario{
		Name:            Restore,
		Summary:         "the database is replaced by a dump and restore of it into a new server at the same address (pg_dump, pg_restore), with its roles: the rows and sequences are the old ones, the transaction ids start again from a fresh server's; a relay that tracks its place by transaction id or keeps one across the change must not stall or skip the rows committed after it",
		Workload:        defaultWorkload(),
		Safety:          restoreSafety,
		NeedsRelay:      true,
		ChangesDatabase: "dump and restore",
		Faults: func(s Stage, rng *rand.Rand, safety time.Duration) ([]chaos.Step, error) {
			// A server in production has given hundreds of millions of
			// transaction ids when it is restored; the harness's has run
			// for seconds. It uses up some first, so that the new
			// server's start well below the old one's.
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if _, err := s.DB().Exec(ctx, burnXids); err != nil {
				return nil, fmt.Errorf("%s: aging the server: %w", Restore, err)
			}
			f := &dbRestore{env: s.Env()}
			if err := s.AddFault(f, ""); err != nil {
				return nil, err
			}
			// The copy takes 1 to 4 s, longer on a loaded machine; it
			// starts early enough, and the producers' transactions are
			// spread over enough of the phase (restoreSafety), that they
			// go on committing on the new server for seconds after it.
			return []chaos.Step{Step(f, between(rng, 2*time.Second, 3*time.Second), between(rng, 300*time.Millisecond, time.Second))}, nil
		},
		Check: func(_ context.Context, s Stage, res *Result) {
			for _, f := range s.Faults() {
				if r, ok := f.(*dbRestore); ok {
					restoreBit(res, r.oldXid, r.newXid)
				}
			}
		},
	}
}

// restoreSafety is restore's safety phase: the producers' transactions
// are spread over 70% of it, 10.5 s, so that a copy that takes 4 s and
// starts at 3 s leaves them 3 s and more on the new server.
const restoreSafety = 15 * time.Second

// burnXids uses up 20,000 transaction ids in one statement: each
// subtransaction that writes gets an id of its own.
const burnXids = `DO $$
BEGIN
	CREATE TEMP TABLE outboxlab_xid_burn (i int) ON COMMIT DROP;
	FOR i IN 1..20000 LOOP
		BEGIN
			INSERT INTO outboxlab_xid_burn VALUES (i);
		EXCEPTION WHEN others THEN NULL;
		END;
	END LOOP;
END $$`

// currentXid reads the next transaction id of the server url leads to.
func currentXid(ctx context.Context, url string) (int64, error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return 0, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var x int64
	err = conn.QueryRow(ctx, `SELECT pg_current_xact_id()::text::bigint`).Scan(&x)
	return x, err
}

// dbRestore replaces the database by a dump and restore of it: the
// links to it close, a new server gets a copy (testenv.Env.DumpRestore),
// and at heal the links open on the new server.
type dbRestore struct {
	faultState
	env *testenv.Env
	// oldXid and newXid are the transaction ids the old server gave
	// last before the restore and the new one first after it.
	oldXid, newXid int64
}

func (f *dbRestore) Name() string              { return "database restore" }
func (f *dbRestore) Class() history.FaultClass { return history.ClassDB }
func (f *dbRestore) Targets() []string         { return nil }
func (f *dbRestore) Kind() string              { return KindRestore }

// Inject closes the links and copies the database into a new server.
func (f *dbRestore) Inject(ctx context.Context) error {
	f.active.Store(true)
	old, err := currentXid(ctx, f.env.DirectDatabaseURL())
	if err != nil {
		return fmt.Errorf("%s: reading the old server's transaction id: %w", f.Name(), err)
	}
	if err := f.env.DumpRestore(ctx); err != nil {
		return fmt.Errorf("%s: %w", f.Name(), err)
	}
	next, err := currentXid(ctx, f.env.DirectDatabaseURL())
	if err != nil {
		return fmt.Errorf("%s: reading the new server's transaction id: %w", f.Name(), err)
	}
	f.oldXid, f.newXid = old, next
	f.hits.Add(1)
	return nil
}

// Heal opens the links on the new server.
func (f *dbRestore) Heal(ctx context.Context) error {
	if !f.active.Swap(false) {
		return nil
	}
	return f.env.OpenLinks(ctx)
}

// restoreBit makes a restore run inconclusive when the new server's
// transaction ids did not start below the old one's, or when no event
// committed after the restore: the relay had nothing to skip or stall
// on.
func restoreBit(res *Result, oldXid, newXid int64) {
	var healed int64
	for _, op := range res.History {
		if op.F == history.FaultStop && op.Meta.Fault != nil && op.Meta.Fault.Kind == KindRestore {
			healed = op.Index
		}
	}
	if healed == 0 {
		return
	}
	after := 0
	for _, op := range res.History {
		if op.F == history.Commit && op.Type == history.OK && op.Index > healed {
			after++
		}
	}
	switch {
	case newXid >= oldXid:
		res.Inconclusive = append(res.Inconclusive, fmt.Sprintf("restore: the new server's transaction ids (from %d) did not start below the old one's (%d)", newXid, oldXid))
	case after == 0:
		res.Inconclusive = append(res.Inconclusive, "restore: no producer committed after the restore: the relay had no row of the new server's transaction ids to skip or stall on")
	default:
		res.Unchecked = append(res.Unchecked, fmt.Sprintf("restore: %d producer commits after the restore, on the new server, whose transaction ids started at %d, below the old one's %d", after, newXid, oldXid))
	}
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
		Name: name, Summary: summary, Workload: defaultWorkload(), Safety: 12 * time.Second,
		NeedsRelay: true, Standby: repl, ChangesDatabase: map[testenv.Replication]string{testenv.ReplicationAsync: "failover to an asynchronous standby", testenv.ReplicationSync: "failover to a synchronous standby"}[repl],
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
			// to see the primary gone and promote. It comes early enough
			// that the producers go on committing on the new primary for
			// a few seconds (the workload spans most of the phase).
			return []chaos.Step{Step(f, between(rng, 2*time.Second, 3*time.Second), between(rng, time.Second, 1500*time.Millisecond))}, nil
		},
		Check: func(_ context.Context, _ Stage, res *Result) { failoverBit(res, repl) },
	}
}

// failoverBit makes a failover run inconclusive when its fault could not
// bite: no producer committed while the standby was cut off (nothing for
// the standby to miss, and nothing for a synchronous primary to hold);
// no producer committed on the new primary (the relay had nothing to
// resume on, and a relay that keeps its place from the old primary
// showed nothing); or, with asynchronous replication, the failover undid
// no acknowledged commit, so the run shows nothing of what such a
// failover costs.
func failoverBit(res *Result, repl testenv.Replication) {
	var from, to, promoted int64
	for _, op := range res.History {
		if op.Meta.Fault == nil || op.Meta.Fault.Kind != checker.KindFailover {
			continue
		}
		switch {
		case op.F == history.FaultStart && op.Type == history.Invoke:
			from = op.Index
		case op.F == history.FaultStart && (op.Type == history.OK || op.Type == history.Info):
			to = op.Index
		case op.F == history.FaultStop && op.Type == history.OK:
			promoted = op.Index
		}
	}
	if from == 0 || to == 0 {
		return // the fault did not fire: the runner says so
	}
	commits, after := 0, 0
	for _, op := range res.History {
		if op.F == history.Commit && op.Type == history.Invoke && op.Index > from && op.Index < to {
			commits++
		}
		if op.F == history.Commit && op.Type == history.OK && promoted > 0 && op.Index > promoted {
			after++
		}
	}
	switch {
	case commits == 0:
		res.Inconclusive = append(res.Inconclusive, "failover: no producer began a commit while the standby was cut off: it had nothing to miss")
	case after == 0:
		res.Inconclusive = append(res.Inconclusive, "failover: no producer committed on the new primary after the promotion: the relay had nothing to resume on")
	case repl == testenv.ReplicationAsync && res.Counts.FailoverLost+res.Counts.FailoverPhantom == 0:
		res.Inconclusive = append(res.Inconclusive, fmt.Sprintf("failover: %d commits began while the standby was cut off, and the failover undid none of them: the run shows nothing of what an asynchronous failover costs", commits))
	default:
		res.Unchecked = append(res.Unchecked, fmt.Sprintf("failover: %d producer commits began while the standby was cut off, %d committed on the new primary after the promotion", commits, after))
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
