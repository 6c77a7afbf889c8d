package bench

import "github.com/outboxlab/outboxlab/bench/goal"

// coresBoundIdle is the idle share of the cores, on average over a
// phase, below which the cores were the phase's limit.
const coresBoundIdle = 0.1

// limits sets, from the phases that ran, the CPU ceilings of the relay's
// ratios to raw, the CPU budget of the relay-1 goal, whether the cores
// bound every phase of the comparison, and relay-1's ratio to raw as the
// broker's busy cores and its CPU per message: what limited the drains.
func (r *Result) limits() {
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
	r.CoresBound = bound && seen == 4
	r.RawSelfRatio = goal.RawSelfRatio(raws...)
	if split != nil && limit != nil {
		r.Raw2RatioToRaw = ratio(split.MsgsPerSec, limit.MsgsPerSec)
	}
	if limit != nil && limit.Resources != nil {
		r.BrokerBusyRaw = limit.Resources.RabbitMQ
		r.BrokerBusyRatio, r.BrokerCostRatio = goal.BrokerFactors(limit.drain(), one.drain())
		r.Broker2BusyRatio, r.Broker2CostRatio = goal.BrokerFactors(limit.drain(), two.drain())
	}
	if limit == nil || limit.CPUMicrosPerMsg == 0 {
		return
	}
	if one != nil {
		r.CPUCeilingRatioToRaw = ratio(limit.CPUMicrosPerMsg, one.CPUMicrosPerMsg)
		if one.Events > 0 {
			broker := one.CPU.RabbitMQSeconds * 1e6 / float64(one.Events)
			r.CPUBudgetRelayPlusDB = max(0, limit.CPUMicrosPerMsg/GoalRatioToRaw-broker)
		}
	}
	if two != nil {
		r.CPUCeiling2RatioToRaw = ratio(limit.CPUMicrosPerMsg, two.CPUMicrosPerMsg)
	}
}

// drain is what ph asked of the broker; a phase not run (nil) or
// without its resources asks nothing.
func (ph *Phase) drain() goal.Drain {
	if ph == nil || ph.Resources == nil {
		return goal.Drain{}
	}
	return goal.Drain{Events: ph.Events, BrokerBusy: ph.Resources.RabbitMQ, BrokerSeconds: ph.CPU.RabbitMQSeconds}
}
