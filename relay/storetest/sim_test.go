package storetest_test

import (
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/outboxlab/outboxlab/internal/sim"
	"github.com/outboxlab/outboxlab/outbox"
	"github.com/outboxlab/outboxlab/relay/storetest"
)

// TestSimStore runs the suite against the simulation's in-memory store.
func TestSimStore(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storetest.Backend {
		clock := sim.NewClock()
		s := sim.NewStore(clock)
		return storetest.Backend{
			Store: s,
			Stage: func(t testing.TB, events ...outbox.Event) {
				t.Helper()
				tx := s.Begin()
				for _, e := range events {
					if err := tx.Stage(e); err != nil {
						t.Fatal(err)
					}
				}
				if err := tx.Commit(); err != nil {
					t.Fatal(err)
				}
				clock.Advance(time.Millisecond)
			},
			Now:     func(testing.TB) time.Time { return clock.Now() },
			Advance: func(_ testing.TB, d time.Duration) { clock.Advance(d) },
			Row: func(_ testing.TB, id uuid.UUID) (storetest.Row, bool) {
				r, ok := s.Row(id)
				return storetest.Row{ProcessedAt: r.ProcessedAt, FaultedAt: r.FaultedAt, Attempts: r.Attempts,
					LockedBy: r.LockedBy, LockedUntil: r.LockedUntil, OccurredAt: r.OccurredAt}, ok
			},
			Unit: time.Minute,
		}
	})
}
