package chaos

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"

	"github.com/outboxlab/outboxlab/history"
)

// Dialer is the network path of one client that runs in the harness's own
// process (a consumer): it dials through a net.Dialer and keeps the
// connections it made, so that a fault can cut that client alone, where a
// toxiproxy link would cut every client that shares it. While cut, its
// connections are closed (the server sees them drop, as after a
// partition) and new dials are refused.
type Dialer struct {
	mu    sync.Mutex
	cut   bool
	conns map[net.Conn]struct{}
}

// ErrDialerCut is what a dial through a cut Dialer returns.
var ErrDialerCut = errors.New("link cut by the harness")

// DialContext dials network and addr, or fails with ErrDialerCut while
// the dialer is cut.
func (d *Dialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	d.mu.Lock()
	cut := d.cut
	d.mu.Unlock()
	if cut {
		return nil, fmt.Errorf("dialing %s: %w", addr, ErrDialerCut)
	}
	var nd net.Dialer
	c, err := nd.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cut {
		_ = c.Close()
		return nil, fmt.Errorf("dialing %s: %w", addr, ErrDialerCut)
	}
	if d.conns == nil {
		d.conns = map[net.Conn]struct{}{}
	}
	tracked := &dialedConn{Conn: c, d: d}
	d.conns[tracked] = struct{}{}
	return tracked, nil
}

// Cut closes every open connection and refuses new dials until Restore;
// it returns how many connections it closed.
func (d *Dialer) Cut() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.cut = true
	n := 0
	for c := range d.conns {
		_ = c.(*dialedConn).Conn.Close()
		delete(d.conns, c)
		n++
	}
	return n
}

// Restore lets dials through again.
func (d *Dialer) Restore() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.cut = false
}

// dialedConn forgets itself in its dialer when closed.
type dialedConn struct {
	net.Conn
	d *Dialer
}

func (c *dialedConn) Close() error {
	c.d.mu.Lock()
	delete(c.d.conns, c)
	c.d.mu.Unlock()
	return c.Conn.Close()
}

// DialerDown is the fault that cuts a Dialer: its client's connections
// drop and it cannot reconnect until the heal. It fires only when it
// closed a connection: a client that was not connected was not cut off
// from anything.
type DialerDown struct {
	marks
	d     *Dialer
	name  string
	class history.FaultClass
}

// CutDialer returns the fault that cuts d, named name, of the given class
// (the service at the far end), affecting targets.
func CutDialer(name string, d *Dialer, class history.FaultClass, targets ...string) *DialerDown {
	f := &DialerDown{d: d, name: name, class: class}
	f.targets = targets
	return f
}

// Name returns the fault's name.
func (f *DialerDown) Name() string { return f.name }

// Class returns the class it was made with.
func (f *DialerDown) Class() history.FaultClass { return f.class }

// Kind returns KindDown.
func (f *DialerDown) Kind() string { return KindDown }

// Inject cuts the dialer; it counts a hit when a connection dropped, and
// returns a NoBite error when there was none to drop.
func (f *DialerDown) Inject(ctx context.Context) error {
	f.active.Store(true)
	if f.d.Cut() == 0 {
		return &NoBite{Fault: f.name, Why: "the client had no connection open to cut"}
	}
	f.hits.Add(1)
	return nil
}

// Heal lets the client dial again.
func (f *DialerDown) Heal(ctx context.Context) error {
	if !f.active.Load() {
		return nil
	}
	f.d.Restore()
	f.active.Store(false)
	return nil
}
