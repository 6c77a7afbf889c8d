package chaos

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/outboxlab/outboxlab/internal/bound"

	toxiproxy "github.com/Shopify/toxiproxy/v2/client"

	"github.com/outboxlab/outboxlab/history"
)

// Stream is the direction of a link a toxic applies to: downstream is from
// the server back to the client (toxiproxy's default), upstream from the
// client to the server.
type Stream string

// Streams.
const (
	Downstream Stream = "downstream"
	Upstream   Stream = "upstream"
)

// Link is a named network link that runs through a toxiproxy proxy, such
// as "relay->broker" or "app->db". Its faults are named after it, and
// carry its class and targets.
type Link struct {
	name    string
	class   history.FaultClass
	targets []string
	proxy   *toxiproxy.Proxy
	client  *toxiproxy.Client
}

// NewLink returns the link through proxy p, named name (p.Name when name
// is empty). Its faults are of class history.ClassOther and hit every
// process until WithClass and WithTargets say what the link's far end is
// and who uses it: a link to the broker is history.ClassBroker for the processes
// that publish or consume through it.
func NewLink(name string, p *toxiproxy.Proxy) *Link {
	if name == "" {
		name = p.Name
	}
	return &Link{name: name, class: history.ClassOther, proxy: p}
}

// LinkByName looks up the proxy named proxyName through c and returns its
// link, named name (proxyName when empty). The link reads the proxy afresh
// before enabling or disabling it, so it never writes back a stale copy.
func LinkByName(ctx context.Context, c *toxiproxy.Client, proxyName, name string) (*Link, error) {
	var p *toxiproxy.Proxy
	err := withContext(ctx, func() (err error) {
		p, err = c.Proxy(proxyName)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("looking up toxiproxy proxy %q: %w", proxyName, err)
	}
	l := NewLink(name, p)
	l.client = c
	return l, nil
}

// WithClass sets the class of the link's faults and returns l.
func (l *Link) WithClass(class history.FaultClass) *Link {
	l.class = class
	return l
}

// WithTargets sets the processes the link's faults affect and returns l.
func (l *Link) WithTargets(processes ...string) *Link {
	l.targets = processes
	return l
}

// Class returns the class of the link's faults.
func (l *Link) Class() history.FaultClass { return l.class }

// Name returns the link's name.
func (l *Link) Name() string { return l.name }

// Proxy returns the link's toxiproxy proxy.
func (l *Link) Proxy() *toxiproxy.Proxy { return l.proxy }

// fresh returns a copy of the proxy to call Enable or Disable on: read
// again from the server when the link has a client, else a copy of the
// proxy it was built with (so the caller's struct is never written).
func (l *Link) fresh() (*toxiproxy.Proxy, error) {
	if l.client != nil {
		p, err := l.client.Proxy(l.proxy.Name)
		if err != nil {
			return nil, fmt.Errorf("reading proxy %q: %w", l.proxy.Name, err)
		}
		return p, nil
	}
	cp := *l.proxy
	cp.ActiveToxics = nil
	return &cp, nil
}

// withContext runs fn, returning early with ctx's error when ctx ends
// first (the toxiproxy client takes no context; fn then finishes in the
// background).
func withContext(ctx context.Context, fn func() error) error { return bound.Call(ctx, fn, nil) }

// isHTTPStatus reports whether err is the toxiproxy client's error for
// the given HTTP status; the client exposes it only as text.
func isHTTPStatus(err error, code int) bool {
	return err != nil && strings.Contains(err.Error(), fmt.Sprintf("HTTP %d", code))
}

// LinkDown is the fault that takes a link down: the proxy is disabled, so
// every open connection through it drops and new ones are refused.
type LinkDown struct {
	marks
	link *Link
	name string
	mu   sync.Mutex
}

// Down returns the fault that disables l's proxy; it is named
// "<link> down".
func Down(l *Link) *LinkDown {
	return &LinkDown{link: l, name: l.name + " " + KindDown}
}

// WithName renames the fault and returns it.
func (f *LinkDown) WithName(name string) *LinkDown { f.name = name; return f }

// Name returns the fault's name.
func (f *LinkDown) Name() string { return f.name }

// Class returns the link's class.
func (f *LinkDown) Class() history.FaultClass { return f.link.class }

// Targets returns the link's targets.
func (f *LinkDown) Targets() []string { return f.link.targets }

// Kind returns KindDown.
func (f *LinkDown) Kind() string { return KindDown }

// Inject disables the proxy.
func (f *LinkDown) Inject(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.active.Store(true)
	err := withContext(ctx, func() error {
		p, err := f.link.fresh()
		if err != nil {
			return err
		}
		return p.Disable()
	})
	if err != nil {
		return fmt.Errorf("injecting %s: disabling proxy %q: %w", f.name, f.link.proxy.Name, err)
	}
	f.hits.Add(1)
	return nil
}

// Heal enables the proxy again.
func (f *LinkDown) Heal(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.active.Load() {
		return nil
	}
	err := withContext(ctx, func() error {
		p, err := f.link.fresh()
		if err != nil {
			return err
		}
		return p.Enable()
	})
	if err != nil {
		return fmt.Errorf("healing %s: enabling proxy %q: %w", f.name, f.link.proxy.Name, err)
	}
	f.active.Store(false)
	return nil
}

// Toxic is a fault that adds one toxiproxy toxic, at toxicity 1.0, to one
// stream of a link while it is injected, and removes it when healed.
type Toxic struct {
	marks
	link      *Link
	name      string
	toxicType string
	stream    Stream
	attrs     toxiproxy.Attributes
	mu        sync.Mutex
}

func newToxic(l *Link, toxicType string, stream Stream, attrs toxiproxy.Attributes) *Toxic {
	if stream == "" {
		stream = Downstream
	}
	name := l.name + " " + toxicType
	if stream == Upstream {
		name += " upstream"
	}
	return &Toxic{link: l, name: name, toxicType: toxicType, stream: stream, attrs: attrs}
}

// Timeout returns the fault that stops all data on stream of l: data is
// dropped, and connections are closed after `after` (never when after is
// 0, a black hole). Named "<link> timeout", plus " upstream" for the
// upstream stream.
func Timeout(l *Link, stream Stream, after time.Duration) *Toxic {
	return newToxic(l, KindTimeout, stream, toxiproxy.Attributes{"timeout": after.Milliseconds()})
}

// Latency returns the fault that delays data on stream of l by latency,
// plus or minus jitter. Named "<link> latency" (+ " upstream").
func Latency(l *Link, stream Stream, latency, jitter time.Duration) *Toxic {
	return newToxic(l, KindLatency, stream, toxiproxy.Attributes{
		"latency": latency.Milliseconds(),
		"jitter":  jitter.Milliseconds(),
	})
}

// ResetPeer returns the fault that resets connections (TCP RST) on stream
// of l after `after` (at once when 0). Named "<link> reset_peer" (+
// " upstream").
func ResetPeer(l *Link, stream Stream, after time.Duration) *Toxic {
	return newToxic(l, KindResetPeer, stream, toxiproxy.Attributes{"timeout": after.Milliseconds()})
}

// Bandwidth returns the fault that limits stream of l to kbPerSecond
// kilobytes per second. Named "<link> bandwidth" (+ " upstream").
func Bandwidth(l *Link, stream Stream, kbPerSecond int64) *Toxic {
	return newToxic(l, KindBandwidth, stream, toxiproxy.Attributes{"rate": kbPerSecond})
}

// Slicer returns the fault that cuts data on stream of l into pieces of
// averageSize bytes (plus or minus variation), delay apart. Named
// "<link> slicer" (+ " upstream").
func Slicer(l *Link, stream Stream, averageSize, variation int, delay time.Duration) *Toxic {
	return newToxic(l, KindSlicer, stream, toxiproxy.Attributes{
		"average_size":   averageSize,
		"size_variation": variation,
		"delay":          delay.Microseconds(),
	})
}

// WithName renames the fault and returns it.
func (f *Toxic) WithName(name string) *Toxic { f.name = name; return f }

// Name returns the fault's name.
func (f *Toxic) Name() string { return f.name }

// Class returns the link's class.
func (f *Toxic) Class() history.FaultClass { return f.link.class }

// Targets returns the link's targets.
func (f *Toxic) Targets() []string { return f.link.targets }

// Kind returns the toxic's type: KindTimeout, KindLatency, ...
func (f *Toxic) Kind() string { return f.toxicType }

// Stream returns the stream the toxic applies to.
func (f *Toxic) Stream() Stream { return f.stream }

// toxicName is the toxic's name inside toxiproxy, derived from the fault's
// name so that distinct faults never share a toxic.
func (f *Toxic) toxicName() string {
	return "chaos_" + strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-':
			return r
		}
		return '_'
	}, f.name)
}

// Inject adds the toxic (or updates it, when it is there already).
func (f *Toxic) Inject(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.active.Store(true)
	p := f.link.proxy
	err := withContext(ctx, func() error {
		_, err := p.AddToxic(f.toxicName(), f.toxicType, string(f.stream), 1.0, f.attrs)
		if isHTTPStatus(err, 409) {
			_, err = p.UpdateToxic(f.toxicName(), 1.0, f.attrs)
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("injecting %s: adding %s toxic to proxy %q: %w", f.name, f.toxicType, p.Name, err)
	}
	f.hits.Add(1)
	return nil
}

// Heal removes the toxic; a toxic already gone is healed.
func (f *Toxic) Heal(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.active.Load() {
		return nil
	}
	p := f.link.proxy
	err := withContext(ctx, func() error {
		err := p.RemoveToxic(f.toxicName())
		if isHTTPStatus(err, 404) {
			return nil
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("healing %s: removing toxic from proxy %q: %w", f.name, p.Name, err)
	}
	f.active.Store(false)
	return nil
}
