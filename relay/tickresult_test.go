package relay

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/outboxlab/outboxlab/history"
	"github.com/outboxlab/outboxlab/outbox"
)

// outcomeStore hands out one batch, keeps the lease of every row but
// lost on a mark, answers each retry with retries[id] and parks every
// row it is asked to.
type outcomeStore struct {
	scriptedStore
	lost    uuid.UUID
	retries map[uuid.UUID]RetryResult
}

func (s *outcomeStore) Mark(_ context.Context, _ string, ids []uuid.UUID) ([]uuid.UUID, error) {
	return slices.DeleteFunc(slices.Clone(ids), func(id uuid.UUID) bool { return id == s.lost }), nil
}

func (s *outcomeStore) Retry(_ context.Context, _ string, id uuid.UUID, _ RetryPolicy, _ string) (RetryResult, error) {
	return s.retries[id], nil
}

// returningPublisher confirms every publish but those of the ids it
// returns (a row-level failure).
type returningPublisher struct{ returned map[uuid.UUID]bool }

type waitErr struct{ err error }

func (w waitErr) Wait(context.Context) error { return w.err }

func (p *returningPublisher) Publish(_ context.Context, m Message) (Confirmation, error) {
	id, _ := uuid.Parse(m.ID)
	if p.returned[id] {
		return waitErr{fmt.Errorf("publishing %s: %w", m.ID, ErrReturned)}, nil
	}
	return waitErr{}, nil
}

// TestTickCountsItsOutcomes: one batch of a healthy row, a row whose mark
// finds its lease lost, three rows the broker returns (one retried, one
// parked at its last attempt, one whose retry finds its lease lost) and a
// row of an unknown type (parked at once): the tick's result counts each, and the records say each park and
// retry went through.
func TestTickCountsItsOutcomes(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	rows := rowsOf(6)
	lost, retried, parkedLate, poison, retryLost := rows[1], rows[2], rows[3], rows[4], rows[5]
	rows[4].Type = "unknown"
	store := &outcomeStore{
		scriptedStore: scriptedStore{claims: [][]Row{rows}, now: &now},
		lost:          lost.ID,
		retries: map[uuid.UUID]RetryResult{
			retried.ID:    {Applied: true, Attempts: 1},
			parkedLate.ID: {Applied: true, Attempts: 5, Parked: true},
			retryLost.ID:  {Applied: false},
		},
	}
	pub := &returningPublisher{returned: map[uuid.UUID]bool{retried.ID: true, parkedLate.ID: true, retryLost.ID: true}}
	reg := outbox.NewRegistry()
	reg.Register("t", struct{}{})
	rec := &memRecords{}
	r, err := New(Config{RelayID: "r", BatchSize: 10, Now: func() time.Time { return now }}, store, pub,
		Options{SerialStore: true, Decoder: reg, Records: rec})
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.Tick(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := TickResult{Batches: 1, Claimed: 6, Published: 1, LostLeases: 2, Attempts: 2, Parked: 2}
	if res != want {
		t.Errorf("tick result %+v, want %+v", res, want)
	}
	got := map[string]string{}
	for _, op := range rec.ops {
		if op.Type != history.Invoke && (op.F == history.Park || op.F == history.Retry) {
			for _, id := range op.Events {
				got[id] += fmt.Sprintf("%s %s;", op.F, op.Type)
			}
		}
	}
	for id, w := range map[uuid.UUID]string{poison.ID: "park ok;", retried.ID: "retry ok;", parkedLate.ID: "retry ok;", retryLost.ID: "retry fail;"} {
		if got[id.String()] != w {
			t.Errorf("records of %s: %q, want %q", id, got[id.String()], w)
		}
	}
}
