package scenarios

import (
	"testing"
	"time"

	"github.com/outboxlab/outboxlab/checker"
	"github.com/outboxlab/outboxlab/history"
	"github.com/outboxlab/outboxlab/relay"
	"github.com/outboxlab/outboxlab/testenv"
)

func TestValidQueueType(t *testing.T) {
	cl, one := clusterLeaderKill(), baseline()
	for _, c := range []struct {
		sc Scenario
		qt string
		ok bool
	}{
		{cl, "", true}, {cl, relay.QueueQuorum, true}, {cl, relay.QueueClassic, true},
		{cl, "stream", false}, {one, relay.QueueClassic, false}, {one, "", true},
	} {
		if err := validQueueType(c.sc, c.qt); (err == nil) != c.ok {
			t.Errorf("validQueueType(%s, %q) = %v, want ok %v", c.sc.Name, c.qt, err, c.ok)
		}
	}
}

func TestClusterCatalogueNames(t *testing.T) {
	names := ClusterNames()
	if len(names) != 6 {
		t.Fatalf("cluster scenarios %v, want the six of the tier", names)
	}
	for _, sc := range ClusterCatalogue() {
		if sc.BrokerNodes != clusterNodes || sc.Faults == nil || sc.Check == nil {
			t.Errorf("%s: %d nodes, faults %v, check %v", sc.Name, sc.BrokerNodes, sc.Faults != nil, sc.Check != nil)
		}
		if found, ok := Lookup(sc.Name); !ok || found.BrokerNodes != clusterNodes {
			t.Errorf("Lookup(%s) = %v, %v", sc.Name, found.Name, ok)
		}
		for _, one := range Catalogue() {
			if one.Name == sc.Name {
				t.Errorf("%s is in the one-node catalogue too", sc.Name)
			}
		}
	}
}

func TestConfirmStall(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	ack := func(ms int) history.Op {
		return history.Op{Time: at(ms), Process: "relay-a", Type: history.OK, F: history.Publish, Meta: history.Meta{Confirm: history.ConfirmAck}}
	}
	fault := func(ms int, class history.FaultClass) history.Op {
		return history.Op{Time: at(ms), Process: "nemesis", Type: history.Invoke, F: history.FaultStart,
			Meta: history.Meta{Fault: &history.Fault{Name: "f", Class: class}}}
	}
	nack := history.Op{Time: at(2500), Process: "relay-a", Type: history.Fail, F: history.Publish, Meta: history.Meta{Confirm: history.ConfirmNack}}
	h := []history.Op{ack(0), ack(100), fault(1000, history.ClassBroker), nack, ack(1100), ack(4100), ack(4200)}
	// The relays' records come after the harness's own: out of time order.
	h = append(h[3:], h[:3]...)
	if got := confirmStall(h); got != 3*time.Second {
		t.Errorf("confirmStall = %s, want 3s (from the ack at 1.1 s to the next at 4.1 s; a nack confirms nothing)", got)
	}
	if got := confirmStall([]history.Op{ack(0), fault(1000, history.ClassDB), ack(5000)}); got != 0 {
		t.Errorf("confirmStall after a database fault = %s, want 0", got)
	}
	if got := confirmStall([]history.Op{ack(0), fault(1000, history.ClassBroker), ack(1500)}); got != 500*time.Millisecond {
		t.Errorf("confirmStall = %s, want 500ms", got)
	}
}

// TestFailoverBit holds a failover run to its fault: no commit while the
// standby was cut off, none on the new primary after the promotion, or
// an asynchronous failover that undid nothing, is inconclusive.
func TestFailoverBit(t *testing.T) {
	f := &history.Fault{Name: "database failover", Kind: checker.KindFailover, Class: history.ClassDB}
	run := func(commitInLag, commitAfter bool, undone int) Result {
		h := []history.Op{{Index: 1, F: history.Commit, Type: history.Invoke}}
		h = append(h, history.Op{Index: 2, F: history.FaultStart, Type: history.Invoke, Meta: history.Meta{Fault: f}})
		if commitInLag {
			h = append(h, history.Op{Index: 3, F: history.Commit, Type: history.Invoke})
		}
		h = append(h, history.Op{Index: 4, F: history.FaultStart, Type: history.OK, Meta: history.Meta{Fault: f}},
			history.Op{Index: 5, F: history.FaultStop, Type: history.OK, Meta: history.Meta{Fault: f}})
		if commitAfter {
			h = append(h, history.Op{Index: 6, F: history.Commit, Type: history.OK})
		}
		return Result{History: h, Counts: checker.Counts{FailoverPhantom: undone}}
	}
	for _, c := range []struct {
		name          string
		repl          testenv.Replication
		commit, after bool
		undone        int
		inconclusive  bool
	}{
		{"async, undid some", testenv.ReplicationAsync, true, true, 3, false},
		{"async, undid none", testenv.ReplicationAsync, true, true, 0, true},
		{"no commit in the lag", testenv.ReplicationSync, false, true, 0, true},
		{"no commit on the new primary", testenv.ReplicationAsync, true, false, 3, true},
		{"sync, a commit held", testenv.ReplicationSync, true, true, 0, false},
	} {
		res := run(c.commit, c.after, c.undone)
		failoverBit(&res, c.repl)
		if (len(res.Inconclusive) > 0) != c.inconclusive {
			t.Errorf("%s: inconclusive %q, want %t", c.name, res.Inconclusive, c.inconclusive)
		}
	}
}

// TestRestoreBit holds a restore run to its fault: a new server whose
// transaction ids did not start below the old one's, or no commit after
// the restore, is inconclusive.
func TestRestoreBit(t *testing.T) {
	f := &history.Fault{Name: "database restore", Kind: KindRestore, Class: history.ClassDB}
	run := func(commitAfter bool) Result {
		h := []history.Op{{Index: 1, F: history.FaultStop, Type: history.OK, Meta: history.Meta{Fault: f}}}
		if commitAfter {
			h = append(h, history.Op{Index: 2, F: history.Commit, Type: history.OK})
		}
		return Result{History: h}
	}
	for _, c := range []struct {
		name           string
		after          bool
		oldXid, newXid int64
		inconclusive   bool
	}{
		{"ids started again, a commit after", true, 20000, 800, false},
		{"ids did not start again", true, 800, 900, true},
		{"no commit after", false, 20000, 800, true},
	} {
		res := run(c.after)
		restoreBit(&res, c.oldXid, c.newXid)
		if (len(res.Inconclusive) > 0) != c.inconclusive {
			t.Errorf("%s: inconclusive %q, want %t", c.name, res.Inconclusive, c.inconclusive)
		}
	}
}
