package checker

import (
	"maps"
	"testing"

	"github.com/outboxlab/outboxlab/history"
)

// TestFaultsAreScopedByTheirTypedFields builds histories whose fault names
// say nothing ("f1", "f2", or a name that misleads), and checks that every
// checker scopes and classifies each fault from its class and targets
// alone.
func TestFaultsAreScopedByTheirTypedFields(t *testing.T) {
	healthy := func(b *hb) *hb { return b.commit("producer-1", "e1").claim("relay-a", "e1").claim("relay-b", "e1") }
	runCases(t, Parking, []checkCase{
		{
			name:      "a broker fault on relay-a blames relay-a's retry",
			h:         healthy(build()).fault("f1", history.ClassBroker, "relay-a").retry("relay-a", "e1", att(1, false)).h(),
			cfg:       Config{MaxAttempts: 5},
			offending: []string{"e1"},
		},
		{
			name:  "a broker fault on relay-a says nothing of relay-b's retry",
			h:     healthy(build()).fault("f1", history.ClassBroker, "relay-a").retry("relay-b", "e1", att(1, false)).h(),
			valid: true,
		},
		{
			name:  "a name that says broker is no broker fault when its class says db",
			h:     healthy(build()).fault("relay->broker down", history.ClassDB).retry("relay-a", "e1", att(1, false)).h(),
			valid: true,
		},
		{
			name: "a name that names relay-b scopes nothing: the targets do",
			h: healthy(build()).fault("cut relay-b->broker", history.ClassBroker, "relay-a").
				retry("relay-b", "e1", att(1, false)).h(),
			valid: true,
		},
		{
			name:      "an untargeted broker fault hits every relay",
			h:         healthy(build()).fault("f2", history.ClassBroker).retry("relay-b", "e1", att(1, false)).h(),
			cfg:       Config{MaxAttempts: 5},
			offending: []string{"e1"},
		},
		{
			name: "refusals are class other, whatever the name",
			h: healthy(build()).fault("broker-down", history.ClassOther).retry("relay-a", "e1", att(1, false)).
				retry("relay-a", "e1", att(2, true)).heal("broker-down").h(),
			s:     State{Outbox: rows(faultedRow("e1", 2))},
			cfg:   Config{MaxAttempts: 2},
			valid: true,
		},
	})

	t.Run("a clock fault explains no duplicate, whatever its name says", func(t *testing.T) {
		h := build().commit("producer-1", "e1").fault("kill relay-b", history.ClassClock, "relay-b").
			relay("relay-a", "e1").claim("relay-b", "e1").publish("relay-b", "e1").h()
		expect(t, DuplicateDeliveries(h, State{}, Config{}), false, "e1")
	})
	t.Run("a process fault named f3 explains the duplicate", func(t *testing.T) {
		h := build().commit("producer-1", "e1").claim("relay-a", "e1").fault("f3", history.ClassProcess, "relay-a").
			heal("f3").claim("relay-b", "e1").publish("relay-b", "e1").publish("relay-a", "e1").
			markLost("relay-a", []string{"e1"}).mark("relay-b", "e1").h()
		r := DuplicateDeliveries(h, State{}, Config{})
		expect(t, r, true)
		if want := map[string]int{"f3": 1}; !maps.Equal(r.By, want) {
			t.Errorf("By = %v, want %v", r.By, want)
		}
	})
	t.Run("a fault record without its identity is malformed", func(t *testing.T) {
		h := build().commit("producer-1", "e1").rec("nemesis", history.Info, history.FaultStart, history.Meta{}).h()
		if r := WellFormed(h, State{}, Config{}); r.Valid {
			t.Errorf("WellFormed passed a FaultStart without a Fault: %s", r.Detail)
		}
		bad := history.Meta{Fault: &history.Fault{Name: "f4", Class: "nonsense"}}
		h = build().commit("producer-1", "e1").rec("nemesis", history.Info, history.FaultStart, bad).h()
		if r := WellFormed(h, State{}, Config{}); r.Valid {
			t.Errorf("WellFormed passed a fault of unknown class: %s", r.Detail)
		}
	})
}
