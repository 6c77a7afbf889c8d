package relay_test

import (
	"context"
	"testing"
	"time"

	"github.com/outboxlab/outboxlab/chaos"
	"github.com/outboxlab/outboxlab/relay"
)

// TestBrokerOutageConsumesNoAttempts cuts the relay's link to the broker
// (toxiproxy down, then a stalled link) for several ticks: the rows staged
// meanwhile stay pending with no attempt consumed, and all of them are
// published once the link heals, without restarting the relay.
func TestBrokerOutageConsumesNoAttempts(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fault func(l *chaos.Link) chaos.Fault
		// exact: no publish can be in flight when the fault starts, so
		// every event arrives exactly once.
		exact bool
	}{
		{"down", func(l *chaos.Link) chaos.Fault { return chaos.Down(l) }, true},
		// A stalled link delays what was sent until it heals: the timed
		// out publishes may reach the broker after all, so duplicates are
		// allowed (and explained by the fault).
		{"stalled", func(l *chaos.Link) chaos.Fault { return chaos.Timeout(l, chaos.Upstream, 0) }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := newDB(t)
			b := newBroker(t, true)
			link := newBrokerLink(t)
			ids := newIDSource(t, 41)
			c := collect(t, b.URL, b.Queue) // direct, not through the link

			// A failed batch keeps its leases until they expire, so the
			// same rows fail again once per lease: keep it short.
			cfg := testConfig("relay-a")
			cfg.Lease = 2500 * time.Millisecond
			cfg.PublishTimeout = time.Second
			pub, err := relay.NewAMQPPublisher(relay.AMQPConfig{URL: link.URL, Exchange: b.Exchange, DialTimeout: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = pub.Close() })
			r, err := relay.New(cfg, relay.NewPGStore(db.Pool, db.Table), pub, relay.Options{})
			if err != nil {
				t.Fatal(err)
			}
			runRelay(t, r, nil)

			before := stageRows(t, db, ids, 20, "order.placed", time.Time{})
			waitFor(t, 20*time.Second, "the rows staged before the fault delivered", func() (bool, error) {
				_, distinct, _ := c.counts()
				return distinct == len(before), nil
			})

			fault := tc.fault(link.Link)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if err := fault.Inject(ctx); err != nil {
				t.Fatal(err)
			}
			healed := false
			t.Cleanup(func() {
				if !healed {
					_ = fault.Heal(context.Background())
				}
			})
			during := stageRows(t, db, ids, 30, "order.placed", time.Time{})
			failures, ticks := r.Totals().BrokerFailures.Load(), r.Totals().Ticks.Load()
			waitFor(t, 30*time.Second, "several ticks and two batches failing on the broker", func() (bool, error) {
				return r.Totals().BrokerFailures.Load() >= failures+2 && r.Totals().Ticks.Load() >= ticks+10, nil
			})
			if n := count(t, db, `id = ANY($1) AND processed_at IS NULL AND faulted_at IS NULL AND attempts = 0`, eventIDs(during)); n != len(during) {
				t.Errorf("%d of %d rows staged during the outage are pending with no attempt", n, len(during))
			}
			if got := r.Totals().Attempts.Load(); got != 0 {
				t.Errorf("the outage consumed %d attempts", got)
			}
			if err := fault.Heal(ctx); err != nil {
				t.Fatal(err)
			}
			healed = true
			if fault.Hits() == 0 {
				t.Fatal("the fault never fired")
			}
			all := len(before) + len(during)
			waitFor(t, 30*time.Second, "every row processed after the heal", func() (bool, error) {
				_, distinct, _ := c.counts()
				return distinct == all && count(t, db, `processed_at IS NOT NULL`) == all, nil
			})
			if n := count(t, db, `attempts <> 0 OR faulted_at IS NOT NULL`); n != 0 {
				t.Errorf("%d rows consumed attempts or were parked", n)
			}
			deliveries, _, duplicated := c.counts()
			if tc.exact && (deliveries != all || duplicated != 0) {
				t.Errorf("%d deliveries, %d duplicated; want each of %d once", deliveries, duplicated, all)
			}
			t.Logf("%d deliveries of %d events, %d dials, %d broker failures", deliveries, all, pub.Dials(), r.Totals().BrokerFailures.Load())
		})
	}
}
