package chaos

import "time"

// Step is one fault window of a schedule. Schedules are data: a scenario
// draws its own from the run's seed (see package seed) and Nemesis.Run
// plays them.
type Step struct {
	// At is when the fault starts, from the start of the schedule's clock.
	At time.Duration `json:"at"`
	// Fault is the fault's name.
	Fault string `json:"fault"`
	// Kind is the fault's kind.
	Kind string `json:"kind"`
	// Duration is how long the fault stays before it is healed.
	Duration time.Duration `json:"duration"`
}

// End returns when the step's fault is healed.
func (s Step) End() time.Duration { return s.At + s.Duration }
