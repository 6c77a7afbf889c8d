package mutant

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/outboxlab/outboxlab/contract"
	"github.com/outboxlab/outboxlab/workload"

	"github.com/outboxlab/outboxlab/internal/sim"
	"github.com/outboxlab/outboxlab/relay"
)

// Exposure is the simulation swarm that exposes a mutant: the faults that
// make its bug matter, enabled on top of whatever the seed draws, and the
// workload it needs. The reference must survive every mutant's exposure:
// an exposure only makes a fault likely, it never bends a checker.
type Exposure struct {
	// Faults are enabled in every seed, at Rate per step, each lasting up
	// to MaxSteps (defaults 0.03 and 30).
	Faults   []sim.Fault
	Rate     float64
	MaxSteps int
	// Without are faults switched off even when the seed draws them:
	// those whose windows would blur what the checkers can attribute.
	Without []sim.Fault
	// Rollback, Poison and LongTx are lower bounds on the workload's
	// shares of rolled-back transactions, poison events and transactions
	// held open.
	Rollback, Poison, LongTx float64
	// ShortLease sets the shortest lease the simulation allows, so that
	// clock offsets are large against it.
	ShortLease bool
	// Consumers is a lower bound on the consumer replicas, for bugs that
	// show when two consumers handle one event at the same moment.
	Consumers int
}

// Tune applies the exposure to a seed's swarm (sim.Options.Tune).
func (e Exposure) Tune(sw *sim.Swarm) {
	rate, steps := e.Rate, e.MaxSteps
	if rate == 0 {
		rate = 0.03
	}
	if steps == 0 {
		steps = 30
	}
	for _, f := range e.Faults {
		found := false
		for i := range sw.Faults {
			if sw.Faults[i].Fault == f {
				sw.Faults[i].Rate = max(sw.Faults[i].Rate, rate)
				sw.Faults[i].MaxSteps = max(sw.Faults[i].MaxSteps, steps)
				found = true
			}
		}
		if !found {
			sw.Faults = append(sw.Faults, sim.FaultRate{Fault: f, Rate: rate, MaxSteps: steps})
		}
	}
	sw.Faults = slices.DeleteFunc(sw.Faults, func(fr sim.FaultRate) bool { return slices.Contains(e.Without, fr.Fault) })
	sw.Rollback = max(sw.Rollback, e.Rollback)
	sw.Poison = max(sw.Poison, e.Poison)
	sw.LongTx = max(sw.LongTx, e.LongTx)
	sw.Consumers = max(sw.Consumers, e.Consumers)
	if e.ShortLease {
		// relay.Config.Validate wants a lease above twice the publish
		// timeout, which the simulation sets to sim.RealTimeout.
		sw.Lease = 2*sim.RealTimeout + time.Minute
	}
}

// String renders the exposure for the matrix's scenario column: "swarm"
// plus what it forces.
func (e Exposure) String() string {
	var parts []string
	for _, f := range e.Faults {
		parts = append(parts, "+"+string(f))
	}
	for _, f := range e.Without {
		parts = append(parts, "-"+string(f))
	}
	if e.Rollback > 0 {
		parts = append(parts, fmt.Sprintf("rollback>=%g", e.Rollback))
	}
	if e.Poison > 0 {
		parts = append(parts, fmt.Sprintf("poison>=%g", e.Poison))
	}
	if e.LongTx > 0 {
		parts = append(parts, fmt.Sprintf("long_tx>=%g", e.LongTx))
	}
	if e.ShortLease {
		parts = append(parts, "short-lease")
	}
	if e.Consumers > 0 {
		parts = append(parts, fmt.Sprintf("consumers>=%d", e.Consumers))
	}
	if len(parts) == 0 {
		return "sim swarm"
	}
	return "sim swarm " + strings.Join(parts, " ")
}

func (e Exposure) zero() bool {
	return len(e.Faults) == 0 && len(e.Without) == 0 && e.Rollback == 0 && e.Poison == 0 && e.LongTx == 0 && !e.ShortLease &&
		e.Consumers == 0
}

// catalogue is every mutant, in matrix order.
var catalogue = []Mutant{
	{
		Name:        "publish-before-commit",
		Description: "The producer publishes its event before its business transaction commits, so a rollback or a crash before COMMIT leaves a phantom event.",
		Side:        SideProducer,
		Producer:    workload.PublishThenCommit,
		Exposure:    Exposure{Rollback: 0.2},
		Infra:       []InfraRun{{Scenario: "baseline", Variant: "publish-then-commit"}},
	},
	{
		Name:        "mark-before-publish",
		Description: "The relay marks its claimed rows processed before it publishes them, so a crash or a broker outage in between loses them.",
		Side:        SideRelay,
		Relay: RelayForm{Store: func(raw sim.RawStore, _ func() time.Time) relay.Store {
			return markOnClaim{raw}
		}},
		Exposure: Exposure{Faults: []sim.Fault{sim.FaultKill, sim.FaultBrokerDown}},
		Infra:    []InfraRun{{Scenario: "broker-down"}},
	},
	{
		Name:        "no-lease",
		Description: "The claim takes the oldest pending rows without a lease predicate or SKIP LOCKED, so replicas publish the same rows at once.",
		Side:        SideRelay,
		Relay: RelayForm{Store: func(raw sim.RawStore, _ func() time.Time) relay.Store {
			return leaselessClaim{raw}
		}},
		Infra: []InfraRun{{Scenario: "baseline"}},
	},
	{
		Name:        "app-clock-lease",
		Description: "Leases are computed and compared with the relay's own clock instead of the database's, so a skewed relay takes rows another still holds or that are backing off.",
		Side:        SideRelay,
		Relay: RelayForm{Store: func(raw sim.RawStore, now func() time.Time) relay.Store {
			return appClockClaim{RawStore: raw, now: now}
		}},
		Exposure: Exposure{Faults: []sim.Fault{sim.FaultSkew}, Rate: 0.05, MaxSteps: 100, Poison: 0.2, ShortLease: true},
		Infra:    []InfraRun{{Scenario: "clock-skew"}},
	},
	{
		Name:        "no-confirm",
		Description: "The relay counts a publish as done once its frame is written and never looks at the broker's confirm, so a nacked or lost message is marked processed.",
		Side:        SideRelay,
		Relay: RelayForm{Publisher: func(pub relay.Publisher, _ sim.RawStore) relay.Publisher {
			return unconfirmed{pub}
		}},
		Exposure: Exposure{Faults: []sim.Fault{sim.FaultConfirmLoss}},
		// A confirm swallowed on its way back (confirm-lost) is harmless
		// to this bug, the message did arrive; the poison scenario's
		// unroutable type is returned, and this relay never hears it.
		Infra: []InfraRun{{Scenario: "poison"}},
	},
	{
		Name:        "ignore-return",
		Description: "The relay takes a mandatory publish the broker returned as unroutable for a success, so events published while no queue is bound are marked processed and lost.",
		Side:        SideRelay,
		Relay: RelayForm{Publisher: func(pub relay.Publisher, _ sim.RawStore) relay.Publisher {
			return returnsIgnored{pub}
		}},
		// A returned publish is a row-level failure: it costs an attempt.
		// While a broker fault is open too, the parking checker cannot
		// tell that attempt from one an outage cost, so the exposure
		// keeps the queue's unbinding apart from broker faults.
		Exposure: Exposure{Faults: []sim.Fault{sim.FaultUnbind}, Rate: 0.02, MaxSteps: 4,
			Without: []sim.Fault{sim.FaultBrokerDown, sim.FaultBrokerCut, sim.FaultBrokerRestart, sim.FaultConfirmLoss}},
		Infra: []InfraRun{{Scenario: "poison"}},
	},
	{
		Name:        "broker-down-consumes-attempts",
		Description: "The relay reports broker-level failures as row-level ones, so a broker outage costs every row it hits an attempt and parks healthy rows.",
		Side:        SideRelay,
		Relay: RelayForm{Publisher: func(pub relay.Publisher, _ sim.RawStore) relay.Publisher {
			return outageCostsAttempts{pub}
		}},
		Exposure: Exposure{Faults: []sim.Fault{sim.FaultBrokerDown}},
		Infra:    []InfraRun{{Scenario: "broker-down"}},
	},
	{
		Name:        "no-backoff",
		Description: "A failed row's attempt is counted but its backoff is not, so a poison row is eligible again at once, retried every tick at the head of its batch.",
		Side:        SideRelay,
		Relay: RelayForm{Store: func(raw sim.RawStore, _ func() time.Time) relay.Store {
			return immediateRetry{raw}
		}},
		Exposure: Exposure{Poison: 0.2},
		// The relay's records show its retries of the poison rows spaced
		// by less than the backoff it declares.
		Infra: []InfraRun{{Scenario: "poison"}},
	},
	{
		Name:        "sweep-pending",
		Description: "Retention deletes rows by their age alone, so pending and faulted rows older than the retention are deleted with the processed ones.",
		Side:        SideRelay,
		Relay: RelayForm{Store: func(raw sim.RawStore, _ func() time.Time) relay.Store {
			return sweepByAge{raw}
		}},
		Exposure: Exposure{Poison: 0.2},
		// broker-killed keeps rows pending past its short retention.
		Infra: []InfraRun{{Scenario: "broker-killed"}},
	},
	{
		Name:        "unfenced-mark",
		Description: "The mark does not check that the relay still holds the lease, so a relay that stalled past its lease marks rows another relay has taken over.",
		Side:        SideRelay,
		Relay: RelayForm{Store: func(raw sim.RawStore, _ func() time.Time) relay.Store {
			return unfencedMark{raw}
		}},
		Exposure: Exposure{Faults: []sim.Fault{sim.FaultPause}, Rate: 0.05},
		// In lease-expiry as it is, the other replica has marked every
		// row the stalled one held before it resumes, so its unfenced
		// marks find nothing pending and look fenced (seeds 7 to 10
		// tried). Here every replica lingers 3 s between the confirms
		// and the mark (the stalled one keeps its own failpoint), so the
		// takeover still holds those rows unmarked when the stalled one
		// marks them: its records show marks outside its lease.
		Infra: []InfraRun{{Scenario: "lease-expiry", Env: map[string]string{contract.EnvFailpoints: "after-confirm-before-mark=sleep(3s)"}}},
	},
	{
		Name:        "offset-claim",
		Description: "The relay claims by a high-water mark on the id, so a transaction that commits after later ones commits rows below the mark that are never published.",
		Side:        SideRelay,
		Relay: RelayForm{Store: func(raw sim.RawStore, _ func() time.Time) relay.Store {
			return &offsetClaim{RawStore: raw}
		}},
		Exposure: Exposure{LongTx: 0.3},
		Infra:    []InfraRun{{Scenario: "commit-order-inversion"}},
	},
	{
		Name:        "non-persistent",
		Description: "The relay publishes with transient delivery mode, so messages the broker holds when it restarts are dropped after they were confirmed and marked.",
		Side:        SideRelay,
		Relay: RelayForm{PublishOptions: &relay.PublishOptions{
			Persistent: false, Mandatory: relay.DefaultPublishOptions().Mandatory,
		}},
		Exposure: Exposure{Faults: []sim.Fault{sim.FaultBrokerRestart}},
		Infra:    []InfraRun{{Scenario: "broker-killed"}},
	},
	{
		Name:        "consumer-no-dedupe",
		Description: "The consumer applies every delivery without checking the inbox, so a redelivery applies the effect twice.",
		Side:        SideConsumer,
		Inbox: func(_ consumerInbox, effect EffectFunc) consumerInbox {
			return undeduplicated{effect: effect}
		},
		Exposure: Exposure{Faults: []sim.Fault{sim.FaultKill, sim.FaultBrokerRestart}},
		Infra:    []InfraRun{{Scenario: "crash-between-publish-and-mark"}},
	},
	{
		Name:        "consumer-ack-before-commit",
		Description: "The consumer acknowledges a delivery before its effect commits, so an apply that fails after the ack loses the effect.",
		Side:        SideConsumer,
		Inbox: func(in consumerInbox, _ EffectFunc) consumerInbox {
			return ackedFirst{in}
		},
		Exposure: Exposure{Faults: []sim.Fault{sim.FaultDBCut, sim.FaultDBDown}},
		// pipeline cuts the consumers' database link while deliveries
		// flow; db-down's kill of PostgreSQL came between deliveries on
		// seeds 7 to 10.
		Infra: []InfraRun{{Scenario: "pipeline"}},
	},
	{
		Name:        "consumer-delivery-tag-key",
		Description: "The consumer keys its inbox by the delivery tag, which every channel numbers from 1, so a delivery on a new channel or of another consumer is taken for one applied before and its event is never applied.",
		Side:        SideConsumer,
		Inbox: func(in consumerInbox, _ EffectFunc) consumerInbox {
			return deliveryTagKey{in.(KeyedInbox)}
		},
		Exposure: Exposure{Faults: []sim.Fault{sim.FaultBrokerCut}},
		// Two competing consumers number their deliveries from 1 each,
		// so their keys collide in any run.
		Infra: []InfraRun{{Scenario: "baseline"}},
	},
	{
		Name:        "consumer-check-then-insert",
		Description: "The consumer looks the event up in its inbox in a statement of its own and then writes the inbox row and the effect without looking again, so two deliveries of one event handled at the same moment both apply it.",
		Side:        SideConsumer,
		Inbox: func(in consumerInbox, _ EffectFunc) consumerInbox {
			return checkThenInsert{in.(KeyedInbox)}
		},
		Exposure: Exposure{Faults: []sim.Fault{sim.FaultKill, sim.FaultBrokerCut}, Consumers: 2},
		// Only duplicates applied at the same moment show it: the
		// catalogue's reach the consumers one after another.
		Infra: []InfraRun{{Scenario: "concurrent-duplicates"}},
	},
	{
		Name:        "delete-before-confirm",
		Description: "The relay deletes a row as soon as its publish is written, before the broker confirms it, so a nack, a lost confirm or a crash loses the event.",
		Side:        SideRelay,
		Relay: RelayForm{Publisher: func(pub relay.Publisher, raw sim.RawStore) relay.Publisher {
			return deleteOnPublish{Publisher: pub, raw: raw}
		}},
		Exposure: Exposure{Faults: []sim.Fault{sim.FaultConfirmLoss}},
		Infra:    []InfraRun{{Scenario: "confirm-lost"}},
	},
	{
		Name:        "drop-poison",
		Description: "The relay deletes each row it should park (an unknown type, an undecodable payload, a row the broker refused up to the attempt limit), so a poison event vanishes from the outbox where no operator will ever see it.",
		Side:        SideRelay,
		Relay: RelayForm{Store: func(raw sim.RawStore, _ func() time.Time) relay.Store {
			return dropPoison{raw}
		}},
		Exposure: Exposure{Poison: 0.2},
		Infra:    []InfraRun{{Scenario: "poison"}},
	},
}
