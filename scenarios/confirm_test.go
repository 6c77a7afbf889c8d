package scenarios

import (
	"strings"
	"testing"
	"time"

	"github.com/outboxlab/outboxlab/checker"
	"github.com/outboxlab/outboxlab/history"
)

// TestJudgeConfirmLost feeds confirm-lost's judgement the histories of
// three relays, none of whose rows was published twice: one that went on
// publishing through the toxic and marked its rows without their
// confirms (a failure), one that published nothing through it because
// each publish first waits for the broker to open a channel (watermill's
// default: the fault could not bite), and one whose only first delivery
// in the window came right after the toxic took hold, of a publish sent
// before it (could not bite either).
func TestJudgeConfirmLost(t *testing.T) {
	const fault = "relay-broker confirms lost"
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	window := func(ops ...history.Op) []history.Op {
		f := &history.Fault{Name: fault, Kind: "timeout", Class: history.ClassBroker}
		h := []history.Op{
			{Process: "nemesis", Type: history.Invoke, F: history.FaultStart, Time: at(2 * time.Second), Meta: history.Meta{Fault: f}},
			{Process: "nemesis", Type: history.OK, F: history.FaultStart, Time: at(2 * time.Second), Meta: history.Meta{Fault: f}},
			{Process: "nemesis", Type: history.Invoke, F: history.FaultStop, Time: at(4 * time.Second), Meta: history.Meta{Fault: f}},
			{Process: "nemesis", Type: history.OK, F: history.FaultStop, Time: at(4 * time.Second), Meta: history.Meta{Fault: f}},
		}
		return append(h, ops...)
	}
	deliver := func(id string, d time.Duration) history.Op {
		return history.Op{Process: "consumer-1", Type: history.OK, F: history.Deliver, Events: []string{id}, Time: at(d)}
	}
	kept := window(deliver("a", time.Second), deliver("b", 2500*time.Millisecond), deliver("c", 3*time.Second), deliver("d", 5*time.Second))
	if p, inc := judgeConfirmLost(kept, nil, fault); !strings.Contains(p, "2 event(s)") || inc != "" {
		t.Errorf("rows published through the toxic, none again: problem %q, inconclusive %q; want a problem naming 2 events", p, inc)
	}
	stalled := window(deliver("a", time.Second), deliver("b", 5*time.Second), deliver("a", 3*time.Second))
	if p, inc := judgeConfirmLost(stalled, nil, fault); p != "" || !strings.Contains(inc, "could not bite") {
		t.Errorf("nothing published through the toxic: problem %q, inconclusive %q; want inconclusive", p, inc)
	}
	edge := window(deliver("a", 2100*time.Millisecond), deliver("b", 5*time.Second))
	if p, inc := judgeConfirmLost(edge, nil, fault); p != "" || inc == "" {
		t.Errorf("a delivery right after the toxic took hold: problem %q, inconclusive %q; want inconclusive", p, inc)
	}
	recorded := window(history.Op{Process: "relay-a", Type: history.Invoke, F: history.Publish, Events: []string{"e"}, Time: at(3 * time.Second)})
	if p, _ := judgeConfirmLost(recorded, nil, fault); p == "" {
		t.Error("a relay's recorded publish in the window, never published again: no problem")
	}
	for _, by := range []map[string]int{{checker.CauseUnconfirmed: 1}, {fault: 2}} {
		if p, inc := judgeConfirmLost(kept, by, fault); p != "" || inc != "" {
			t.Errorf("duplicates %v explained by the lost confirms: problem %q, inconclusive %q", by, p, inc)
		}
	}
}
