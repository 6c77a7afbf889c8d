package checker

import (
	"maps"
	"testing"
	"time"

	"github.com/outboxlab/outboxlab/history"
)

func TestDuplicateDeliveries(t *testing.T) {
	cases := []struct {
		checkCase
		by map[string]int
	}{
		{checkCase: checkCase{
			name: "republished with nothing to provoke it",
			h: build().commit("producer-1", "e1", "e2").relay("relay-a", "e1", "e2").
				claim("relay-a", "e2").publish("relay-a", "e2").h(),
			offending: []string{"e2"},
		}},
		{checkCase: checkCase{
			name: "republished after the relay's own mark of it failed",
			h: build().commit("producer-1", "e1").claim("relay-a", "e1").publish("relay-a", "e1").
				invoke("relay-a", history.Mark, "e1").info("relay-a", history.Mark, "e1").
				claim("relay-a", "e1").publish("relay-a", "e1").h(),
			valid: true,
		}, by: map[string]int{"mark-failed relay-a": 1}},
		{checkCase: checkCase{
			name: "republished after the relay crashed between publish and mark",
			h: build().commit("producer-1", "e1").claim("relay-a", "e1").publish("relay-a", "e1").
				crash("relay-a").restart("relay-a").relay("relay-a", "e1").h(),
			valid: true,
		}, by: map[string]int{"restart relay-a": 1}},
		{checkCase: checkCase{
			name: "duplicates across a relay restart, published and delivered twice",
			h: build().commit("producer-1", "e1").claim("relay-a", "e1").publish("relay-a", "e1").
				crash("relay-a").deliver("consumer-1", "e1").apply("consumer-1", "e1").
				restart("relay-a").relay("relay-a", "e1").deliver("consumer-1", "e1").applyDup("consumer-1", "e1").h(),
			valid: true,
		}, by: map[string]int{"restart relay-a": 2}},
		{checkCase: checkCase{
			name: "a broker timeout open during the publish explains it",
			h: build().commit("producer-1", "e1").fault("relay-broker-timeout", history.ClassBroker).claim("relay-a", "e1").
				publish("relay-a", "e1").heal("relay-broker-timeout").claim("relay-b", "e1").publish("relay-b", "e1").h(),
			valid: true,
		}, by: map[string]int{"relay-broker-timeout": 1}},
		{checkCase: checkCase{
			name: "a relay paused after its claim publishes after the relay that took over",
			h: build().commit("producer-1", "e1").claim("relay-a", "e1").fault("pause relay-a", history.ClassProcess, "relay-a").heal("pause relay-a").
				claim("relay-b", "e1").publish("relay-b", "e1").publish("relay-a", "e1").
				markLost("relay-a", []string{"e1"}).mark("relay-b", "e1").h(),
			valid: true,
		}, by: map[string]int{"pause relay-a": 1}},
		{checkCase: checkCase{
			name: "a fault healed before the first publish explains nothing",
			h: build().commit("producer-1", "e1").fault("broker-down", history.ClassBroker).heal("broker-down").
				relay("relay-a", "e1").claim("relay-b", "e1").publish("relay-b", "e1").h(),
			offending: []string{"e1"},
		}},
		{checkCase: checkCase{
			name: "a fault never healed explains what follows it",
			h: build().commit("producer-1", "e1").fault("pause relay-a", history.ClassProcess, "relay-a").claim("relay-a", "e1").
				publish("relay-a", "e1").claim("relay-b", "e1").publish("relay-b", "e1").h(),
			valid: true,
		}, by: map[string]int{"pause relay-a": 1}},
		{checkCase: checkCase{
			name: "a skewed clock explains nothing: leases run on the database clock",
			h: build().commit("producer-1", "e1").fault("clock-skew relay-b", history.ClassClock, "relay-b").
				relay("relay-a", "e1").claim("relay-b", "e1").publish("relay-b", "e1").h(),
			offending: []string{"e1"},
		}},
		{checkCase: checkCase{
			name: "a redelivery after a failed apply is a requeue",
			h: build().commit("producer-1", "e1").relay("relay-a", "e1").
				deliver("consumer-1", "e1").applyFail("consumer-1", "e1").
				deliver("consumer-1", "e1", history.Meta{Redelivered: true}).apply("consumer-1", "e1").h(),
			valid: true,
		}, by: map[string]int{CauseRequeue: 1}},
		{checkCase: checkCase{
			name: "a redelivery with nothing to provoke it",
			h: build().commit("producer-1", "e1").relay("relay-a", "e1").
				consume("consumer-1", "e1").deliver("consumer-1", "e1", history.Meta{Redelivered: true}).applyDup("consumer-1", "e1").h(),
			offending: []string{"e1"},
		}},
		{checkCase: checkCase{
			name: "a second publish's copy requeued from a prefetch arrives flagged redelivered",
			h: build().commit("producer-1", "e1").claim("relay-a", "e1").publishInfo("relay-a", "e1").
				claim("relay-a", "e1").publish("relay-a", "e1").mark("relay-a", "e1").
				deliver("consumer-1", "e1").apply("consumer-1", "e1").
				deliver("consumer-1", "e1", history.Meta{Redelivered: true}).applyDup("consumer-1", "e1").h(),
			valid: true,
		}, by: map[string]int{CauseUnconfirmed: 1}},
		{checkCase: checkCase{
			name: "a consumer crash before its ack explains the redelivery",
			h: build().commit("producer-1", "e1").relay("relay-a", "e1").
				consume("consumer-1", "e1").crash("consumer-1").restart("consumer-1").
				deliver("consumer-1", "e1", history.Meta{Redelivered: true}).applyDup("consumer-1", "e1").h(),
			valid: true,
		}, by: map[string]int{"restart consumer-1": 1}},
		{checkCase: checkCase{
			name: "an unconfirmed publish may reach the broker",
			h: build().commit("producer-1", "e1").claim("relay-a", "e1").publishInfo("relay-a", "e1").
				claim("relay-a", "e1").publish("relay-a", "e1").mark("relay-a", "e1").
				deliver("consumer-1", "e1").apply("consumer-1", "e1").
				deliver("consumer-1", "e1").applyDup("consumer-1", "e1").h(),
			valid: true,
		}, by: map[string]int{CauseUnconfirmed: 1}},
		{checkCase: checkCase{
			name: "one delivery per queue is no duplicate",
			h: build().commit("producer-1", "e1").relay("relay-a", "e1").
				deliver("consumer-1", "e1", history.Meta{Queue: "a"}).deliver("consumer-2", "e1", history.Meta{Queue: "b"}).h(),
			valid: true,
		}},
		{checkCase: checkCase{
			name: "a black-box relay: a fault after the commit explains a double delivery",
			h: build().commit("producer-1", "e1").fault("kill relay", history.ClassProcess).
				consume("consumer-1", "e1").heal("kill relay").deliver("consumer-1", "e1").applyDup("consumer-1", "e1").h(),
			valid: true,
		}, by: map[string]int{"kill relay": 1}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := DuplicateDeliveries(c.h, c.s, c.cfg)
			expect(t, r, c.valid, c.offending...)
			if c.by != nil && !maps.Equal(r.By, c.by) {
				t.Errorf("By = %v, want %v", r.By, c.by)
			}
			if c.valid && r.Counts["unexplained"] != 0 {
				t.Errorf("unexplained = %d, want 0", r.Counts["unexplained"])
			}
			if !c.valid && r.Counts["unexplained"] == 0 {
				t.Errorf("unexplained = 0 for a failing history")
			}
		})
	}
}

func TestDuplicateCountsSplitPublishesAndDeliveries(t *testing.T) {
	h := build().commit("producer-1", "e1").claim("relay-a", "e1").publish("relay-a", "e1").
		crash("relay-a").restart("relay-a").relay("relay-a", "e1").
		deliver("consumer-1", "e1").deliver("consumer-1", "e1").deliver("consumer-1", "e1").h()
	r := DuplicateDeliveries(h, State{}, Config{})
	if got := r.Counts["duplicate_published"]; got != 1 {
		t.Errorf("duplicate_published = %d, want 1", got)
	}
	if got := r.Counts["duplicate_delivered"]; got != 2 {
		t.Errorf("duplicate_delivered = %d, want 2", got)
	}
	if got := r.Counts["explained"]; got != 3 {
		t.Errorf("explained = %d, want 3", got)
	}
}

// TestDuplicatesNeedACauseOnTheirRow: a fault window that overlapped the
// journey explains a duplicate only when it touched the row's relay while
// that relay held it, or the delivery's consumer.
func TestDuplicatesNeedACauseOnTheirRow(t *testing.T) {
	cases := []struct {
		checkCase
		by, near map[string]int
	}{
		{checkCase: checkCase{
			name: "a broker outage of another relay, while relay-a republishes with no cause",
			h: build().commit("producer-1", "e1").fault("broker-down relay-b", history.ClassBroker, "relay-b").
				relay("relay-a", "e1").claim("relay-a", "e1").publish("relay-a", "e1").heal("broker-down relay-b").h(),
			offending: []string{"e1"},
		}, near: map[string]int{"broker-down relay-b": 1}},
		{checkCase: checkCase{
			name: "a consumer fault explains no second publish",
			h: build().commit("producer-1", "e1").fault("consumer cut", history.ClassBroker, "consumer-1").
				relay("relay-a", "e1").deliver("consumer-1", "e1").apply("consumer-1", "e1").
				claim("relay-b", "e1").publish("relay-b", "e1").deliver("consumer-1", "e1").applyDup("consumer-1", "e1").heal("consumer cut").h(),
			offending: []string{"e1"},
		}, near: map[string]int{"consumer cut": 2}},
		{checkCase: checkCase{
			name: "a consumer fault explains the redelivery it caused",
			h: build().commit("producer-1", "e1").relay("relay-a", "e1").deliver("consumer-1", "e1").apply("consumer-1", "e1").
				fault("consumer cut", history.ClassBroker, "consumer-1").heal("consumer cut").
				deliver("consumer-1", "e1", history.Meta{Redelivered: true}).applyDup("consumer-1", "e1").h(),
			valid: true,
		}, by: map[string]int{"consumer cut": 1}},
		{checkCase: checkCase{
			name: "claimed again after the lease ran out on the database clock",
			h: build().commit("producer-1", "e1").claimAt("relay-a", db, "e1").publish("relay-a", "e1").
				claimAt("relay-b", db.Add(lease+time.Second), "e1").publish("relay-b", "e1").mark("relay-b", "e1").h(),
			valid: true,
		}, by: map[string]int{CauseLeaseExpired: 1}},
		{checkCase: checkCase{
			name: "claimed again while the lease was live explains nothing",
			h: build().commit("producer-1", "e1").claimAt("relay-a", db, "e1").publish("relay-a", "e1").
				claimAt("relay-b", db.Add(time.Second), "e1").publish("relay-b", "e1").mark("relay-b", "e1").h(),
			offending: []string{"e1"},
		}, near: map[string]int{"none": 1}},
		{checkCase: checkCase{
			name: "claimed again after its mark explains nothing",
			h: build().commit("producer-1", "e1").claimAt("relay-a", db, "e1").publish("relay-a", "e1").markAt("relay-a", db, "e1").
				claimAt("relay-b", db.Add(lease+time.Second), "e1").publish("relay-b", "e1").h(),
			offending: []string{"e1"},
		}},
		{checkCase: checkCase{
			name: "marked, the database killed, claimed again: the crash undid the asynchronous mark",
			h: build().commit("producer-1", "e1").claimAt("relay-a", db, "e1").publish("relay-a", "e1").markAt("relay-a", db, "e1").
				dbKill("postgres kill").heal("postgres kill").
				claimAt("relay-b", db.Add(time.Second), "e1").publish("relay-b", "e1").mark("relay-b", "e1").h(),
			valid: true,
		}, by: map[string]int{"postgres kill": 1}},
		{checkCase: checkCase{
			name: "marked while the database kill was under way, claimed again after: the crash undid the mark",
			h: build().commit("producer-1", "e1").claimAt("relay-a", db, "e1").publish("relay-a", "e1").
				dbKillInvoke("postgres kill").markAt("relay-a", db, "e1").dbKillTook("postgres kill").heal("postgres kill").
				claimAt("relay-b", db.Add(time.Second), "e1").publish("relay-b", "e1").mark("relay-b", "e1").h(),
			valid: true,
		}, by: map[string]int{"postgres kill": 1}},
		{checkCase: checkCase{
			name: "a database kill before the row was ever claimed explains nothing",
			h: build().commit("producer-1", "e1").dbKill("postgres kill").heal("postgres kill").
				claimAt("relay-a", db, "e1").publish("relay-a", "e1").markAt("relay-a", db, "e1").
				claimAt("relay-b", db.Add(time.Second), "e1").publish("relay-b", "e1").h(),
			offending: []string{"e1"},
		}},
		{checkCase: checkCase{
			name: "its relay was killed holding it (records lost up to the claim)",
			h: build().commit("producer-1", "e1").claim("relay-a", "e1").deliver("consumer-1", "e1").apply("consumer-1", "e1").
				crash("relay-a").claim("relay-b", "e1").publish("relay-b", "e1").mark("relay-b", "e1").
				deliver("consumer-1", "e1").applyDup("consumer-1", "e1").h(),
			valid: true,
		}, by: map[string]int{"crash relay-a": 1}},
		{checkCase: checkCase{
			name: "publishes without claims (a row-lock relay observed at the broker): the crash of the replica that published first explains the second, not a fault on the replica that republished",
			h: build().commit("producer-1", "e1").fault("relay-db slowed", history.ClassDB, "relay-a", "relay-b").
				publish("relay-a", "e1").crash("relay-a").publish("relay-b", "e1").mark("relay-b", "e1").heal("relay-db slowed").h(),
			valid: true,
		}, by: map[string]int{"crash relay-a": 1}},
		{checkCase: checkCase{
			name: "two faults on the holder, both open before its claim: the one that opened last explains it",
			h: build().commit("producer-1", "e1").fault("confirms slowed", history.ClassBroker, "relay-a").
				fault("relay-a paused", history.ClassProcess, "relay-a").claim("relay-a", "e1").publish("relay-a", "e1").
				claim("relay-b", "e1").publish("relay-b", "e1").mark("relay-b", "e1").heal("relay-a paused").heal("confirms slowed").h(),
			valid: true,
		}, by: map[string]int{"relay-a paused": 1}},
		{checkCase: checkCase{
			name: "publishes without claims: a fault that hit only the replica that republished explains nothing",
			h: build().commit("producer-1", "e1").publish("relay-a", "e1").mark("relay-a", "e1").
				fault("relay-b slowed", history.ClassDB, "relay-b").publish("relay-b", "e1").heal("relay-b slowed").h(),
			offending: []string{"e1"},
		}, near: map[string]int{"relay-b slowed": 1}},
		{checkCase: checkCase{
			name: "a relay that takes no lock: two replicas published the row",
			h: build().commit("producer-1", "e1").publish("relay-a", "e1").publish("relay-b", "e1").
				mark("relay-a", "e1").h(),
			cfg:   Config{Features: Features{Unlocked: true}},
			valid: true,
		}, by: map[string]int{CauseUnlocked: 1}},
		{checkCase: checkCase{
			name: "a relay that takes no lock: one replica publishing a row twice is not explained by it",
			h: build().commit("producer-1", "e1").publish("relay-a", "e1").publish("relay-a", "e1").
				mark("relay-a", "e1").h(),
			cfg:       Config{Features: Features{Unlocked: true}},
			offending: []string{"e1"},
		}, near: map[string]int{"none": 1}},
		{checkCase: checkCase{
			name: "two replicas publishing a row is no cause for a relay that did not declare locking=none",
			h: build().commit("producer-1", "e1").publish("relay-a", "e1").publish("relay-b", "e1").
				mark("relay-a", "e1").h(),
			offending: []string{"e1"},
		}, near: map[string]int{"none": 1}},
		{checkCase: checkCase{
			name: "a black-box relay: a fault on the consumers explains no second publish",
			h: build().commit("producer-1", "e1").fault("consumer cut", history.ClassBroker, "consumer-1").
				consume("consumer-1", "e1").heal("consumer cut").deliver("consumer-1", "e1").applyDup("consumer-1", "e1").h(),
			cfg:       Config{Relays: []string{"relay-a"}},
			offending: []string{"e1"},
		}, near: map[string]int{"consumer cut": 1}},
		{checkCase: checkCase{
			name: "a black-box relay that takes no lock, run as two replicas: unseen publishes may be both of theirs",
			h: build().commit("producer-1", "e1").consume("consumer-1", "e1").
				deliver("consumer-1", "e1").applyDup("consumer-1", "e1").h(),
			cfg:   Config{Relays: []string{"relay-a", "relay-b"}, Features: Features{Unlocked: true}},
			valid: true,
		}, by: map[string]int{CauseUnlocked: 1}},
		{checkCase: checkCase{
			name: "a black-box relay that takes no lock, run as one replica: nothing explains the second publish",
			h: build().commit("producer-1", "e1").consume("consumer-1", "e1").
				deliver("consumer-1", "e1").applyDup("consumer-1", "e1").h(),
			cfg:       Config{Relays: []string{"relay-a"}, Features: Features{Unlocked: true}},
			offending: []string{"e1"},
		}, near: map[string]int{"none": 1}},
		{checkCase: checkCase{
			name: "a black-box relay: a fault on a relay in the event's flight explains it",
			h: build().commit("producer-1", "e1").fault("kill relay-a", history.ClassProcess, "relay-a").
				consume("consumer-1", "e1").heal("kill relay-a").deliver("consumer-1", "e1").applyDup("consumer-1", "e1").h(),
			cfg:   Config{Relays: []string{"relay-a"}},
			valid: true,
		}, by: map[string]int{"kill relay-a": 1}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := DuplicateDeliveries(c.h, c.s, c.cfg)
			expect(t, r, c.valid, c.offending...)
			if c.by != nil && !maps.Equal(r.By, c.by) {
				t.Errorf("By = %v, want %v", r.By, c.by)
			}
			if c.near != nil && !maps.Equal(r.Unexplained, c.near) {
				t.Errorf("Unexplained = %v, want %v", r.Unexplained, c.near)
			}
		})
	}
}
