package consumer

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/outboxlab/outboxlab/testenv/tcpfake"
)

// closingBroker accepts connections and closes each at once, as a node
// whose broker refuses clients does; it records which node was dialled,
// in one log shared by every node of a test.
type closingBroker struct {
	mu    sync.Mutex
	order []int
}

func (b *closingBroker) node(t *testing.T, n int) string {
	t.Helper()
	addr := tcpfake.Listen(t, func(net.Conn) bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		b.order = append(b.order, n)
		return false
	})
	return "amqp://" + addr + "/"
}

// TestAMQPSourceDefaults checks the settings Run applies when the caller
// leaves them out (zero or negative) and keeps those it gives.
func TestAMQPSourceDefaults(t *testing.T) {
	cons, err := New(Config{Name: "c"}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	var b closingBroker
	url := b.node(t, 0)
	for _, c := range []struct {
		name     string
		in, want AMQPSource
	}{
		{"zero", AMQPSource{}, AMQPSource{Prefetch: 16, HandleTimeout: 10 * time.Second, MinBackoff: 100 * time.Millisecond, MaxBackoff: 5 * time.Second, MaxTracked: 100_000}},
		{"negative", AMQPSource{Prefetch: -1, HandleTimeout: -1, MinBackoff: -1, MaxBackoff: -1, MaxTracked: -1},
			AMQPSource{Prefetch: 16, HandleTimeout: 10 * time.Second, MinBackoff: 100 * time.Millisecond, MaxBackoff: 5 * time.Second, MaxTracked: 100_000}},
		{"a minimum above the default maximum", AMQPSource{MinBackoff: 8 * time.Second},
			AMQPSource{Prefetch: 16, HandleTimeout: 10 * time.Second, MinBackoff: 8 * time.Second, MaxBackoff: 8 * time.Second, MaxTracked: 100_000}},
		{"given", AMQPSource{Prefetch: 1, HandleTimeout: time.Millisecond, MinBackoff: time.Millisecond, MaxBackoff: time.Millisecond, MaxTracked: 1},
			AMQPSource{Prefetch: 1, HandleTimeout: time.Millisecond, MinBackoff: time.Millisecond, MaxBackoff: time.Millisecond, MaxTracked: 1}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := c.in
			s.URL, s.Queue = url, "q"
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			if err := s.Run(ctx, cons); err != nil {
				t.Fatal(err)
			}
			got := AMQPSource{Prefetch: s.Prefetch, HandleTimeout: s.HandleTimeout, MinBackoff: s.MinBackoff, MaxBackoff: s.MaxBackoff, MaxTracked: s.MaxTracked}
			if got.Prefetch != c.want.Prefetch || got.HandleTimeout != c.want.HandleTimeout || got.MinBackoff != c.want.MinBackoff ||
				got.MaxBackoff != c.want.MaxBackoff || got.MaxTracked != c.want.MaxTracked {
				t.Errorf("settings %+v, want %+v", got, c.want)
			}
		})
	}
}

// TestAMQPSourceReconnects: while no node takes it, the source tries the
// nodes of its URL in turn, the next at once, and backs off after each
// round from MinBackoff, doubling up to MaxBackoff, until its context
// ends. Its waits go through the test's hook, which records them in the
// order of the dials, so no timing of the machine enters the verdict.
func TestAMQPSourceReconnects(t *testing.T) {
	cons, err := New(Config{Name: "c"}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	var b closingBroker
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const rounds = 6
	var waits []time.Duration
	s := &AMQPSource{URL: b.node(t, 0) + "," + b.node(t, 1), Queue: "q", MinBackoff: 100 * time.Millisecond, MaxBackoff: 400 * time.Millisecond}
	s.backoff = func(ctx context.Context, d time.Duration) {
		b.mu.Lock()
		defer b.mu.Unlock()
		waits = append(waits, d)
		// A wait is marked in the dial order as -1.
		b.order = append(b.order, -1)
		if len(waits) == rounds {
			cancel()
		}
	}
	if err := s.Run(ctx, cons); err != nil {
		t.Fatal(err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	var want []int
	for range rounds {
		want = append(want, 0, 1, -1)
	}
	if !slices.Equal(b.order, want) {
		t.Errorf("dials and waits %v, want %v: node 0, node 1 at once, then a wait, each round", b.order, want)
	}
	wantWaits := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 400 * time.Millisecond, 400 * time.Millisecond, 400 * time.Millisecond}
	if !slices.Equal(waits, wantWaits) {
		t.Errorf("waits %v, want %v: from MinBackoff, doubling, up to MaxBackoff", waits, wantWaits)
	}
}

// TestAMQPSourceClosesTheSocketOfAFailedHandshake: a peer that offers
// only a SASL mechanism amqp091 does not speak fails the dial before
// amqp091 itself would close anything, and then waits with the
// connection open; the source closes that socket at once rather than
// leaving it to the peer's handshake timeout, and dials again.
func TestAMQPSourceClosesTheSocketOfAFailedHandshake(t *testing.T) {
	// connection.start, version 0-9, no server properties, mechanism FOO.
	var start []byte
	start = binary.BigEndian.AppendUint16(start, 10)
	start = binary.BigEndian.AppendUint16(start, 10)
	start = append(start, 0, 9)
	start = binary.BigEndian.AppendUint32(start, 0)
	for _, s := range []string{"FOO", "en_US"} {
		start = binary.BigEndian.AppendUint32(start, uint32(len(s)))
		start = append(start, s...)
	}
	frame := append([]byte{1, 0, 0}, binary.BigEndian.AppendUint32(nil, uint32(len(start)))...)
	frame = append(append(frame, start...), 0xCE)
	closed := make(chan time.Duration, 16)
	addr := tcpfake.Listen(t, func(c net.Conn) bool {
		_, _ = c.Write(frame)
		go func() {
			accepted := time.Now()
			_, _ = io.Copy(io.Discard, c)
			closed <- time.Since(accepted)
		}()
		return true
	})
	cons, err := New(Config{Name: "c"}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- (&AMQPSource{URL: "amqp://" + addr + "/", Queue: "q", MinBackoff: 10 * time.Millisecond, MaxBackoff: 20 * time.Millisecond}).Run(ctx, cons)
	}()
	select {
	case d := <-closed:
		if d > 2*time.Second {
			t.Errorf("the socket of the failed handshake closed %s after it was accepted, want at once", d)
		}
	case <-ctx.Done():
		t.Fatal("the socket of a failed handshake was still open after 20 s")
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
}
