package campaign

import (
	"errors"
	"fmt"
	"math"
	"slices"
)

// Cell is one run of a chaos campaign: a scenario on a seed.
type Cell struct {
	Scenario string `json:"scenario"`
	Seed     uint64 `json:"seed"`
}

// String returns "scenario/seed".
func (c Cell) String() string { return fmt.Sprintf("%s/%d", c.Scenario, c.Seed) }

// ErrInvalidCampaign is returned by Cells for a campaign that cannot be
// enumerated.
var ErrInvalidCampaign = errors.New("invalid campaign")

// Cells returns the cells of a campaign that runs each of scenarios on
// seeds consecutive seeds from first: scenario by scenario in the order
// given, the seeds ascending within each, so that the cells of one
// scenario that a shard holds are consecutive seeds, which one command
// replays (`--scenario S --seeds M --seed F`). It returns an error
// wrapping ErrInvalidCampaign when there is no scenario, a scenario is
// named twice, seeds is below 1, or the seeds would pass the largest
// seed.
func Cells(scenarios []string, first uint64, seeds int) ([]Cell, error) {
	if len(scenarios) == 0 {
		return nil, fmt.Errorf("%w: no scenario", ErrInvalidCampaign)
	}
	if seeds < 1 {
		return nil, fmt.Errorf("%w: %d seeds: want at least 1", ErrInvalidCampaign, seeds)
	}
	if uint64(seeds-1) > math.MaxUint64-first {
		return nil, fmt.Errorf("%w: %d seeds from %d would pass the largest seed, %d: give at most %d seeds from there, or a lower seed",
			ErrInvalidCampaign, seeds, first, uint64(math.MaxUint64), math.MaxUint64-first+1)
	}
	for i, s := range scenarios {
		if slices.Contains(scenarios[:i], s) {
			return nil, fmt.Errorf("%w: scenario %q is named twice", ErrInvalidCampaign, s)
		}
	}
	cells := make([]Cell, 0, len(scenarios)*seeds)
	for _, s := range scenarios {
		for j := range seeds {
			cells = append(cells, Cell{Scenario: s, Seed: first + uint64(j)})
		}
	}
	return cells, nil
}

// Select returns the items of a campaign, in their order, that belong to
// s: the contiguous block s.Range(len(items)). The blocks of 1/N .. N/N
// together hold every item once.
func Select[T any](s Shard, items []T) []T {
	lo, hi := s.Range(len(items))
	return items[lo:hi:hi]
}
