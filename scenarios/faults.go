package scenarios

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxlab/outboxlab/chaos"
	"github.com/outboxlab/outboxlab/contract"
	"github.com/outboxlab/outboxlab/history"
	"github.com/outboxlab/outboxlab/testenv"
)

// faultState counts a fault's hits and whether it may be in effect.
type faultState struct {
	hits   atomic.Int64
	active atomic.Bool
}

// Hits counts how many times the fault fired.
func (f *faultState) Hits() int64 { return f.hits.Load() }

// serviceKill kills PostgreSQL or RabbitMQ and, when healed, starts it
// again and waits until it accepts connections: the next scenario of the
// environment must find it ready.
type serviceKill struct {
	*chaos.ContainerFault
	c *testenv.Container
}

func newServiceKill(c *testenv.Container, class history.FaultClass) *serviceKill {
	return &serviceKill{ContainerFault: chaos.KillContainer(c, class), c: c}
}

// Heal starts the container and waits until its service is ready.
func (f *serviceKill) Heal(ctx context.Context) error {
	if err := f.ContainerFault.Heal(ctx); err != nil {
		return err
	}
	if err := f.c.WaitReady(ctx); err != nil {
		return fmt.Errorf("%s after restart: %w", f.c.Name(), err)
	}
	return nil
}

// failpointKill is a relay replica armed, from its start, with a
// failpoint that lets a few passes through a named point of its tick and
// kills it at the next one (see killSpec). Injecting it waits until the
// replica died there and counts a hit; the death is recorded in the
// history as a Crash of the relay's process. The heal starts the replica
// again without the failpoint.
type failpointKill struct {
	faultState
	rec   *history.Recorder
	slot  *Replica
	point string
	// within bounds the wait for the kill once injected.
	within time.Duration
}

// killSpec is the failpoint spec that lets passes through point go by and
// kills at the next pass.
func killSpec(point string, passes int) string {
	return fmt.Sprintf("%s=%d*off->kill", point, passes)
}

func (f *failpointKill) Name() string              { return f.slot.name + " killed at " + f.point }
func (f *failpointKill) Class() history.FaultClass { return history.ClassProcess }
func (f *failpointKill) Targets() []string         { return []string{f.slot.name} }
func (f *failpointKill) Kind() string              { return chaos.KindFailpoint }

// Inject waits until the armed replica died at the failpoint.
func (f *failpointKill) Inject(ctx context.Context) error {
	f.active.Store(true)
	wctx, cancel := context.WithTimeout(ctx, f.within)
	defer cancel()
	h := f.slot.handle()
	if h == nil {
		return fmt.Errorf("%s is not running", f.slot.name)
	}
	code, err := h.WaitExit(wctx)
	if err != nil {
		logs, _ := h.Logs(ctx, 8)
		return fmt.Errorf("%s did not die at %s within %s: %w; its last lines:\n%s", f.slot.name, f.point, f.within, err, logs)
	}
	if code != 137 {
		return fmt.Errorf("%s exited with status %d, not killed at %s", f.slot.name, code, f.point)
	}
	if path := f.slot.currentRecords(); path != "" {
		// The relay's own records say where it died: the last failpoint
		// it recorded (durable before the failpoint acted) is this one,
		// and no stop record ends the lifetime. Only the statements it had
		// on their way at that moment may have recorded after it.
		l, ok, err := lastLifetime(path)
		switch {
		case err != nil:
			return fmt.Errorf("%s killed: reading its records: %w", f.slot.name, err)
		case !ok:
			return fmt.Errorf("%s killed with status 137 before it recorded anything: not at %s", f.slot.name, f.point)
		case l.Stopped():
			return fmt.Errorf("%s recorded a clean stop, not a kill at %s", f.slot.name, f.point)
		}
		if at := lastFailpoint(l); at != f.point {
			return fmt.Errorf("%s killed, but the last failpoint it recorded is %q, not %s", f.slot.name, at, f.point)
		}
	}
	f.hits.Add(1)
	f.rec.Record(history.Op{Process: f.slot.name, Type: history.Info, F: history.Crash, Meta: history.Meta{Detail: "failpoint " + f.point}})
	return nil
}

// Heal starts the replica again without failpoints.
func (f *failpointKill) Heal(ctx context.Context) error {
	if !f.active.Load() {
		return nil
	}
	if err := f.slot.recreate(ctx, map[string]string{contract.EnvFailpoints: ""}); err != nil {
		return err
	}
	f.rec.Record(history.Op{Process: f.slot.name, Type: history.Info, F: history.Restart})
	f.active.Store(false)
	return nil
}

// pauseHolding freezes a relay replica while it holds claimed rows and
// keeps it frozen past their lease. Its hits count pauses that caught the
// replica holding claims. The heal waits until another replica has taken
// and marked the held rows, notes their processed_at, and thaws the
// replica: its late mark must change none of them (fencing).
type pauseHolding struct {
	faultState
	db   *pgxpool.Pool
	rec  *history.Recorder
	slot *Replica
	// within bounds the wait for a claim to catch, and again for the
	// takeover at heal.
	within time.Duration
	// asleep, when set, is the failpoint the replica lingers in after
	// each claim: where the replica records, a freeze counts only once
	// its records end in that failpoint, so that it thaws with a batch
	// yet to publish and mark rather than in the middle of a publish
	// whose deadline ran out while it was frozen.
	asleep string

	// onPublish, where the broker is observed, freezes the replica only
	// once the broker has taken its publish of a row it holds, and before
	// its mark: for a relay without failpoints to linger in.
	onPublish bool

	// paused is whether the replica is frozen by this fault now: the
	// heal thaws only a replica it froze (a pause that could not bite was
	// thawed at once).
	paused atomic.Bool

	mu        sync.Mutex
	held      []string
	snapshot  map[string]time.Time
	takenOver bool
	// left is how much of its lease the frozen replica had left on the
	// held rows, by the database clock, when it was frozen.
	left time.Duration
	// frozen is when the replica was frozen holding rows, and tookOver
	// how long after that another replica had marked them all.
	frozen   time.Time
	tookOver time.Duration
	// thawed is when the heal thawed it.
	thawed time.Time
}

func (f *pauseHolding) Name() string              { return f.slot.name + " pause holding claims" }
func (f *pauseHolding) Class() history.FaultClass { return history.ClassProcess }
func (f *pauseHolding) Targets() []string         { return []string{f.slot.name} }
func (f *pauseHolding) Kind() string              { return chaos.KindPause }

// heldIn selects the rows of ids, which are events' ids, by the text of
// the rows' id.
const heldIn = `id::text = ANY($1::text[])`

// settledHeldRows reads the held rows until two reads 150 ms apart agree
// (at most 2 s), so that statements the replica sent before it froze have
// landed.
func (f *pauseHolding) settledHeldRows(ctx context.Context) ([]string, error) {
	prev, err := f.slot.heldNow(ctx)
	if err != nil {
		return nil, err
	}
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); {
		if !chaos.Sleep(ctx, 150*time.Millisecond) {
			return nil, ctx.Err()
		}
		cur, err := f.slot.heldNow(ctx)
		if err != nil {
			return nil, err
		}
		if slices.Equal(cur, prev) {
			return cur, nil
		}
		prev = cur
	}
	return prev, nil
}

// leaseLeft returns how long, by the database clock, the longest lease
// the replica took on ids has yet to run: the lease it actually took,
// whatever the harness configured.
func (f *pauseHolding) leaseLeft(ctx context.Context, ids []string) (time.Duration, error) {
	var left time.Duration
	err := f.db.QueryRow(ctx, `SELECT (COALESCE(EXTRACT(EPOCH FROM max(locked_until) - now()), 0) * 1e9)::bigint FROM `+
		f.slot.bc.rows+` WHERE `+heldIn, ids).Scan(&left)
	return left, err
}

// Inject waits until the replica holds claims, pauses it, and checks that
// it still held them once frozen; otherwise it thaws it and tries again.
func (f *pauseHolding) Inject(ctx context.Context) error {
	f.active.Store(true)
	wctx, cancel := context.WithTimeout(ctx, f.within)
	defer cancel()
	tap, seen := f.slot.tap(), 0
	if f.onPublish && tap != nil {
		seen = len(tap.Published())
	}
	err := chaos.WaitFor(wctx, 20*time.Millisecond, func(ctx context.Context) (bool, error) {
		var published []string
		if f.onPublish && tap != nil {
			// Only once the broker has taken a publish of a row the
			// replica holds: frozen then, it waits for the confirm, which
			// reaches it while it is frozen.
			ps := tap.Published()[seen:]
			seen += len(ps)
			for _, p := range ps {
				if _, replica, _, event, ok := f.slot.r.publishedEvent(p); ok && replica == f.slot.name && len(p.Routed) > 0 {
					published = append(published, event)
				}
			}
			if len(published) == 0 {
				return false, nil
			}
		}
		ids, err := f.slot.heldNow(ctx)
		if err != nil || len(ids) == 0 {
			return false, nil
		}
		if published != nil && !slices.ContainsFunc(ids, func(id string) bool { return slices.Contains(published, id) }) {
			return false, nil
		}
		if err := f.slot.Pause(ctx); err != nil {
			return false, err
		}
		f.paused.Store(true)
		// What the frozen replica holds is read once its statements in
		// flight have landed: a mark sent just before the freeze still
		// commits, and the rows it marked are not held.
		ids, err = f.settledHeldRows(ctx)
		if err == nil && len(ids) > 0 && f.caughtAsleep() {
			left, lerr := f.leaseLeft(ctx, ids)
			f.mu.Lock()
			f.held, f.snapshot, f.takenOver, f.frozen = ids, nil, false, time.Now()
			if lerr == nil {
				f.left = left
			}
			f.mu.Unlock()
			f.recordLocks(ids)
			return true, nil
		}
		if err := f.slot.Unpause(ctx); err != nil {
			return false, err
		}
		f.paused.Store(false)
		return false, nil
	})
	if err != nil {
		if ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
			// The relay never held a claim when it could be frozen: the
			// fault cannot test what it claims to, which says nothing of
			// the relay.
			what := "no claimed row"
			if f.slot.r != nil && f.slot.r.relay.Promises.Locking.Style == contract.LockingRowLock {
				what = "no row lock on the outbox's rows (the database's lock table showed none)"
			}
			return &chaos.NoBite{Fault: f.Name(), Why: fmt.Sprintf("%s held %s when it could be paused, within %s", f.slot.name, what, f.within)}
		}
		return fmt.Errorf("pausing %s while it holds claims: %w", f.slot.name, err)
	}
	f.hits.Add(1)
	return nil
}

// recordLocks records, for a relay that holds row locks, that the frozen
// replica held ids when it was frozen: a claim of them, observed in the
// database's lock table rather than in the rows, which keep no trace of
// it. It explains a second publish of a row the replica held.
func (f *pauseHolding) recordLocks(ids []string) {
	if f.rec == nil || f.slot.r == nil || f.slot.r.relay.Promises.Locking.Style != contract.LockingRowLock {
		return
	}
	meta := history.Meta{Detail: "observed holding row locks on them when frozen"}
	f.rec.Record(history.Op{Process: f.slot.name, Type: history.Invoke, F: history.Claim, Events: ids, Meta: meta})
	f.rec.Record(history.Op{Process: f.slot.name, Type: history.OK, F: history.Claim, Events: ids, Meta: meta})
}

// caughtAsleep reports whether the frozen replica's records end in the
// failpoint it lingers in after a claim; true where it records nothing
// or no such failpoint is set.
func (f *pauseHolding) caughtAsleep() bool {
	path := f.slot.currentRecords()
	if f.asleep == "" || path == "" {
		return true
	}
	l, ok, err := lastLifetime(path)
	if err != nil || !ok || len(l.Ops) == 0 {
		return false
	}
	last := l.Ops[len(l.Ops)-1]
	return last.F == history.Failpoint && last.Failpoint == f.asleep
}

// Heal waits (bounded) until the held rows are marked by another replica,
// notes their processed_at, and thaws the replica.
func (f *pauseHolding) Heal(ctx context.Context) error {
	if !f.active.Load() {
		return nil
	}
	f.mu.Lock()
	held, left := f.held, f.left
	f.mu.Unlock()
	if len(held) > 0 {
		// Another replica can take the rows over only once the lease the
		// frozen one actually took has run out.
		wctx, cancel := context.WithTimeout(ctx, max(f.within, left+6*time.Second))
		snap := map[string]time.Time{}
		err := chaos.WaitFor(wctx, 100*time.Millisecond, func(ctx context.Context) (bool, error) {
			clear(snap)
			// A relay that holds row locks keeps no locked_by: while the
			// replica is frozen, only another can mark its rows.
			rows, err := f.db.Query(ctx, `SELECT id::text, processed_at FROM `+f.slot.bc.rows+`
				WHERE `+heldIn+` AND processed_at IS NOT NULL AND coalesce(locked_by::text, '') <> $2`, held, f.slot.name)
			if err != nil {
				return false, nil
			}
			var (
				id string
				at time.Time
			)
			_, err = pgx.ForEachRow(rows, []any{&id, &at}, func() error { snap[id] = at; return nil })
			return err == nil && len(snap) == len(held), nil
		})
		cancel()
		f.mu.Lock()
		if err == nil {
			f.snapshot, f.takenOver, f.tookOver = snap, true, time.Since(f.frozen).Round(100*time.Millisecond)
		}
		f.mu.Unlock()
	}
	if f.paused.Load() {
		if err := f.slot.Unpause(ctx); err != nil {
			return err
		}
		f.mu.Lock()
		f.thawed = time.Now()
		f.mu.Unlock()
		f.paused.Store(false)
		f.awaitLateWrite(ctx, len(held) > 0)
	}
	f.active.Store(false)
	return nil
}

// heldPublishes counts the publishes of the rows it held that the broker
// took from the replica before it was frozen (their confirms reached it
// while it was frozen) and after it was thawed, as the broker's firehose
// saw them; -1 each when the broker is not observed. Either is followed
// by the replica's mark of the row, late.
func (f *pauseHolding) heldPublishes() (before, after int) {
	tap := f.slot.tap()
	if tap == nil {
		return -1, -1
	}
	f.mu.Lock()
	held, frozen, thawed := f.held, f.frozen, f.thawed
	f.mu.Unlock()
	for _, p := range tap.Published() {
		_, replica, _, event, ok := f.slot.r.publishedEvent(p)
		if !ok || replica != f.slot.name || len(p.Routed) == 0 || !slices.Contains(held, event) {
			continue
		}
		switch {
		case p.Seen.Before(frozen):
			before++
		case !thawed.IsZero() && !p.Seen.Before(thawed):
			after++
		}
	}
	return before, after
}

// lateWriteWithin bounds the wait for a thawed replica's late write: it
// finishes the step it was frozen in (a failpoint's sleep, at most a
// second and a half in the catalogue), publishes the rows it held and
// marks them.
const lateWriteWithin = 5 * time.Second

// awaitLateWrite waits, within lateWriteWithin, until the records of the
// thawed replica show a write the lease fence stopped, where the replica
// records and held rows: the run goes on to stop the relays only once the
// late mark it tests was made, rather than stopping the replica before it
// got there. A replica that never writes late (it may check its lease
// first) costs the bound and is judged as it stands.
func (f *pauseHolding) awaitLateWrite(ctx context.Context, held bool) {
	files := f.slot.recordsFiles()
	if !held || len(files) == 0 {
		return
	}
	path := files[len(files)-1]
	wctx, cancel := context.WithTimeout(ctx, lateWriteWithin)
	defer cancel()
	_ = chaos.WaitFor(wctx, 50*time.Millisecond, func(context.Context) (bool, error) {
		l, ok, err := lastLifetime(path)
		return err == nil && ok && fencedWrites(l.Ops, f.slot.name) > 0, nil
	})
}

// verdict checks the rows the replica held when it was frozen: another
// replica took them over once their leases ran out, and, for a relay that
// declares fenced, the thawed replica's late mark changed none of them.
// It returns the problems found and how many rows it judged.
func (f *pauseHolding) verdict(ctx context.Context, fenced bool) ([]string, int) {
	f.mu.Lock()
	held, snap, took := f.held, f.snapshot, f.takenOver
	f.mu.Unlock()
	if len(held) == 0 {
		return nil, 0
	}
	if !took {
		return []string{fmt.Sprintf("lease-expiry: no other replica marked the %d rows %s held while it was paused", len(held), f.slot.name)}, 0
	}
	if !fenced {
		return nil, len(held)
	}
	var problems []string
	rows, err := f.db.Query(ctx, `SELECT id::text, processed_at, locked_by::text FROM `+f.slot.bc.rows+` WHERE `+heldIn, held)
	if err != nil {
		return []string{fmt.Sprintf("lease-expiry: reading the held rows: %v", err)}, 0
	}
	var (
		id   string
		at   *time.Time
		by   *string
		seen int
	)
	_, err = pgx.ForEachRow(rows, []any{&id, &at, &by}, func() error {
		seen++
		want := snap[id]
		switch {
		case at == nil:
			problems = append(problems, fmt.Sprintf("fencing: row %s lost its processed_at after %s resumed", id, f.slot.name))
		case !at.Equal(want):
			problems = append(problems, fmt.Sprintf("fencing: row %s was marked again after %s resumed, its hold on the row lost (processed_at %s, was %s)",
				id, f.slot.name, at.UTC().Format(time.RFC3339Nano), want.UTC().Format(time.RFC3339Nano)))
		case by != nil && *by == f.slot.name:
			problems = append(problems, fmt.Sprintf("fencing: row %s is locked by %s again after it lost the lease", id, f.slot.name))
		}
		return nil
	})
	if err != nil {
		problems = append(problems, fmt.Sprintf("lease-expiry: reading the held rows: %v", err))
	}
	return problems, seen
}

// relayClock starts a relay replica afresh with its process clock offset
// (OUTBOX_CLOCK_OFFSET); the heal starts it again without the offset.
type relayClock struct {
	faultState
	slot   *Replica
	offset time.Duration
}

func (f *relayClock) Name() string {
	return f.slot.name + " clock " + chaos.FormatClockOffset(f.offset)
}
func (f *relayClock) Class() history.FaultClass { return history.ClassClock }
func (f *relayClock) Targets() []string         { return []string{f.slot.name} }
func (f *relayClock) Kind() string              { return chaos.KindClockSkew }

// Inject starts the replica with the offset.
func (f *relayClock) Inject(ctx context.Context) error {
	f.active.Store(true)
	if err := f.slot.recreate(ctx, map[string]string{contract.EnvClockOffset: chaos.FormatClockOffset(f.offset)}); err != nil {
		return err
	}
	f.hits.Add(1)
	return nil
}

// Heal starts the replica without an offset.
func (f *relayClock) Heal(ctx context.Context) error {
	if !f.active.Load() {
		return nil
	}
	if err := f.slot.recreate(ctx, nil); err != nil {
		return err
	}
	f.active.Store(false)
	return nil
}
