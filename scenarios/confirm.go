package scenarios

import (
	"fmt"
	"time"

	"github.com/outboxlab/outboxlab/checker"
	"github.com/outboxlab/outboxlab/history"
)

// firstDeliveryMargin is how long after confirm-lost's toxic took hold an
// event must first reach a consumer to count as published while the
// confirms were lost: a message reaches a consumer within milliseconds of
// its publish, and the broker confirms it no sooner, so the confirm of
// one delivered this late into the window was swallowed.
const firstDeliveryMargin = 250 * time.Millisecond

// judgeConfirmLost says what confirm-lost's run shows, from its history
// and its duplicate causes, fault being the name of its toxic: nothing
// when a duplicate delivery is explained by the lost confirms (a row
// published unconfirmed was published again); a problem when events went
// out while the confirms were lost and none was published again; and,
// when nothing went out then, that the fault could not bite. A relay that
// opens a channel for every publish (watermill-amqp's default) waits for
// the broker's answer to the channel's opening, which the toxic swallows
// too, so it publishes nothing through the fault.
func judgeConfirmLost(h []history.Op, by map[string]int, fault string) (problem, inconclusive string) {
	if by[checker.CauseUnconfirmed]+by[fault] > 0 {
		return "", ""
	}
	if n := sentWhile(h, fault); n > 0 {
		return fmt.Sprintf("confirm-lost: %d event(s) were published while the confirms were lost, yet no duplicate delivery is explained by the lost confirms, so no unconfirmed row was published again", n), ""
	}
	return "", "confirm-lost could not bite: no event was published while the confirms were lost (no relay recorded a publish and no event first reached a consumer in the window), so no row went out unconfirmed"
}

// sentWhile counts the events that went out to the broker while fault was
// active: the relays recorded publishing them in its window, or they
// first reached a consumer in it, firstDeliveryMargin after it began.
func sentWhile(h []history.Op, fault string) int {
	var from, to time.Time
	for _, op := range h {
		if op.Meta.Fault == nil || op.Meta.Fault.Name != fault {
			continue
		}
		switch {
		case op.F == history.FaultStart && op.Type == history.OK && from.IsZero():
			from = op.Time
		case op.F == history.FaultStop && op.Type == history.Invoke && to.IsZero():
			to = op.Time
		}
	}
	if from.IsZero() {
		return 0
	}
	in := func(t time.Time, after time.Time) bool { return !t.Before(after) && (to.IsZero() || t.Before(to)) }
	first := map[string]time.Time{}
	sent := map[string]bool{}
	for _, op := range h {
		switch {
		case op.F == history.Publish && op.Type == history.Invoke && in(op.Time, from):
			for _, id := range op.Events {
				sent[id] = true
			}
		case op.F == history.Deliver && op.Type == history.OK:
			for _, id := range op.Events {
				if t, ok := first[id]; !ok || op.Time.Before(t) {
					first[id] = op.Time
				}
			}
		}
	}
	for id, t := range first {
		if in(t, from.Add(firstDeliveryMargin)) {
			sent[id] = true
		}
	}
	return len(sent)
}
