package relay

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
)

// fakeStore is a Store whose claims come from claim (n counts the claims
// from 1), safe for the concurrent calls of a relay without SerialStore.
// It counts the marks and retries of every row; mark, when set, runs
// before each mark.
type fakeStore struct {
	claim func(ctx context.Context, n int) ([]Row, error)
	mark  func(ctx context.Context) error
	// sweep, when set, answers the sweeps (n counts them from 1).
	sweep func(n int) (int, error)

	mu      sync.Mutex
	claims  int
	sweeps  int
	marked  map[uuid.UUID]int
	retried map[uuid.UUID]int
}

func (s *fakeStore) Claim(ctx context.Context, _ string, _ int, _ time.Duration) ([]Row, error) {
	s.mu.Lock()
	s.claims++
	n := s.claims
	s.mu.Unlock()
	if s.claim == nil {
		return nil, nil
	}
	return s.claim(ctx, n)
}

func (s *fakeStore) Mark(ctx context.Context, _ string, ids []uuid.UUID) ([]uuid.UUID, error) {
	if s.mark != nil {
		if err := s.mark(ctx); err != nil {
			return nil, err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.marked == nil {
		s.marked = map[uuid.UUID]int{}
	}
	for _, id := range ids {
		s.marked[id]++
	}
	return ids, nil
}

func (s *fakeStore) Retry(_ context.Context, _ string, id uuid.UUID, _ RetryPolicy, _ string) (RetryResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.retried == nil {
		s.retried = map[uuid.UUID]int{}
	}
	s.retried[id]++
	return RetryResult{Applied: true, Attempts: s.retried[id]}, nil
}

func (s *fakeStore) Park(context.Context, string, uuid.UUID, string) (bool, error) { return true, nil }
func (s *fakeStore) Sweep(context.Context, time.Duration, int) (int, error) {
	s.mu.Lock()
	s.sweeps++
	n := s.sweeps
	s.mu.Unlock()
	if s.sweep == nil {
		return 0, nil
	}
	return s.sweep(n)
}
func (s *fakeStore) Stats(context.Context) (Stats, error) { return Stats{}, nil }

func (s *fakeStore) counts(id uuid.UUID) (marked, retried int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.marked[id], s.retried[id]
}

// hookPublisher confirms at once, after running onPublish (n counts the
// publishes from 1). It counts the publishes of every row.
type hookPublisher struct {
	onPublish func(n int)

	mu    sync.Mutex
	n     int
	byRow map[string]int
}

func (p *hookPublisher) Publish(_ context.Context, m Message) (Confirmation, error) {
	p.mu.Lock()
	p.n++
	n := p.n
	if p.byRow == nil {
		p.byRow = map[string]int{}
	}
	p.byRow[m.ID]++
	p.mu.Unlock()
	if p.onPublish != nil {
		p.onPublish(n)
	}
	return acked{}, nil
}

func (p *hookPublisher) published(id uuid.UUID) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.byRow[id.String()]
}

// runUntil runs r.Run(ctx, wake) on a goroutine and returns a function
// that waits for it to return, failing the test after within.
func runUntil(t *testing.T, r *Relay, ctx context.Context, wake <-chan struct{}) func(within time.Duration) time.Time {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx, wake) }()
	return func(within time.Duration) time.Time {
		t.Helper()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
			return time.Now()
		case <-time.After(within):
			t.Fatalf("Run did not return within %s", within)
			return time.Time{}
		}
	}
}

// TestRunStartsNoTickAfterShutdown shuts the relay down from inside a
// publish, as SIGTERM may land at any moment of a drain, while its poll
// timer is due at once and its wake channel holds a wake-up and is
// closed, as relay.Listen closes it when the shared context ends: no tick
// may start after that, and, with a serial store (whose calls are
// ordered with the shutdown), no claim either, although every other
// claim returns a full batch.
func TestRunStartsNoTickAfterShutdown(t *testing.T) {
	for _, serial := range []bool{true, false} {
		t.Run(fmt.Sprintf("serial=%v", serial), func(t *testing.T) {
			for i := range 100 {
				var (
					shut    atomic.Bool
					late    atomic.Int64
					ticksAt atomic.Int64
				)
				ctx, cancel := context.WithCancel(context.Background())
				wake := make(chan struct{}, 1)
				var r *Relay
				store := &fakeStore{claim: func(_ context.Context, n int) ([]Row, error) {
					if shut.Load() {
						late.Add(1)
					}
					if n%2 == 1 {
						return rowsOf(3), nil
					}
					return nil, nil
				}}
				pub := &hookPublisher{onPublish: func(n int) {
					if n != 1+i%11 {
						return
					}
					ticksAt.Store(r.Totals().Ticks.Load())
					shut.Store(true)
					cancel()
					select {
					case wake <- struct{}{}:
					default:
					}
					close(wake)
				}}
				var err error
				r, err = New(Config{RelayID: "r", BatchSize: 3, PollInterval: time.Nanosecond}, store, pub, Options{SerialStore: serial})
				if err != nil {
					t.Fatal(err)
				}
				runUntil(t, r, ctx, wake)(5 * time.Second)
				if got, want := r.Totals().Ticks.Load(), ticksAt.Load(); got != want {
					t.Fatalf("run %d: %d ticks after shutdown began (%d before)", i, got-want, want)
				}
				if n := late.Load(); serial && n > 0 {
					t.Fatalf("run %d: %d claims after shutdown began", i, n)
				}
			}
		})
	}
}

// hangingConfirm is a confirm that comes release after shutdown began, or
// never when release is zero.
type hangingConfirm struct {
	shutdown <-chan struct{}
	release  time.Duration
}

func (c hangingConfirm) Wait(ctx context.Context) error {
	if c.release > 0 {
		select {
		case <-c.shutdown:
			select {
			case <-time.After(c.release):
				return nil
			case <-ctx.Done():
				return fmt.Errorf("waiting for confirm: %w", errors.Join(ctx.Err(), ErrBrokerUnavailable))
			}
		case <-ctx.Done():
		}
	} else {
		<-ctx.Done()
	}
	return fmt.Errorf("waiting for confirm: %w", errors.Join(ctx.Err(), ErrBrokerUnavailable))
}

// slowPublisher sends at once and hands out hangingConfirms; published
// closes after the first publish.
type slowPublisher struct {
	shutdown  <-chan struct{}
	release   time.Duration
	published chan struct{}
	once      sync.Once
}

func (p *slowPublisher) Publish(context.Context, Message) (Confirmation, error) {
	p.once.Do(func() { close(p.published) })
	return hangingConfirm{shutdown: p.shutdown, release: p.release}, nil
}

// TestRunExitsWithinThePublishTimeout shuts a relay down while what it
// has in flight hangs: it must return within the publish timeout (plus a
// margin for a loaded machine), not after the store timeout, and mark
// what the broker confirmed meanwhile.
func TestRunExitsWithinThePublishTimeout(t *testing.T) {
	const (
		publishTimeout = 400 * time.Millisecond
		margin         = time.Second
	)
	hang := func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }
	for _, tc := range []struct {
		name string
		// claimHangs: the database hangs from the start, the claim never
		// returns; else one batch is claimed and published.
		claimHangs bool
		// release is when the confirms come after shutdown (0: never).
		release time.Duration
		// markHangs: the database hangs after the claim.
		markHangs bool
		// wantMarked: the rows are marked before Run returns.
		wantMarked bool
	}{
		{name: "claim hangs", claimHangs: true},
		{name: "confirms never come"},
		{name: "confirms come after shutdown", release: 50 * time.Millisecond, wantMarked: true},
		{name: "confirms come, the mark hangs", release: 50 * time.Millisecond, markHangs: true},
	} {
		for _, serial := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/serial=%v", tc.name, serial), func(t *testing.T) {
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				rows := rowsOf(3)
				claimed := make(chan struct{})
				store := &fakeStore{claim: func(cctx context.Context, n int) ([]Row, error) {
					if n == 1 {
						close(claimed)
					}
					if tc.claimHangs {
						return nil, hang(cctx)
					}
					if n == 1 {
						return rows, nil
					}
					return nil, nil
				}}
				if tc.markHangs {
					store.mark = hang
				}
				pub := &slowPublisher{shutdown: ctx.Done(), release: tc.release, published: make(chan struct{})}
				r, err := New(Config{RelayID: "r", BatchSize: 10, PublishTimeout: publishTimeout, StoreTimeout: time.Minute,
					Lease: 10 * time.Second, PollInterval: time.Hour}, store, pub, Options{SerialStore: serial})
				if err != nil {
					t.Fatal(err)
				}
				wait := runUntil(t, r, ctx, nil)
				ready := pub.published
				if tc.claimHangs {
					ready = claimed
				}
				select {
				case <-ready:
				case <-time.After(5 * time.Second):
					t.Fatal("the relay never got to its first call")
				}
				time.Sleep(20 * time.Millisecond) // let the call start to hang
				began := time.Now()
				cancel()
				took := wait(publishTimeout + margin + time.Second).Sub(began)
				if took > publishTimeout+margin {
					t.Errorf("Run returned %s after shutdown began; the publish timeout is %s", took, publishTimeout)
				}
				for _, row := range rows {
					marked, _ := store.counts(row.ID)
					if tc.wantMarked && marked != 1 {
						t.Errorf("row %s confirmed after shutdown began was marked %d times, want once", row.ID, marked)
					}
				}
				t.Logf("returned %s after shutdown began", took.Round(time.Millisecond))
			})
		}
	}
}

// TestDrainPublishesARowOnItsWayOnce: the claim after a full batch returns
// a row of that batch again, as it does when the lease ran out while the
// relay stood still and the row's publish still awaits its confirm. The
// relay must not publish it a second time: the publish on its way marks
// it.
func TestDrainPublishesARowOnItsWayOnce(t *testing.T) {
	for _, serial := range []bool{true, false} {
		t.Run(fmt.Sprintf("serial=%v", serial), func(t *testing.T) {
			first := rowsOf(2)
			again := []Row{first[0], rowsOf(1)[0]}
			store := &fakeStore{claim: func(_ context.Context, n int) ([]Row, error) {
				switch n {
				case 1:
					return first, nil
				case 2:
					return again, nil
				}
				return nil, nil
			}}
			pub := &hookPublisher{}
			r, err := New(Config{RelayID: "r", BatchSize: 2, PublishWindow: 10}, store, pub, Options{SerialStore: serial})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := r.Tick(context.Background()); err != nil {
				t.Fatal(err)
			}
			for _, row := range []Row{first[0], first[1], again[1]} {
				marked, _ := store.counts(row.ID)
				if n := pub.published(row.ID); n != 1 || marked != 1 {
					t.Errorf("row %s published %d times, marked %d times; want once each", row.ID, n, marked)
				}
			}
		})
	}
}

// poisonDecoder fails to decode the rows of type "poison", a row-level
// failure that costs an attempt.
type poisonDecoder struct{}

func (poisonDecoder) Decode(typ string, _ []byte) (any, error) {
	if typ == "poison" {
		return nil, errors.New("undecodable payload")
	}
	return nil, nil
}

// TestDrainFilesARowClaimedAheadOnce: the claim a relay runs ahead of
// publishing a full batch returns a row of that batch again, as it does
// when the claim was delayed past the lease (a pause). The row fails:
// the relay must record one attempt, not two.
func TestDrainFilesARowClaimedAheadOnce(t *testing.T) {
	for _, serial := range []bool{true, false} {
		t.Run(fmt.Sprintf("serial=%v", serial), func(t *testing.T) {
			first := rowsOf(2)
			first[0].Type = "poison"
			ahead := []Row{first[0], rowsOf(1)[0]}
			// The claim ahead returns only once the batch's rows are
			// filed, as one delayed by a pause does.
			filed := make(chan struct{})
			store := &fakeStore{claim: func(_ context.Context, n int) ([]Row, error) {
				switch n {
				case 1:
					return first, nil
				case 2:
					if !serial {
						select {
						case <-filed:
						case <-time.After(5 * time.Second):
						}
					}
					return ahead, nil
				}
				return nil, nil
			}}
			pub := &hookPublisher{onPublish: func(n int) {
				if n == 1 {
					close(filed)
				}
			}}
			r, err := New(Config{RelayID: "r", BatchSize: 2, PublishWindow: 10}, store, pub, Options{SerialStore: serial, Decoder: poisonDecoder{}})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := r.Tick(context.Background()); err != nil {
				t.Fatal(err)
			}
			if _, retried := store.counts(first[0].ID); retried != 1 {
				t.Errorf("the poison row claimed twice was retried %d times, want once", retried)
			}
			if n := pub.published(ahead[1].ID); n != 1 {
				t.Errorf("the fresh row of the claim ahead was published %d times, want once", n)
			}
		})
	}
}

// TestRunStopsSweepingAtShutdown shuts a relay down in the middle of a
// sweep that would go on for long (every statement deletes a full batch,
// and the store, like the simulation's, ignores the cancelled context):
// the sweep stops at the next statement and Run returns.
func TestRunStopsSweepingAtShutdown(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const batch, shutAt = 10, 3
	store := &fakeStore{sweep: func(n int) (int, error) {
		if n == shutAt {
			cancel()
		}
		return batch, nil
	}}
	m := NewMetrics(prometheus.NewRegistry(), "outbox")
	r, err := New(Config{RelayID: "r", SweepBatch: batch, PollInterval: time.Hour}, store, &hookPublisher{},
		Options{SerialStore: true, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	runUntil(t, r, ctx, nil)(5 * time.Second)
	store.mu.Lock()
	sweeps := store.sweeps
	store.mu.Unlock()
	if sweeps != shutAt {
		t.Errorf("%d sweep statements, want %d: the sweep went on after shutdown began", sweeps, shutAt)
	}
	if n := value(t, m.TickFailures); n != 0 {
		t.Errorf("%v failed ticks: a sweep cut short by shutdown is not a failure", n)
	}
}
