package external

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/outboxlab/outboxlab/chaos"
	"github.com/outboxlab/outboxlab/history"
	"github.com/outboxlab/outboxlab/scenarios"
	"github.com/outboxlab/outboxlab/workload"
)

// RelayPausedName is the name of RelayPaused, which is its subtest's.
const RelayPausedName = "relay-paused"

// MaxDeliveries is how many times RelayPaused lets one event reach one
// queue: the first delivery, and one republish of a row whose confirm or
// mark a pause cut off.
const MaxDeliveries = 2

// RelayPaused is a scenario of this module's own, built from outboxlab's
// public packages alone: its fault freezes each of the two relay replicas
// in turn (docker pause) for one to two seconds, shorter than the lease,
// while producers commit, the second pause a lease after the first ends;
// its check fails the run when an event reached a queue more than
// MaxDeliveries times. A frozen replica keeps its claims, so the other
// one must not take them over; what a pause can cost is a confirm or a
// mark that timed out while frozen, and so one more publish of those
// rows, never a storm of them. The checkers judge the run as they judge
// the catalogue's: nothing lost, nothing invented, every duplicate
// explained and absorbed by the consumers' inbox.
func RelayPaused() scenarios.Scenario {
	return scenarios.Scenario{
		Name:       RelayPausedName,
		Summary:    "each relay replica in turn is frozen for less than its lease while producers commit; no event reaches a queue more than twice",
		Workload:   workload.Shape{Events: 150, Producers: 3, MaxEventsPerTxn: 3, RollbackRate: 0.1},
		Safety:     13 * time.Second,
		NeedsRelay: true, // its fault acts on relay replicas
		Faults: func(s scenarios.Stage, rng *rand.Rand, safety time.Duration) ([]chaos.Step, error) {
			at, d, err := Pauses(rng, s.Lease(), safety)
			if err != nil {
				return nil, err
			}
			var steps []chaos.Step
			for i := range 2 {
				f := chaos.PauseContainer(s.Replica(0, i), history.ClassProcess)
				if err := s.AddFault(f, ""); err != nil {
					return nil, err
				}
				steps = append(steps, scenarios.Step(f, at[i], d[i]))
			}
			return steps, nil
		},
		Check: func(ctx context.Context, s scenarios.Stage, res *scenarios.Result) {
			res.Problems = append(res.Problems, DeliveredMoreThan(res.History, MaxDeliveries)...)
		},
	}
}

// Pauses draws the two pauses of RelayPaused from rng: the first from 1
// to 2 s into the schedule, each lasting 1 to 2 s (below the lease), the
// second 1 to 2 s more than a lease after the first ends, so that any
// row the first pause left claimed is settled before the second. It
// fails when that does not fit a safety phase of safety (a relay with a
// long lease).
func Pauses(rng *rand.Rand, lease, safety time.Duration) (at, d [2]time.Duration, err error) {
	between := func(lo, hi time.Duration) time.Duration {
		return lo + time.Duration(rng.Int64N(int64(hi-lo)+1)).Truncate(time.Millisecond)
	}
	at[0], d[0] = between(time.Second, 2*time.Second), between(time.Second, 2*time.Second)
	at[1], d[1] = at[0]+d[0]+lease+between(time.Second, 2*time.Second), between(time.Second, 2*time.Second)
	if d[0] >= lease || d[1] >= lease {
		return at, d, fmt.Errorf("%s: pauses of up to 2s reach the lease (%s)", RelayPausedName, lease)
	}
	if end := at[1] + d[1]; end > safety {
		return at, d, fmt.Errorf("%s: two pauses a lease (%s) apart end at %s, after the safety phase (%s)", RelayPausedName, lease, end, safety)
	}
	return at, d, nil
}

// DeliveredMoreThan returns a problem for every event that reached one
// queue more than limit times in history h, as the consumers recorded
// their deliveries (history.Deliver, ok), at most five listed, then a
// count of the others.
func DeliveredMoreThan(h []history.Op, limit int) []string {
	type key struct{ queue, event string }
	n := map[key]int{}
	for _, op := range h {
		if op.F != history.Deliver || op.Type != history.OK {
			continue
		}
		for _, id := range op.Events {
			n[key{op.Queue, id}]++
		}
	}
	var over []key
	for k, c := range n {
		if c > limit {
			over = append(over, k)
		}
	}
	slices.SortFunc(over, func(a, b key) int {
		return cmp.Or(cmp.Compare(n[b], n[a]), strings.Compare(a.event, b.event), strings.Compare(a.queue, b.queue))
	})
	var out []string
	for i, k := range over {
		if i == 5 {
			out = append(out, fmt.Sprintf("%s: %d more event(s) delivered more than %d times", RelayPausedName, len(over)-5, limit))
			break
		}
		queue := ""
		if k.queue != "" {
			queue = " to queue " + k.queue
		}
		out = append(out, fmt.Sprintf("%s: event %s delivered %d times%s, more than %d", RelayPausedName, k.event, n[k], queue, limit))
	}
	return out
}
