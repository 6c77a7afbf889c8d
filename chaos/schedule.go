package chaos

import (
	"cmp"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"time"
)

// Step is one fault window of a schedule.
type Step struct {
	// At is when the fault starts, from the start of the safety phase.
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

// KindWeight is one fault kind a swarm schedule enabled, with the weight
// it is drawn with.
type KindWeight struct {
	Kind   string `json:"kind"`
	Weight int    `json:"weight"`
}

// ScheduleConfig shapes the schedules Generate draws.
type ScheduleConfig struct {
	// Span is the length of the safety phase: every step starts and ends
	// within it. Required.
	Span time.Duration
	// Kinds restricts the schedule to faults of these kinds; empty means
	// every kind of the candidate faults.
	Kinds []string
	// Uniform turns swarm testing off: every kind is enabled with the same
	// weight and the gaps and durations use their full ranges. By default
	// the seed also draws which kinds are enabled, how often each is
	// chosen, and how dense and long the faults are.
	Uniform bool
	// MinGap and MaxGap bound the quiet time before each step (after the
	// end of the previous one when MaxConcurrent is 1, after the start of
	// the previous one otherwise). When MaxGap is 0 they default to
	// Span/20 (unless MinGap is set) and Span/5.
	MinGap, MaxGap time.Duration
	// MinDuration and MaxDuration bound each fault's duration. Defaults
	// Span/20 and Span/4.
	MinDuration, MaxDuration time.Duration
	// MaxConcurrent is how many faults may be active at once. Default 1.
	MaxConcurrent int
}

func (c ScheduleConfig) withDefaults() ScheduleConfig {
	if c.MaxGap == 0 {
		if c.MinGap == 0 {
			c.MinGap = c.Span / 20
		}
		c.MaxGap = max(c.Span/5, c.MinGap)
	}
	if c.MinDuration == 0 {
		c.MinDuration = c.Span / 20
	}
	if c.MaxDuration == 0 {
		c.MaxDuration = max(c.Span/4, c.MinDuration)
	}
	if c.MaxConcurrent == 0 {
		c.MaxConcurrent = 1
	}
	return c
}

// Validate reports what is wrong with c once its defaults are applied.
func (c ScheduleConfig) Validate() error {
	c = c.withDefaults()
	var errs []error
	if c.Span <= 0 {
		errs = append(errs, fmt.Errorf("Span must be positive, got %s", c.Span))
	}
	if c.MinGap < 0 || c.MaxGap < c.MinGap {
		errs = append(errs, fmt.Errorf("gaps must satisfy 0 <= MinGap (%s) <= MaxGap (%s)", c.MinGap, c.MaxGap))
	}
	if c.MinDuration <= 0 || c.MaxDuration < c.MinDuration {
		errs = append(errs, fmt.Errorf("durations must satisfy 0 < MinDuration (%s) <= MaxDuration (%s)", c.MinDuration, c.MaxDuration))
	}
	if c.MaxConcurrent < 1 {
		errs = append(errs, fmt.Errorf("MaxConcurrent must be positive, got %d", c.MaxConcurrent))
	}
	return errors.Join(errs...)
}

// Schedule is a fault plan for the safety phase of one run.
type Schedule struct {
	// Seed is the seed the schedule was drawn from.
	Seed uint64 `json:"seed"`
	// Span is the length of the safety phase.
	Span time.Duration `json:"span"`
	// Enabled lists the kinds the schedule drew from, with their weights.
	Enabled []KindWeight `json:"enabled"`
	// MaxGap and MaxDuration are the upper bounds this schedule drew its
	// gaps and durations under (swarm intensity).
	MaxGap      time.Duration `json:"max_gap"`
	MaxDuration time.Duration `json:"max_duration"`
	// Steps are the fault windows in start order.
	Steps []Step `json:"steps"`
}

// NewRand returns the random source every random choice of a run derives
// from: PCG seeded by seed alone.
func NewRand(seed uint64) *rand.Rand {
	return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
}

// Generate draws a fault schedule from seed alone over the candidate
// faults: the same seed, faults and config always give the same schedule.
// Swarm style, unless cfg.Uniform: the seed picks a random subset of the
// fault kinds (at least one), a weight for each, and how dense and long
// the faults are, so that different seeds stress different mixes. Faults
// of one kind are picked uniformly; a fault never overlaps itself.
func Generate(seed uint64, faults []Fault, cfg ScheduleConfig) (Schedule, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return Schedule{}, fmt.Errorf("schedule config: %w", err)
	}
	byKind := map[string][]string{}
	for _, f := range faults {
		if len(cfg.Kinds) > 0 && !slices.Contains(cfg.Kinds, f.Kind()) {
			continue
		}
		byKind[f.Kind()] = append(byKind[f.Kind()], f.Name())
	}
	if len(byKind) == 0 {
		return Schedule{}, fmt.Errorf("schedule: no candidate fault of kinds %v", cfg.Kinds)
	}
	kinds := make([]string, 0, len(byKind))
	for k, names := range byKind {
		kinds = append(kinds, k)
		sort.Strings(names)
	}
	sort.Strings(kinds)

	rng := NewRand(seed)
	s := Schedule{Seed: seed, Span: cfg.Span, MaxGap: cfg.MaxGap, MaxDuration: cfg.MaxDuration}
	if cfg.Uniform {
		for _, k := range kinds {
			s.Enabled = append(s.Enabled, KindWeight{k, 1})
		}
	} else {
		for _, k := range kinds {
			on := rng.IntN(2) == 0
			w := 1 + rng.IntN(9)
			if on {
				s.Enabled = append(s.Enabled, KindWeight{k, w})
			}
		}
		if len(s.Enabled) == 0 {
			s.Enabled = append(s.Enabled, KindWeight{kinds[rng.IntN(len(kinds))], 1})
		}
		s.MaxGap = between(rng, cfg.MinGap, cfg.MaxGap)
		s.MaxDuration = between(rng, cfg.MinDuration, cfg.MaxDuration)
	}
	total := 0
	for _, kw := range s.Enabled {
		total += kw.Weight
	}

	type window struct {
		end  time.Duration
		name string
	}
	var active []window
	var t time.Duration
	for {
		gap := between(rng, cfg.MinGap, s.MaxGap)
		t += gap
		for {
			active = slices.DeleteFunc(active, func(w window) bool { return w.end <= t })
			if len(active) < cfg.MaxConcurrent {
				break
			}
			first := slices.MinFunc(active, func(a, b window) int { return cmp.Compare(a.end, b.end) })
			t = first.end + gap
		}
		if t+cfg.MinDuration > cfg.Span {
			break
		}
		pick := rng.IntN(total)
		var kind string
		for _, kw := range s.Enabled {
			if pick < kw.Weight {
				kind = kw.Kind
				break
			}
			pick -= kw.Weight
		}
		busy := func(name string) bool {
			return slices.ContainsFunc(active, func(w window) bool { return w.name == name })
		}
		var free []string
		for _, name := range byKind[kind] {
			if !busy(name) {
				free = append(free, name)
			}
		}
		if len(free) == 0 {
			// Every fault of this kind is active: move on to the first
			// moment one of them is healed.
			t = slices.MinFunc(active, func(a, b window) int { return cmp.Compare(a.end, b.end) }).end
			continue
		}
		name := free[rng.IntN(len(free))]
		d := min(between(rng, cfg.MinDuration, s.MaxDuration), cfg.Span-t)
		s.Steps = append(s.Steps, Step{At: t, Fault: name, Kind: kind, Duration: d})
		active = append(active, window{t + d, name})
		if cfg.MaxConcurrent == 1 {
			t += d // the next gap is quiet time after this heal
		}
	}
	return s, nil
}

// between draws a duration uniformly from [lo, hi].
func between(rng *rand.Rand, lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(rng.Int64N(int64(hi-lo)+1))
}

// Periodic returns the fixed-shape schedule a single-fault scenario uses:
// fault (of kind) starts at first, lasts duration, and comes back gap
// after each heal (a negative gap counts as 0), as long as a whole window
// fits in span.
func Periodic(fault, kind string, first, duration, gap, span time.Duration) Schedule {
	s := Schedule{Span: span, Enabled: []KindWeight{{kind, 1}}, MaxGap: gap, MaxDuration: duration}
	if duration <= 0 {
		return s
	}
	gap = max(gap, 0)
	for t := first; t+duration <= span; t += duration + gap {
		s.Steps = append(s.Steps, Step{At: t, Fault: fault, Kind: kind, Duration: duration})
	}
	return s
}

// Faults returns the distinct fault names the schedule uses, sorted.
func (s Schedule) Faults() []string {
	var out []string
	for _, st := range s.Steps {
		if !slices.Contains(out, st.Fault) {
			out = append(out, st.Fault)
		}
	}
	sort.Strings(out)
	return out
}

// String renders the schedule for people, one step a line.
func (s Schedule) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "fault schedule SEED=%d span=%s steps=%d\n", s.Seed, s.Span, len(s.Steps))
	b.WriteString("  enabled:")
	for _, kw := range s.Enabled {
		fmt.Fprintf(&b, " %s(w=%d)", kw.Kind, kw.Weight)
	}
	fmt.Fprintf(&b, "  max gap %s, max duration %s\n", s.MaxGap, s.MaxDuration)
	for _, st := range s.Steps {
		fmt.Fprintf(&b, "  +%9s .. +%9s  %-10s %s\n",
			st.At.Round(time.Millisecond), st.End().Round(time.Millisecond), st.Kind, st.Fault)
	}
	return b.String()
}
