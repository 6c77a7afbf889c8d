package result

import "github.com/outboxlab/outboxlab/internal/bench/goal"

// Limits are what bound a run's drains, derived from its phases: the CPU
// ceilings of the relay's ratios to raw, the CPU budget of the relay-1
// goal, whether the cores bound every phase of the comparison, the
// relay's ratios to raw as the broker's busy cores and its CPU per
// message, and how far raw publishing itself is from the broker's limit.
// Each is zero (false) where a phase it needs did not run or was not
// read.
type Limits struct {
	// CoresBound is true when every phase of the throughput comparison
	// (raw, relay-1, relay-2, raw-after) kept the cores busy, less than
	// coresBoundIdle of them idle on average: the ceilings then hold.
	CoresBound bool `json:"cores_bound"`
	// CPUCeilingRatioToRaw is the CPU per message of the raw phase that
	// set the broker's limit over relay-1's, and CPUCeiling2RatioToRaw
	// the same over relay-2's: the ratio to raw that the machine's cores
	// allow a relay with that cost when they are the limit of both phases
	// (a phase's rate is then its busy cores over its CPU per message).
	// RatioToRaw over its ceiling says how close the relay came to it.
	CPUCeilingRatioToRaw  float64 `json:"cpu_ceiling_ratio_to_raw"`
	CPUCeiling2RatioToRaw float64 `json:"cpu_ceiling_relay2_ratio_to_raw"`
	// CPUBudgetRelayPlusDB is the CPU per message relay-1's process and
	// PostgreSQL may take, RabbitMQ's share in relay-1 unchanged, for its
	// CPU ceiling to reach goal.RatioToRaw: what the relay-1 goal asks of
	// the relay on a machine whose cores are the limit.
	CPUBudgetRelayPlusDB float64 `json:"cpu_budget_us_per_msg_relay_plus_db"`
	// BrokerBusyRaw is how many cores RabbitMQ kept busy in the raw phase
	// that set the limit. BrokerBusyRatio is RabbitMQ's busy cores in
	// relay-1 over that, and BrokerCostRatio raw's RabbitMQ CPU per
	// message over relay-1's. Their product is RatioToRaw exactly (each
	// phase's rate is RabbitMQ's busy cores over its CPU per message);
	// where the broker is the limit (about a core busy in raw while cores
	// stay idle: its queue and channel run as a few Erlang processes),
	// they say how fully the relay kept the broker busy and how much
	// more work each of its messages gave the broker.
	BrokerBusyRaw   float64 `json:"broker_busy_raw"`
	BrokerBusyRatio float64 `json:"broker_busy_ratio"`
	BrokerCostRatio float64 `json:"broker_cost_ratio"`
	// Broker2BusyRatio and Broker2CostRatio are the same two factors of
	// Ratio2ToRaw, for the two-replica drain.
	Broker2BusyRatio float64 `json:"broker2_busy_ratio"`
	Broker2CostRatio float64 `json:"broker2_cost_ratio"`
	// RawSelfRatio is the slower raw phase's rate over the faster's
	// (goal.RawSelfRatio): raw publishing itself against the broker's
	// limit, the broker's own noise from one phase to the next.
	RawSelfRatio float64 `json:"raw_self_ratio"`
	// Raw2RatioToRaw is the raw-2 phase's rate (the backlog published
	// from memory over two connections at once, each with the relay's
	// window) over the faster raw phase's: relay-2 / raw of a two-replica
	// relay as fast as raw publishing, since each replica publishes on a
	// connection of its own. Below the relay-2 goal, no two-replica relay
	// meets it through this broker on this machine.
	Raw2RatioToRaw float64 `json:"raw2_ratio_to_raw"`
}

// coresBoundIdle is the idle share of the cores, on average over a
// phase, below which the cores were the phase's limit.
const coresBoundIdle = 0.1

// Limits derives, from the phases that ran, what bound the drains.
func (r Result) Limits() Limits {
	var l Limits
	var limit, one, two, split *Phase
	var raws []float64
	bound, seen := true, 0
	for i := range r.Phases {
		ph := &r.Phases[i]
		switch ph.Name {
		case "raw", "raw-after":
			raws = append(raws, ph.MsgsPerSec)
			if limit == nil || ph.MsgsPerSec > limit.MsgsPerSec {
				limit = ph
			}
		case "relay-1":
			one = ph
		case "relay-2":
			two = ph
		case "raw-2":
			split = ph
			continue
		default:
			continue
		}
		seen++
		bound = bound && ph.Resources != nil && ph.Resources.Idle < coresBoundIdle
	}
	l.CoresBound = bound && seen == 4
	l.RawSelfRatio = goal.RawSelfRatio(raws...)
	if split != nil && limit != nil {
		l.Raw2RatioToRaw = ratio(split.MsgsPerSec, limit.MsgsPerSec)
	}
	if limit != nil && limit.Resources != nil {
		l.BrokerBusyRaw = limit.Resources.RabbitMQ
		l.BrokerBusyRatio, l.BrokerCostRatio = goal.BrokerFactors(limit.drain(), one.drain())
		l.Broker2BusyRatio, l.Broker2CostRatio = goal.BrokerFactors(limit.drain(), two.drain())
	}
	if limit == nil || limit.CPUMicrosPerMsg == 0 {
		return l
	}
	if one != nil {
		l.CPUCeilingRatioToRaw = ratio(limit.CPUMicrosPerMsg, one.CPUMicrosPerMsg)
		if one.Events > 0 {
			broker := one.CPU.RabbitMQSeconds * 1e6 / float64(one.Events)
			l.CPUBudgetRelayPlusDB = max(0, limit.CPUMicrosPerMsg/goal.RatioToRaw-broker)
		}
	}
	if two != nil {
		l.CPUCeiling2RatioToRaw = ratio(limit.CPUMicrosPerMsg, two.CPUMicrosPerMsg)
	}
	return l
}

// drain is what ph asked of the broker; a phase not run (nil) or
// without its resources asks nothing.
func (ph *Phase) drain() goal.Drain {
	if ph == nil || ph.Resources == nil {
		return goal.Drain{}
	}
	return goal.Drain{Events: ph.Events, BrokerBusy: ph.Resources.RabbitMQ, BrokerSeconds: ph.CPU.RabbitMQSeconds}
}
