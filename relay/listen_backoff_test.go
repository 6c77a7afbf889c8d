package relay_test

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/outboxlab/outboxlab/outbox"
	"github.com/outboxlab/outboxlab/relay"
)

// fakeDB accepts connections and either closes each at once (a database
// that refuses clients) or keeps it without a word (one that hangs); it
// counts the connects, a burst of connections within 20 ms being one (a
// client may open a second connection at once when the first fails).
type fakeDB struct {
	mu     sync.Mutex
	dialed int
	last   time.Time
}

func (f *fakeDB) start(t *testing.T, silent bool) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var held []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			f.mu.Lock()
			if now := time.Now(); now.Sub(f.last) > 20*time.Millisecond {
				f.dialed++
				f.last = now
			}
			f.mu.Unlock()
			if silent {
				held = append(held, c)
			} else {
				_ = c.Close()
			}
		}
	}()
	t.Cleanup(func() {
		_ = l.Close()
		<-done
		for _, c := range held {
			_ = c.Close()
		}
	})
	host, port, _ := net.SplitHostPort(l.Addr().String())
	return "postgres://outbox:s3cret@" + host + ":" + port + "/outbox?sslmode=disable"
}

func (f *fakeDB) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.dialed
}

// listenFor runs Listen on url with cfg for d and returns once its wake
// channel closed after ctx ended.
func listenFor(t *testing.T, url string, cfg relay.ListenConfig, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	wake, err := relay.Listen(ctx, url, outbox.MustParseTable("outbox"), cfg)
	if err != nil {
		t.Fatal(err)
	}
	timeout := time.After(d + 5*time.Second)
	for {
		select {
		case _, ok := <-wake:
			if !ok {
				return
			}
		case <-timeout:
			t.Fatal("the wake channel was not closed after the context ended")
		}
	}
}

// TestListenBacksOff: while the database refuses it, the listener tries
// again after MinBackoff, doubling up to MaxBackoff; both default when
// left out (100 ms and 5 s).
func TestListenBacksOff(t *testing.T) {
	for _, c := range []struct {
		name      string
		cfg       relay.ListenConfig
		d         time.Duration
		low, high int
	}{
		// Dials at about 0, 100, 300, 700 and 1500 ms: 5. Without a
		// backoff hundreds, without the doubling 16, without a default
		// maximum (zero) as many as without a backoff.
		{"defaults", relay.ListenConfig{}, 1600 * time.Millisecond, 4, 7},
		// 0, 40, 120, 280, 440, ...: 13 in 2 s; without the cap 6.
		{"given", relay.ListenConfig{MinBackoff: 40 * time.Millisecond, MaxBackoff: 160 * time.Millisecond}, 2 * time.Second, 9, 25},
		// A maximum below the minimum is the larger of 5 s and the
		// minimum: 0, 300, 900 ms.
		{"maximum below the minimum", relay.ListenConfig{MinBackoff: 300 * time.Millisecond, MaxBackoff: time.Millisecond}, 1200 * time.Millisecond, 2, 4},
	} {
		t.Run(c.name, func(t *testing.T) {
			var db fakeDB
			listenFor(t, db.start(t, false), c.cfg, c.d)
			if n := db.count(); n < c.low || n > c.high {
				t.Errorf("dialed %d times in %s, want %d to %d", n, c.d, c.low, c.high)
			}
		})
	}
}

// TestListenConnectTimeout: a connect to a database that never answers
// waits ConnectTimeout (default 10 s) before it gives up, so a second of
// it sees one dial; a short ConnectTimeout gives up sooner and dials again.
func TestListenConnectTimeout(t *testing.T) {
	var db fakeDB
	listenFor(t, db.start(t, true), relay.ListenConfig{MinBackoff: 10 * time.Millisecond, MaxBackoff: 10 * time.Millisecond}, time.Second)
	if n := db.count(); n != 1 {
		t.Errorf("dialed %d times in 1 s with the default connect timeout, want 1", n)
	}
	var short fakeDB
	listenFor(t, short.start(t, true), relay.ListenConfig{MinBackoff: 10 * time.Millisecond, MaxBackoff: 10 * time.Millisecond, ConnectTimeout: 100 * time.Millisecond}, time.Second)
	if n := short.count(); n < 3 {
		t.Errorf("dialed %d times in 1 s with a connect timeout of 100 ms, want several", n)
	}
}
