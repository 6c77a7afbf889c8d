package relay_test

import (
	"context"
	"net"
	"net/url"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxlab/outboxlab/outbox"
	"github.com/outboxlab/outboxlab/relay"
	"github.com/outboxlab/outboxlab/testenv/pgserver"
	"github.com/outboxlab/outboxlab/testenv/tcpfake"
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
	addr := tcpfake.Listen(t, func(net.Conn) bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		if now := time.Now(); now.Sub(f.last) > 20*time.Millisecond {
			f.dialed++
			f.last = now
		}
		return silent
	})
	host, port, _ := net.SplitHostPort(addr)
	return "postgres://outbox:s3cret@" + host + ":" + port + "/outbox?sslmode=disable"
}

func (f *fakeDB) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.dialed
}

// expectWake waits up to within for a wake-up on wake; a closed channel
// or none in time fails the test, naming what should have woken it.
func expectWake(t testing.TB, wake <-chan struct{}, within time.Duration, what string) {
	t.Helper()
	select {
	case _, ok := <-wake:
		if !ok {
			t.Fatalf("%s: the wake channel closed", what)
		}
	case <-time.After(within):
		t.Fatalf("%s: no wake-up within %v", what, within)
	}
}

// expectWakeClosed checks that wake closes within the given time of its
// listener's context ending: one coalesced wake-up may still be pending,
// a second one fails the test.
func expectWakeClosed(t testing.TB, wake <-chan struct{}, within time.Duration) {
	t.Helper()
	select {
	case _, ok := <-wake:
		if ok {
			if _, ok := <-wake; ok {
				t.Fatal("the wake channel stayed open after the context ended")
			}
		}
	case <-time.After(within):
		t.Fatalf("the wake channel was not closed within %v of the context ending", within)
	}
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
		// A maximum equal to the minimum holds the backoff there: every
		// 50 ms, 20 in 1 s; were it taken for a maximum below the
		// minimum (5 s), 5.
		{"maximum equal to the minimum", relay.ListenConfig{MinBackoff: 50 * time.Millisecond, MaxBackoff: 50 * time.Millisecond}, time.Second, 12, 22},
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

// TestListenOnPostgreSQL runs the listener against a real PostgreSQL (the
// local binaries, under -short too): it wakes once connected, on each
// NOTIFY of its table's channel, keeps one connection through quiet
// health intervals, listens again with a wake-up after its backend is
// terminated, and closes its channel when ctx ends.
func TestListenOnPostgreSQL(t *testing.T) {
	srv := pgserver.StartT(t)
	u, err := url.Parse(srv.AdminURL())
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("application_name", "listen-test")
	u.RawQuery = q.Encode()
	table := outbox.MustParseTable("outbox")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wake, err := relay.Listen(ctx, u.String(), table, relay.ListenConfig{MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond,
		HealthInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	admin, err := pgx.Connect(ctx, srv.AdminURL())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	backends := func() []int {
		t.Helper()
		rows, err := admin.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE application_name = 'listen-test' ORDER BY pid`)
		if err != nil {
			t.Fatal(err)
		}
		pids, err := pgx.CollectRows(rows, pgx.RowTo[int])
		if err != nil {
			t.Fatal(err)
		}
		return pids
	}
	notify := func() {
		t.Helper()
		if _, err := admin.Exec(ctx, `SELECT pg_notify($1, '')`, table.Channel()); err != nil {
			t.Fatal(err)
		}
	}
	expectWake(t, wake, 5*time.Second, "connected")
	first := backends()
	if len(first) != 1 {
		t.Fatalf("listener backends %v, want one", first)
	}
	notify()
	expectWake(t, wake, 5*time.Second, "a notification")
	// Ten quiet health intervals: pinged, never reconnected.
	time.Sleep(500 * time.Millisecond)
	if got := backends(); !slices.Equal(got, first) {
		t.Fatalf("listener backends %v after quiet health intervals, want %v (no reconnect)", got, first)
	}
	select {
	case <-wake:
		t.Fatal("a wake-up with no notification and no reconnect")
	default:
	}
	notify()
	expectWake(t, wake, 5*time.Second, "a notification after the health checks")
	if _, err := admin.Exec(ctx, `SELECT pg_terminate_backend($1)`, first[0]); err != nil {
		t.Fatal(err)
	}
	expectWake(t, wake, 5*time.Second, "listening again after the backend was terminated")
	deadline := time.Now().Add(5 * time.Second)
	for got := backends(); len(got) != 1 || got[0] == first[0]; got = backends() {
		if time.Now().After(deadline) {
			t.Fatalf("listener backends %v, want one new one", got)
		}
		time.Sleep(10 * time.Millisecond)
	}
	notify()
	expectWake(t, wake, 5*time.Second, "a notification on the new connection")
	cancel()
	expectWakeClosed(t, wake, 5*time.Second)
}

// TestListenQuietByDefault: with the default health interval (30 s) a
// listener on a quiet channel sends the database nothing for a while:
// its backend's last query stays the LISTEN.
func TestListenQuietByDefault(t *testing.T) {
	srv := pgserver.StartT(t)
	u, err := url.Parse(srv.AdminURL())
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("application_name", "listen-quiet")
	u.RawQuery = q.Encode()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wake, err := relay.Listen(ctx, u.String(), outbox.MustParseTable("outbox"), relay.ListenConfig{})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-wake:
	case <-time.After(5 * time.Second):
		t.Fatal("no wake-up once connected")
	}
	admin, err := pgx.Connect(ctx, srv.AdminURL())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	last := func() (string, time.Time) {
		t.Helper()
		var (
			query string
			at    time.Time
		)
		if err := admin.QueryRow(ctx, `SELECT query, query_start FROM pg_stat_activity WHERE application_name = 'listen-quiet'`).Scan(&query, &at); err != nil {
			t.Fatal(err)
		}
		return query, at
	}
	q0, at0 := last()
	time.Sleep(300 * time.Millisecond)
	if q1, at1 := last(); q1 != q0 || !at1.Equal(at0) {
		t.Fatalf("the quiet listener sent %q at %s after %q at %s, want nothing within 300 ms", q1, at1, q0, at0)
	}
	cancel()
	for range wake {
	}
}
