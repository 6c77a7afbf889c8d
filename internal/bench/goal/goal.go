// Package goal holds the benchmark's goals: the bounds that the ratios of
// one `outboxlab bench` run are judged against, and the judgement itself,
// so that the benchmark and the report of many runs judge them the same
// way.
package goal

import "strconv"

// Goals of the benchmark: the relay against the broker's limit, its tail
// latency against the broker's own, against its peer, and its CPU cost
// against the broker's. Every one is a ratio within one run.
const (
	RatioToRaw        = 0.85
	Ratio2ToRaw       = 0.95
	NotifyOverBroker  = 2.0
	RatioToWatermill  = 10.0
	CPUOverBrokerUpTo = 0.5
)

// Figures are the ratios of one run that the goals are about, as
// result.Result (and result.Summary) derives them. A zero figure was not
// measured (its phase was left out or did not run).
type Figures interface {
	// RatioToRaw and Ratio2ToRaw are the relay's drain rate, one and two
	// replicas, over raw confirmed publishing's.
	RatioToRaw() float64
	Ratio2ToRaw() float64
	// NotifyOverBrokerP99 is the LISTEN/NOTIFY run's commit -> confirm
	// p99 over the broker-alone p99 at the same rate.
	NotifyOverBrokerP99() float64
	// RatioToWatermill is the one-replica drain rate over watermill's
	// forwarder's.
	RatioToWatermill() float64
	// CPURelayPlusDBOverBroker is the CPU per message of the relay
	// process plus PostgreSQL over RabbitMQ's, in the one-replica drain.
	CPURelayPlusDBOverBroker() float64
}

// Target is one goal of the benchmark and what a run measured against it.
type Target struct {
	// Figure names what is measured; Measured is its value in the run.
	Figure   string  `json:"figure"`
	Measured float64 `json:"measured"`
	// Goal is the bound: Measured must be at least Goal, or at most Goal
	// when AtMost is set.
	Goal   float64 `json:"goal"`
	AtMost bool    `json:"at_most"`
	// Ran is false when the run did not measure the figure (a phase was
	// left out); Met is then false too.
	Ran bool `json:"ran"`
	Met bool `json:"met"`
}

// Bound says the goal as text: ">= 0.85", "<= 2".
func (t Target) Bound() string {
	if t.AtMost {
		return "<= " + trim(t.Goal)
	}
	return ">= " + trim(t.Goal)
}

// Judge returns f's figures against the goals, in a fixed order: relay-1
// and relay-2 against raw, NOTIFY against the broker, relay-1 against
// watermill, CPU against the broker's.
func Judge(f Figures) []Target {
	t := func(figure string, measured, bound float64, atMost bool) Target {
		ran := measured > 0
		met := ran && (measured >= bound && !atMost || measured <= bound && atMost)
		return Target{Figure: figure, Measured: measured, Goal: bound, AtMost: atMost, Ran: ran, Met: met}
	}
	return []Target{
		t("relay-1 / raw, msgs/s", f.RatioToRaw(), RatioToRaw, false),
		t("relay-2 / raw, msgs/s", f.Ratio2ToRaw(), Ratio2ToRaw, false),
		t("NOTIFY p99 / broker-alone p99, commit -> confirm", f.NotifyOverBrokerP99(), NotifyOverBroker, true),
		t("relay-1 / watermill, msgs/s", f.RatioToWatermill(), RatioToWatermill, false),
		t("CPU per message, relay + PostgreSQL / RabbitMQ", f.CPURelayPlusDBOverBroker(), CPUOverBrokerUpTo, true),
	}
}

// trim formats a bound without trailing zeros: 0.85, 2, 10.
func trim(v float64) string {
	return strconv.FormatFloat(v, 'f', -1, 64)
}

// Drain is what one drain of the benchmark (raw publishing or a relay's)
// asked of the broker: the events it confirmed, RabbitMQ's busy cores
// over it (CPU seconds per second) and RabbitMQ's CPU seconds.
type Drain struct {
	Events        int
	BrokerBusy    float64
	BrokerSeconds float64
}

// BrokerFactors splits a relay drain's rate over raw's into two factors
// whose product it is: busy, RabbitMQ's busy cores in the relay's drain
// over raw's (how fully the relay kept the broker busy), and cost,
// RabbitMQ's CPU per message in raw over the relay's (how much more work
// each of the relay's messages gave it). Both are zero where a drain
// lacks a figure.
func BrokerFactors(raw, relay Drain) (busy, cost float64) {
	if raw.Events <= 0 || relay.Events <= 0 || raw.BrokerBusy <= 0 || relay.BrokerSeconds <= 0 {
		return 0, 0
	}
	busy = relay.BrokerBusy / raw.BrokerBusy
	cost = (raw.BrokerSeconds / float64(raw.Events)) / (relay.BrokerSeconds / float64(relay.Events))
	return busy, cost
}

// RawSelfRatio is the slower of the raw phases' rates over the faster:
// raw publishing itself scored against the broker's limit (the benchmark
// takes the faster raw phase as that limit). The two raw phases publish
// the same messages the same way, so what keeps it below 1 is the
// broker's own noise from one phase to the next; below a goal on the
// relay's ratio to raw, raw publishing itself missed that goal in the
// run. Zero with fewer than two rates.
func RawSelfRatio(rates ...float64) float64 {
	if len(rates) < 2 {
		return 0
	}
	lo, hi := rates[0], rates[0]
	for _, r := range rates[1:] {
		lo, hi = min(lo, r), max(hi, r)
	}
	if lo <= 0 {
		return 0
	}
	return lo / hi
}
