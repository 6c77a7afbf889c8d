package scenarios

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxlab/outboxlab/chaos"
	"github.com/outboxlab/outboxlab/history"
	"github.com/outboxlab/outboxlab/outbox"
	"github.com/outboxlab/outboxlab/testenv"
)

// RollingUpgrade is the name of the scenario of a mixed-version rolling
// upgrade.
const RollingUpgrade = "rolling-upgrade"

// KindUpgrade is the kind of the rolling upgrade's fault.
const KindUpgrade = "upgrade"

// Version is one version of a relay in a rolling upgrade: an image or a
// command, as RelayUnderTest has them, and the OUTBOX_* settings it adds
// over the scenario's. The zero value is the relay under test itself.
type Version struct {
	// Name says which version it is in reports ("outboxlab/relay:prev").
	Name    string
	Image   string
	Command []string
	Env     map[string]string
}

// self reports whether v is the relay under test itself.
func (v Version) self() bool { return v.Image == "" && len(v.Command) == 0 }

// Upgrade is a rolling upgrade from version N to version N+1 of a relay,
// with a migration of its outbox between them: the rolling-upgrade
// scenario creates the outbox as N has it (Before), starts the replicas
// as N, runs Migrate while they drain, and replaces them one by one by
// N+1. Either From or To is the relay under test (the zero Version).
type Upgrade struct {
	// From is version N, To version N+1.
	From, To Version
	// Before creates an outbox table as version N has it; nil creates it
	// as the relay under test's outbox does (RelayUnderTest.Outbox).
	Before func(ctx context.Context, db *pgxpool.Pool, table outbox.Table) error
	// Migrate migrates an outbox table from N's schema to N+1's while
	// the replicas of N run. It must be safe to run while producers
	// stage and relays claim and mark.
	Migrate func(ctx context.Context, db *pgxpool.Pool, table outbox.Table) error
}

// Validate says what an Upgrade lacks.
func (u Upgrade) Validate() error {
	var problems []string
	if u.From.self() == u.To.self() {
		problems = append(problems, "exactly one of From and To must be the relay under test (the zero Version), the other an image or a command")
	}
	for _, v := range []Version{u.From, u.To} {
		if v.Image != "" && len(v.Command) > 0 {
			problems = append(problems, fmt.Sprintf("version %s has both an image and a command", v.Name))
		}
	}
	if u.Migrate == nil {
		problems = append(problems, "no Migrate")
	}
	if len(problems) > 0 {
		return fmt.Errorf("upgrade: %s", strings.Join(problems, "; "))
	}
	return nil
}

// previousSchemaVersion is the last migration of package outbox that the
// relay of testenv.ImageRelayPrev knew: its outbox has no 004.
const previousSchemaVersion = 3

// DefaultUpgrade is the rolling upgrade of a relay on package outbox's
// table: from this repository's relay of an earlier commit
// (testenv.ImageRelayPrev, `make images` builds it), on the outbox as
// migrations 001 to 003 leave it, to the relay under test, with
// outbox.Migrate (004 builds an index CONCURRENTLY) between them.
func DefaultUpgrade() Upgrade {
	return Upgrade{
		From: Version{Name: testenv.ImageRelayPrev, Image: testenv.ImageRelayPrev},
		Before: func(ctx context.Context, db *pgxpool.Pool, table outbox.Table) error {
			return outbox.MigrateTo(ctx, db, table, previousSchemaVersion)
		},
		Migrate: func(ctx context.Context, db *pgxpool.Pool, table outbox.Table) error {
			return outbox.Migrate(ctx, db, table)
		},
	}
}

// PlannedUpgrade returns the rolling upgrade the rolling-upgrade scenario
// runs on u: its own, or DefaultUpgrade for a relay on package outbox's
// table; nil when it declares none.
func (u RelayUnderTest) PlannedUpgrade() *Upgrade {
	switch {
	case u.Upgrade != nil:
		return u.Upgrade
	case !u.Outbox.Own():
		up := DefaultUpgrade()
		return &up
	}
	return nil
}

func rollingUpgrade() Scenario {
	return Scenario{
		Name:            RollingUpgrade,
		Summary:         "a rolling upgrade under load: the replicas run version N of the relay on N's outbox; the relays' link to the broker goes down, so that rows staged before the upgrade wait; the outbox is migrated to N+1's schema while N's replicas run, and each replica is stopped (SIGTERM) and replaced by version N+1 in turn; then the link heals: every row N left, staged before the migration, is N+1's to publish, and nothing may be lost or published twice without a cause",
		Workload:        defaultWorkload(),
		Safety:          14 * time.Second,
		NeedsRelay:      true,
		ChangesDatabase: "schema migration and rolling upgrade",
		upgrades:        true,
		Prepare: func(s Stage, r *Replica) {
			if up := s.Relay().PlannedUpgrade(); up != nil && !up.From.self() {
				r.setVersion(&up.From)
			}
		},
		Faults: func(s Stage, rng *rand.Rand, safety time.Duration) ([]chaos.Step, error) {
			up := s.Relay().PlannedUpgrade()
			if up == nil {
				return nil, fmt.Errorf("%s: %s declares no upgrade", RollingUpgrade, s.Relay().Name)
			}
			link := s.Link(testenv.LinkRelayBroker)
			if link == nil {
				return nil, fmt.Errorf("%s: the environment has no %s link", RollingUpgrade, testenv.LinkRelayBroker)
			}
			cut := chaos.Down(link)
			rs, ok := s.(runStage)
			if !ok {
				return nil, fmt.Errorf("%s runs only through the runner (Run)", RollingUpgrade)
			}
			f := &upgradeFault{stage: rs, up: *up}
			for c := range rs.r.contexts {
				for i := range s.Replicas(c) {
					f.slots = append(f.slots, s.Replica(c, i))
				}
			}
			for _, x := range []chaos.Fault{cut, f} {
				if err := s.AddFault(x, ""); err != nil {
					return nil, err
				}
			}
			at := between(rng, 1500*time.Millisecond, 2*time.Second)
			down := between(rng, 8*time.Second, 9*time.Second)
			return []chaos.Step{
				Step(cut, at, down),
				Step(f, at+between(rng, 600*time.Millisecond, time.Second), 100*time.Millisecond),
			}, nil
		},
		Check: func(_ context.Context, s Stage, res *Result) {
			for _, f := range s.Faults() {
				if u, ok := f.(*upgradeFault); ok {
					u.judge(res)
				}
			}
		},
	}
}

// upgradeFault runs the upgrade: the migration, then each replica
// stopped and started again as version N+1, one after the other. Its
// targets are the replicas, so that a row one of them held when it was
// stopped may be published again with the upgrade as the cause.
type upgradeFault struct {
	faultState
	stage runStage
	up    Upgrade
	slots []*Replica
	// migrated is how long the migration took; replaced, per replica,
	// when its version N+1 started.
	migrated time.Duration
	replaced []string
}

func (f *upgradeFault) Name() string              { return "rolling upgrade" }
func (f *upgradeFault) Class() history.FaultClass { return history.ClassProcess }
func (f *upgradeFault) Kind() string              { return KindUpgrade }

func (f *upgradeFault) Targets() []string {
	out := make([]string, len(f.slots))
	for i, s := range f.slots {
		out[i] = s.Name()
	}
	return out
}

// Inject migrates every context's outbox and replaces the replicas.
func (f *upgradeFault) Inject(ctx context.Context) error {
	f.active.Store(true)
	start := time.Now()
	for _, bc := range f.stage.r.contexts {
		if err := f.up.Migrate(ctx, f.stage.DB(), bc.table); err != nil {
			return fmt.Errorf("%s: migrating %s: %w", f.Name(), bc.table, err)
		}
	}
	f.migrated = time.Since(start)
	for _, s := range f.slots {
		var to *Version
		if !f.up.To.self() {
			to = &f.up.To
		}
		s.setVersion(to)
		if err := s.recreate(ctx, nil); err != nil {
			return fmt.Errorf("%s: %w", f.Name(), err)
		}
		// The replica's process restarted, as another version: what it
		// held in memory is gone.
		f.stage.Recorder().Record(history.Op{Process: s.Name(), Type: history.Info, F: history.Restart})
		f.replaced = append(f.replaced, fmt.Sprintf("%s at %.1fs", s.Name(), time.Since(start).Seconds()))
	}
	f.hits.Add(1)
	return nil
}

// Heal does nothing: the new version stays.
func (f *upgradeFault) Heal(context.Context) error {
	f.active.Store(false)
	return nil
}

// judge makes the run inconclusive when no row staged before the
// migration was left for version N+1 to publish: the commits before the
// migration began whose events were first published after the last
// replica was replaced. It notes the upgrade's figures otherwise.
func (f *upgradeFault) judge(res *Result) {
	var began, done int64
	for _, op := range res.History {
		if op.F != history.FaultStart || op.Meta.Fault == nil || op.Meta.Fault.Kind != KindUpgrade {
			continue
		}
		switch op.Type {
		case history.Invoke:
			began = op.Index
		case history.OK:
			done = op.Index
		}
	}
	if began == 0 || done == 0 {
		return // the fault did not fire, or failed: the runner says so
	}
	before := map[string]bool{}
	for _, op := range res.History {
		if op.F == history.Commit && op.Type == history.OK && op.Index < began {
			for _, id := range op.Events {
				before[id] = true
			}
		}
	}
	// When the broker first took each event: a publish that completed ok
	// (a relay's confirmed publish, or the broker's own record of one).
	firstPublish := map[string]int64{}
	for _, p := range history.Pairs(res.History) {
		start := p.Start()
		if start.F != history.Publish || p.Outcome() != history.OK {
			continue
		}
		at := start.Index
		if p.Done != nil {
			at = p.Done.Index
		}
		for _, id := range start.Events {
			if prev, ok := firstPublish[id]; !ok || at < prev {
				firstPublish[id] = at
			}
		}
	}
	left := 0
	for id := range before {
		if at, ok := firstPublish[id]; ok && at > done {
			left++
		}
	}
	from, to := f.versionName(f.up.From, res), f.versionName(f.up.To, res)
	if left == 0 {
		res.Inconclusive = append(res.Inconclusive, fmt.Sprintf("%s: no row staged before the migration was first published after %s replaced %s: the upgrade left version N+1 nothing of version N's to publish", RollingUpgrade, to, from))
		return
	}
	res.Unchecked = append(res.Unchecked, fmt.Sprintf("%s: %s replaced %s (%s), after a migration of %s; %d of the %d events committed before the migration were first published after the last replacement",
		RollingUpgrade, to, from, strings.Join(f.replaced, ", "), f.migrated.Round(time.Millisecond), left, len(before)))
}

func (f *upgradeFault) versionName(v Version, res *Result) string {
	switch {
	case v.self():
		return res.Relay
	case v.Name != "":
		return v.Name
	case v.Image != "":
		return v.Image
	}
	return strings.Join(v.Command, " ")
}

// setVersion makes the replica's next lifetimes run v; nil is the relay
// under test.
func (s *Replica) setVersion(v *Version) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if v == nil {
		s.version = nil
		return
	}
	c := *v
	c.Env = maps.Clone(v.Env)
	s.version = &c
}

// program returns what the replica's next lifetime runs, an image or a
// command, and its environment: the relay under test's, or, for another
// version, the scenario's settings with that version's over them (the
// relay under test's own Env does not apply to it) and what Setenv set.
func (s *Replica) program() (image string, command []string, env map[string]string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.version == nil {
		return s.r.relay.Image, s.r.relay.Command, maps.Clone(s.base)
	}
	env = maps.Clone(s.base)
	for k := range s.r.relay.Env {
		delete(env, k)
		if v, ok := s.pre[k]; ok {
			env[k] = v
		}
	}
	maps.Copy(env, s.version.Env)
	maps.Copy(env, s.set)
	return s.version.Image, slices.Clone(s.version.Command), env
}
