package checker

import (
	"testing"

	"github.com/outboxlab/outboxlab/history"
)

func TestLost(t *testing.T) {
	runCases(t, Lost, []checkCase{
		{
			name:  "committed, published and applied",
			h:     build().commit("producer-1", "e1").relay("relay-a", "e1").consume("consumer-1", "e1").h(),
			valid: true,
		},
		{
			name:      "committed and never published",
			h:         build().commit("producer-1", "e1", "e2").relay("relay-a", "e1").consume("consumer-1", "e1").h(),
			offending: []string{"e2"},
		},
		{
			name:      "delivered but never applied",
			h:         build().commit("producer-1", "e1").relay("relay-a", "e1").deliver("consumer-1", "e1").h(),
			offending: []string{"e1"},
		},
		{
			name:  "delivered counts when the run has no consumers",
			h:     build().commit("producer-1", "e1", "e2").relay("relay-a", "e1").h(),
			s:     State{Queued: []string{"e2"}},
			cfg:   Config{BrokerOnly: true},
			valid: true,
		},
		{
			name:  "an effect counts without an apply record",
			h:     build().commit("producer-1", "e1").h(),
			s:     State{Effects: map[string]int{"e1": 1}},
			valid: true,
		},
		{
			name: "a duplicate-absorbed apply counts as delivered",
			h: build().commit("producer-1", "e1").relay("relay-a", "e1").
				deliver("consumer-1", "e1").invoke("consumer-1", history.Apply, "e1").crash("consumer-1").restart("consumer-1").
				deliver("consumer-1", "e1", history.Meta{Redelivered: true}).applyDup("consumer-1", "e1").h(),
			valid: true,
		},
		{
			name: "absorbed as a duplicate of nothing: an inbox with the wrong key drops the effect",
			h: build().commit("producer-1", "e1", "e2").relay("relay-a", "e1", "e2").
				consume("consumer-1", "e1").deliver("consumer-1", "e2").applyDup("consumer-1", "e2").h(),
			offending: []string{"e2"},
		},
		{
			name: "the effects table decides: an apply ok without its effect is lost",
			h: build().commit("producer-1", "e1", "e2").relay("relay-a", "e1", "e2").
				consume("consumer-1", "e1", "e2").h(),
			s:         State{Effects: map[string]int{"e1": 1}},
			offending: []string{"e2"},
		},
		{
			name: "the effects table decides: a crashed apply whose effect committed is delivered",
			h: build().commit("producer-1", "e1").relay("relay-a", "e1").
				deliver("consumer-1", "e1").invoke("consumer-1", history.Apply, "e1").crash("consumer-1").h(),
			s:     State{Effects: map[string]int{"e1": 1}},
			valid: true,
		},
		{
			name:  "rolled back and never seen",
			h:     build().commitFail("producer-1", "e1").h(),
			valid: true,
		},
		{
			name:  "indeterminate and never seen is neither lost nor phantom",
			h:     build().commitInfo("producer-1", "e1").h(),
			valid: true,
		},
		{
			name:  "commit left open by a producer crash, never seen",
			h:     build().invoke("producer-1", history.Commit, "e1").crash("producer-1").h(),
			valid: true,
		},
		{
			name:      "indeterminate but its row exists: committed after all, must arrive",
			h:         build().commitInfo("producer-1", "e1").h(),
			s:         State{Outbox: rows(pendingRow("e1", 0))},
			offending: []string{"e1"},
		},
		{
			name:  "parked poison is accounted for",
			h:     build().commit("producer-1", "e1").claim("relay-a", "e1").park("relay-a", "e1").h(),
			s:     State{Outbox: rows(faultedRow("e1", 0))},
			cfg:   Config{Poison: map[string]bool{"e1": true}},
			valid: true,
		},
		{
			name:      "poison neither parked nor delivered by a relay that parks",
			h:         build().commit("producer-1", "e1").h(),
			s:         State{Outbox: rows(pendingRow("e1", 2))},
			cfg:       Config{Poison: map[string]bool{"e1": true}, Features: Features{Parks: true}},
			offending: []string{"e1"},
		},
		{
			name:  "poison still pending, retried by a relay that parks nothing",
			h:     build().commit("producer-1", "e1").h(),
			s:     State{Outbox: rows(pendingRow("e1", 2))},
			cfg:   Config{Poison: map[string]bool{"e1": true}},
			valid: true,
		},
		{
			name:      "poison gone and never delivered, from a relay that parks nothing",
			h:         build().commit("producer-1", "e1").h(),
			s:         State{Outbox: rows()},
			cfg:       Config{Poison: map[string]bool{"e1": true}},
			offending: []string{"e1"},
		},
		{
			name: "commit-then-publish whose publish failed",
			h: build().commit("producer-1", "e1").
				invoke("producer-1", history.Publish, "e1").fail("producer-1", history.Publish, "e1").h(),
			offending: []string{"e1"},
		},
	})
}

func TestPhantom(t *testing.T) {
	runCases(t, Phantom, []checkCase{
		{
			name: "publish-then-commit whose commit failed",
			h: build().invoke("producer-1", history.Commit, "e1").publish("producer-1", "e1").
				fail("producer-1", history.Commit, "e1").consume("consumer-1", "e1").h(),
			offending: []string{"e1"},
		},
		{
			name: "delivered before the producer saw its commit acknowledged",
			h: build().invoke("producer-1", history.Commit, "e1").relay("relay-a", "e1").
				consume("consumer-1", "e1").ok("producer-1", history.Commit, "e1").h(),
			valid: true,
		},
		{
			name:  "commit cut by a reset whose transaction committed is recovered",
			h:     build().commitInfo("producer-1", "e1").relay("relay-a", "e1").consume("consumer-1", "e1").h(),
			valid: true,
		},
		{
			name: "a failed retry after an info proves nothing about the first commit",
			h: build().commitInfo("producer-1", "e1").commitFail("producer-1", "e1").
				relay("relay-a", "e1").consume("consumer-1", "e1").h(),
			valid: true,
		},
		{
			name: "a fail recorded after the info without a new invoke is ignored",
			h: build().commitInfo("producer-1", "e1").fail("producer-1", history.Commit, "e1").
				relay("relay-a", "e1").consume("consumer-1", "e1").h(),
			valid: true,
		},
		{
			name:      "rolled back yet its row is in the outbox",
			h:         build().commitFail("producer-1", "e1").h(),
			s:         State{Outbox: rows(pendingRow("e1", 0))},
			offending: []string{"e1"},
		},
		{
			name:      "rolled back yet a relay claimed it",
			h:         build().commitFail("producer-1", "e1").claim("relay-a", "e1").h(),
			offending: []string{"e1"},
		},
		{
			name:  "rolled back and never seen",
			h:     build().commitFail("producer-1", "e1").h(),
			valid: true,
		},
		{
			name: "duplicates across a relay restart are not phantom",
			h: build().commit("producer-1", "e1").claim("relay-a", "e1").publish("relay-a", "e1").
				crash("relay-a").restart("relay-a").relay("relay-a", "e1").
				consume("consumer-1", "e1").deliver("consumer-1", "e1").applyDup("consumer-1", "e1").h(),
			valid: true,
		},
	})
}

func TestUnexpected(t *testing.T) {
	runCases(t, Unexpected, []checkCase{
		{
			name:      "delivered without ever being staged",
			h:         build().commit("producer-1", "e1").relay("relay-a", "e1").consume("consumer-1", "e1", "x9").h(),
			offending: []string{"x9"},
		},
		{
			name:      "an effect of an id nobody staged",
			h:         build().commit("producer-1", "e1").h(),
			s:         State{Effects: map[string]int{"e1": 1, "x9": 1}},
			offending: []string{"x9"},
		},
		{
			name:  "every event seen was staged",
			h:     build().commit("producer-1", "e1").relay("relay-a", "e1").consume("consumer-1", "e1").h(),
			s:     State{Effects: map[string]int{"e1": 1}, Outbox: rows(processedRow("e1", t0))},
			valid: true,
		},
		{
			name:  "a rolled-back event is phantom, not unexpected",
			h:     build().commitFail("producer-1", "e1").consume("consumer-1", "e1").h(),
			valid: true,
		},
	})
}

func TestDuplicateEffects(t *testing.T) {
	runCases(t, DuplicateEffects, []checkCase{
		{
			name:      "two effects in the effects table",
			h:         build().commit("producer-1", "e1").h(),
			s:         State{Effects: map[string]int{"e1": 2}},
			offending: []string{"e1"},
		},
		{
			name: "applied twice with effect",
			h: build().commit("producer-1", "e1", "e2").relay("relay-a", "e1", "e2").
				consume("consumer-1", "e1", "e2").consume("consumer-1", "e2").h(),
			offending: []string{"e2"},
		},
		{
			name: "a redelivery absorbed by the inbox",
			h: build().commit("producer-1", "e1").relay("relay-a", "e1").
				consume("consumer-1", "e1").deliver("consumer-1", "e1", history.Meta{Redelivered: true}).applyDup("consumer-1", "e1").h(),
			s:     State{Effects: map[string]int{"e1": 1}},
			valid: true,
		},
	})
}
