package relay

import (
	"bytes"
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/outboxlab/outboxlab/relay/amqptest"
)

// countingConn records each Write it gets, as the system calls they are.
type countingConn struct {
	net.Conn
	mu     sync.Mutex
	writes [][]byte
	fail   error
	wrote  chan struct{}
	closed bool
}

func newCountingConn() *countingConn {
	return &countingConn{wrote: make(chan struct{}, 100)}
}

func (c *countingConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fail != nil {
		return 0, c.fail
	}
	c.writes = append(c.writes, bytes.Clone(p))
	c.wrote <- struct{}{}
	return len(p), nil
}

func (c *countingConn) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	return nil
}

func (c *countingConn) got() ([][]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([][]byte(nil), c.writes...), c.closed
}

// TestBatchConnHoldsOnceSetUp: before hold every write goes out on its
// own (the handshake waits for answers); after it, writes are held and go
// out together, in order, on flush.
func TestBatchConnHoldsOnceSetUp(t *testing.T) {
	raw := newCountingConn()
	c := newBatchConn(raw)
	defer c.Close()
	c.delay = time.Hour
	for _, p := range []string{"a", "b"} {
		if n, err := c.Write([]byte(p)); n != 1 || err != nil {
			t.Fatalf("Write(%s) = %d, %v", p, n, err)
		}
	}
	if w, _ := raw.got(); len(w) != 2 {
		t.Fatalf("before hold: %d writes, want 2", len(w))
	}
	c.hold()
	for _, p := range []string{"c", "d", "e"} {
		if n, err := c.Write([]byte(p)); n != 1 || err != nil {
			t.Fatalf("Write(%s) = %d, %v", p, n, err)
		}
	}
	if w, _ := raw.got(); len(w) != 2 {
		t.Fatalf("held writes went out: %d writes, want 2", len(w))
	}
	if err := c.flush(); err != nil {
		t.Fatal(err)
	}
	if err := c.flush(); err != nil {
		t.Fatal(err)
	}
	w, _ := raw.got()
	if len(w) != 3 || string(w[2]) != "cde" {
		t.Fatalf("writes %q, want the held ones in one write, once", w)
	}
}

// TestBatchConnWritesWhatItHoldsWithinItsDelay: a held write goes out
// when the delay has passed, without a flush; flushSoon sends it at once.
func TestBatchConnWritesWhatItHoldsWithinItsDelay(t *testing.T) {
	raw := newCountingConn()
	c := newBatchConn(raw)
	defer c.Close()
	c.delay = 20 * time.Millisecond
	c.hold()
	start := time.Now()
	_, _ = c.Write([]byte("x"))
	select {
	case <-raw.wrote:
	case <-time.After(5 * time.Second):
		t.Fatal("a held write did not go out within 5 s")
	}
	if d := time.Since(start); d < c.delay {
		t.Errorf("the held write went out after %s, before the delay of %s", d, c.delay)
	}
	c.delay = time.Hour
	_, _ = c.Write([]byte("y"))
	c.flushSoon()
	select {
	case <-raw.wrote:
	case <-time.After(5 * time.Second):
		t.Fatal("flushSoon did not write what was held within 5 s")
	}
	if w, _ := raw.got(); len(w) != 2 || string(w[1]) != "y" {
		t.Errorf("writes %q", w)
	}
}

// TestBatchConnWritesAFullBuffer: holding reaches batchBytes, and what is
// held goes out at once.
func TestBatchConnWritesAFullBuffer(t *testing.T) {
	raw := newCountingConn()
	c := newBatchConn(raw)
	defer c.Close()
	c.delay = time.Hour
	c.hold()
	chunk := bytes.Repeat([]byte("z"), 1024)
	for range batchBytes/len(chunk) - 1 {
		_, _ = c.Write(chunk)
	}
	if w, _ := raw.got(); len(w) != 0 {
		t.Fatalf("%d writes below the bound", len(w))
	}
	// The write that reaches the bound reports all of it written, as
	// amqp091's buffered writer needs (a short write fails the publish).
	if n, err := c.Write(chunk); n != len(chunk) || err != nil {
		t.Fatalf("the write reaching the bound: %d, %v; want %d, nil", n, err, len(chunk))
	}
	w, _ := raw.got()
	if len(w) != 1 || len(w[0]) != batchBytes {
		t.Fatalf("at the bound: %d writes, want one of %d bytes", len(w), batchBytes)
	}
}

// TestBatchConnFailsAfterAFailedWrite: a failed write closes the socket
// and fails every later write with its error, held or not.
func TestBatchConnFailsAfterAFailedWrite(t *testing.T) {
	for _, held := range []bool{false, true} {
		raw := newCountingConn()
		c := newBatchConn(raw)
		c.delay = time.Hour
		broken := errors.New("connection reset")
		raw.fail = broken
		if held {
			c.hold()
			_, _ = c.Write([]byte("a"))
			if err := c.flush(); !errors.Is(err, broken) {
				t.Errorf("held: flush = %v, want the write's error", err)
			}
		} else if _, err := c.Write([]byte("a")); !errors.Is(err, broken) {
			t.Errorf("Write = %v, want the write's error", err)
		}
		raw.fail = nil
		if _, err := c.Write([]byte("b")); !errors.Is(err, broken) {
			t.Errorf("held %v: a later Write = %v, want the first failure", held, err)
		}
		if w, closed := raw.got(); len(w) != 0 || !closed {
			t.Errorf("held %v: after a failed write: writes %q, socket closed %v", held, w, closed)
		}
		_ = c.Close()
	}
}

// TestBatchConnCloseDoesNotWaitForABlockedWrite: a write blocked on a
// peer that reads nothing fails as soon as Close is called, as
// amqpSession.bounded relies on.
func TestBatchConnCloseDoesNotWaitForABlockedWrite(t *testing.T) {
	a, b := net.Pipe()
	defer b.Close()
	c := newBatchConn(a)
	c.delay = time.Hour
	c.hold()
	_, _ = c.Write([]byte("never read"))
	done := make(chan error, 1)
	go func() { done <- c.flush() }()
	select {
	case err := <-done:
		t.Fatalf("a write to a peer that reads nothing returned %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	_ = c.Close()
	select {
	case err := <-done:
		if err == nil {
			t.Error("the blocked write succeeded after Close")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not end the blocked write within 5 s")
	}
}

// TestPublisherWritesHeldPublishesBeforeItWaits: with the socket's delay
// out of reach, a confirm still comes, because Wait and Done write what is
// held before the relay waits on them, and several publishes go out in
// one write.
func TestPublisherWritesHeldPublishesBeforeItWaits(t *testing.T) {
	defer func(d time.Duration) { batchDelay = d }(batchDelay)
	batchDelay = time.Hour
	b := amqptest.Start(t)
	if err := (Topology{Exchange: "events", Queue: "q", BindingKey: "#"}).Declare(context.Background(), b.URL()); err != nil {
		t.Fatal(err)
	}
	p, err := NewAMQPPublisher(AMQPConfig{URL: b.URL(), Exchange: "events"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var confs []Confirmation
	for _, id := range []string{"e1", "e2", "e3"} {
		c, err := p.Publish(ctx, Message{ID: id, Type: "t", Payload: []byte(`{}`)})
		if err != nil {
			t.Fatal(err)
		}
		confs = append(confs, c)
	}
	if n := len(b.Published()); n != 0 {
		t.Fatalf("the broker took %d messages before anything waited: the publishes were not held", n)
	}
	// Done asks for the held publishes at once.
	select {
	case <-confs[0].(DoneConfirmation).Done():
	case <-ctx.Done():
		t.Fatal("Done never closed: the held publishes were not written")
	}
	// e1's confirm may come before the broker has read e2 and e3 off the
	// socket; they must come without anything else asking for them (the
	// socket's delay is an hour away).
	for deadline := time.Now().Add(5 * time.Second); len(b.Published()) < 3; {
		if time.Now().After(deadline) {
			t.Fatalf("the broker took %d messages within 5 s of e1's confirm, want the 3 held", len(b.Published()))
		}
		time.Sleep(5 * time.Millisecond)
	}
	for i, c := range confs {
		if err := c.Wait(ctx); err != nil {
			t.Errorf("confirm %d: %v", i, err)
		}
	}
	// Wait writes a held publish itself.
	c, err := p.Publish(ctx, Message{ID: "e4", Type: "t", Payload: []byte(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Wait(ctx); err != nil {
		t.Errorf("confirm of a held publish: %v", err)
	}
}
