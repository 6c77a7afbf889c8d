package bench

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/outboxlab/outboxlab/relay"
)

// timedStore is a relay.Store that adds up the time the relay spends in
// each call. It changes nothing else: every call goes to the store under
// it with the same arguments.
type timedStore struct {
	relay.Store
	claim, mark callClock
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
func (c *callClock) report(wall time.Duration) CallTime {
	ct := CallTime{Calls: c.calls.Load(), Rows: c.rows.Load(), Seconds: time.Duration(c.nanos.Load()).Seconds()}
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
	d := time.Since(t)
	s.claim.add(d, len(rows))
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
// Publish and in Wait, and, when onConfirm is set, reports the moment each
// confirm reached the relay. The broker sees exactly what the publisher
// under it sends.
type observedPublisher struct {
	relay.Publisher
	publish, wait callClock
	onConfirm     func(id string, at time.Time)
}

func (p *observedPublisher) Publish(ctx context.Context, m relay.Message) (relay.Confirmation, error) {
	t := time.Now()
	c, err := p.Publisher.Publish(ctx, m)
	p.publish.add(time.Since(t), 1)
	if err != nil {
		return nil, err
	}
	return &observedConfirmation{Confirmation: c, pub: p, id: m.ID}, nil
}

type observedConfirmation struct {
	relay.Confirmation
	pub *observedPublisher
	id  string
}

func (c *observedConfirmation) Wait(ctx context.Context) error {
	t := time.Now()
	err := c.Confirmation.Wait(ctx)
	now := time.Now()
	c.pub.wait.add(now.Sub(t), 1)
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
