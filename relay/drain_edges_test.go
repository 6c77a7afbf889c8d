package relay

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/outboxlab/outboxlab/history"
)

// callLog is the order of a drain's calls, as "claim N", "publish N" and
// "wait N" (the confirm of publish N awaited), numbered from 1.
type callLog struct {
	mu    sync.Mutex
	calls []string
}

func (l *callLog) add(format string, a ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls = append(l.calls, fmt.Sprintf(format, a...))
}

func (l *callLog) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.calls)
}

// count returns how many calls start with prefix.
func (l *callLog) count(prefix string) int {
	n := 0
	for _, c := range l.all() {
		if strings.HasPrefix(c, prefix) {
			n++
		}
	}
	return n
}

// loggingPublisher sends every message and logs its publishes and the
// waits for their confirms; confirm, when set, gives the outcome of the
// confirm of publish n (nil: acked), onPublish runs after publish n.
type loggingPublisher struct {
	log       *callLog
	confirm   func(n int) error
	onPublish func(n int)
	n         atomic.Int64
}

type loggedConfirm struct {
	p *loggingPublisher
	n int
}

func (c loggedConfirm) Wait(context.Context) error {
	c.p.log.add("wait %d", c.n)
	if c.p.confirm != nil {
		return c.p.confirm(c.n)
	}
	return nil
}

func (p *loggingPublisher) Publish(context.Context, Message) (Confirmation, error) {
	n := int(p.n.Add(1))
	p.log.add("publish %d", n)
	if p.onPublish != nil {
		p.onPublish(n)
	}
	return loggedConfirm{p: p, n: n}, nil
}

// batches returns a claim hook that hands out rows[n-1] for claim n and
// nothing after them, logging each claim.
func batches(log *callLog, rows ...[]Row) func(context.Context, int) ([]Row, error) {
	return func(_ context.Context, n int) ([]Row, error) {
		log.add("claim %d", n)
		if n > len(rows) {
			return nil, nil
		}
		return rows[n-1], nil
	}
}

func newTestRelay(t *testing.T, cfg Config, store Store, pub Publisher, opts Options) *Relay {
	t.Helper()
	if cfg.RelayID == "" {
		cfg.RelayID = "r"
	}
	r, err := New(cfg, store, pub, opts)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestDrainMakesRoomInTheWindowBeforeItClaims: with the window full, the
// drain waits for the oldest confirm before it takes the next batch and
// starts the claim after it, so that the rows it holds leased stay bounded.
func TestDrainMakesRoomInTheWindowBeforeItClaims(t *testing.T) {
	log := &callLog{}
	store := &fakeStore{claim: batches(log, rowsOf(2), rowsOf(2), rowsOf(2))}
	pub := &loggingPublisher{log: log}
	r := newTestRelay(t, Config{BatchSize: 2, PublishWindow: 2}, store, pub, Options{SerialStore: true})
	if _, err := r.Tick(context.Background()); err != nil {
		t.Fatal(err)
	}
	calls := log.all()
	wait, claim := slices.Index(calls, "wait 1"), slices.Index(calls, "claim 3")
	if wait < 0 || claim < 0 || claim < wait {
		t.Fatalf("calls %v: the third claim must come after the first confirm was awaited", calls)
	}
}

// TestDrainKeepsAtMostTheWindowInFlight: however long the batch, no more
// than PublishWindow publishes await their confirms at once.
func TestDrainKeepsAtMostTheWindowInFlight(t *testing.T) {
	log := &callLog{}
	store := &fakeStore{claim: batches(log, rowsOf(7))}
	pub := &loggingPublisher{log: log}
	r := newTestRelay(t, Config{BatchSize: 10, PublishWindow: 3}, store, pub, Options{SerialStore: true})
	res, err := r.Tick(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	open, most := 0, 0
	for _, c := range log.all() {
		switch {
		case strings.HasPrefix(c, "publish"):
			open++
		case strings.HasPrefix(c, "wait"):
			open--
		}
		most = max(most, open)
	}
	if most != 3 || res.Published != 7 {
		t.Fatalf("at most %d publishes in flight and %d marked (calls %v), want 3 and 7", most, res.Published, log.all())
	}
}

// TestTickClaimsNothingOnceStopped: a tick that starts after shutdown
// began claims nothing.
func TestTickClaimsNothingOnceStopped(t *testing.T) {
	log := &callLog{}
	store := &fakeStore{claim: batches(log, rowsOf(3))}
	r := newTestRelay(t, Config{}, store, &loggingPublisher{log: log}, Options{SerialStore: true})
	stop := make(chan struct{})
	close(stop)
	res, err := r.tick(context.Background(), context.Background(), stop, nil)
	if err != nil {
		t.Fatal(err)
	}
	if calls := log.all(); len(calls) != 0 || res.Claimed != 0 {
		t.Fatalf("a tick after shutdown began made the calls %v, want none", calls)
	}
}

// TestDrainEndsOnAnEmptyClaim: an empty claim ends the drain at once; a
// wake-up that came before it stays in the channel for Run.
func TestDrainEndsOnAnEmptyClaim(t *testing.T) {
	log := &callLog{}
	store := &fakeStore{claim: batches(log)}
	r := newTestRelay(t, Config{PollInterval: time.Hour}, store, &loggingPublisher{log: log}, Options{SerialStore: true})
	wake := make(chan struct{}, 1)
	wake <- struct{}{}
	res, err := r.tick(context.Background(), context.Background(), nil, wake)
	if err != nil {
		t.Fatal(err)
	}
	checkDrain(t, res, log.count("claim"), 1, wake, true, 0)
}

// TestDrainPublishesNothingOnceStopped: shutdown that begins during a
// batch's publishes stops them: the rows not yet published stay leased.
func TestDrainPublishesNothingOnceStopped(t *testing.T) {
	log := &callLog{}
	stop := make(chan struct{})
	store := &fakeStore{claim: batches(log, rowsOf(3))}
	pub := &loggingPublisher{log: log, onPublish: func(n int) {
		if n == 1 {
			close(stop)
		}
	}}
	r := newTestRelay(t, Config{BatchSize: 10}, store, pub, Options{SerialStore: true})
	res, err := r.tick(context.Background(), context.Background(), stop, nil)
	if err != nil {
		t.Fatal(err)
	}
	if n := log.count("publish"); n != 1 || res.Published != 1 {
		t.Fatalf("%d publishes and %d marks after shutdown began in the first, want 1 and 1", n, res.Published)
	}
}

// TestDrainHaltsOnABrokerFailure: a confirm that fails for the broker's
// sake halts the drain: nothing more is published, no batch after the
// one already on its way is claimed, the tick fails with the broker's
// error and the relay counts one broker failure; a clean tick counts none.
func TestDrainHaltsOnABrokerFailure(t *testing.T) {
	log := &callLog{}
	store := &fakeStore{claim: batches(log, rowsOf(2), rowsOf(2), rowsOf(2), rowsOf(2))}
	pub := &loggingPublisher{log: log, confirm: func(n int) error {
		if n == 1 {
			return fmt.Errorf("channel closed: %w", ErrBrokerUnavailable)
		}
		return nil
	}}
	r := newTestRelay(t, Config{BatchSize: 2, PublishWindow: 1}, store, pub, Options{SerialStore: true})
	res, err := r.Tick(context.Background())
	if !errors.Is(err, ErrBrokerUnavailable) {
		t.Fatalf("tick after a broker failure: %v, want ErrBrokerUnavailable", err)
	}
	if p, c := log.count("publish"), log.count("claim"); p != 1 || c != 2 || res.Published != 0 {
		t.Errorf("%d publishes, %d claims, %d marked after the first confirm failed (calls %v), want 1, 2 (the next batch was on its way) and 0",
			p, c, res.Published, log.all())
	}
	if n := r.Totals().BrokerFailures.Load(); n != 1 {
		t.Errorf("%d broker failures counted, want 1", n)
	}

	clean := newTestRelay(t, Config{BatchSize: 2}, &fakeStore{claim: batches(&callLog{}, rowsOf(1))},
		&loggingPublisher{log: &callLog{}}, Options{SerialStore: true})
	if _, err := clean.Tick(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := clean.Totals().BrokerFailures.Load(); n != 0 {
		t.Errorf("a clean tick counted %d broker failures", n)
	}
}

// TestDrainMarksEachRowOnceAfterItsBatch: with a window smaller than the
// batch, some confirms are in before the batch is sealed; the batch is
// still marked once, with all its rows, after its last confirm.
func TestDrainMarksEachRowOnceAfterItsBatch(t *testing.T) {
	log := &callLog{}
	rows := rowsOf(3)
	var marks atomic.Int64
	store := &fakeStore{claim: batches(log, rows), mark: func(context.Context) error { marks.Add(1); return nil }}
	r := newTestRelay(t, Config{BatchSize: 10, PublishWindow: 1}, store, &loggingPublisher{log: log}, Options{SerialStore: true})
	res, err := r.Tick(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, row := range rows {
		if m, _ := store.counts(row.ID); m != 1 {
			t.Errorf("row %s marked %d times, want once", row.ID, m)
		}
	}
	if n := marks.Load(); n != 1 || res.Published != 3 || res.LostLeases != 0 {
		t.Errorf("%d marks, %d rows marked, %d lost leases; want 1 mark of 3 rows", n, res.Published, res.LostLeases)
	}
}

// TestDrainMarksNothingItNeedNot: a batch with no confirmed row (every
// row failed) starts no mark, and after a failed claim halted the drain
// nothing more is marked, although the confirms of the batch before it
// come in: the tick fails with the claim's error.
func TestDrainMarksNothingItNeedNot(t *testing.T) {
	t.Run("nothing confirmed", func(t *testing.T) {
		log := &callLog{}
		var marks atomic.Int64
		store := &fakeStore{claim: batches(log, rowsOf(2)), mark: func(context.Context) error { marks.Add(1); return nil }}
		pub := &loggingPublisher{log: log, confirm: func(int) error { return ErrReturned }}
		r := newTestRelay(t, Config{BatchSize: 10}, store, pub, Options{SerialStore: true})
		res, err := r.Tick(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if n := marks.Load(); n != 0 || res.Attempts != 2 {
			t.Errorf("%d marks and %d retries after every confirm failed, want 0 and 2", n, res.Attempts)
		}
	})
	t.Run("the store failed", func(t *testing.T) {
		log := &callLog{}
		var marks atomic.Int64
		claimErr := errors.New("connection reset")
		store := &fakeStore{claim: func(ctx context.Context, n int) ([]Row, error) {
			log.add("claim %d", n)
			if n == 2 {
				return nil, claimErr
			}
			return rowsOf(2), nil
		}, mark: func(context.Context) error { marks.Add(1); return nil }}
		r := newTestRelay(t, Config{BatchSize: 2}, store, &loggingPublisher{log: log}, Options{SerialStore: true})
		_, err := r.Tick(context.Background())
		if !errors.Is(err, claimErr) {
			t.Fatalf("tick after a failed claim: %v, want the claim's error", err)
		}
		if n := marks.Load(); n != 0 {
			t.Errorf("%d marks after the store failed, want none", n)
		}
	})
}

// TestDrainFailsWhenAMarkFails: a failed mark halts the drain (no batch
// is claimed after the one on its way) and fails the tick with the
// mark's error.
func TestDrainFailsWhenAMarkFails(t *testing.T) {
	log := &callLog{}
	markErr := errors.New("connection reset")
	store := &fakeStore{claim: batches(log, rowsOf(1), rowsOf(1), rowsOf(1), rowsOf(1)),
		mark: func(context.Context) error { return markErr }}
	r := newTestRelay(t, Config{BatchSize: 1, PublishWindow: 1}, store, &loggingPublisher{log: log}, Options{SerialStore: true})
	res, err := r.Tick(context.Background())
	if !errors.Is(err, markErr) || !strings.Contains(err.Error(), "marking") {
		t.Fatalf("tick with a failing mark: %v, want the mark's error", err)
	}
	if c := log.count("claim"); c > 2 || res.Published != 0 {
		t.Errorf("%d claims and %d marked after the first mark failed (calls %v), want at most 2 and 0", c, res.Published, log.all())
	}
}

// TestDrainBoundsTheMarksOnTheirWay: with a concurrent store, at most
// maxMarks marks are on their way at once, however many batches wait.
func TestDrainBoundsTheMarksOnTheirWay(t *testing.T) {
	log := &callLog{}
	var (
		mu           sync.Mutex
		active, most int
		more         = make(chan struct{})
		once         sync.Once
	)
	store := &fakeStore{claim: batches(log, rowsOf(1), rowsOf(1), rowsOf(1), rowsOf(1), rowsOf(1)),
		mark: func(context.Context) error {
			mu.Lock()
			active++
			most = max(most, active)
			if active > maxMarks {
				once.Do(func() { close(more) })
			}
			mu.Unlock()
			// Hold the mark, so that the next ones would overlap it; a mark
			// beyond the bound ends the wait at once.
			select {
			case <-more:
			case <-time.After(100 * time.Millisecond):
			}
			mu.Lock()
			active--
			mu.Unlock()
			return nil
		}}
	r := newTestRelay(t, Config{BatchSize: 1}, store, &loggingPublisher{log: log}, Options{})
	res, err := r.Tick(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if most > maxMarks || res.Published != 5 {
		t.Fatalf("%d marks on their way at once and %d rows marked, want at most %d and 5", most, res.Published, maxMarks)
	}
}

// TestDrainReapsEveryMark: the marks still on their way when the drain
// ends are all waited for and counted.
func TestDrainReapsEveryMark(t *testing.T) {
	for i := 0; i < 5; i++ {
		log := &callLog{}
		store := &fakeStore{claim: batches(log, rowsOf(1), rowsOf(1)),
			mark: func(context.Context) error { time.Sleep(30 * time.Millisecond); return nil }}
		r := newTestRelay(t, Config{BatchSize: 1}, store, &loggingPublisher{log: log}, Options{})
		res, err := r.Tick(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if res.Published != 2 {
			t.Fatalf("run %d: %d rows marked, want both batches' 2", i, res.Published)
		}
	}
}

// markHookStore runs onMark with the ids of every mark before the mark.
type markHookStore struct {
	*fakeStore
	onMark func(ids []uuid.UUID)
}

func (s *markHookStore) Mark(ctx context.Context, relayID string, ids []uuid.UUID) ([]uuid.UUID, error) {
	s.onMark(ids)
	return s.fakeStore.Mark(ctx, relayID, ids)
}

// TestDrainClaimsAgainOnAWakeUpDuringAMark: a wake-up that comes while
// the drain waits for its last marks starts the next claim in the same
// drain, also after an earlier mark was reaped meanwhile.
func TestDrainClaimsAgainOnAWakeUpDuringAMark(t *testing.T) {
	for i := 0; i < 5; i++ {
		log := &callLog{}
		wake := make(chan struct{}, 1)
		// A full batch, then a short one: the drain lingers with both
		// marks on their way; the full batch's is done after 20 ms, the
		// short one's puts a wake-up in the channel after 100 ms.
		store := &markHookStore{fakeStore: &fakeStore{claim: batches(log, rowsOf(2), rowsOf(1))},
			onMark: func(ids []uuid.UUID) {
				if len(ids) == 2 {
					time.Sleep(20 * time.Millisecond)
					return
				}
				time.Sleep(100 * time.Millisecond)
				wake <- struct{}{}
			}}
		r := newTestRelay(t, Config{BatchSize: 2, PollInterval: time.Hour}, store, &loggingPublisher{log: log}, Options{})
		res, err := r.tick(context.Background(), context.Background(), nil, wake)
		if err != nil {
			t.Fatal(err)
		}
		if c := log.count("claim"); c != 3 || len(wake) != 0 || res.Published != 3 {
			t.Fatalf("run %d: %d claims, wake-up pending %v, %d marked (calls %v); want 3, false, 3",
				i, c, len(wake) == 1, res.Published, log.all())
		}
	}
}

// TestOldDrainLeavesAWakeUpDuringAMarkToRun: a drain older than the poll
// interval does not act on a wake-up that comes while its mark is on its
// way: the drain ends, and the wake-up stays in the channel for Run.
func TestOldDrainLeavesAWakeUpDuringAMarkToRun(t *testing.T) {
	log := &callLog{}
	wake := make(chan struct{}, 1)
	var mu sync.Mutex
	now := time.Unix(1_700_000_000, 0)
	store := &fakeStore{
		claim: func(ctx context.Context, n int) ([]Row, error) {
			mu.Lock()
			now = now.Add(2 * time.Second) // older than the poll interval at once
			mu.Unlock()
			return batches(log, rowsOf(1))(ctx, n)
		},
		mark: func(context.Context) error {
			wake <- struct{}{}
			time.Sleep(100 * time.Millisecond) // on its way while the drain lingers
			return nil
		}}
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	r := newTestRelay(t, Config{BatchSize: 10, PollInterval: time.Second, Now: clock}, store, &loggingPublisher{log: log}, Options{})
	res, err := r.tick(context.Background(), context.Background(), nil, wake)
	if err != nil {
		t.Fatal(err)
	}
	checkDrain(t, res, log.count("claim"), 1, wake, true, 1)
}

// TestRelayRecordsOnlyClaimsThatLeasedOrFailed: an empty claim records
// nothing; a claim that leased rows records them, and a failed one
// records its unknown outcome.
func TestRelayRecordsOnlyClaimsThatLeasedOrFailed(t *testing.T) {
	rows := rowsOf(2)
	claimErr := errors.New("connection reset")
	store := &fakeStore{claim: func(_ context.Context, n int) ([]Row, error) {
		switch n {
		case 1:
			return rows, nil
		case 2:
			return nil, nil
		default:
			return nil, claimErr
		}
	}}
	rec := &memRecords{}
	r := newTestRelay(t, Config{BatchSize: 2}, store, &loggingPublisher{log: &callLog{}}, Options{Records: rec, SerialStore: true})
	if _, err := r.Tick(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Tick(context.Background()); !errors.Is(err, claimErr) {
		t.Fatalf("tick with a failing claim: %v, want its error", err)
	}
	var claims []string
	for _, op := range rec.all() {
		if op.F == history.Claim {
			claims = append(claims, fmt.Sprintf("%s %d", op.Type, len(op.Events)))
		}
	}
	if want := []string{"invoke 0", "ok 2", "invoke 0", "info 0"}; !slices.Equal(claims, want) {
		t.Fatalf("claim records %v, want %v", claims, want)
	}
}

// failAt is a Failpoints that fails at one name.
type failAt string

func (f failAt) Inject(_ context.Context, name string) error {
	if name == string(f) {
		return errors.New("injected")
	}
	return nil
}

// TestDrainAbortsAtAFailpoint: a failpoint that fails ends the tick with
// its error, whether or not the next claim is on its way, and the tick
// returns only after that claim ended.
func TestDrainAbortsAtAFailpoint(t *testing.T) {
	for _, c := range []struct {
		name      string
		batchSize int
	}{{"short batch, no claim on its way", 10}, {"full batch, the next claim on its way", 3}} {
		t.Run(c.name, func(t *testing.T) {
			var claimsDone atomic.Int64
			store := &fakeStore{claim: func(_ context.Context, n int) ([]Row, error) {
				if n == 2 {
					time.Sleep(50 * time.Millisecond)
				}
				defer claimsDone.Add(1)
				if n == 1 {
					return rowsOf(3), nil
				}
				return nil, nil
			}}
			r := newTestRelay(t, Config{BatchSize: c.batchSize}, store, &loggingPublisher{log: &callLog{}},
				Options{Failpoints: failAt(FailAfterPublishBeforeConfirm)})
			_, err := r.Tick(context.Background())
			if err == nil || !strings.Contains(err.Error(), FailAfterPublishBeforeConfirm) {
				t.Fatalf("tick at a failing failpoint: %v, want its error", err)
			}
			store.mu.Lock()
			started := store.claims
			store.mu.Unlock()
			if done := claimsDone.Load(); done != int64(started) {
				t.Fatalf("the tick returned with %d of its %d claims still on their way", int64(started)-done, started)
			}
		})
	}
}

// TestRunCountsFailedTicks: Run goes on after a failed tick and counts it
// in TickFailures; without metrics it goes on all the same.
func TestRunCountsFailedTicks(t *testing.T) {
	for _, withMetrics := range []bool{true, false} {
		t.Run(fmt.Sprintf("metrics=%v", withMetrics), func(t *testing.T) {
			claims := make(chan struct{}, 10)
			store := &fakeStore{claim: func(context.Context, int) ([]Row, error) {
				claims <- struct{}{}
				return nil, errors.New("connection refused")
			}}
			var m *Metrics
			if withMetrics {
				m = NewMetrics(prometheus.NewRegistry(), "outbox")
			}
			r := newTestRelay(t, Config{PollInterval: time.Hour}, store, &loggingPublisher{log: &callLog{}}, Options{Metrics: m})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			wake := make(chan struct{}, 1)
			wait := runUntil(t, r, ctx, wake)
			for i, what := range []string{"the first tick", "a tick after the failed one"} {
				select {
				case <-claims:
				case <-time.After(5 * time.Second):
					t.Fatalf("%s never claimed", what)
				}
				if i == 0 {
					wake <- struct{}{}
				}
			}
			cancel()
			wait(5 * time.Second)
			if withMetrics {
				if got, ticks := value(t, m.TickFailures), float64(r.Totals().Ticks.Load()); got < 1 || got > ticks {
					t.Errorf("%v failed ticks counted of %v ticks whose claims all failed, want at least the first", got, ticks)
				}
			}
		})
	}
}

// TestRelayRecordsItsSweeps: a sweep that deleted rows is recorded, one
// that deleted none is not, and a failed one is recorded with its unknown
// outcome.
func TestRelayRecordsItsSweeps(t *testing.T) {
	for _, c := range []struct {
		name    string
		deleted int
		err     error
		want    []string
	}{
		{"deleted rows", 3, nil, []string{"invoke", "ok"}},
		{"deleted nothing", 0, nil, nil},
		{"failed", 0, errors.New("connection reset"), []string{"invoke", "info"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			store := &fakeStore{sweep: func(int) (int, error) { return c.deleted, c.err }}
			rec := &memRecords{}
			r := newTestRelay(t, Config{}, store, &loggingPublisher{log: &callLog{}}, Options{Records: rec, SerialStore: true})
			if _, err := r.Tick(context.Background()); !errors.Is(err, c.err) {
				t.Fatalf("tick: %v, want %v", err, c.err)
			}
			var got []string
			for _, op := range rec.all() {
				if op.F == history.Sweep {
					got = append(got, string(op.Type))
				}
			}
			if !slices.Equal(got, c.want) {
				t.Fatalf("sweep records %v, want %v", got, c.want)
			}
		})
	}
}

// TestRelayRecordsTheSweepsCutoff: with a store that tells the database
// time of its sweep, the sweep's record names the rows it deleted, that
// time and the cutoff, retention before it.
func TestRelayRecordsTheSweepsCutoff(t *testing.T) {
	at := time.Date(2026, 1, 8, 0, 0, 0, 0, time.UTC)
	store := &timedStore{swept: []uuid.UUID{uuid.New(), uuid.New()}, at: at}
	rec := &memRecords{}
	r := newTestRelay(t, Config{Retention: 7 * 24 * time.Hour}, store, &loggingPublisher{log: &callLog{}}, Options{Records: rec, SerialStore: true})
	if _, err := r.Tick(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, op := range rec.all() {
		if op.F == history.Sweep && op.Type == history.OK {
			if len(op.Events) != 2 || !op.DBTime.Equal(at) || !op.Cutoff.Equal(at.Add(-7*24*time.Hour)) {
				t.Fatalf("sweep record %+v, want the 2 rows deleted at %s with the cutoff a week before", op, at)
			}
			return
		}
	}
	t.Fatalf("no sweep ok among the records %v", rec.all())
}
