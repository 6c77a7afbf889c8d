package footprint

import (
	"strings"
	"testing"
	"time"

	"github.com/outboxlab/outboxlab/contract"
	"github.com/outboxlab/outboxlab/history"
)

var t0 = time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

func producer(p string) bool { return strings.HasPrefix(p, "producer-") }

// hist builds a history: a control phase of n commits taking ctl each,
// then a safety phase of n commits taking run each, by producer-1.
func hist(n int, ctl, run time.Duration) []history.Op {
	var h []history.Op
	now := 0
	add := func(op history.Op) {
		op.Time = at(now)
		h = append(h, op)
	}
	commit := func(d time.Duration, held time.Duration) {
		add(history.Op{Process: "producer-1", Type: history.Invoke, F: history.Commit, Meta: history.Meta{Held: held}})
		now += int((d + held) / time.Millisecond)
		add(history.Op{Process: "producer-1", Type: history.OK, F: history.Commit})
		now += 10
	}
	add(history.Op{Process: "runner", Type: history.OK, F: history.Phase, Meta: history.Meta{Phase: history.PhaseControl}})
	for range n {
		commit(ctl, 0)
	}
	add(history.Op{Process: "runner", Type: history.OK, F: history.Phase, Meta: history.Meta{Phase: history.PhaseSafety}})
	for i := range n {
		held := time.Duration(0)
		if i%3 == 0 {
			held = 2 * time.Second // a slow request: not the database's doing
		}
		commit(run, held)
	}
	return h
}

func TestProducersAgainstTheControl(t *testing.T) {
	f := Measure(Input{History: hist(20, 10*time.Millisecond, 20*time.Millisecond), Producer: producer})
	p := f.Producers
	if p.Control.Count != 20 || p.Run.Count != 20 || p.Control.P99 != 10*time.Millisecond || p.Run.P99 != 20*time.Millisecond || p.Ratio != 2 {
		t.Fatalf("producers %+v: want 20 and 20 commits, p99 10ms and 20ms (held time taken out), ratio 2", p)
	}
	if got := Judge(f, contract.Budgets{ProducerP99: 3}); len(got) != 0 {
		t.Errorf("within its budget: %v", got)
	}
	// Twice the control is over a budget of 1.5x, but within the margin
	// of a loaded machine: not a problem.
	if got := Judge(f, contract.Budgets{ProducerP99: 1.5}); len(got) != 0 {
		t.Errorf("within the margin: %v", got)
	}
	blocked := Measure(Input{History: hist(20, 10*time.Millisecond, 900*time.Millisecond), Producer: producer,
		Locks: []LockSample{{At: at(500), Waiting: 2}, {At: at(600), Waiting: 0}}, LockEvery: 200 * time.Millisecond})
	got := Judge(blocked, contract.Budgets{ProducerP99: 3})
	if len(got) != 1 || !strings.Contains(got[0], "producer budget") || !strings.Contains(got[0], "900ms") || !strings.Contains(got[0], "1 samples") {
		t.Errorf("a relay that blocks the producers: %v, want the producer budget exceeded with its evidence", got)
	}
	if got := Judge(blocked, contract.Budgets{}); len(got) != 0 {
		t.Errorf("no budget declared, and judged: %v", got)
	}
	// As slow, with no lock wait or abort in the database: the machine's
	// doing, not the relay's.
	slow := Measure(Input{History: hist(20, 10*time.Millisecond, 900*time.Millisecond), Producer: producer,
		Locks: []LockSample{{At: at(500)}, {At: at(600)}}, LockEvery: 200 * time.Millisecond})
	if got := Judge(slow, contract.Budgets{ProducerP99: 3}); len(got) != 0 || slow.Producers.Ratio < 80 {
		t.Errorf("a slowdown without a wait on the relay: %v (ratio %.1f)", got, slow.Producers.Ratio)
	}
	// A fault on the producers' link leaves the budget unjudged.
	h := hist(20, 10*time.Millisecond, 900*time.Millisecond)
	h = append(h, history.Op{Process: "nemesis", Type: history.OK, F: history.FaultStart, Time: at(100000),
		Meta: history.Meta{Fault: &history.Fault{Name: "app-db down", Kind: "down", Class: history.ClassDB, Targets: []string{"producer-1"}}}})
	hit := Measure(Input{History: h, Producer: producer})
	if !strings.Contains(hit.Producers.Unjudged, "app-db down") || len(Judge(hit, contract.Budgets{ProducerP99: 3})) != 0 {
		t.Errorf("a fault on the producers: unjudged %q", hit.Producers.Unjudged)
	}
	few := Measure(Input{History: hist(3, 10*time.Millisecond, 900*time.Millisecond), Producer: producer})
	if few.Producers.Unjudged == "" || len(Judge(few, contract.Budgets{ProducerP99: 3})) != 0 {
		t.Errorf("three commits a phase: unjudged %q", few.Producers.Unjudged)
	}
}

func TestAbortsAreCounted(t *testing.T) {
	h := []history.Op{
		{Process: "producer-1", Type: history.Invoke, F: history.Commit, Time: at(0)},
		{Process: "producer-1", Type: history.Fail, F: history.Commit, Time: at(1), Meta: history.Meta{SQLState: SQLStateSerialization}},
		{Process: "producer-2", Type: history.Invoke, F: history.Commit, Time: at(2)},
		{Process: "producer-2", Type: history.Fail, F: history.Commit, Time: at(3), Meta: history.Meta{SQLState: SQLStateDeadlock}},
		{Process: "consumer-1", Type: history.Invoke, F: history.Commit, Time: at(4)},
		{Process: "consumer-1", Type: history.Fail, F: history.Commit, Time: at(5), Meta: history.Meta{SQLState: SQLStateDeadlock}},
	}
	p := Measure(Input{History: h, Producer: producer}).Producers
	if p.SerializationFailures != 1 || p.Deadlocks != 1 {
		t.Errorf("%+v: want one serialization failure and one deadlock of the producers", p)
	}
}

// outageHistory: the broker is down from 1 s to 3 s; relay-a publishes
// 500 ms after the heal, relay-b only when resumed is set.
func outageHistory(bResumes bool) []history.Op {
	down := &history.Fault{Name: "relay-broker down", Kind: "down", Class: history.ClassBroker, Targets: []string{"relay-a", "relay-b"}}
	h := []history.Op{
		{Process: "nemesis", Type: history.OK, F: history.FaultStart, Time: at(1000), Meta: history.Meta{Fault: down}},
		{Process: "nemesis", Type: history.OK, F: history.FaultStop, Time: at(3000), Meta: history.Meta{Fault: down}},
		{Process: "relay-a", Type: history.Invoke, F: history.Publish, Time: at(3400)},
		{Process: "relay-a", Type: history.OK, F: history.Publish, Time: at(3500)},
	}
	if bResumes {
		h = append(h, history.Op{Process: "relay-b", Type: history.OK, F: history.Publish, Time: at(9000)})
	}
	return append(h, history.Op{Process: "runner", Type: history.OK, F: history.Phase, Time: at(20000), Meta: history.Meta{Phase: history.PhaseCheck}})
}

// samples reads a counter every 250 ms from 0 to 9 s, CPU growing by
// cpuPerSec a second and statements by stmts a second.
func samples(cpuPerSec time.Duration, stmts int64, life func(ms int) string) []Sample {
	var out []Sample
	for ms := 0; ms <= 9000; ms += 250 {
		out = append(out, Sample{At: at(ms), Life: life(ms), CPU: cpuPerSec * time.Duration(ms) / 1000, Connects: -1, Statements: stmts * int64(ms) / 1000})
	}
	return out
}

func TestOutages(t *testing.T) {
	one := func(int) string { return "pid 7" }
	lines := func(perSec int) []time.Time {
		var out []time.Time
		for ms := 0; ms < 9000; ms += 1000 / perSec {
			out = append(out, at(ms))
		}
		return out
	}
	f := Measure(Input{History: outageHistory(true), Producer: producer, Replicas: []Replica{
		{Name: "relay-a", Samples: samples(20*time.Millisecond, 5, one), Lines: lines(2), LinesKnown: true},
		{Name: "relay-b", Samples: samples(900*time.Millisecond, 400, one), Lines: lines(100), LinesKnown: true},
	}})
	if len(f.Outages) != 1 || len(f.Outages[0].Replicas) != 2 {
		t.Fatalf("outages %+v: want one window with two replicas", f.Outages)
	}
	a := f.Outages[0].Replicas[0]
	if a.CPU == nil || *a.CPU < 0.019 || *a.CPU > 0.021 || *a.Statements != 5 || a.Resume == nil || *a.Resume != 500*time.Millisecond || a.Connects != nil {
		t.Errorf("relay-a %+v: want 0.02 cores, 5 statements a second, resumed after 500ms, connects unmeasured", a)
	}
	budgets := contract.Budgets{OutageCPU: 0.5, OutageLogs: 20, OutageStatements: 100, OutageConnects: 10, Resume: 5 * time.Second}
	got := Judge(f, budgets)
	want := []string{"relay-b used 0.90 cores", "relay-b wrote 100.1", "relay-b ran 400.00 statements"}
	if len(got) != len(want) {
		t.Fatalf("problems %q, want %d of relay-b", got, len(want))
	}
	for i, w := range want {
		if !strings.Contains(got[i], w) {
			t.Errorf("problem %q, want %q", got[i], w)
		}
	}
	// An outage of a link no replica uses measures no replica.
	consumers := outageHistory(true)
	consumers[0].Fault = &history.Fault{Name: "consumer-db down", Kind: "down", Class: history.ClassDB, Targets: []string{"consumer-1"}}
	consumers[1].Fault = consumers[0].Fault
	if f := Measure(Input{History: consumers, Producer: producer, Replicas: []Replica{{Name: "relay-a"}}}); len(f.Outages) != 0 {
		t.Errorf("an outage of the consumers' link: %+v", f.Outages)
	}
	// relay-b published nothing after the heal: a fault only when relay-a
	// went on publishing past the budget, so that there was work to take.
	short := Measure(Input{History: outageHistory(false), Producer: producer, Replicas: []Replica{{Name: "relay-a"}, {Name: "relay-b"}}})
	if got := Judge(short, budgets); len(got) != 0 || !short.Outages[0].Replicas[1].Never {
		t.Errorf("a replica that found nothing left to publish: %q", got)
	}
	long := outageHistory(false)
	long = append(long, history.Op{Process: "relay-a", Type: history.OK, F: history.Publish, Time: at(9500)})
	never := Measure(Input{History: long, Producer: producer, Replicas: []Replica{{Name: "relay-a"}, {Name: "relay-b"}}})
	if got := Judge(never, budgets); len(got) != 1 || !strings.Contains(got[0], "relay-b published nothing after") {
		t.Errorf("a replica that never reconnects: %q", got)
	}
	// No replica published until 7 s after the heal: the relay resumed
	// late.
	late := outageHistory(false)[:2]
	late = append(late, history.Op{Process: "relay-a", Type: history.OK, F: history.Publish, Time: at(10000)},
		history.Op{Process: "relay-b", Type: history.OK, F: history.Publish, Time: at(10100)})
	lateF := Measure(Input{History: late, Producer: producer, Replicas: []Replica{{Name: "relay-a"}, {Name: "relay-b"}}})
	if got := Judge(lateF, budgets); len(got) != 1 || !strings.Contains(got[0], "no replica published until 7s after") {
		t.Errorf("a relay that resumed late: %q", got)
	}
	// A replica killed in the window is not held to its resume, and a
	// new process's CPU counter starts again.
	h := outageHistory(false)
	h = append(h[:2], append([]history.Op{{Process: "relay-b", Type: history.Info, F: history.Crash, Time: at(2000)}}, h[2:]...)...)
	restarted := func(ms int) string {
		if ms < 2000 {
			return "pid 7"
		}
		return "pid 9"
	}
	killed := Measure(Input{History: h, Producer: producer, Replicas: []Replica{{Name: "relay-b", Samples: samples(100*time.Millisecond, 0, restarted)}}})
	rb := killed.Outages[0].Replicas[0]
	if rb.Never || rb.ResumeUnjudged == "" || rb.CPU == nil || *rb.CPU < 0.099 || *rb.CPU > 0.101 {
		t.Errorf("a replica killed in the window: %+v", rb)
	}
}

func TestWindowsMerge(t *testing.T) {
	f := func(name string, kind string, class history.FaultClass) *history.Fault {
		return &history.Fault{Name: name, Kind: kind, Class: class}
	}
	a, b, slow, db := f("a", "down", history.ClassBroker), f("b", "kill", history.ClassBroker), f("slow", "latency", history.ClassBroker), f("db", "down", history.ClassDB)
	h := []history.Op{
		{Type: history.OK, F: history.FaultStart, Time: at(0), Meta: history.Meta{Fault: a}},
		{Type: history.OK, F: history.FaultStart, Time: at(500), Meta: history.Meta{Fault: b}},
		{Type: history.OK, F: history.FaultStart, Time: at(600), Meta: history.Meta{Fault: slow}},
		{Type: history.OK, F: history.FaultStop, Time: at(1000), Meta: history.Meta{Fault: a}},
		{Type: history.OK, F: history.FaultStop, Time: at(1500), Meta: history.Meta{Fault: b}},
		{Type: history.OK, F: history.FaultStop, Time: at(1600), Meta: history.Meta{Fault: slow}},
		{Type: history.OK, F: history.FaultStart, Time: at(5000), Meta: history.Meta{Fault: db}},
		{Type: history.OK, F: history.FaultStop, Time: at(6000), Meta: history.Meta{Fault: db}},
	}
	ws := windows(h)
	if len(ws) != 2 || len(ws[0].faults) != 2 || !ws[0].from.Equal(at(0)) || !ws[0].to.Equal(at(1500)) || ws[1].class != history.ClassDB {
		t.Errorf("windows %+v: want the two broker outages merged, the latency left out, the database's apart", ws)
	}
}

// TestConnectsPerService holds a replica to its budget on each service
// apart: one that redials the database in a hot loop while the broker is
// down fails it by the database, though its total alone would pass a
// budget split over two services no better.
func TestConnectsPerService(t *testing.T) {
	one := func(int) string { return "pid 7" }
	withConns := func(dbPerSec, mqPerSec int64) []Sample {
		out := samples(10*time.Millisecond, 1, one)
		for i := range out {
			ms := int64(out[i].At.Sub(at(0)) / time.Millisecond)
			out[i].Connects = (dbPerSec + mqPerSec) * ms / 1000
			if i%4 == 0 {
				out[i].ConnectsTo = map[string]int64{"database": dbPerSec * ms / 1000, "broker": mqPerSec * ms / 1000}
			}
		}
		return out
	}
	f := Measure(Input{History: outageHistory(true), Producer: producer, Replicas: []Replica{
		{Name: "relay-a", Samples: withConns(1, 2)},
		{Name: "relay-b", Samples: withConns(40, 2)},
	}})
	a := f.Outages[0].Replicas[0]
	if a.ConnectsTo["database"] != 1 || a.ConnectsTo["broker"] != 2 || *a.Connects != 3 {
		t.Errorf("relay-a %+v: want 1 attempt a second to the database, 2 to the broker, 3 in all", a)
	}
	got := Judge(f, contract.Budgets{OutageConnects: 10})
	if len(got) != 1 || !strings.Contains(got[0], "relay-b sent 40.00 TCP connection attempts a second to the database") {
		t.Errorf("problems %q: want relay-b over its budget on the database alone", got)
	}
	if s := Summary(f); !strings.Contains(strings.Join(s, "\n"), "database 40.0/s") {
		t.Errorf("summary %q: want the attempts to the database", s)
	}
	// Without counts per service, the total is judged.
	for i := range f.Outages[0].Replicas {
		f.Outages[0].Replicas[i].ConnectsTo = nil
	}
	if got := Judge(f, contract.Budgets{OutageConnects: 10}); len(got) != 1 || !strings.Contains(got[0], "relay-b opened 42.00 TCP connections a second") {
		t.Errorf("problems %q: want relay-b over its budget in all", got)
	}
}
