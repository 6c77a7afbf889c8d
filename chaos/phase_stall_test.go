package chaos

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestLivenessEndsWhenTheBacklogStalls: a backlog that reports stalled
// for StallFor without a break ends the liveness phase at once with
// ErrStalled (an ErrNotDrained); a break in the stall starts the count
// again, and without Stalled the phase waits out DrainWithin.
func TestLivenessEndsWhenTheBacklogStalls(t *testing.T) {
	never := func(context.Context) (bool, error) { return false, nil }
	polls := 0
	p := &Phases{DrainWithin: 10 * time.Second, PollEvery: 5 * time.Millisecond, StallFor: 100 * time.Millisecond,
		Stalled: func(context.Context) (bool, error) {
			polls++
			return polls%10 != 0 || polls > 30, nil // breaks at polls 10, 20 and 30
		}}
	took, err := p.RunLiveness(context.Background(), never)
	if !errors.Is(err, ErrStalled) || !errors.Is(err, ErrNotDrained) {
		t.Fatalf("RunLiveness = %v, want ErrStalled", err)
	}
	if took >= 5*time.Second || polls <= 30 {
		t.Fatalf("ended after %s and %d polls: want soon after the last break, at poll 30", took, polls)
	}
	p = &Phases{DrainWithin: 300 * time.Millisecond, PollEvery: 5 * time.Millisecond}
	took, err = p.RunLiveness(context.Background(), never)
	if errors.Is(err, ErrStalled) || !errors.Is(err, ErrNotDrained) || took < 300*time.Millisecond {
		t.Fatalf("without Stalled: %v after %s, want ErrNotDrained after the deadline", err, took)
	}
}
