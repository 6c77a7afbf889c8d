package scenarios

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/outboxlab/outboxlab/chaos"
	"github.com/outboxlab/outboxlab/history"
)

// TestCutApplyingWaitsForItsMoment: the cut comes as the consumer begins
// an apply that outlasts the other consumer's apply in hand, not while
// the other would still be busy when the first commits; with no such
// moment within its bound it cuts all the same. Every cut drops the
// consumer's connection.
func TestCutApplyingWaitsForItsMoment(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a, b := &recordingInbox{process: "consumer-1", dialer: &chaos.Dialer{}}, &recordingInbox{process: "consumer-2"}
	f := &cutApplying{DialerDown: chaos.CutDialer("consumer-1->broker down while applying", a.dialer, history.ClassBroker, a.process),
		c: a, other: b, within: 300 * time.Millisecond}
	begin := func(in *recordingInbox, hold time.Duration) {
		now := time.Now()
		in.applyEnd.Store(now.Add(hold).UnixNano())
		in.applying.Store(now.UnixNano())
	}
	connect := func() {
		if _, err := a.dialer.DialContext(ctx, "tcp", ln.Addr().String()); err != nil {
			t.Fatal(err)
		}
	}

	// consumer-2 is busy for longer than consumer-1's next apply holds:
	// no moment comes, and the cut falls at the bound.
	connect()
	begin(b, time.Hour)
	go func() {
		time.Sleep(50 * time.Millisecond)
		begin(a, 100*time.Millisecond)
	}()
	start := time.Now()
	if err := f.Inject(ctx); err != nil || f.Hits() != 1 {
		t.Fatalf("Inject = %v, %d hits", err, f.Hits())
	}
	if waited := time.Since(start); waited < 300*time.Millisecond {
		t.Fatalf("cut after %s, before its bound, while consumer-2 was still busy", waited)
	}
	_ = f.Heal(ctx)

	// consumer-2 is idle: the cut comes as consumer-1 begins an apply.
	connect()
	b.applying.Store(0)
	go func() {
		time.Sleep(50 * time.Millisecond)
		begin(a, 100*time.Millisecond)
	}()
	start = time.Now()
	if err := f.Inject(ctx); err != nil || f.Hits() != 2 {
		t.Fatalf("Inject = %v, %d hits", err, f.Hits())
	}
	if waited := time.Since(start); waited >= 250*time.Millisecond {
		t.Fatalf("cut after %s, not as consumer-1 began its apply", waited)
	}
	_ = f.Heal(ctx)

	// consumer-2 ends its apply well before consumer-1's new one would
	// commit: the cut comes at that begin.
	connect()
	begin(b, 20*time.Millisecond)
	go func() {
		time.Sleep(50 * time.Millisecond)
		begin(a, 200*time.Millisecond)
	}()
	start = time.Now()
	if err := f.Inject(ctx); err != nil || f.Hits() != 3 {
		t.Fatalf("Inject = %v, %d hits", err, f.Hits())
	}
	if waited := time.Since(start); waited >= 250*time.Millisecond {
		t.Fatalf("cut after %s, not as consumer-1 began its apply", waited)
	}
}
