package scenarios

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/outboxlab/outboxlab/contract"
	"github.com/outboxlab/outboxlab/history"
)

func TestSkewUnitCoversTheDeclaredLease(t *testing.T) {
	for _, c := range []struct {
		declared, run, want time.Duration
	}{
		{0, 4 * time.Second, time.Minute},
		{10 * time.Second, 4 * time.Second, time.Minute},
		{30 * time.Minute, 4 * time.Second, 30 * time.Minute},
		{0, 2 * time.Hour, 2 * time.Hour},
	} {
		r := &run{relay: RelayUnderTest{Promises: contract.Promises{Locking: contract.Lease(c.declared)}, Env: map[string]string{contract.EnvLease: c.run.String()}}}
		if got := skewUnit(runStage{r}); got != c.want {
			t.Errorf("declared %s, run with %s: unit %s, want %s", c.declared, c.run, got, c.want)
		}
	}
}

func TestJudgeSkew(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	skews := []skewed{
		{process: "relay-a", fault: "relay-a clock +5m", offset: 5 * time.Minute},
		{process: "relay-b", fault: "relay-b clock -3m", offset: -3 * time.Minute},
	}
	fault := func(name string, f history.Func, at int) history.Op {
		return history.Op{Time: t0.Add(time.Duration(at) * time.Second), Process: "nemesis", Type: history.OK, F: f,
			Meta: history.Meta{Fault: &history.Fault{Name: name, Class: history.ClassClock}}}
	}
	claim := func(process string, at int, lease time.Duration) history.Op {
		db := t0.Add(time.Duration(at) * time.Second)
		return history.Op{Time: db, Process: process, Type: history.OK, F: history.Claim, Events: []string{"e"},
			Meta: history.Meta{DBTime: db, Until: db.Add(lease)}}
	}
	row := func(process string, at, lease int) leaseSeen {
		return leaseSeen{process: process, at: t0.Add(time.Duration(at) * time.Second), until: t0.Add(time.Duration(at+lease) * time.Second)}
	}
	both := []history.Op{
		claim("relay-a", 0, 4*time.Second), // before its skew: not counted
		fault("relay-a clock +5m", history.FaultStart, 1),
		fault("relay-b clock -3m", history.FaultStart, 2),
		claim("relay-a", 3, 4*time.Second),
		claim("relay-b", 4, 4*time.Second),
		fault("relay-a clock +5m", history.FaultStop, 8),
		fault("relay-b clock -3m", history.FaultStop, 8),
	}
	onlyA := append(append([]history.Op{}, both[:4]...), both[5:]...)
	// Both claim while skewed, each lease over before the other's claim.
	apart := append(append([]history.Op{}, both[1:3]...), claim("relay-a", 3, time.Second), claim("relay-b", 5, time.Second), both[5], both[6])
	// The relays' records come after the harness's own in a history.
	shuffled := append(append([]history.Op{}, both[3:5]...), append(append([]history.Op{}, both[:3]...), both[5:]...)...)
	for _, c := range []struct {
		name         string
		lease        time.Duration
		known        bool
		h            []history.Op
		inconclusive string
		unchecked    bool
		seen         []leaseSeen
	}{
		{name: "bites", lease: 4 * time.Second, known: true, h: both},
		{name: "bites, records merged after the harness's ops", lease: 4 * time.Second, known: true, h: shuffled},
		{name: "lease unknown", lease: 0, known: true, h: both, inconclusive: "no lease the relays took is known"},
		{name: "lease as long as the smallest offset", lease: 3 * time.Minute, known: true, h: both, inconclusive: "not shorter than the smallest offset 3m0s"},
		{name: "a replica never claimed while skewed", lease: 4 * time.Second, known: true, h: onlyA, inconclusive: "relay-b claimed no row while its clock was -3m"},
		{name: "records: both claimed while skewed, never under another's live lease", lease: time.Second, known: true, h: apart,
			inconclusive: "no skewed replica claimed a row while another replica held a live lease"},
		{name: "no records: both skewed replicas claimed while another held a live lease", lease: 4 * time.Second, h: both, unchecked: true,
			seen: []leaseSeen{row("relay-a", 3, 4), row("relay-b", 4, 4), row("relay-c", 2, 4)}},
		{name: "no records: a replica shows no claim while skewed", lease: 4 * time.Second, h: both, unchecked: true,
			seen:         []leaseSeen{row("relay-a", 3, 4), row("relay-b", 0, 4), row("relay-c", 2, 4)},
			inconclusive: "no row shows a claim by relay-b while its clock was -3m"},
		{name: "no records: claims while skewed, none against a live lease", lease: 4 * time.Second, h: both, unchecked: true,
			seen:         []leaseSeen{row("relay-c", 0, 1), row("relay-a", 3, 4), row("relay-b", 7, 4)},
			inconclusive: "no row shows a skewed replica's claim taken while another replica held a live lease"},
		{name: "no records, no rows", lease: 4 * time.Second, h: both, unchecked: true, inconclusive: "no row shows a claim by relay-a"},
	} {
		t.Run(c.name, func(t *testing.T) {
			inc, unchecked := judgeSkew(skews, c.lease, "test", c.known, c.h, c.seen)
			if c.inconclusive == "" && len(inc) > 0 {
				t.Fatalf("inconclusive %q, want none", inc)
			}
			if c.inconclusive != "" && !slices.ContainsFunc(inc, func(s string) bool { return strings.Contains(s, c.inconclusive) }) {
				t.Fatalf("inconclusive %q, want one containing %q", inc, c.inconclusive)
			}
			if c.unchecked != (len(unchecked) > 0) {
				t.Fatalf("unchecked %q, want some: %v", unchecked, c.unchecked)
			}
		})
	}
	if got := claimLease(both, skews); got != 4*time.Second {
		t.Errorf("claimLease = %s, want 4s", got)
	}
	long := append(append([]history.Op{}, both...), claim("relay-b", 5, 10*time.Minute), claim("relay-c", 5, time.Hour))
	if got := claimLease(long, skews); got != 10*time.Minute {
		t.Errorf("claimLease = %s, want 10m (relay-c is not skewed)", got)
	}
}

// TestJudgeSkewByLocks: a relay holding row locks is judged to have been
// exercised by clock-skew only when the lock table showed each skewed
// replica holding row locks while its clock was off, and at one such
// moment another replica holding some too.
func TestJudgeSkewByLocks(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	window := func(name string, from, to int) []history.Op {
		f := &history.Fault{Name: name, Class: history.ClassClock}
		return []history.Op{
			{Time: at(from), Process: "nemesis", Type: history.OK, F: history.FaultStart, Meta: history.Meta{Fault: f}},
			{Time: at(to), Process: "nemesis", Type: history.OK, F: history.FaultStop, Meta: history.Meta{Fault: f}},
		}
	}
	h := append(window("relay-a clock 5m0s", 100, 1000), window("relay-b clock -3m0s", 200, 1000)...)
	skews := []skewed{{process: "relay-a", fault: "relay-a clock 5m0s", offset: 5 * time.Minute}, {process: "relay-b", fault: "relay-b clock -3m0s", offset: -3 * time.Minute}}
	sample := func(ms int, held map[string]int) lockSample { return lockSample{at: at(ms), held: held} }

	if inc, _ := judgeSkewByLocks(skews, h, nil); len(inc) != 1 {
		t.Errorf("no watch: inconclusive %q, want one line", inc)
	}
	apart := &lockWatch{samples: []lockSample{
		sample(300, map[string]int{"relay-a": 2}),
		sample(400, map[string]int{"relay-b": 1}),
		sample(1500, map[string]int{"relay-a": 1, "relay-b": 1}), // after the clocks were healed
	}}
	if inc, unchecked := judgeSkewByLocks(skews, h, apart); len(inc) != 1 || !strings.Contains(inc[0], "no sample of the lock table showed a skewed replica holding row locks while another replica held some") || unchecked != nil {
		t.Errorf("replicas that never held locks at once: inconclusive %q, unchecked %q", inc, unchecked)
	}
	onlyA := &lockWatch{samples: []lockSample{sample(300, map[string]int{"relay-a": 2, "relay-c": 1})}}
	if inc, _ := judgeSkewByLocks(skews, h, onlyA); len(inc) != 1 || !strings.Contains(inc[0], "relay-b held no row lock") {
		t.Errorf("relay-b never held a lock while skewed: inconclusive %q", inc)
	}
	contended := &lockWatch{samples: []lockSample{
		sample(300, map[string]int{"relay-a": 2, "relay-b": 1}),
		sample(350, map[string]int{"relay-b": 1}),
	}}
	if inc, unchecked := judgeSkewByLocks(skews, h, contended); len(inc) != 0 || len(unchecked) != 1 || !strings.Contains(unchecked[0], "in 2 samples") {
		t.Errorf("contended: inconclusive %q, unchecked %q; want none and the count", inc, unchecked)
	}
}
