package sim

import (
	"slices"
	"strings"
	"testing"
)

// TestSetupNamesItsWorld: the names a generator draws from before the
// world exists are those of the world the setup builds.
func TestSetupNamesItsWorld(t *testing.T) {
	for _, s := range []Setup{
		{Seed: 1, Replicas: 2, Consumers: 1, Batch: 1, Window: 1},
		{Seed: 2, Replicas: 3, Consumers: 2, Batch: 100, Window: 100},
	} {
		m := NewMachine(s, Variant{}, nil)
		w := m.World()
		producers, relays, consumers := s.Names()
		if !slices.Equal(producers, w.Producers()) || !slices.Equal(relays, w.Relays()) || !slices.Equal(consumers, w.Consumers()) {
			t.Errorf("%s names %v %v %v, its world %v %v %v", s, producers, relays, consumers, w.Producers(), w.Relays(), w.Consumers())
		}
		sw := w.Swarm()
		if sw.Replicas != s.Replicas || sw.Consumers != s.Consumers || sw.BatchSize != s.Batch || sw.Window != s.Window || len(sw.Faults) != 0 {
			t.Errorf("%s builds a world of swarm %s", s, sw)
		}
		if got := s.Swarm(nil); got.Lease != sw.Lease || got.BackoffBase != sw.BackoffBase || got.BackoffMax != sw.BackoffMax {
			t.Errorf("%s: Swarm says %s, the world runs %s", s, got, sw)
		}
		if res := m.Finish(); !res.Valid {
			t.Errorf("%s with no action fails:\n%s", s, res.Report.Summary())
		}
	}
}

// TestMachinePreconditions: an action whose precondition does not hold
// is skipped and left out of the trace; the state the machine reports
// follows the actions that took effect.
func TestMachinePreconditions(t *testing.T) {
	m := NewMachine(Setup{Seed: 7, Replicas: 2, Consumers: 1, Batch: 5, Window: 2}, Variant{}, nil)
	steps := []struct {
		a    Action
		want bool
	}{
		{Action{Kind: ActRestart, Proc: "relay-a"}, false},
		{Action{Kind: ActCrash, Proc: "relay-a"}, true},
		{Action{Kind: ActCrash, Proc: "relay-a"}, false},
		{Action{Kind: ActHeal, Proc: "consumer-1", Link: LinkBroker}, false},
		{Action{Kind: ActCut, Proc: "consumer-1", Link: LinkBroker}, true},
		{Action{Kind: ActCut, Proc: "consumer-1", Link: LinkBroker}, false},
		{Action{Kind: ActPause, Proc: "relay-b"}, true},
		{Action{Kind: ActOpen, Proc: "producer-1", N: 2}, true},
		{Action{Kind: ActBrokerUp}, false},
		{Action{Kind: ActBrokerDown}, true},
		{Action{Kind: ActConfirmsBack}, false},
		{Action{Kind: ActConfirmLoss}, true},
		{Action{}, false},
	}
	var want []string
	for _, s := range steps {
		if got := m.Apply(s.a); got != s.want {
			t.Errorf("Apply(%s) = %v, want %v", s.a, got, s.want)
		}
		if s.want {
			want = append(want, s.a.String())
		}
	}
	if !slices.Equal(m.Trace(), want) || len(m.Applied()) != len(want) {
		t.Errorf("trace %q, want %q", m.Trace(), want)
	}
	if !slices.Equal(m.Crashed(), []string{"relay-a"}) || !slices.Equal(m.Paused(), []string{"relay-b"}) ||
		!slices.Equal(m.Cuts(), []ProcLink{{"consumer-1", LinkBroker}}) || !m.BrokerIsDown() || !m.ConfirmsLost() {
		t.Errorf("state: crashed %v, paused %v, cut %v, broker down %v, confirms lost %v",
			m.Crashed(), m.Paused(), m.Cuts(), m.BrokerIsDown(), m.ConfirmsLost())
	}
	for _, a := range []Action{{Kind: ActRestart, Proc: "relay-a"}, {Kind: ActResume, Proc: "relay-b"},
		{Kind: ActHeal, Proc: "consumer-1", Link: LinkBroker}, {Kind: ActBrokerUp}, {Kind: ActConfirmsBack}} {
		if !m.Apply(a) {
			t.Errorf("Apply(%s) skipped", a)
		}
	}
	if len(m.Crashed())+len(m.Paused())+len(m.Cuts()) != 0 || m.BrokerIsDown() || m.ConfirmsLost() {
		t.Errorf("after the heals: crashed %v, paused %v, cut %v, broker down %v, confirms lost %v",
			m.Crashed(), m.Paused(), m.Cuts(), m.BrokerIsDown(), m.ConfirmsLost())
	}
	if res := m.Finish(); !res.Valid {
		t.Errorf("the production system fails:\n%s", res.Report.Summary())
	}
}

// TestActionStrings: every kind reads as a sentence of its own.
func TestActionStrings(t *testing.T) {
	seen := map[string]ActionKind{}
	for k := ActCommit; k <= ActRedeliver; k++ {
		s := Action{Kind: k, Proc: "relay-a", N: 2, Link: LinkBroker, By: 5}.String()
		if strings.HasPrefix(s, "action(") {
			t.Errorf("kind %d has no String form", k)
		}
		if prev, ok := seen[s]; ok {
			t.Errorf("kinds %d and %d both read %q", prev, k, s)
		}
		seen[s] = k
	}
	if got := (Action{Kind: ActCut, Proc: "relay-a", Link: LinkDB}).String(); got != "cut relay-a->db" {
		t.Errorf("a cut reads %q", got)
	}
}
