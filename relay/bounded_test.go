package relay

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"
)

// TestBoundedCutsOnlyACallUnderWay: the end of a context closes the
// socket under a call it bounds that is blocked on it, and the call
// returns the context's error; the end of a context while no call runs
// leaves the session alone, and a call that starts after its context
// ended returns at once without running.
func TestBoundedCutsOnlyACallUnderWay(t *testing.T) {
	newSession := func(t *testing.T) (*amqpSession, net.Conn) {
		a, b := net.Pipe()
		t.Cleanup(func() { _ = a.Close(); _ = b.Close() })
		return &amqpSession{raw: a, guardStop: make(chan struct{})}, b
	}

	t.Run("blocked call", func(t *testing.T) {
		s, _ := newSession(t)
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		began := time.Now()
		err := s.bounded(ctx, func() error {
			_, err := s.raw.Write([]byte("nobody reads this")) // blocks: the pipe's other end never reads
			return err
		})
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("bounded = %v, want the deadline", err)
		}
		if d := time.Since(began); d > 5*time.Second {
			t.Fatalf("bounded returned after %s", d)
		}
		if !s.broken.Load() {
			t.Error("the session is not broken after its socket was closed")
		}
	})

	t.Run("context ends between calls", func(t *testing.T) {
		s, peer := newSession(t)
		go func() {
			buf := make([]byte, 64)
			for {
				if _, err := peer.Read(buf); err != nil {
					return
				}
			}
		}()
		ctx, cancel := context.WithCancel(context.Background())
		write := func() error { _, err := s.raw.Write([]byte("x")); return err }
		if err := s.bounded(ctx, write); err != nil {
			t.Fatalf("first call: %v", err)
		}
		cancel()
		time.Sleep(20 * time.Millisecond) // let the watch run
		if s.broken.Load() {
			t.Fatal("a context that ended between calls broke the session")
		}
		ran := false
		if err := s.bounded(ctx, func() error { ran = true; return nil }); !errors.Is(err, context.Canceled) || ran {
			t.Errorf("call on an ended context: %v, ran %v", err, ran)
		}
		if err := s.bounded(context.Background(), write); err != nil {
			t.Errorf("call on a new context: %v", err)
		}
	})
}
