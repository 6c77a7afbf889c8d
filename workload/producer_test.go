package workload

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/outboxlab/outboxlab/history"
	"github.com/outboxlab/outboxlab/outbox"
)

type memStore struct{ staged []outbox.Event }

func (s *memStore) Begin(context.Context) (Tx, error) { return &memTx{s: s}, nil }

type memTx struct {
	s      *memStore
	staged []outbox.Event
}

func (t *memTx) Write(_ context.Context, e outbox.Event, stage bool) error {
	if stage {
		t.staged = append(t.staged, e)
	}
	return nil
}
func (t *memTx) Commit(context.Context) error {
	t.s.staged = append(t.s.staged, t.staged...)
	return nil
}
func (t *memTx) Rollback(context.Context) error { return nil }
func (t *memTx) Kill()                          {}

// TestProducerRecordsOnTheSharedClock: a producer whose own clock is skewed
// stamps occurred_at with it, and never its records, which merge with the
// other processes' records by time.
func TestProducerRecordsOnTheSharedClock(t *testing.T) {
	wall := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	skewed := wall.Add(-5 * time.Minute)
	for _, c := range []struct {
		name  string
		stamp func() time.Time
		want  time.Time
	}{
		{"the recorder's clock", nil, wall},
		{"the given shared clock", func() time.Time { return wall.Add(time.Second) }, wall.Add(time.Second)},
	} {
		t.Run(c.name, func(t *testing.T) {
			rec := &history.Recorder{Now: func() time.Time { return wall }}
			st := &memStore{}
			p := &Producer{Name: "producer-1", Store: st, Mode: Outbox, Rec: rec,
				Now: func() time.Time { return skewed }, Stamp: c.stamp, StampOccurredAt: true}
			e := outbox.Event{ID: uuid.New(), Type: "order.placed", Payload: []byte(`{}`)}
			if err := p.Do(context.Background(), Txn{Events: []outbox.Event{e}}); err != nil {
				t.Fatal(err)
			}
			if len(st.staged) != 1 || !st.staged[0].OccurredAt.Equal(skewed) {
				t.Fatalf("staged %+v, want one event with occurred_at %s (the producer's own clock)", st.staged, skewed)
			}
			ops := rec.Ops()
			if len(ops) == 0 {
				t.Fatal("no records")
			}
			for _, op := range ops {
				if !op.Time.Equal(c.want) {
					t.Errorf("%s %s stamped %s, want %s", op.Type, op.F, op.Time, c.want)
				}
			}
		})
	}
}
