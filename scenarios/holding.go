package scenarios

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxlab/outboxlab/chaos"
	"github.com/outboxlab/outboxlab/contract"
	"github.com/outboxlab/outboxlab/history"
	"github.com/outboxlab/outboxlab/internal/observe"
)

// holdsRows is what the faults that act on the rows a replica holds need
// of a relay, one of: leases on the rows (the rows show which replica
// holds them, until when), or row locks held while publishing (the
// database's lock table shows which session holds them).
var holdsRows = []contract.Promises{{Locking: contract.Lease(0)}, {Locking: contract.RowLocks}}

// heldNow returns the events whose rows the replica holds now and has
// neither marked nor parked, by the relay's declared locking style: rows
// whose lease names it and has not run out on the database clock, or
// rows its session holds locked in an open transaction. A row of no event
// the harness staged is left out.
func (s *Replica) heldNow(ctx context.Context) ([]string, error) {
	r := s.r
	switch r.relay.Promises.Locking.Style {
	case contract.LockingLease:
		rows, err := r.fx.Admin.Query(ctx, `SELECT id::text FROM `+s.bc.rows+`
			WHERE locked_by = $1 AND locked_until > now() AND processed_at IS NULL AND faulted_at IS NULL ORDER BY id::text`, s.name)
		if err != nil {
			return nil, err
		}
		return pgx.CollectRows(rows, pgx.RowTo[string])
	case contract.LockingRowLock:
		if s.role == nil {
			return nil, errors.New("the replica has no role of its own, so its row locks cannot be told from another's")
		}
		locks, err := observe.LocksView(ctx, r.fx.Admin, s.bc.table, r.relay.Outbox.Rows)
		if err != nil {
			return nil, err
		}
		var events []string
		for _, l := range locks {
			if l.Session == s.role.Name && l.ID != "" {
				events = append(events, s.bc.ids.Event(l.ID))
			}
		}
		if len(events) == 0 {
			return nil, nil
		}
		return s.unsettled(ctx, events)
	}
	return nil, fmt.Errorf("%s declares %s, which holds no row", r.relay.Name, r.relay.Promises.Locking.Describe())
}

// unsettled returns the events of events whose rows are committed
// neither marked nor parked.
func (s *Replica) unsettled(ctx context.Context, events []string) ([]string, error) {
	rows, err := s.r.fx.Admin.Query(ctx, `SELECT id::text FROM `+s.bc.rows+`
		WHERE id::text = ANY($1) AND processed_at IS NULL AND faulted_at IS NULL ORDER BY id::text`, events)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// observedKill kills a relay replica between its publish of a row and its
// mark of it, with no help from the relay: the harness watches the
// broker's firehose, and when the broker accepts from the replica a
// publish of a row that the database shows unmarked and held by that
// replica (heldNow; for a relay that declares locking=none, unmarked and
// not deleted), it sends the replica SIGKILL (docker kill for an
// image) at once. The kill bit when, read once the replica is dead, the
// published rows are still unmarked: the crash fell between publish and
// mark. A kill that came after the mark does not count: the replica is
// started again and the fault waits for the next publish, until within
// runs out (then NoBite: the run is inconclusive). The heal starts the
// killed replica again.
type observedKill struct {
	faultState
	rec  *history.Recorder
	slot *Replica
	// within bounds the wait for a kill that bites, once injected.
	within time.Duration

	mu sync.Mutex
	// published are the events the killed replica had published and not
	// marked when it died.
	published []string
	tries     int
}

func (f *observedKill) Name() string {
	return f.slot.name + " killed at an observed publish before its mark"
}
func (f *observedKill) Class() history.FaultClass { return history.ClassProcess }
func (f *observedKill) Targets() []string         { return []string{f.slot.name} }
func (f *observedKill) Kind() string              { return chaos.KindKill }

// Inject waits for a publish of a held, unmarked row by the replica and
// kills the replica, until a kill bites.
func (f *observedKill) Inject(ctx context.Context) error {
	f.active.Store(true)
	tap := f.slot.r.tap
	if tap == nil {
		return &chaos.NoBite{Fault: f.Name(), Why: "the broker is not observed: " + f.slot.r.brokerUnobserved}
	}
	wctx, cancel := context.WithTimeout(ctx, f.within)
	defer cancel()
	from := len(tap.Published())
	for {
		ps, err := tap.Next(wctx, from)
		if err != nil {
			if ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
				f.mu.Lock()
				tries := f.tries
				f.mu.Unlock()
				return &chaos.NoBite{Fault: f.Name(), Why: fmt.Sprintf("no kill of %s within %s fell between a publish the broker accepted and its mark (%d kills came after the mark)", f.slot.name, f.within, tries)}
			}
			return fmt.Errorf("waiting for a publish of %s: %w", f.slot.name, err)
		}
		from += len(ps)
		var events []string
		for _, p := range ps {
			if bc, replica, _, event, ok := f.slot.r.publishedEvent(p); ok && replica == f.slot.name && bc == f.slot.bc && len(p.Routed) > 0 {
				events = append(events, event)
			}
		}
		if len(events) == 0 {
			continue
		}
		var held []string
		if f.slot.r.relay.Promises.Locking.Style == contract.LockingNone {
			// A relay that locks nothing holds a row from its publish to
			// its mark only in that it has not marked it yet.
			held, err = f.slot.unsettled(wctx, events)
		} else {
			held, err = f.slot.heldNow(wctx)
		}
		if err != nil {
			continue // read again at the next publish
		}
		held = slices.DeleteFunc(held, func(e string) bool { return !slices.Contains(events, e) })
		if len(held) == 0 {
			continue
		}
		bit, err := f.kill(ctx, held)
		if err != nil {
			return err
		}
		if bit {
			f.hits.Add(1)
			return nil
		}
		// The mark won the race: start the replica again and wait for its
		// next publish.
		if err := f.slot.recreate(ctx, nil); err != nil {
			return err
		}
		f.rec.Record(history.Op{Process: f.slot.name, Type: history.Info, F: history.Restart})
		from = len(tap.Published())
	}
}

// kill records the crash, kills the replica and reports whether any of
// the held rows it had published is still unmarked once it is dead.
func (f *observedKill) kill(ctx context.Context, held []string) (bool, error) {
	// The crash is recorded before the kill, so that it precedes in the
	// history every publish of another replica that it lets happen.
	detail := fmt.Sprintf("killed by the harness after the broker accepted its publish of %d rows it held unmarked", len(held))
	f.rec.Record(history.Op{Process: f.slot.name, Type: history.Info, F: history.Crash, Meta: history.Meta{Detail: detail}})
	if err := f.slot.Kill(ctx); err != nil {
		return false, fmt.Errorf("killing %s: %w", f.slot.name, err)
	}
	if h := f.slot.handle(); h != nil {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := h.WaitExit(wctx)
		cancel()
		if err != nil {
			return false, fmt.Errorf("waiting for %s to die: %w", f.slot.name, err)
		}
	}
	// Statements the replica sent before it died may still be on their
	// way to the database (a mark among them): the rows are read until two
	// reads 150 ms apart agree (at most 2 s).
	left, err := f.slot.unsettled(ctx, held)
	for deadline := time.Now().Add(2 * time.Second); err == nil && time.Now().Before(deadline); {
		if !chaos.Sleep(ctx, 150*time.Millisecond) {
			return false, ctx.Err()
		}
		var again []string
		if again, err = f.slot.unsettled(ctx, held); err == nil {
			if slices.Equal(again, left) {
				break
			}
			left = again
		}
	}
	if err != nil {
		return false, fmt.Errorf("reading the rows %s published: %w", f.slot.name, err)
	}
	f.mu.Lock()
	f.tries++
	if len(left) > 0 {
		f.published = left
	}
	f.mu.Unlock()
	return len(left) > 0, nil
}

// Heal starts the killed replica again.
func (f *observedKill) Heal(ctx context.Context) error {
	if !f.active.Load() {
		return nil
	}
	if f.hits.Load() > 0 {
		if err := f.slot.recreate(ctx, nil); err != nil {
			return err
		}
		f.rec.Record(history.Op{Process: f.slot.name, Type: history.Info, F: history.Restart})
	}
	f.active.Store(false)
	return nil
}

// killedRows describes, for a check, the rows the replica had published
// and not marked when it was killed.
func (f *observedKill) killedRows() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return strings.Join(f.published, ", ")
}

// lockWatch is a toxic that slows the relays (their confirms, say, so
// that each batch holds its row locks longer) and, while it is in effect,
// samples the database's lock table every lockSampleEvery: which replicas
// hold row locks at the same moment. It is how clock-skew shows that the
// replicas of a relay that holds row locks contended for the rows while
// their clocks were apart.
type lockWatch struct {
	*chaos.Toxic
	slots []*Replica

	mu      sync.Mutex
	samples []lockSample
	stop    chan struct{}
	done    chan struct{}
}

// lockSample is one read of the lock table: how many rows each replica
// held, at a time of the harness's clock.
type lockSample struct {
	at   time.Time
	held map[string]int
}

// lockSampleEvery is how often a lockWatch reads the lock table.
const lockSampleEvery = 25 * time.Millisecond

// Inject puts the toxic in place and starts sampling.
func (w *lockWatch) Inject(ctx context.Context) error {
	if err := w.Toxic.Inject(ctx); err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stop == nil {
		w.stop, w.done = make(chan struct{}), make(chan struct{})
		go w.sample(w.stop, w.done)
	}
	return nil
}

// Heal stops sampling and takes the toxic away.
func (w *lockWatch) Heal(ctx context.Context) error {
	w.mu.Lock()
	stop, done := w.stop, w.done
	w.stop, w.done = nil, nil
	w.mu.Unlock()
	if stop != nil {
		close(stop)
		<-done
	}
	return w.Toxic.Heal(ctx)
}

func (w *lockWatch) sample(stop, done chan struct{}) {
	defer close(done)
	names := map[string]string{}
	for _, s := range w.slots {
		if s.role != nil {
			names[s.role.Name] = s.name
		}
	}
	if len(w.slots) == 0 || len(names) == 0 {
		return
	}
	r, bc := w.slots[0].r, w.slots[0].bc
	t := time.NewTicker(lockSampleEvery)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		locks, err := observe.LocksView(ctx, r.fx.Admin, bc.table, r.relay.Outbox.Rows)
		cancel()
		if err != nil {
			continue
		}
		held := map[string]int{}
		for session, ids := range observe.Held(locks) {
			if p := names[session]; p != "" {
				held[p] += len(ids)
			}
		}
		if len(held) > 0 {
			w.mu.Lock()
			w.samples = append(w.samples, lockSample{at: time.Now(), held: held})
			w.mu.Unlock()
		}
	}
}

// contention counts, between from and to (to zero: no end), the samples
// in which process held row locks, and those in which another replica
// held row locks at the same moment.
func (w *lockWatch) contention(process string, from, to time.Time) (holding, contended int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, s := range w.samples {
		if s.at.Before(from) || (!to.IsZero() && s.at.After(to)) || s.held[process] == 0 {
			continue
		}
		holding++
		if len(s.held) > 1 {
			contended++
		}
	}
	return holding, contended
}

// inFlight injects a fault (a cut of the relays' link to the broker) the
// moment the broker's firehose shows a replica's publish of a row, so that
// the fault lands on publishes whose confirms are on their way: once it is
// in place, a row the replicas published in the moment before and still
// have not marked inFlightSettle later had its confirm cut off. Those rows
// are what the fault exercised (landed). Without a tap, or when no
// publish comes within wait, it injects at once.
type inFlight struct {
	chaos.Fault
	slots []*Replica
	wait  time.Duration

	mu     sync.Mutex
	landed []string
}

// inFlightSettle is how long inFlight lets a replica mark what it had
// confirmed before the cut, before it reads which rows stayed unmarked.
const inFlightSettle = 300 * time.Millisecond

// Inject waits for a publish, injects the fault, and notes the rows whose
// confirms it cut off.
func (f *inFlight) Inject(ctx context.Context) error {
	if len(f.slots) == 0 || f.slots[0].r == nil || f.slots[0].r.tap == nil {
		return f.Fault.Inject(ctx)
	}
	r, bc := f.slots[0].r, f.slots[0].bc
	tap := r.tap
	wctx, cancel := context.WithTimeout(ctx, f.wait)
	defer cancel()
	var events []string
	for from := len(tap.Published()); len(events) == 0; {
		ps, err := tap.Next(wctx, from)
		if err != nil {
			break // no publish in time: the fault lands on none
		}
		from += len(ps)
		for _, p := range ps {
			if c, _, _, event, ok := r.publishedEvent(p); ok && c == bc && len(p.Routed) > 0 {
				events = append(events, event)
			}
		}
	}
	if err := f.Fault.Inject(ctx); err != nil {
		return err
	}
	if len(events) == 0 || !chaos.Sleep(ctx, inFlightSettle) {
		return nil
	}
	if left, err := f.slots[0].unsettled(ctx, events); err == nil && len(left) > 0 {
		f.mu.Lock()
		f.landed = append(f.landed, left...)
		f.mu.Unlock()
	}
	return nil
}

// landedOn returns the rows whose confirms the fault cut off.
func (f *inFlight) landedOn() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.landed)
}
