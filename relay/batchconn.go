package relay

import (
	"net"
	"sync"
	"time"
)

// batchConn is the publisher's socket. amqp091 writes every publish with
// a system call of its own (it flushes its buffer after each message);
// once the session is set up, batchConn holds what amqp091 writes and
// writes it in one call when the relay is about to wait for a confirm
// (flush), when its delay (batchDelay) has passed since the first byte it
// holds, or
// when it holds batchBytes. A drain that publishes while confirms of
// earlier publishes come in then writes dozens of messages at a time, and
// the broker reads them at a time too.
//
// A failed write fails every later Write and closes the socket, so that
// amqp091's reader sees the connection end and resolves what is in
// flight; the relay reads those confirms as the broker's failure, as it
// does when a connection drops with publishes unconfirmed. Close closes
// the socket without waiting for a write in progress (it is how
// amqpSession.bounded gives up), and drops what is held: a message held
// and never written was never confirmed either.
type batchConn struct {
	net.Conn

	mu sync.Mutex
	// holding is set once the session is set up: before, every write
	// goes out at once (the handshake waits for the broker's answers).
	holding bool
	buf     []byte
	err     error
	timer   *time.Timer
	delay   time.Duration
}

// batchBytes bounds what is held: a window of 100 publishes of 1 KiB
// payloads fits twice.
const batchBytes = 256 << 10

// batchDelay bounds how long a held byte waits. It is a variable only so
// that a test can put the timer out of reach and see that a wait for a
// confirm writes what is held without it.
var batchDelay = time.Millisecond

func newBatchConn(c net.Conn) *batchConn {
	b := &batchConn{Conn: c, delay: batchDelay}
	b.timer = time.AfterFunc(time.Hour, func() { _ = b.flush() })
	b.timer.Stop()
	return b
}

// hold starts holding writes.
func (c *batchConn) hold() {
	c.mu.Lock()
	c.holding = true
	c.mu.Unlock()
}

// Write holds p once the session is set up, and otherwise writes what is
// held and p at once.
func (c *batchConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return 0, c.err
	}
	if !c.holding {
		if err := c.flushLocked(); err != nil {
			return 0, err
		}
		n, err := c.Conn.Write(p)
		if err != nil {
			c.failLocked(err)
		}
		return n, err
	}
	if len(c.buf) == 0 {
		c.timer.Reset(c.delay)
	}
	c.buf = append(c.buf, p...)
	if len(c.buf) >= batchBytes {
		if err := c.flushLocked(); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

// flushSoon has what is held written at once by the timer's goroutine,
// without waiting for it.
func (c *batchConn) flushSoon() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.buf) > 0 && c.err == nil {
		c.timer.Reset(0)
	}
}

// flush writes what is held.
func (c *batchConn) flush() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.flushLocked()
}

func (c *batchConn) flushLocked() error {
	if c.err != nil || len(c.buf) == 0 {
		return c.err
	}
	c.timer.Stop()
	_, err := c.Conn.Write(c.buf)
	c.buf = c.buf[:0]
	if err != nil {
		c.failLocked(err)
	}
	return err
}

// failLocked records a failed write and closes the socket.
func (c *batchConn) failLocked(err error) {
	c.err = err
	c.buf = nil
	_ = c.Conn.Close()
}

// Close closes the socket at once, holding no lock: a write blocked on a
// peer that reads nothing fails with it.
func (c *batchConn) Close() error {
	c.timer.Stop()
	return c.Conn.Close()
}
