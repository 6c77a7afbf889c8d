package chaos

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

// TestDialerCut: a cut closes the connections the dialer made, so that
// the far end sees them drop, and refuses new dials until the heal; the
// fault counts a hit only when it dropped a connection.
func TestDialerCut(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 4)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d := &Dialer{}
	f := CutDialer("consumer-1->broker down", d, "broker", "consumer-1")
	if err := f.Inject(ctx); !errors.Is(err, ErrCouldNotBite) || f.Hits() != 0 {
		t.Fatalf("cutting a dialer with no connection: %v, %d hits; want could not bite, 0 hits", err, f.Hits())
	}
	if err := f.Heal(ctx); err != nil {
		t.Fatal(err)
	}
	c, err := d.DialContext(ctx, "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	server := <-accepted
	defer server.Close()
	if err := f.Inject(ctx); err != nil || f.Hits() != 1 {
		t.Fatalf("cut: %v, %d hits; want 1", err, f.Hits())
	}
	_ = server.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := server.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("the far end read %v after the cut, want EOF", err)
	}
	if _, err := d.DialContext(ctx, "tcp", ln.Addr().String()); !errors.Is(err, ErrDialerCut) {
		t.Fatalf("dial while cut: %v, want ErrDialerCut", err)
	}
	if err := f.Heal(ctx); err != nil {
		t.Fatal(err)
	}
	c2, err := d.DialContext(ctx, "tcp", ln.Addr().String())
	if err != nil {
		t.Fatalf("dial after the heal: %v", err)
	}
	c2.Close()
}
