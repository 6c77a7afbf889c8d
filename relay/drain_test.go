package relay

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
)

// scriptedStore hands out the batches of claims in order (then nothing)
// and moves the clock on by step at every claim; every mark succeeds.
type scriptedStore struct {
	claims [][]Row
	calls  int
	now    *time.Time
	step   time.Duration
}

func (s *scriptedStore) Claim(context.Context, string, int, time.Duration) ([]Row, error) {
	s.calls++
	*s.now = s.now.Add(s.step)
	if len(s.claims) == 0 {
		return nil, nil
	}
	rows := s.claims[0]
	s.claims = s.claims[1:]
	return rows, nil
}

func (s *scriptedStore) Mark(_ context.Context, _ string, ids []uuid.UUID) ([]uuid.UUID, error) {
	return ids, nil
}

func (s *scriptedStore) Retry(context.Context, string, uuid.UUID, RetryPolicy, string) (RetryResult, error) {
	return RetryResult{Applied: true, Attempts: 1}, nil
}

func (s *scriptedStore) Park(context.Context, string, uuid.UUID, string) (bool, error) {
	return true, nil
}
func (s *scriptedStore) Sweep(context.Context, time.Duration, int) (int, error) { return 0, nil }
func (s *scriptedStore) Stats(context.Context) (Stats, error)                   { return Stats{}, nil }

// ackingPublisher confirms every publish at once.
type ackingPublisher struct{ published int }

type acked struct{}

func (acked) Wait(context.Context) error { return nil }

func (p *ackingPublisher) Publish(context.Context, Message) (Confirmation, error) {
	p.published++
	return acked{}, nil
}

func rowsOf(n int) []Row {
	rows := make([]Row, n)
	for i := range rows {
		rows[i] = Row{ID: uuid.New(), Type: "t", Payload: []byte(`{}`)}
	}
	return rows
}

// TestDrainClaimsAgainOnAWakeUp: a short claim ends the drain unless a
// wake-up came in meanwhile and the drain is younger than the poll
// interval. A wake-up it does not act on stays in the channel for Run.
func TestDrainClaimsAgainOnAWakeUp(t *testing.T) {
	for _, c := range []struct {
		name       string
		step       time.Duration // clock movement per claim
		wantClaims int
		wantWake   bool // the wake-up is still pending afterwards
	}{
		{"young drain takes the wake-up and claims again", time.Millisecond, 2, false},
		{"old drain leaves the wake-up to the next tick", 2 * time.Second, 1, true},
		{"drain as old as the poll interval leaves it too", time.Second, 1, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			now := time.Unix(1_700_000_000, 0)
			store := &scriptedStore{claims: [][]Row{rowsOf(2), rowsOf(1)}, now: &now, step: c.step}
			pub := &ackingPublisher{}
			r, err := New(Config{RelayID: "r", BatchSize: 5, PollInterval: time.Second, Now: func() time.Time { return now }},
				store, pub, Options{SerialStore: true})
			if err != nil {
				t.Fatal(err)
			}
			wake := make(chan struct{}, 1)
			wake <- struct{}{}
			res, err := r.tick(context.Background(), context.Background(), nil, wake)
			if err != nil {
				t.Fatal(err)
			}
			checkDrain(t, res, store.calls, c.wantClaims, wake, c.wantWake, pub.published)
		})
	}
}

// wakingPublisher confirms every publish, and puts a wake-up in wake when
// the confirm of its first publish is awaited: rows committed while the
// batch is being confirmed.
type wakingPublisher struct {
	wake      chan struct{}
	published int
}

type wakingConfirm struct {
	wake chan struct{}
}

func (c wakingConfirm) Wait(context.Context) error {
	if c.wake != nil {
		c.wake <- struct{}{}
	}
	return nil
}

func (p *wakingPublisher) Publish(context.Context, Message) (Confirmation, error) {
	p.published++
	if p.published == 1 {
		return wakingConfirm{wake: p.wake}, nil
	}
	return wakingConfirm{}, nil
}

// TestDrainClaimsAgainOnAWakeUpWhileConfirming: a short claim that no
// wake-up followed does not end the drain while its batch is still being
// confirmed and marked: a wake-up that comes meanwhile starts the next
// claim in the same drain, for each store mode; in an old drain it stays
// in the channel for Run.
func TestDrainClaimsAgainOnAWakeUpWhileConfirming(t *testing.T) {
	for _, c := range []struct {
		name       string
		serial     bool
		step       time.Duration
		wantClaims int
		wantWake   bool
	}{
		{"serial store", true, time.Millisecond, 2, false},
		{"concurrent store", false, time.Millisecond, 2, false},
		{"old drain", true, 2 * time.Second, 1, true},
		{"drain as old as the poll interval", true, time.Second, 1, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			now := time.Unix(1_700_000_000, 0)
			var mu sync.Mutex
			claims := [][]Row{rowsOf(1), rowsOf(1)}
			calls := 0
			store := &fakeStore{claim: func(context.Context, int) ([]Row, error) {
				mu.Lock()
				defer mu.Unlock()
				calls++
				now = now.Add(c.step)
				if len(claims) == 0 {
					return nil, nil
				}
				rows := claims[0]
				claims = claims[1:]
				return rows, nil
			}}
			wake := make(chan struct{}, 1)
			pub := &wakingPublisher{wake: wake}
			clock := func() time.Time {
				mu.Lock()
				defer mu.Unlock()
				return now
			}
			r, err := New(Config{RelayID: "r", BatchSize: 5, PollInterval: time.Second, Now: clock},
				store, pub, Options{SerialStore: c.serial})
			if err != nil {
				t.Fatal(err)
			}
			res, err := r.tick(context.Background(), context.Background(), nil, wake)
			if err != nil {
				t.Fatal(err)
			}
			checkDrain(t, res, calls, c.wantClaims, wake, c.wantWake, pub.published)
		})
	}
}

// gatedPublisher's first confirm comes only when gate is closed; every
// other one at once. Its confirmations tell when they are in.
type gatedPublisher struct {
	gate      chan struct{}
	mu        sync.Mutex
	published int
}

type gatedConfirm struct{ done <-chan struct{} }

func (c gatedConfirm) Wait(ctx context.Context) error {
	select {
	case <-c.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (c gatedConfirm) Done() <-chan struct{} { return c.done }

func (p *gatedPublisher) Publish(context.Context, Message) (Confirmation, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.published++
	if p.published == 1 {
		return gatedConfirm{done: p.gate}, nil
	}
	now := make(chan struct{})
	close(now)
	return gatedConfirm{done: now}, nil
}

func (p *gatedPublisher) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.published
}

// TestDrainPublishesATrickleWithoutWaitingForEarlierConfirms: in a
// trickle (short claims, each followed by a wake-up), a batch whose claim
// is back is published while the confirm of the batch before is still
// awaited, when the confirmations tell when they are in; every row is
// still published once and marked.
func TestDrainPublishesATrickleWithoutWaitingForEarlierConfirms(t *testing.T) {
	for _, serial := range []bool{true, false} {
		t.Run(fmt.Sprintf("serial=%v", serial), func(t *testing.T) {
			var mu sync.Mutex
			claims := [][]Row{rowsOf(1), rowsOf(1), rowsOf(1)}
			wake := make(chan struct{}, 1)
			store := &fakeStore{claim: func(context.Context, int) ([]Row, error) {
				mu.Lock()
				defer mu.Unlock()
				if len(claims) == 0 {
					return nil, nil
				}
				rows := claims[0]
				claims = claims[1:]
				select {
				case wake <- struct{}{}: // more rows committed meanwhile
				default:
				}
				return rows, nil
			}}
			pub := &gatedPublisher{gate: make(chan struct{})}
			r, err := New(Config{RelayID: "r", BatchSize: 5, PollInterval: time.Minute}, store, pub, Options{SerialStore: serial})
			if err != nil {
				t.Fatal(err)
			}
			var waited atomic.Bool
			go func() {
				// The first confirm comes only once the later batches went
				// out, or after a deadline a relay that waits for it meets.
				deadline := time.Now().Add(3 * time.Second)
				for pub.count() < 3 && time.Now().Before(deadline) {
					time.Sleep(time.Millisecond)
				}
				waited.Store(pub.count() < 3)
				close(pub.gate)
			}()
			res, err := r.tick(context.Background(), context.Background(), nil, wake)
			if err != nil {
				t.Fatal(err)
			}
			if waited.Load() {
				t.Error("the later batches waited for the first batch's confirm")
			}
			if res.Published != 3 || pub.count() != 3 {
				t.Errorf("published %d, marked %d, want 3 and 3", pub.count(), res.Published)
			}
		})
	}
}

// checkDrain checks a drain's tick: the claims it made, whether a
// wake-up is still pending in wake, and that every claimed row was
// published (published publishes) and marked.
func checkDrain(t *testing.T, res TickResult, claims, wantClaims int, wake chan struct{}, wantWake bool, published int) {
	t.Helper()
	if claims != wantClaims {
		t.Errorf("%d claims, want %d", claims, wantClaims)
	}
	if got := len(wake) == 1; got != wantWake {
		t.Errorf("wake-up pending = %v, want %v", got, wantWake)
	}
	if res.Published != published || res.Claimed != published {
		t.Errorf("claimed %d, published %d, marked %d: every claimed row is published and marked",
			res.Claimed, published, res.Published)
	}
}
