package bench

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/outboxlab/outboxlab/internal/bench/result"
	"github.com/outboxlab/outboxlab/relay"
)

// timedStore is a relay.Store that adds up the time the relay spends in
// each call. It changes nothing else: every call goes to the store under
// it with the same arguments.
type timedStore struct {
	relay.Store
	claim, mark callClock
	// onClaim, when set, is told the moment each claimed row came back,
	// and when the claim that returned it started.
	onClaim func(id uuid.UUID, started, at time.Time)
	// claims records every claim's duration in order, so that a drain can
	// show whether claims slow down as it goes.
	mu     sync.Mutex
	claims []time.Duration
}

// callClock adds up calls and their time.
type callClock struct {
	calls atomic.Int64
	nanos atomic.Int64
	rows  atomic.Int64
}

func (c *callClock) add(d time.Duration, rows int) {
	c.calls.Add(1)
	c.nanos.Add(int64(d))
	c.rows.Add(int64(rows))
}

// Calls reports what the clock counted.
func (c *callClock) report(wall time.Duration) result.CallTime {
	ct := result.CallTime{Calls: c.calls.Load(), Rows: c.rows.Load(), Seconds: time.Duration(c.nanos.Load()).Seconds()}
	if ct.Calls > 0 {
		ct.MeanMs = ct.Seconds * 1000 / float64(ct.Calls)
	}
	if wall > 0 {
		ct.ShareOfWall = ct.Seconds / wall.Seconds()
	}
	return ct
}

func (s *timedStore) Claim(ctx context.Context, owner string, limit int, lease time.Duration) ([]relay.Row, error) {
	t := time.Now()
	rows, err := s.Store.Claim(ctx, owner, limit, lease)
	now := time.Now()
	d := now.Sub(t)
	s.claim.add(d, len(rows))
	if s.onClaim != nil {
		for _, r := range rows {
			s.onClaim(r.ID, t, now)
		}
	}
	if len(rows) > 0 {
		s.mu.Lock()
		s.claims = append(s.claims, d)
		s.mu.Unlock()
	}
	return rows, err
}

func (s *timedStore) Mark(ctx context.Context, owner string, ids []uuid.UUID) ([]uuid.UUID, error) {
	t := time.Now()
	marked, err := s.Store.Mark(ctx, owner, ids)
	s.mark.add(time.Since(t), len(marked))
	return marked, err
}

// statements returns how many claims and marks the store has timed and
// their time in all, in nanoseconds.
func (s *timedStore) statements() (calls, nanos int64) {
	return s.claim.calls.Load() + s.mark.calls.Load(), s.claim.nanos.Load() + s.mark.nanos.Load()
}

// claimTrend returns the mean duration of the first and the last tenth of
// the claims that returned rows.
func (s *timedStore) claimTrend() (first, last time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(s.claims)
	if n == 0 {
		return 0, 0
	}
	k := max(1, n/10)
	mean := func(ds []time.Duration) time.Duration {
		var sum time.Duration
		for _, d := range ds {
			sum += d
		}
		return sum / time.Duration(len(ds))
	}
	return mean(s.claims[:k]), mean(s.claims[n-k:])
}

// observedPublisher is a relay.Publisher that adds up the time spent in
// Publish and in Wait and how full the publish window was, and, when
// onPublish and onConfirm are set, reports the moment each publish went
// out and each confirm reached the relay. The broker sees exactly what the
// publisher under it sends.
type observedPublisher struct {
	relay.Publisher
	publish, wait callClock
	onPublish     func(id string, at time.Time)
	onConfirm     func(id string, at time.Time)
	window        windowClock
}

// windowClock integrates the number of publishes awaiting their confirm
// over time: published and not yet settled by the relay.
type windowClock struct {
	mu       sync.Mutex
	open     int
	since    time.Time
	integral time.Duration // publish-seconds, as a Duration per publish
	first    time.Time
}

func (w *windowClock) move(at time.Time, delta int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.first.IsZero() {
		w.first = at
	} else {
		w.integral += time.Duration(w.open) * at.Sub(w.since)
	}
	w.open += delta
	w.since = at
}

// mean returns the mean number of publishes awaiting their confirm from
// the first publish to end.
func (w *windowClock) mean(end time.Time) float64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.first.IsZero() || !end.After(w.first) {
		return 0
	}
	total := w.integral + time.Duration(w.open)*end.Sub(w.since)
	return float64(total) / float64(end.Sub(w.first))
}

func (p *observedPublisher) Publish(ctx context.Context, m relay.Message) (relay.Confirmation, error) {
	t := time.Now()
	c, err := p.Publisher.Publish(ctx, m)
	now := time.Now()
	p.publish.add(now.Sub(t), 1)
	if err != nil {
		return nil, err
	}
	p.window.move(now, 1)
	if p.onPublish != nil {
		p.onPublish(m.ID, now)
	}
	oc := &observedConfirmation{Confirmation: c, pub: p, id: m.ID}
	if dc, ok := c.(relay.DoneConfirmation); ok {
		return observedDoneConfirmation{observedConfirmation: oc, done: dc.Done}, nil
	}
	return oc, nil
}

type observedConfirmation struct {
	relay.Confirmation
	pub *observedPublisher
	id  string
}

// observedDoneConfirmation is an observedConfirmation that tells when its
// outcome is in, as the one under it does.
type observedDoneConfirmation struct {
	*observedConfirmation
	done func() <-chan struct{}
}

func (c observedDoneConfirmation) Done() <-chan struct{} { return c.done() }

func (c *observedConfirmation) Wait(ctx context.Context) error {
	t := time.Now()
	err := c.Confirmation.Wait(ctx)
	now := time.Now()
	c.pub.wait.add(now.Sub(t), 1)
	c.pub.window.move(now, -1)
	if err == nil && c.pub.onConfirm != nil {
		c.pub.onConfirm(c.id, now)
	}
	return err
}

// countingDecoder is a relay.Decoder that adds up the time spent decoding.
type countingDecoder struct {
	relay.Decoder
	clock callClock
}

func (d *countingDecoder) Decode(messageType string, payload []byte) (any, error) {
	t := time.Now()
	v, err := d.Decoder.Decode(messageType, payload)
	d.clock.add(time.Since(t), 1)
	return v, err
}

// Validate times the decoder's Validate when it has one (the relay then
// calls it instead of Decode), else Decode.
func (d *countingDecoder) Validate(messageType string, payload []byte) error {
	t := time.Now()
	var err error
	if v, ok := d.Decoder.(relay.Validator); ok {
		err = v.Validate(messageType, payload)
	} else {
		_, err = d.Decoder.Decode(messageType, payload)
	}
	d.clock.add(time.Since(t), 1)
	return err
}
