package scenarios

import (
	"maps"
	"strings"
	"testing"

	"github.com/outboxlab/outboxlab/history"
)

// TestUpgradeJudge holds a rolling upgrade to its fault: a row staged
// before the migration and first published after the last replacement
// makes it bite; without one the run is inconclusive. A publish that
// failed (the link was down) is not the broker taking the row.
func TestUpgradeJudge(t *testing.T) {
	f := &history.Fault{Name: "rolling upgrade", Kind: KindUpgrade, Class: history.ClassProcess}
	run := func(publishedAt int64, ok bool) Result {
		h := []history.Op{
			{Index: 1, Process: "producer-1", F: history.Commit, Type: history.Invoke, Events: []string{"e1"}},
			{Index: 2, Process: "producer-1", F: history.Commit, Type: history.OK, Events: []string{"e1"}},
			{Index: 10, Process: "nemesis", F: history.FaultStart, Type: history.Invoke, Meta: history.Meta{Fault: f}},
			{Index: 20, Process: "nemesis", F: history.FaultStart, Type: history.OK, Meta: history.Meta{Fault: f}},
			// An attempt by version N while the link was down.
			{Index: 12, Process: "relay-a", F: history.Publish, Type: history.Invoke, Events: []string{"e1"}},
			{Index: 13, Process: "relay-a", F: history.Publish, Type: history.Fail, Events: []string{"e1"}},
		}
		done := history.Fail
		if ok {
			done = history.OK
		}
		h = append(h,
			history.Op{Index: publishedAt, Process: "relay-b", F: history.Publish, Type: history.Invoke, Events: []string{"e1"}},
			history.Op{Index: publishedAt + 1, Process: "relay-b", F: history.Publish, Type: done, Events: []string{"e1"}})
		return Result{Relay: "ours", History: h}
	}
	uf := &upgradeFault{up: DefaultUpgrade()}
	for _, c := range []struct {
		name         string
		at           int64
		ok           bool
		inconclusive bool
	}{
		{"published by N+1", 30, true, false},
		{"published by N before the migration", 5, true, true},
		{"never taken by the broker", 30, false, true},
	} {
		res := run(c.at, c.ok)
		uf.judge(&res)
		if (len(res.Inconclusive) > 0) != c.inconclusive {
			t.Errorf("%s: inconclusive %q, want %t", c.name, res.Inconclusive, c.inconclusive)
		}
		if !c.inconclusive && (len(res.Unchecked) != 1 || !strings.Contains(res.Unchecked[0], "1 of the 1 events committed before the migration")) {
			t.Errorf("%s: noted %q", c.name, res.Unchecked)
		}
	}
}

// TestReplicaVersionEnv: a replica running another version than the
// relay under test starts with the scenario's settings and that
// version's, not the relay under test's own (a mutant's OUTBOX_MUTANT
// would stop the previous relay), and keeps what Setenv set.
func TestReplicaVersionEnv(t *testing.T) {
	r := &run{relay: RelayUnderTest{Image: "relay-mutants", Env: map[string]string{"OUTBOX_MUTANT": "m", "OUTBOX_LEASE": "9s"}}}
	pre := map[string]string{"OUTBOX_LEASE": "4s", "OUTBOX_TABLE": "t"}
	base := maps.Clone(pre)
	maps.Copy(base, r.relay.Env)
	s := &Replica{r: r, name: "relay-a", base: base, pre: pre}
	s.Setenv("OUTBOX_FAILPOINTS", "x")
	image, _, env := s.program()
	if image != "relay-mutants" || env["OUTBOX_MUTANT"] != "m" || env["OUTBOX_LEASE"] != "9s" || env["OUTBOX_FAILPOINTS"] != "x" {
		t.Errorf("the relay under test: %s %v", image, env)
	}
	s.setVersion(&Version{Image: "relay:prev", Env: map[string]string{"PREV": "1"}})
	image, _, env = s.program()
	want := map[string]string{"OUTBOX_LEASE": "4s", "OUTBOX_TABLE": "t", "OUTBOX_FAILPOINTS": "x", "PREV": "1"}
	if image != "relay:prev" || !maps.Equal(env, want) {
		t.Errorf("the previous version: %s %v, want relay:prev %v", image, env, want)
	}
	s.setVersion(nil)
	if image, _, env = s.program(); image != "relay-mutants" || env["OUTBOX_MUTANT"] != "m" {
		t.Errorf("back to the relay under test: %s %v", image, env)
	}
}
