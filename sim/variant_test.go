package sim

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/outboxlab/outboxlab/checker"
	"github.com/outboxlab/outboxlab/consumer"
	"github.com/outboxlab/outboxlab/relay"
)

// TestProductionPasses runs the production relay and consumer over many
// seeds: every one must pass every checker.
func TestProductionPasses(t *testing.T) {
	n := 300
	if testing.Short() {
		n = 100
	}
	s := RunMany(context.Background(), 1, n, Options{})
	for _, f := range s.Failures {
		t.Errorf("%s\n%s", f.Header(), f.Report.Summary())
	}
	if s.Failed > 0 {
		t.Fatalf("%d of %d seeds failed", s.Failed, s.Seeds)
	}
}

// regressions are seeds that once caught a bug of the production relay,
// with what they caught. Each must pass now.
var regressions = []struct {
	seed uint64
	bug  string
}{
	{25890, "a relay paused past its lease re-claimed its own rows while their first publishes were still " +
		"awaiting confirms, published them again and counted two attempts for one nack"},
}

// TestRegressions replays the seeds of regressions.
func TestRegressions(t *testing.T) {
	for _, r := range regressions {
		res := Run(r.seed, Options{})
		if !res.Valid {
			t.Errorf("seed %d (%s) fails again:\n%s", r.seed, r.bug, res.Report.Summary())
		}
	}
}

// TestSwarmFaultsFire checks that every fault the swarm draws fires in some
// seed, and that faults produce the effects they exist for.
func TestSwarmFaultsFire(t *testing.T) {
	hits := map[Fault]int{}
	counts := checker.Counts{}
	for seed := uint64(1); seed <= 100; seed++ {
		r := Run(seed, Options{})
		for f, n := range r.Hits {
			hits[f] += n
		}
		c := r.Report.Counts
		counts.DuplicateDeliveries += c.DuplicateDeliveries
		counts.LostLeases += c.LostLeases
		counts.Parked += c.Parked
		counts.Indeterminate += c.Indeterminate
		counts.RolledBack += c.RolledBack
	}
	for _, f := range SwarmFaults {
		if hits[f] == 0 {
			t.Errorf("fault %s never fired in 100 seeds", f)
		}
	}
	if counts.DuplicateDeliveries == 0 || counts.LostLeases == 0 || counts.Parked == 0 || counts.Indeterminate == 0 || counts.RolledBack == 0 {
		t.Errorf("100 seeds saw no duplicates, lost leases, parked rows, indeterminate commits or rollbacks: %+v", counts)
	}
}

// markOnClaim is the mark-before-publish bug: the rows are marked
// processed as soon as they are claimed.
type markOnClaim struct{ relay.Store }

func (m markOnClaim) Claim(ctx context.Context, owner string, limit int, lease time.Duration) ([]relay.Row, error) {
	rows, err := m.Store.Claim(ctx, owner, limit, lease)
	if err != nil || len(rows) == 0 {
		return rows, err
	}
	ids := make([]uuid.UUID, len(rows))
	for i, r := range rows {
		ids[i] = r.ID
	}
	if _, err := m.Store.Mark(ctx, owner, ids); err != nil {
		return nil, err
	}
	return rows, nil
}

// noDedupe applies every delivery's effect, as a consumer without an
// inbox would.
type noDedupe struct{ RawInbox }

func (n noDedupe) Apply(ctx context.Context, m consumer.Message) (bool, error) {
	return false, n.Effect(ctx, m)
}

// outageCostsAttempts turns broker outages into row-level failures.
type outageCostsAttempts struct{ relay.Publisher }

func (o outageCostsAttempts) Publish(ctx context.Context, m relay.Message) (relay.Confirmation, error) {
	c, err := o.Publisher.Publish(ctx, m)
	if errors.Is(err, relay.ErrBrokerUnavailable) {
		return nil, fmt.Errorf("publish failed: %s", err)
	}
	return c, err
}

func TestVariantsAreCaught(t *testing.T) {
	cases := []struct {
		v       Variant
		faults  []Fault
		checker string
	}{
		{Variant{Name: "mark-before-publish", WrapStore: func(_ Process, s relay.Store) relay.Store { return markOnClaim{s} }},
			[]Fault{FaultKill}, checker.NameLost},
		{Variant{Name: "consumer-without-dedupe", WrapInbox: func(_ Process, in consumer.Inbox) consumer.Inbox { return noDedupe{in.(RawInbox)} }},
			[]Fault{FaultKill, FaultBrokerRestart}, checker.NameDuplicateEffects},
		{Variant{Name: "outage-consumes-attempts", WrapPublisher: func(_ Process, p relay.Publisher) relay.Publisher { return outageCostsAttempts{p} }},
			[]Fault{FaultBrokerDown}, checker.NameParking},
		{Variant{Name: "publish-then-commit", Producer: PublishThenCommit}, nil, checker.NamePhantom},
		{Variant{Name: "commit-then-publish", Producer: CommitThenPublish}, []Fault{FaultKill, FaultBrokerDown}, checker.NameLost},
		{Variant{Name: "optimistic-publish", Producer: OptimisticPublish}, []Fault{FaultBrokerRestart}, checker.NameLost},
	}
	for _, c := range cases {
		t.Run(c.v.Name, func(t *testing.T) {
			opts := Options{Variant: c.v, Tune: func(sw *Swarm) {
				sw.Rollback = max(sw.Rollback, 0.2)
				for _, f := range c.faults {
					sw.Faults = append(sw.Faults, FaultRate{Fault: f, Rate: 0.05, MaxSteps: 20})
				}
			}}
			s := RunMany(context.Background(), 1, 50, opts)
			if s.Failed == 0 {
				t.Fatalf("%s passed 50 seeds", c.v.Name)
			}
			caught := false
			for _, f := range s.Failures {
				if r, ok := f.Report.Result(c.checker); ok && !r.Valid {
					caught = true
				}
			}
			if !caught {
				t.Errorf("%s failed %d seeds, but never on %s; first: %s\n%s", c.v.Name, s.Failed, c.checker,
					s.Failures[0].Header(), s.Failures[0].Report.Summary())
			}
			t.Logf("%s: %d of %d seeds failed, first %d", c.v.Name, s.Failed, s.Seeds, s.FirstFailureSeed)
		})
	}
}
