package consumer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/outboxlab/outboxlab/internal/bound"
	"github.com/outboxlab/outboxlab/relay"

	amqp "github.com/rabbitmq/amqp091-go"
)

// AMQPSource feeds a Consumer from a RabbitMQ queue with manual acks. It
// reconnects after broker outages until its context ends. Classic queues
// do not count deliveries, so the source counts them per message id in a
// bounded in-memory map; a count survives reconnects but not a restart of
// the process.
type AMQPSource struct {
	// URL is the broker's AMQP URI. Required. Several URIs separated by
	// commas name the nodes of one cluster (relay.SplitAMQPURLs): the
	// source consumes from one and, when it cannot connect or loses its
	// connection, moves on to the next.
	URL string
	// Queue is consumed. Required; it should dead-letter somewhere (see
	// relay.DeclareTopology) so that MaxDeliveries has a destination.
	Queue string
	// Prefetch is the channel's QoS prefetch count. Default 16.
	Prefetch int
	// Tag is the consumer tag; empty lets the library choose.
	Tag string
	// HandleTimeout bounds one delivery: inbox transaction and ack.
	// Default 10 s.
	HandleTimeout time.Duration
	// MinBackoff and MaxBackoff bound the delay between reconnects.
	// Defaults 100 ms and 5 s.
	MinBackoff, MaxBackoff time.Duration
	// MaxTracked bounds the delivery counts kept. Default 100,000.
	MaxTracked int
	// backoff, when set, waits d between two rounds of dials in place of
	// a timer: a test's hook, which sees every wait the source asks for.
	backoff func(ctx context.Context, d time.Duration)
	// Logger receives connection events; nil discards them.
	Logger *slog.Logger
	// Observe, when set, is called after each delivery was handled.
	Observe func(m Message, o Outcome, err error)
	// Wrap, when set, wraps each delivery before the consumer sees it; a
	// test uses it to lose an ack after the commit.
	Wrap func(Delivery) Delivery
	// Topology, when set, is declared (idempotently) on every connection
	// before consuming: a consumer that fails over to another node, or
	// whose queue went with a lost node, declares what it needs again.
	// Its Queue must be Queue.
	Topology *relay.Topology
	// Identity says where a delivery carries its event id; the zero value
	// reads the AMQP message_id.
	Identity Identity
	// Dial, when set, opens the network connection to the broker in place
	// of a net.Dialer. A harness gives each consumer of its own process a
	// dialer it can cut (chaos.Dialer), to partition one consumer from
	// the broker while the others keep their links.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
}

// Run consumes queue at url into c with prefetch until ctx ends; it is
// AMQPSource.Run with defaults.
func Run(ctx context.Context, url, queue string, c *Consumer, prefetch int) error {
	s := &AMQPSource{URL: url, Queue: queue, Prefetch: prefetch}
	return s.Run(ctx, c)
}

// Run consumes until ctx ends and returns nil then; the delivery in hand
// when ctx ends is finished first. Only a malformed configuration is an
// error: an unreachable broker is retried.
func (s *AMQPSource) Run(ctx context.Context, c *Consumer) error {
	if s.URL == "" || s.Queue == "" || c == nil {
		return errors.New("amqp source: URL, Queue and a consumer are required")
	}
	if s.Topology != nil && s.Topology.Queue != s.Queue {
		return fmt.Errorf("amqp source: the topology declares queue %q, and the source consumes %q", s.Topology.Queue, s.Queue)
	}
	urls, err := relay.SplitAMQPURLs(s.URL)
	if err != nil {
		return fmt.Errorf("amqp source: %w", err)
	}
	if s.Prefetch <= 0 {
		s.Prefetch = 16
	}
	if s.HandleTimeout <= 0 {
		s.HandleTimeout = 10 * time.Second
	}
	if s.MinBackoff <= 0 {
		s.MinBackoff = 100 * time.Millisecond
	}
	if s.MaxBackoff < s.MinBackoff {
		s.MaxBackoff = max(5*time.Second, s.MinBackoff)
	}
	if s.MaxTracked <= 0 {
		s.MaxTracked = 100_000
	}
	log := s.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	counts := newDeliveryCounts(s.MaxTracked)
	backoff := s.MinBackoff
	node := 0
	for ctx.Err() == nil {
		sess, deliveries, err := s.connect(ctx, urls[node])
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			node = (node + 1) % len(urls)
			if node != 0 {
				// The next node is tried at once; a round of them all
				// failing backs off.
				log.Warn("amqp source: connecting failed, trying the next node", "queue", s.Queue, "err", err)
				continue
			}
			log.Warn("amqp source: connecting failed", "queue", s.Queue, "err", err, "retry_in", backoff)
			if s.backoff != nil {
				s.backoff(ctx, backoff)
			} else {
				select {
				case <-ctx.Done():
				case <-time.After(backoff):
				}
			}
			backoff = min(2*backoff, s.MaxBackoff)
			continue
		}
		backoff = s.MinBackoff
		log.Info("amqp source: consuming", "queue", s.Queue)
		err = s.consume(ctx, c, sess, deliveries, counts)
		sess.close()
		if ctx.Err() == nil {
			log.Warn("amqp source: connection lost", "queue", s.Queue, "err", err)
			node = (node + 1) % len(urls)
		}
	}
	return nil
}

// consume handles deliveries until the channel closes or ctx ends.
func (s *AMQPSource) consume(ctx context.Context, c *Consumer, sess *amqpConn, deliveries <-chan amqp.Delivery, counts *deliveryCounts) error {
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-sess.closed:
			return errors.New("channel closed")
		case d, ok := <-deliveries:
			if !ok {
				return errors.New("delivery channel closed")
			}
			id := s.Identity.ID(d)
			m := Message{
				ID:            id,
				Type:          s.Identity.Type(d),
				CorrelationID: d.CorrelationId,
				Payload:       d.Body,
				Redelivered:   d.Redelivered,
				Deliveries:    counts.inc(id),
				DeliveryTag:   d.DeliveryTag,
			}
			if n, ok := d.Headers["x-delivery-count"]; ok {
				if k, ok := asInt(n); ok {
					m.Deliveries = k + 1
				}
			}
			var del Delivery = &amqpDelivery{d: d, m: m, sess: sess}
			if s.Wrap != nil {
				del = s.Wrap(del)
			}
			// The delivery in hand is finished even when ctx ends now.
			hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.HandleTimeout)
			out, err := c.Handle(hctx, del)
			cancel()
			if err == nil && out != Requeued {
				counts.forget(m.ID)
			}
			if s.Observe != nil {
				s.Observe(m, out, err)
			}
			if err != nil && errors.Is(err, ErrAckFailed) {
				return err
			}
		}
	}
}

// ErrAckFailed wraps an ack or nack that could not be sent: the channel is
// gone and the broker will redeliver.
var ErrAckFailed = errors.New("ack failed")

func asInt(v any) (int, bool) {
	switch n := v.(type) {
	case int64:
		return int(n), true
	case int32:
		return int(n), true
	case int:
		return n, true
	}
	return 0, false
}

// amqpConn is one connection and channel of the source.
type amqpConn struct {
	conn   *amqp.Connection
	ch     *amqp.Channel
	closed chan *amqp.Error

	mu  sync.Mutex
	raw net.Conn
}

func (c *amqpConn) close() {
	if c.conn != nil {
		_ = c.conn.CloseDeadline(time.Now().Add(time.Second))
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.raw != nil {
		_ = c.raw.Close()
	}
}

// connect dials, sets QoS and starts consuming, bounded by ctx and a 10 s
// timeout.
func (s *AMQPSource) connect(ctx context.Context, url string) (*amqpConn, <-chan amqp.Delivery, error) {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c := &amqpConn{}
	cfg := amqp.Config{
		Heartbeat: 10 * time.Second,
		Locale:    "en_US",
		Dial: func(network, addr string) (net.Conn, error) {
			dial := s.Dial
			if dial == nil {
				var d net.Dialer
				dial = d.DialContext
			}
			raw, err := dial(cctx, network, addr)
			if err != nil {
				return nil, err
			}
			_ = raw.SetDeadline(time.Now().Add(10 * time.Second))
			c.mu.Lock()
			c.raw = raw
			c.mu.Unlock()
			return raw, nil
		},
	}
	var deliveries <-chan amqp.Delivery
	setup := func() error {
		conn, err := amqp.DialConfig(url, cfg)
		if err != nil {
			return fmt.Errorf("connecting: %w", err)
		}
		c.conn = conn
		ch, err := conn.Channel()
		if err != nil {
			return fmt.Errorf("opening channel: %w", err)
		}
		c.ch = ch
		c.closed = ch.NotifyClose(make(chan *amqp.Error, 1))
		if err := ch.Qos(s.Prefetch, 0, false); err != nil {
			return fmt.Errorf("setting prefetch: %w", err)
		}
		if s.Topology != nil {
			if err := s.Topology.DeclareOn(ch); err != nil {
				return err
			}
		}
		deliveries, err = ch.Consume(s.Queue, s.Tag, false, false, false, false, nil)
		if err != nil {
			return fmt.Errorf("consuming %q: %w", s.Queue, err)
		}
		return nil
	}
	if err := c.bounded(cctx, setup); err != nil {
		c.close()
		return nil, nil, err
	}
	return c, deliveries, nil
}

// bounded runs fn, a blocking amqp091 call that ignores contexts, and
// closes the socket to fail it when ctx ends first.
func (c *amqpConn) bounded(ctx context.Context, fn func() error) error {
	return bound.Call(ctx, fn, func() {
		c.mu.Lock()
		if c.raw != nil {
			_ = c.raw.Close()
		}
		c.mu.Unlock()
	})
}

// amqpDelivery adapts an amqp091 delivery; its ack and nack are bounded by
// their context.
type amqpDelivery struct {
	d    amqp.Delivery
	m    Message
	sess *amqpConn
}

func (d *amqpDelivery) Message() Message { return d.m }

func (d *amqpDelivery) Ack(ctx context.Context) error {
	if err := d.sess.bounded(ctx, func() error { return d.d.Ack(false) }); err != nil {
		return fmt.Errorf("%w: %w", ErrAckFailed, err)
	}
	return nil
}

func (d *amqpDelivery) Nack(ctx context.Context, requeue bool) error {
	if err := d.sess.bounded(ctx, func() error { return d.d.Nack(false, requeue) }); err != nil {
		return fmt.Errorf("%w: %w", ErrAckFailed, err)
	}
	return nil
}

// deliveryCounts counts deliveries per message id, forgetting the oldest
// ids beyond its bound. order lists the ids in the order they were first
// counted, each entry with the generation of its count: an id forgotten
// and counted again has a new generation, so the stale entry it left
// behind never evicts the new count.
type deliveryCounts struct {
	max   int
	gen   uint64
	n     map[string]tracked
	order []orderEntry
}

// tracked is one id's count and the generation of its order entry.
type tracked struct {
	count int
	gen   uint64
}

type orderEntry struct {
	id  string
	gen uint64
}

func newDeliveryCounts(max int) *deliveryCounts {
	return &deliveryCounts{max: max, n: make(map[string]tracked)}
}

// live reports whether e is the order entry of a count still kept.
func (c *deliveryCounts) live(e orderEntry) bool {
	t, ok := c.n[e.id]
	return ok && t.gen == e.gen
}

// inc counts one more delivery of id and returns the count so far.
func (c *deliveryCounts) inc(id string) int {
	if id == "" {
		return 1
	}
	t, ok := c.n[id]
	if !ok {
		for len(c.n) >= c.max && len(c.order) > 0 {
			if e := c.order[0]; c.live(e) {
				delete(c.n, e.id)
			}
			c.order = c.order[1:]
		}
		c.gen++
		t = tracked{gen: c.gen}
		c.order = append(c.order, orderEntry{id, c.gen})
	}
	t.count++
	c.n[id] = t
	return t.count
}

// forget drops id once it is settled for good.
func (c *deliveryCounts) forget(id string) {
	delete(c.n, id)
	// order keeps the id's entry until it reaches the front; compact
	// when it is mostly stale (how often changes memory only: eviction
	// skips stale entries).
	if len(c.order) > 2*len(c.n)+64 {
		kept := c.order[:0]
		for _, e := range c.order {
			if c.live(e) {
				kept = append(kept, e)
			}
		}
		c.order = kept
	}
}
