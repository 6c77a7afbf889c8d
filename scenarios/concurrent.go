package scenarios

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/outboxlab/outboxlab/chaos"
	"github.com/outboxlab/outboxlab/contract"
	"github.com/outboxlab/outboxlab/history"
	"github.com/outboxlab/outboxlab/workload"
)

// ConcurrentDuplicates is the scenario of the consumers: it makes two
// competing consumers apply the same event at the same moment, which
// the catalogue's scenarios, whose duplicates reach the consumers one
// after another, never do. It is not part of Catalogue (it judges the
// consumer, whatever relay runs); ConsumerCatalogue and Lookup find it.
const ConcurrentDuplicates = "concurrent-duplicates"

// SubjectConsumers is the Subject of the scenarios that put the
// consumers under test rather than the relay.
const SubjectConsumers = "consumers"

// ConsumerCatalogue returns the scenarios that put the consumers under
// test rather than the relay.
func ConsumerCatalogue() []Scenario {
	return named(concurrentDuplicates(), outOfOrder(), crossContext())
}

// ConsumerNames returns the names of ConsumerCatalogue's scenarios.
func ConsumerNames() []string {
	var out []string
	for _, s := range ConsumerCatalogue() {
		out = append(out, s.Name)
	}
	return out
}

// applyHold is how long a consumer's effect keeps its transaction open
// in concurrent-duplicates: long enough that the other consumer, with
// a prefetch of one, is handed the requeued event before the first
// commits it.
const applyHold = 150 * time.Millisecond

func concurrentDuplicates() Scenario {
	return Scenario{
		Name:    ConcurrentDuplicates,
		Subject: SubjectConsumers,
		Summary: "each consumer's own link to the broker is cut while it applies an event, so the broker requeues the event to the other consumer, " +
			"which applies it while the first one's transaction is still open: the inbox must absorb the duplicate",
		Workload: defaultWorkload(),
		Safety:   9 * time.Second,
		// With a prefetch of one the other consumer is handed the requeued
		// event as soon as it finishes the one in hand, and every apply is
		// slow, so that it gets there before the first one commits.
		ConsumerPrefetch: 1,
		ApplyHold:        applyHold,
		Faults: func(s Stage, rng *rand.Rand, _ time.Duration) ([]chaos.Step, error) {
			return cutsWhileApplying(s, rng, ConcurrentDuplicates, 4)
		},
		Check: func(ctx context.Context, s Stage, res *Result) {
			n, example := concurrentApplies(res.History)
			if n == 0 {
				res.Inconclusive = append(res.Inconclusive, fmt.Sprintf("%s: no event was applied by two consumers at the same moment, so the inbox's dedupe under concurrency was not put to the test", ConcurrentDuplicates))
				return
			}
			res.Unchecked = append(res.Unchecked, fmt.Sprintf("%s: %d event(s) applied by two consumers at the same moment (%s)", ConcurrentDuplicates, n, example))
		},
	}
}

// cutsWhileApplying schedules n (at most four) cuts of the competing
// consumers' own links to the broker, alternating between the first two,
// each at the start of an apply (cutApplying), each over before the next
// begins, the last well inside the safety phase (at most 1 s + 4 x 1.7 s).
func cutsWhileApplying(s Stage, rng *rand.Rand, scenario string, n int) ([]chaos.Step, error) {
	cs := consumers(s)
	if len(cs) < 2 {
		return nil, fmt.Errorf("scenario %s needs two competing consumers, and the run has %d", scenario, len(cs))
	}
	var faults []*cutApplying
	for i, c := range cs[:2] {
		f := &cutApplying{
			DialerDown: chaos.CutDialer(c.process+"->broker down while applying", c.dialer, history.ClassBroker, c.process),
			c:          c, other: cs[1-i], within: 500 * time.Millisecond,
		}
		if err := s.AddFault(f, ""); err != nil {
			return nil, err
		}
		faults = append(faults, f)
	}
	var steps []chaos.Step
	at := between(rng, 500*time.Millisecond, time.Second)
	for i := range min(n, 4) {
		f := faults[i%2]
		d := between(rng, 300*time.Millisecond, 600*time.Millisecond)
		steps = append(steps, Step(f, at, d))
		at += d + f.within + between(rng, 200*time.Millisecond, 600*time.Millisecond)
	}
	return steps, nil
}

// OutOfOrder is the scenario of the consumers that teaches what the
// outbox does not promise: strict order inside one context. The events
// update a few orders, each order's versions staged by one producer in
// order; two competing consumers apply them at once, and their links are
// cut mid-apply so that the broker redelivers what a consumer held.
// Versions of an order reach the consumers out of order, and the
// consumers' projection must end every order at its newest version
// (checker.Convergence). It is not part of Catalogue; ConsumerCatalogue
// and Lookup find it.
const OutOfOrder = "out-of-order"

func outOfOrder() Scenario {
	w := defaultWorkload()
	w.Events, w.MaxEventsPerTxn, w.Entities = 240, 8, 60
	return Scenario{
		Name:    OutOfOrder,
		Subject: SubjectConsumers,
		Summary: "the events update 60 orders, each order's versions staged in order by one producer; two competing consumers apply them at once, " +
			"and twice a consumer's link is cut mid-apply so the broker redelivers what it held: versions of an order reach the consumers out of order, " +
			"and the consumers' state must end every order at its newest version",
		Workload:         w,
		RelayEnv:         map[string]string{contract.EnvTypes: workload.VersionedTypesSpec},
		Safety:           9 * time.Second,
		ConsumerPrefetch: 2,
		// Applies of 40-120 ms, a little slower than the producers stage: the
		// consumers are always busy, and two versions of an order handed to the two
		// consumers together commit in the order of their holds, not of
		// their versions.
		ApplyHold: 80 * time.Millisecond,
		Faults: func(s Stage, rng *rand.Rand, _ time.Duration) ([]chaos.Step, error) {
			return cutsWhileApplying(s, rng, OutOfOrder, 2)
		},
		Check: func(ctx context.Context, s Stage, res *Result) {
			if res.Counts.OutOfOrder == 0 {
				res.Inconclusive = append(res.Inconclusive, fmt.Sprintf("%s: no event was first applied after a newer version of its order, so the consumers' state was not put to the test of events out of order", OutOfOrder))
				return
			}
			res.Unchecked = append(res.Unchecked, fmt.Sprintf("%s: %d event(s) first applied after a newer version of their order", OutOfOrder, res.Counts.OutOfOrder))
		},
	}
}

// CrossContext is the scenario of the consumers that teaches the other
// half of what the outbox does not promise: any order across contexts.
// The events update orders whose transactions alternate between two
// bounded contexts, each with its own outbox, relay and queue: an order's
// first update goes to "orders", its second to "payments", and so on.
// The orders relay is woken at each COMMIT; the payments relay polls
// every 4 s, as independent deployments differ. Within a context one
// relay replica and one consumer keep the order, so every event applied
// after a newer version of its order was overtaken by the other context.
// The consumers keep one projection of the orders together, which must
// end every order at its newest version (checker.Convergence). It is not
// part of Catalogue; ConsumerCatalogue and Lookup find it.
const CrossContext = "cross-context"

func crossContext() Scenario {
	w := defaultWorkload()
	w.Events, w.MaxEventsPerTxn, w.Entities, w.Contexts = 180, 2, 18, 2
	return Scenario{
		Name:    CrossContext,
		Subject: SubjectConsumers,
		Summary: "the events update 18 orders, each order's transactions alternating between two contexts (orders, payments) with their own outbox, relay and queue; " +
			"the orders relay is woken at each COMMIT and the payments relay polls every 4 s: an order's update in one context overtakes its earlier update in the other, " +
			"and the consumers' shared state must end every order at its newest version",
		Workload:    w,
		Safety:      9 * time.Second,
		Replicas:    1,
		Contexts:    []string{"orders", "payments"},
		Independent: true,
		RelayEnv:    map[string]string{contract.EnvTypes: workload.VersionedTypesSpec},
		ContextEnv:  map[string]map[string]string{"payments": {contract.EnvNotify: "false", contract.EnvPollInterval: "4s"}},
		Check: func(ctx context.Context, s Stage, res *Result) {
			if res.Counts.OutOfOrder == 0 {
				res.Inconclusive = append(res.Inconclusive, fmt.Sprintf("%s: no event was first applied after a newer version of its order from the other context, so the consumers' state was not put to the test of contexts out of order", CrossContext))
				return
			}
			res.Unchecked = append(res.Unchecked, fmt.Sprintf("%s: %d event(s) first applied after a newer version of their order from the other context", CrossContext, res.Counts.OutOfOrder))
		},
	}
}

// cutApplying cuts one consumer's own link to the broker as it begins
// an apply that will hold its transaction longer than the other
// consumer's apply in hand (or while the other is idle), so that the
// broker requeues that delivery to the other consumer, which takes it
// up while the first one's transaction is still open. When no such
// moment comes within its bound it cuts all the same; the scenario's
// check judges from the history whether two applies met.
type cutApplying struct {
	*chaos.DialerDown
	c, other *recordingInbox
	within   time.Duration
}

// ahead is how much sooner than the cut consumer's commit the other
// consumer must be done with its apply in hand.
const ahead = 30 * time.Millisecond

// holdFor is how long the effect of event id holds its transaction in
// sc: between half and one and a half times ApplyHold, by a hash of the
// id, the same on every delivery.
func (sc Scenario) holdFor(id string) time.Duration {
	if sc.ApplyHold <= 0 {
		return 0
	}
	h := fnv.New32a()
	h.Write([]byte(id))
	return sc.ApplyHold/2 + sc.ApplyHold*time.Duration(h.Sum32()%1000)/1000
}

// freshApply is how recently an apply must have begun for a cut to be
// taken as coming at its start.
const freshApply = 20 * time.Millisecond

// Inject waits for the consumer to begin an apply, then cuts its link.
func (f *cutApplying) Inject(ctx context.Context) error {
	wctx, cancel := context.WithTimeout(ctx, f.within)
	defer cancel()
	before := f.c.applying.Load()
	err := chaos.WaitFor(wctx, time.Millisecond, func(context.Context) (bool, error) {
		began := f.c.applying.Load()
		if began == 0 || began == before || time.Since(time.Unix(0, began)) >= freshApply {
			return false, nil
		}
		if f.other == nil || f.other.applying.Load() == 0 {
			return true, nil
		}
		return f.other.applyEnd.Load() < f.c.applyEnd.Load()-int64(ahead), nil
	})
	if err != nil && (ctx.Err() != nil || !errors.Is(err, context.DeadlineExceeded)) {
		return fmt.Errorf("waiting for %s to apply: %w", f.c.process, err)
	}
	return f.DialerDown.Inject(ctx)
}

// concurrentApplies counts the events that two consumer processes were
// applying at the same moment: one's apply began before the other's
// ended. It returns the count and one such event, described.
func concurrentApplies(h []history.Op) (int, string) {
	type span struct {
		process    string
		start, end int64
	}
	open := map[[2]string]int64{} // (process, event) -> index of its Invoke
	spans := map[string][]span{}
	for _, op := range h {
		if op.F != history.Apply || len(op.Events) != 1 {
			continue
		}
		key := [2]string{op.Process, op.Events[0]}
		if op.Type == history.Invoke {
			open[key] = op.Index
			continue
		}
		if start, ok := open[key]; ok {
			delete(open, key)
			spans[op.Events[0]] = append(spans[op.Events[0]], span{op.Process, start, op.Index})
		}
	}
	n, example := 0, ""
	for _, id := range slices.Sorted(maps.Keys(spans)) {
		ss := spans[id]
	pairs:
		for i := range ss {
			for j := i + 1; j < len(ss); j++ {
				a, b := ss[i], ss[j]
				if a.process != b.process && a.start < b.end && b.start < a.end {
					n++
					if example == "" {
						example = fmt.Sprintf("%s by %s in ops %d-%d and by %s in ops %d-%d", id, a.process, a.start, a.end, b.process, b.start, b.end)
					}
					break pairs
				}
			}
		}
	}
	return n, example
}
