package report

import (
	"fmt"
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
		crashed, refused, other := lostCauses(r.History, lost.Offending)
		var why []string
		if crashed > 0 {
			why = append(why, fmt.Sprintf("%d because the producer died between COMMIT and publish", crashed))
		}
		if refused > 0 {
			why = append(why, fmt.Sprintf("%d because the inline publish failed while the broker was unreachable and nothing retried it", refused))
		}
		if other > 0 {
			why = append(why, fmt.Sprintf("%d never reached a consumer", other))
		}
		parts = append(parts, fmt.Sprintf("%d of %d committed %s %s lost: %s",
			c.Lost, c.Committed, pick(c.Committed, "event", "events"), pick(c.Lost, "was", "were"), strings.Join(why, ", ")))
	}
	if c.Phantom > 0 {
		parts = append(parts, fmt.Sprintf("%s delivered although %s transaction rolled back (phantom): the publish happened before COMMIT, and a rollback cannot unsend a message",
			count(c.Phantom, "event was", "events were"), pick(c.Phantom, "its", "their")))
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

// lostCauses sorts lost events by what stopped them: the producer's crash
// right after COMMIT (its next record is the crash, and no publish was
// attempted), a publish that failed, or something else.
func lostCauses(h []history.Op, lost []string) (crashed, refused, other int) {
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
	for _, id := range lost {
		var commitOK *history.Op
		publishFailed, publishTried := false, false
		for _, op := range byEvent[id] {
			switch {
			case op.F == history.Commit && op.Type == history.OK && commitOK == nil:
				o := op
				commitOK = &o
			case op.F == history.Publish && op.Type == history.Invoke:
				publishTried = true
			case op.F == history.Publish && (op.Type == history.Fail || op.Type == history.Info):
				publishFailed = true
			}
		}
		switch {
		case publishFailed:
			refused++
		case commitOK != nil && !publishTried && next[commitOK.Index] == history.Crash:
			crashed++
		default:
			other++
		}
	}
	return crashed, refused, other
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
