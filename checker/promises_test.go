package checker

import (
	"testing"
	"time"

	"github.com/outboxlab/outboxlab/contract"
)

func TestWithPromises(t *testing.T) {
	backoff := contract.Backoff{Base: 100 * time.Millisecond, Max: time.Second}
	run := Config{Retention: time.Hour, Poison: map[string]bool{"p": true}, Features: Features{Stages: true}, Relays: []string{"relay-a"}}
	for _, tc := range []struct {
		name      string
		p         contract.Promises
		features  Features
		lease     time.Duration
		attempts  int
		backoff   bool
		retention time.Duration
	}{
		{"nothing declared", contract.Promises{}, Features{Stages: true}, 0, 0, false, time.Hour},
		{"a lease with its length", contract.Promises{Fenced: true, Locking: contract.Lease(4 * time.Second)}, Features{Stages: true, Fenced: true}, 4 * time.Second, 0, false, time.Hour},
		{"a lease without its length", contract.Promises{Fenced: true, Locking: contract.Lease(0)}, Features{Stages: true, Fenced: true}, 0, 0, false, time.Hour},
		{"row locks", contract.Promises{Parks: true, Locking: contract.RowLocks, Attempts: 5}, Features{Stages: true, Parks: true}, 0, 5, false, time.Hour},
		{"everything", contract.Promises{Parks: true, Fenced: true, Sweeps: true, Records: true, Failpoints: true, Locking: contract.Lease(time.Minute),
			Attempts: 3, Backoff: backoff, Retention: time.Second},
			Features{Stages: true, Parks: true, Fenced: true, Sweeps: true}, time.Minute, 3, true, time.Second},
	} {
		// What a relay does not declare is not taken over from the Config
		// it is applied to.
		before := run
		before.Lease, before.MaxAttempts, before.Backoff = time.Hour, 9, func(int) time.Duration { return time.Hour }
		before.Features.Parks, before.Features.Fenced, before.Features.Sweeps = true, true, true
		c := before.WithPromises(tc.p)
		if c.Features != tc.features || c.Lease != tc.lease || c.MaxAttempts != tc.attempts || (c.Backoff != nil) != tc.backoff || c.Retention != tc.retention {
			t.Errorf("%s: features %+v, lease %s, attempts %d, backoff %v, retention %s; want %+v, %s, %d, %v, %s", tc.name,
				c.Features, c.Lease, c.MaxAttempts, c.Backoff != nil, c.Retention, tc.features, tc.lease, tc.attempts, tc.backoff, tc.retention)
		}
		if !c.Poison["p"] || len(c.Relays) != 1 {
			t.Errorf("%s: the run's poison %v and relays %v were not kept", tc.name, c.Poison, c.Relays)
		}
		if c.Backoff != nil {
			for n := range 6 {
				if got, want := c.Backoff(n), backoff.Wait(n); got != want {
					t.Errorf("%s: Backoff(%d) = %s, want %s", tc.name, n, got, want)
				}
			}
		}
	}
}

// TestCoreGuaranteeWhateverThePromises checks that no declaration turns
// off the core guarantee: a lost event, a phantom event, an unexplained
// duplicate delivery and a duplicate effect fail the run whatever the
// relay promises, nothing included.
func TestCoreGuaranteeWhateverThePromises(t *testing.T) {
	h := build().commit("producer-1", "e1", "e2", "e4").commitFail("producer-1", "e3").
		relay("relay-a", "e1", "e4").publish("relay-a", "e3").
		consume("consumer-1", "e1", "e3", "e4").
		publish("relay-a", "e1").deliver("consumer-1", "e1").applyDup("consumer-1", "e1").h()
	s := State{Effects: map[string]int{"e1": 1, "e3": 1, "e4": 2}}
	for _, p := range []contract.Promises{
		{},
		{Locking: contract.RowLocks},
		{Locking: contract.NoLocks, Failpoints: true},
		{Parks: true, Fenced: true, Sweeps: true, Records: true, Failpoints: true, Locking: contract.Lease(time.Minute), Attempts: 3,
			Backoff: contract.Backoff{Base: time.Second, Max: time.Minute}, Retention: time.Second},
	} {
		rep := Check(h, s, Config{Features: Features{Stages: true}}.WithPromises(p))
		for name, want := range map[string]string{NameLost: "e2", NamePhantom: "e3", NameDuplicateDeliveries: "e1", NameDuplicateEffects: "e4"} {
			res, ok := rep.Result(name)
			if !ok || res.Valid || res.Skipped || len(res.Offending) == 0 || res.Offending[0] != want {
				t.Errorf("promises %s: %s = %+v, want it to fail on %s", p, name, res, want)
			}
		}
	}
}
