package checker

import (
	"fmt"

	"github.com/outboxlab/outboxlab/history"
)

// CausalOrder checks multi-hop pipelines: an event B whose Commit invoke
// says "caused-by=A" is staged by the consumer of A, so B can exist only
// after A was consumed. For every B that committed or showed up, and every
// cause A of it:
//
//   - A was staged (some Commit invoke names it);
//   - when B's commit completed ok, A had reached its consumer before (a
//     Deliver of A or an Apply invoke of A precedes B's Commit ok);
//   - when B was applied, A was applied too, and B's first Apply ok does not
//     precede A's first Apply invoke.
//
// Hops must record A's Deliver or Apply invoke before B's Commit invoke.
func CausalOrder(h []history.Op, s State, cfg Config) Result {
	return analyze(h, s, cfg).causalOrder()
}

func (a *analysis) causalOrder() Result {
	v := a.verdict(NameCausalOrder)
	links := 0
	for _, id := range a.ids {
		b := a.events[id]
		if len(b.causes) == 0 || !(b.proven() || b.observed()) {
			continue
		}
		for _, cause := range b.causes {
			links++
			c, ok := a.events[cause]
			if !ok || c.commitInvoke < 0 {
				v.offend(id, "caused by %s, which was never staged", cause)
				continue
			}
			reached := c.applyInvoke
			if len(c.deliverOK) > 0 && (reached < 0 || c.deliverOK[0].Index < reached) {
				reached = c.deliverOK[0].Index
			}
			if b.commitOK >= 0 && (reached < 0 || reached > b.commitOK) {
				v.offend(id, "committed at #%d before its cause %s reached a consumer (%s)", b.commitOK, cause, at(reached))
				continue
			}
			if len(b.applyOK) == 0 {
				continue
			}
			if !c.applied() {
				v.offend(id, "applied at #%d, but its cause %s never was", b.applyOK[0].Index, cause)
				continue
			}
			if c.applyInvoke >= 0 && b.applyOK[0].Index < c.applyInvoke {
				v.offend(id, "applied at #%d before its cause %s was being applied (#%d)", b.applyOK[0].Index, cause, c.applyInvoke)
			}
		}
	}
	if links == 0 {
		return skipped(NameCausalOrder, "no caused-by links in the history")
	}
	v.counts["links"] = links
	return v.result(fmt.Sprintf("%d causal links", links))
}

func at(i int64) string {
	if i < 0 {
		return "never"
	}
	return fmt.Sprintf("#%d", i)
}
