package checker

import (
	"testing"
	"time"

	"github.com/outboxlab/outboxlab/history"
)

func TestRetention(t *testing.T) {
	const ret = time.Hour
	cfg := Config{Retention: ret, Features: Features{Stages: true, Sweeps: true}}
	db := func(d time.Duration) time.Time { return t0.Add(d) }
	dbv := func(d time.Duration) history.Meta { return history.Meta{DBTime: db(d)} }

	runCases(t, Retention, []checkCase{
		{
			name: "swept after retention by the database clock",
			h: build().commit("producer-1", "e1").claim("relay-a", "e1").publish("relay-a", "e1").
				markAt("relay-a", db(0), "e1").sweep("relay-b", dbv(ret+time.Second), "e1").h(),
			cfg:   cfg,
			valid: true,
		},
		{
			name: "swept before retention by the database clock",
			h: build().commit("producer-1", "e1").claim("relay-a", "e1").publish("relay-a", "e1").
				markAt("relay-a", db(0), "e1").sweep("relay-b", dbv(ret-time.Second), "e1").h(),
			cfg:       cfg,
			offending: []string{"e1"},
		},
		{
			name: "swept too early by the sweeping relay's own clock",
			h: build().commit("producer-1", "e1").relay("relay-a", "e1").
				wait(time.Minute).sweep("relay-a", history.Meta{}, "e1").h(),
			cfg:       cfg,
			offending: []string{"e1"},
		},
		{
			name: "swept late enough by the sweeping relay's own clock",
			h: build().commit("producer-1", "e1").relay("relay-a", "e1").
				wait(2*ret).sweep("relay-a", history.Meta{}, "e1").h(),
			cfg:   cfg,
			valid: true,
		},
		{
			name: "another relay's clock is not compared: unchecked",
			h: build().commit("producer-1", "e1").relay("relay-a", "e1").
				wait(time.Minute).sweep("relay-b", history.Meta{}, "e1").h(),
			cfg:   cfg,
			valid: true,
		},
		{
			name: "a sweep deleted a pending row",
			h: build().commit("producer-1", "e1", "e2").relay("relay-a", "e1").
				wait(2*ret).sweep("relay-a", history.Meta{}, "e1", "e2").h(),
			cfg:       cfg,
			offending: []string{"e2"},
		},
		{
			name: "a sweep deleted a faulted row",
			h: build().commit("producer-1", "p1").claim("relay-a", "p1").park("relay-a", "p1").
				wait(2*ret).sweep("relay-a", history.Meta{}, "p1").h(),
			cfg:       cfg,
			offending: []string{"p1"},
		},
		{
			name: "a mark whose reply was lost may have marked",
			h: build().commit("producer-1", "e1").claim("relay-a", "e1").publish("relay-a", "e1").
				invoke("relay-a", "mark", "e1").info("relay-a", "mark", "e1").
				sweep("relay-a", dbv(2*ret), "e1").h(),
			cfg:   cfg,
			valid: true,
		},
		{
			name: "final state: gone while the run was shorter than retention",
			h:    build().commit("producer-1", "e1").h(),
			s: State{Outbox: rows(), Effects: map[string]int{"e1": 1},
				DBStart: db(0), DBNow: db(10 * time.Minute)},
			cfg:       cfg,
			offending: []string{"e1"},
		},
		{
			name: "final state: gone after retention from its mark",
			h: build().commit("producer-1", "e1").claim("relay-a", "e1").publish("relay-a", "e1").
				markAt("relay-a", db(time.Minute), "e1").h(),
			s:     State{Outbox: rows(), DBStart: db(0), DBNow: db(ret + 2*time.Minute)},
			cfg:   cfg,
			valid: true,
		},
		{
			name: "final state: gone too soon after its mark",
			h: build().commit("producer-1", "e1").claim("relay-a", "e1").publish("relay-a", "e1").
				markAt("relay-a", db(30*time.Minute), "e1").h(),
			s:         State{Outbox: rows(), DBStart: db(0), DBNow: db(ret + time.Minute)},
			cfg:       cfg,
			offending: []string{"e1"},
		},
		{
			name: "final state: gone without any mark while relays record marks",
			h:    build().commit("producer-1", "e1", "e2").relay("relay-a", "e1").h(),
			s: State{Outbox: rows(processedRow("e1", db(0))),
				DBStart: db(0), DBNow: db(2 * ret)},
			cfg:       cfg,
			offending: []string{"e2"},
		},
		{
			name:      "final state: gone from a relay that does not sweep",
			h:         build().commit("producer-1", "e1").h(),
			s:         State{Outbox: rows(), DBStart: db(0), DBNow: db(2 * ret)},
			cfg:       Config{Retention: ret, Features: Features{Stages: true}},
			offending: []string{"e1"},
		},
		{
			name:  "final state: gone from a relay that deletes a row once published",
			h:     build().commit("producer-1", "e1").relay("relay-a", "e1").h(),
			s:     State{Outbox: rows(), DBStart: db(0), DBNow: db(time.Minute)},
			cfg:   Config{Retention: ret, Features: Features{Stages: true, Deletes: true}},
			valid: true,
		},
		{
			name:      "final state: a parked row gone from a relay that deletes a row once published",
			h:         build().commit("producer-1", "p1").claim("relay-a", "p1").park("relay-a", "p1").h(),
			s:         State{Outbox: rows(), DBStart: db(0), DBNow: db(time.Minute)},
			cfg:       Config{Retention: ret, Features: Features{Stages: true, Deletes: true}},
			offending: []string{"p1"},
		},
		{
			name:      "final state: a parked row is gone",
			h:         build().commit("producer-1", "p1").claim("relay-a", "p1").park("relay-a", "p1").h(),
			s:         State{Outbox: rows(), DBStart: db(0), DBNow: db(2 * ret)},
			cfg:       cfg,
			offending: []string{"p1"},
		},
		{
			name:  "final state: every committed row still there",
			h:     build().commit("producer-1", "e1").commitInfo("producer-1", "e2").h(),
			s:     State{Outbox: rows(pendingRow("e1", 0)), DBStart: db(0), DBNow: db(time.Minute)},
			cfg:   cfg,
			valid: true,
		},
		{
			name:  "unsafe variants stage no rows: nothing to check",
			h:     build().commit("producer-1", "e1").h(),
			s:     State{Outbox: rows()},
			cfg:   Config{},
			valid: true,
		},
	})
}

func TestRetentionSkipsWithoutEvidence(t *testing.T) {
	r := Retention(build().commit("producer-1", "e1").h(), State{}, Config{Features: Features{Stages: true}})
	if !r.Valid || !r.Skipped {
		t.Errorf("Retention without sweeps or outbox state = %+v, want skipped", r)
	}
}
