package tcpfake_test

import (
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/outboxlab/outboxlab/testenv/tcpfake"
)

// TestListenHoldsOrClosesEachConnection: a connection accept holds stays
// open (a read waits) until the test's cleanup closes it; one it does not
// hold is closed at once (a read ends with EOF).
func TestListenHoldsOrClosesEachConnection(t *testing.T) {
	var heldConn net.Conn
	t.Run("listener", func(t *testing.T) {
		n := 0
		addr := tcpfake.Listen(t, func(net.Conn) bool { n++; return n == 1 })
		held, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		heldConn = held
		_ = held.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		if _, err := held.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("read of a held connection: %v, want it to wait until its deadline", err)
		}
		closed, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer closed.Close()
		_ = closed.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := closed.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
			t.Fatalf("read of a connection accept did not hold: %v, want EOF", err)
		}
	})
	defer heldConn.Close()
	_ = heldConn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := heldConn.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Fatalf("read of a held connection after the test ended: %v, want EOF", err)
	}
}
