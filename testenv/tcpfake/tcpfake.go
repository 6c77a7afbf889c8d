// Package tcpfake serves fake TCP peers for tests: a loopback listener
// whose connections the test handles as a server that is down, mute or
// refusing would, closed with the test.
package tcpfake

import (
	"net"
	"sync"
	"testing"
)

// Listen starts a TCP listener on 127.0.0.1 and calls accept, in its
// accept loop, with every connection it accepts. accept returns true to
// hold the connection open, as a mute peer does, or false to close it at
// once, as a peer that hangs up does. When the test ends the listener
// closes, its loop is waited for and every held connection is closed.
// Listen returns the listener's host:port.
func Listen(t testing.TB, accept func(net.Conn) (hold bool)) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listening on loopback: %v", err)
	}
	var (
		mu   sync.Mutex
		held []net.Conn
	)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			if !accept(c) {
				_ = c.Close()
				continue
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = l.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			_ = c.Close()
		}
	})
	return l.Addr().String()
}
