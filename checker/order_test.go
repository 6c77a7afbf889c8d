package checker

import (
	"testing"
	"time"

	"github.com/outboxlab/outboxlab/history"
)

func TestFencing(t *testing.T) {
	fenced := Config{Features: Features{Fenced: true}}
	runCases(t, Fencing, []checkCase{
		{
			name: "a mark after another relay took the lease over",
			h: build().commit("producer-1", "e1", "e2").claim("relay-a", "e1", "e2").publish("relay-a", "e1").
				publish("relay-a", "e2").claim("relay-b", "e2").mark("relay-a", "e1", "e2").h(),
			cfg:       fenced,
			offending: []string{"e2"},
		},
		{
			name: "the late mark left the taken-over row alone",
			h: build().commit("producer-1", "e1", "e2").claim("relay-a", "e1", "e2").publish("relay-a", "e1").
				publish("relay-a", "e2").claim("relay-b", "e2").markLost("relay-a", []string{"e1", "e2"}, "e1").
				publish("relay-b", "e2").mark("relay-b", "e2").h(),
			cfg:   fenced,
			valid: true,
		},
		{
			name: "a retry after the lease was taken over",
			h: build().commit("producer-1", "p1").claim("relay-a", "p1").claim("relay-b", "p1").
				retry("relay-a", "p1", att(1, false)).h(),
			cfg:       fenced,
			offending: []string{"p1"},
		},
		{
			name: "a park after the lease was taken over",
			h: build().commit("producer-1", "p1").claim("relay-a", "p1").claim("relay-b", "p1").
				park("relay-a", "p1").h(),
			cfg:       fenced,
			offending: []string{"p1"},
		},
		{
			name:      "a mark of a row never claimed",
			h:         build().commit("producer-1", "e1").publish("relay-a", "e1").mark("relay-a", "e1").h(),
			cfg:       fenced,
			offending: []string{"e1"},
		},
		{
			name: "claimed again by the first relay after the takeover",
			h: build().commit("producer-1", "e1").claim("relay-a", "e1").claim("relay-b", "e1").
				claim("relay-a", "e1").publish("relay-a", "e1").mark("relay-a", "e1").h(),
			cfg:   fenced,
			valid: true,
		},
		{
			name: "a takeover after the mark is not the mark's fault",
			h: build().commit("producer-1", "e1").relay("relay-a", "e1").
				claim("relay-b", "e1").h(),
			cfg:   fenced,
			valid: true,
		},
	})
	r := Fencing(build().commit("producer-1", "e1").claim("relay-a", "e1").claim("relay-b", "e1").mark("relay-a", "e1").h(), State{}, Config{})
	if !r.Valid || !r.Skipped {
		t.Errorf("Fencing without the feature = %+v, want skipped", r)
	}
}

func TestLiveness(t *testing.T) {
	bound := Config{LivenessBound: 5 * time.Second, Poison: map[string]bool{"p1": true}}
	staged := bound
	staged.Features.Stages = true
	runCases(t, Liveness, []checkCase{
		{
			name: "drained within the bound",
			h: build().commit("producer-1", "e1").relay("relay-a", "e1").consume("consumer-1", "e1").
				commit("producer-1", "e2").fault("broker-down", history.ClassBroker).heal("broker-down").phase(history.PhaseLiveness).
				wait(3*time.Second).relay("relay-a", "e2").consume("consumer-1", "e2").h(),
			cfg:   bound,
			valid: true,
		},
		{
			name: "drained after the bound",
			h: build().commit("producer-1", "e1", "e2").phase(history.PhaseLiveness).
				relay("relay-a", "e1").consume("consumer-1", "e1").
				wait(10*time.Second).relay("relay-a", "e2").consume("consumer-1", "e2").h(),
			cfg:       bound,
			offending: []string{"e2"},
		},
		{
			name:      "never drained",
			h:         build().commit("producer-1", "e1").phase(history.PhaseLiveness).h(),
			cfg:       Config{},
			offending: []string{"e1"},
		},
		{
			name: "poison is parking's business",
			h: build().commit("producer-1", "e1", "p1").phase(history.PhaseLiveness).
				relay("relay-a", "e1").consume("consumer-1", "e1").h(),
			cfg:   bound,
			valid: true,
		},
		{
			name: "delivered, and its row processed",
			h: build().commit("producer-1", "e1").phase(history.PhaseLiveness).
				relay("relay-a", "e1").consume("consumer-1", "e1").h(),
			s:   State{Outbox: map[string]RowState{"e1": {ID: "e1", ProcessedAt: &t0}}},
			cfg: staged, valid: true,
		},
		{
			name: "delivered, but its row never marked: the backlog did not drain",
			h: build().commit("producer-1", "e1", "e2").phase(history.PhaseLiveness).
				relay("relay-a", "e1", "e2").consume("consumer-1", "e1").consume("consumer-1", "e2").h(),
			s:         State{Outbox: map[string]RowState{"e1": {ID: "e1", ProcessedAt: &t0}, "e2": {ID: "e2"}}},
			cfg:       staged,
			offending: []string{"e2"},
		},
		{
			name: "an effect without an apply record counts, untimed",
			h:    build().commit("producer-1", "e1").phase(history.PhaseLiveness).h(),
			s:    State{Effects: map[string]int{"e1": 1}},
			cfg:  bound, valid: true,
		},
	})

	h := build().commit("producer-1", "e1", "e2").phase(history.PhaseLiveness).
		wait(time.Second).relay("relay-a", "e1").consume("consumer-1", "e1").
		wait(2*time.Second).relay("relay-a", "e2").consume("consumer-1", "e2").h()
	r := Liveness(h, State{}, bound)
	expect(t, r, true)
	// e2's apply ok is the last record: phase at index 2, then 1s, 1s of
	// later records stepping 10ms each, then 2s.
	phase, last := h[2].Time, h[len(h)-1].Time
	if want := int(last.Sub(phase) / time.Millisecond); r.Counts["drain_ms"] != want {
		t.Errorf("drain_ms = %d, want %d", r.Counts["drain_ms"], want)
	}

	r = Liveness(build().commit("producer-1", "e1").h(), State{}, bound)
	if !r.Valid || !r.Skipped {
		t.Errorf("Liveness without a liveness phase = %+v, want skipped", r)
	}
}

func TestCausalOrder(t *testing.T) {
	// hop runs the first hop of a pipeline: a consumer receives A, applies
	// it and stages B in the same transaction.
	hop := func(b *hb, a, bID string) *hb {
		return b.deliver("hop-1", a).invoke("hop-1", history.Apply, a).
			causedCommit("hop-1", a, bID).ok("hop-1", history.Apply, a)
	}
	runCases(t, CausalOrder, []checkCase{
		{
			name: "B staged by A's consumer, applied after A",
			h: hop(build().commit("producer-1", "a1").relay("relay-a", "a1"), "a1", "b1").
				relay("relay-a", "b1").consume("consumer-2", "b1").h(),
			valid: true,
		},
		{
			name: "caused by an event never staged",
			h: build().causedCommit("hop-1", "x9", "b1").relay("relay-a", "b1").
				consume("consumer-2", "b1").h(),
			offending: []string{"b1"},
		},
		{
			name: "B committed before A reached any consumer",
			h: build().commit("producer-1", "a1").causedCommit("hop-1", "a1", "b1").
				relay("relay-a", "a1", "b1").consume("hop-1", "a1").consume("consumer-2", "b1").h(),
			offending: []string{"b1"},
		},
		{
			name: "B applied before A was being applied",
			h: build().commit("producer-1", "a1").relay("relay-a", "a1").deliver("hop-1", "a1").
				causedCommit("hop-1", "a1", "b1").relay("relay-a", "b1").consume("consumer-2", "b1").
				apply("hop-1", "a1").h(),
			offending: []string{"b1"},
		},
		{
			name: "B applied while A never was",
			h: build().commit("producer-1", "a1").relay("relay-a", "a1").deliver("hop-1", "a1").
				invoke("hop-1", history.Apply, "a1").causedCommit("hop-1", "a1", "b1").
				fail("hop-1", history.Apply, "a1").relay("relay-a", "b1").consume("consumer-2", "b1").h(),
			offending: []string{"b1"},
		},
		{
			name: "B rolled back with A's failed apply and never seen",
			h: build().commit("producer-1", "a1").relay("relay-a", "a1").deliver("hop-1", "a1").
				invoke("hop-1", history.Apply, "a1").rec("hop-1", history.Invoke, history.Commit, history.Meta{CausedBy: []string{"a1"}}, "b1").
				fail("hop-1", history.Commit, "b1").fail("hop-1", history.Apply, "a1").h(),
			valid: true,
		},
	})
	r := CausalOrder(build().commit("producer-1", "e1").h(), State{}, Config{})
	if !r.Valid || !r.Skipped {
		t.Errorf("CausalOrder without links = %+v, want skipped", r)
	}
}

func TestWellFormed(t *testing.T) {
	swapped := build().commit("producer-1", "e1").h()
	swapped[0].Index, swapped[1].Index = 1, 0
	badType := build().commit("producer-1", "e1").h()
	badType[1].Type = "done"
	runCases(t, WellFormed, []checkCase{
		{
			name:  "a clean history with standalone observations",
			h:     build().commit("producer-1", "e1").fault("broker-down", history.ClassBroker).relay("relay-a", "e1").heal("broker-down").consume("consumer-1", "e1").phase(history.PhaseCheck).h(),
			valid: true,
		},
		{
			name:      "a commit completion without its invoke",
			h:         build().commit("producer-1", "e1").ok("producer-1", history.Commit, "e2").h(),
			offending: []string{"e2"},
		},
		{
			name:      "a completion after a crash closed its operation",
			h:         build().invoke("relay-a", history.Publish, "e1").crash("relay-a").ok("relay-a", history.Publish, "e1").h(),
			offending: []string{"e1"},
		},
		{
			// A relay's pipelined marks: the later one's rows were all
			// fenced and its completion names none; it comes first.
			name: "overlapping marks, the later one completing first with no row marked",
			h: build().invoke("relay-a", history.Mark, "e1", "e2").invoke("relay-a", history.Mark, "e3", "e4").
				ok("relay-a", history.Mark).ok("relay-a", history.Mark, "e1", "e2").h(),
			valid: true,
		},
		{
			name: "a completion that fits no invoke, after one that named nothing",
			h: build().invoke("relay-a", history.Mark, "e1").ok("relay-a", history.Mark).
				ok("relay-a", history.Mark, "e9").h(),
			offending: []string{"e9"},
		},
		{
			// The completion that named nothing cannot have completed an
			// invoke that came after it.
			name: "a completion that named nothing cannot move to a later invoke",
			h: build().invoke("relay-a", history.Mark, "e1").ok("relay-a", history.Mark).
				invoke("relay-a", history.Mark, "e3").ok("relay-a", history.Mark, "e1").h(),
			offending: []string{"e1"},
		},
		{
			name:      "indexes out of order",
			h:         swapped,
			offending: []string{"e1"},
		},
		{
			name:      "unknown type",
			h:         badType,
			offending: []string{"e1"},
		},
	})
}
