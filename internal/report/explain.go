package report

import (
	"fmt"
	"slices"
	"strings"

	"github.com/outboxlab/outboxlab/checker"
	"github.com/outboxlab/outboxlab/history"
)

// Explain says in one sentence what happened to a run's events and why,
// from its counts and its history: how many committed events were lost and
// what stopped each (a producer that died after COMMIT, a publish the
// broker refused), how many rolled-back events were delivered anyway, and
// what became of duplicates.
func Explain(r Run) string {
	c := r.Report.Counts
	var parts []string
	if c.Lost > 0 {
		lost, _ := r.Report.Result(checker.NameLost)
		k := lostCauses(r.History, lost.Offending)
		var why []string
		if k.crashed > 0 {
			why = append(why, fmt.Sprintf("%d because the producer died between COMMIT and publish", k.crashed))
		}
		if k.refused > 0 {
			why = append(why, fmt.Sprintf("%d because the inline publish failed while the broker was unreachable", k.refused))
		}
		if k.gaveUp > 0 {
			why = append(why, fmt.Sprintf("%d because an earlier publish of the same transaction failed and the producer gave up on the rest", k.gaveUp))
		}
		if k.other > 0 {
			why = append(why, fmt.Sprintf("%d never reached a consumer", k.other))
		}
		s := fmt.Sprintf("%d of %d committed %s %s lost: %s", c.Lost, c.Committed, pick(c.Committed, "event", "events"),
			pick(c.Lost, "was", "were"), strings.Join(why, ", "))
		if k.refused+k.gaveUp > 0 {
			s += ", and nothing retries an inline publish"
		}
		parts = append(parts, s)
	}
	if c.Phantom > 0 {
		parts = append(parts, fmt.Sprintf("%s delivered although %s transaction rolled back (phantom): the publish happened before COMMIT, and a rollback cannot unsend a message",
			count(c.Phantom, "event was", "events were"), pick(c.Phantom, "its", "their")))
	}
	if n := refusedRequests(r.History); n > 0 {
		parts = append(parts, fmt.Sprintf("%s failed because the publish before COMMIT could not reach the broker", count(n, "request", "requests")))
	}
	if c.Lost == 0 && c.Phantom == 0 {
		s := fmt.Sprintf("all %d committed events were delivered", c.Committed)
		if c.Committed == 1 {
			s = "the one committed event was delivered"
		}
		switch {
		case c.RolledBack == 1:
			s += " and the rolled-back one was not"
		case c.RolledBack > 1:
			s += fmt.Sprintf(" and none of the %d rolled-back ones", c.RolledBack)
		}
		if r.Variant == "outbox" || r.Variant == "production" {
			s += ": each event row committed or rolled back with its business write, and the relay published only committed rows, retrying through the faults"
		}
		parts = append(parts, s)
	}
	switch {
	case c.DuplicateEffects > 0:
		parts = append(parts, fmt.Sprintf("%s applied twice", count(c.DuplicateEffects, "effect was", "effects were")))
	case c.DuplicateDeliveries > 0:
		parts = append(parts, fmt.Sprintf("%s absorbed by the consumer's inbox with no second effect",
			count(c.DuplicateDeliveries, "duplicate delivery was", "duplicate deliveries were")))
	}
	s := strings.Join(parts, "; ")
	if s == "" {
		return ""
	}
	return strings.ToUpper(s[:1]) + s[1:] + "."
}

// refusedRequests counts the transactions that rolled back because a
// publish inside them failed: the price publish-then-commit pays for an
// outage.
func refusedRequests(h []history.Op) int {
	pos := make(map[int64]int, len(h))
	for i, op := range h {
		pos[op.Index] = i
	}
	n := 0
	for _, p := range history.Pairs(h) {
		if p.Invoke == nil || p.Done == nil || p.Invoke.F != history.Commit || p.Done.Type != history.Fail {
			continue
		}
		for _, op := range h[pos[p.Invoke.Index]+1 : pos[p.Done.Index]] {
			if op.Process == p.Invoke.Process && op.F == history.Publish && op.Type == history.Fail {
				n++
				break
			}
		}
	}
	return n
}

// lostReasons counts lost events by what stopped them.
type lostReasons struct {
	crashed, refused, gaveUp, other int
}

// lostCauses sorts lost events by what stopped them: the producer's crash
// right after COMMIT (its next record is the crash, and no publish was
// attempted), a publish of the event that failed, a failed publish of
// another event of the same transaction after which the producer gave up,
// or something else.
func lostCauses(h []history.Op, lost []string) lostReasons {
	byEvent := history.ByEvent(h)
	// next[i] is the F of the record its process made after record i.
	next := map[int64]history.Func{}
	lastOf := map[string]int64{}
	for _, op := range h {
		if prev, ok := lastOf[op.Process]; ok {
			next[prev] = op.F
		}
		lastOf[op.Process] = op.Index
	}
	publishFailed := func(id string) bool {
		for _, op := range byEvent[id] {
			if op.F == history.Publish && (op.Type == history.Fail || op.Type == history.Info) {
				return true
			}
		}
		return false
	}
	var k lostReasons
	for _, id := range lost {
		var commitOK *history.Op
		publishTried := false
		for _, op := range byEvent[id] {
			switch {
			case op.F == history.Commit && op.Type == history.OK && commitOK == nil:
				o := op
				commitOK = &o
			case op.F == history.Publish && op.Type == history.Invoke:
				publishTried = true
			}
		}
		switch {
		case publishFailed(id):
			k.refused++
		case commitOK != nil && !publishTried && next[commitOK.Index] == history.Crash:
			k.crashed++
		case commitOK != nil && !publishTried && slices.ContainsFunc(commitOK.Events, publishFailed):
			k.gaveUp++
		default:
			k.other++
		}
	}
	return k
}

func count(n int, one, many string) string {
	return fmt.Sprintf("%d %s", n, pick(n, one, many))
}

func pick(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
