// Package amqptest is a small AMQP 0-9-1 broker in the test's own process,
// for unit tests of the AMQP code of relay and consumer without RabbitMQ
// (as net/http/httptest is for HTTP): it speaks the wire protocol as far as
// a publisher in confirm mode and a consumer with manual acks need
// (handshake, channels, confirms, exchanges and queues declared and bound,
// publishes acked, nacked or returned, deliveries and their acks), keeps
// everything in memory, and lets a test refuse publishes, drop
// connections and read what arrived. Routing is by binding key, which is
// either a routing key itself or "#" (every key). It is no broker to
// measure anything against: the chaos tiers run RabbitMQ.
package amqptest

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
)

// Message is one message the broker took.
type Message struct {
	Exchange, RoutingKey string
	Mandatory            bool
	// MessageID, Type, CorrelationID, ContentType and DeliveryMode are
	// the properties the publisher set.
	MessageID, Type, CorrelationID, ContentType string
	DeliveryMode                                uint8
	Body                                        []byte
	// DeliveryCount, when above 0, is the x-delivery-count header of a
	// message Enqueue put in a queue, as a quorum queue counts a
	// message's earlier deliveries.
	DeliveryCount int64

	header      []byte // the raw content header
	queue       string // the queue it waits in, once routed
	redelivered bool
}

// Ack is a consumer's answer to one delivery.
type Ack struct {
	MessageID string
	// Kind is "ack", "nack" or "reject"; Requeue is its requeue flag.
	Kind    string
	Requeue bool
}

// Server is the broker. Its zero value is not usable: call Start.
type Server struct {
	l   net.Listener
	url string

	mu        sync.Mutex
	nack      bool
	hold      bool
	refuse    bool
	mute      bool
	bindings  map[string][]string // queue -> binding keys
	queues    map[string][]*Message
	published []Message
	acks      []Ack
	consumers []*consumer
	conns     map[*conn]bool
	dials     int
	beats     []uint16
	wg        sync.WaitGroup
}

type consumer struct {
	c     *conn
	ch    uint16
	tag   string
	queue string
}

// Start starts a broker on a loopback port and stops it when the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("amqptest: %v", err)
	}
	s := &Server{l: l, url: "amqp://guest:guest@" + l.Addr().String() + "/",
		bindings: map[string][]string{}, queues: map[string][]*Message{}, conns: map[*conn]bool{}}
	s.wg.Add(1)
	go s.accept()
	t.Cleanup(s.Close)
	return s
}

// URL is the broker's AMQP URI.
func (s *Server) URL() string { return s.url }

// Close stops accepting, drops every connection and waits for them.
func (s *Server) Close() {
	_ = s.l.Close()
	s.DropConnections()
	s.wg.Wait()
}

// DropConnections closes every client connection, as a broker restart
// does.
func (s *Server) DropConnections() {
	s.mu.Lock()
	for c := range s.conns {
		_ = c.nc.Close()
	}
	s.mu.Unlock()
}

// Dials counts the connections clients opened.
func (s *Server) Dials() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dials
}

// Heartbeats returns the heartbeat, in seconds, that each connection
// asked for in its connection.tune-ok, in the order they connected (the
// broker proposes none, so a client's own setting stands).
func (s *Server) Heartbeats() []uint16 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]uint16(nil), s.beats...)
}

// NackPublishes makes the broker nack every publish from now on (or ack
// again with false), as a quorum queue without a leader does.
func (s *Server) NackPublishes(on bool) {
	s.mu.Lock()
	s.nack = on
	s.mu.Unlock()
}

// HoldConfirms makes the broker take publishes without ever confirming
// them from now on (or confirm again with false), as a confirm lost on
// the way does.
func (s *Server) HoldConfirms(on bool) {
	s.mu.Lock()
	s.hold = on
	s.mu.Unlock()
}

// CloseChannelOnPublish makes the broker answer every publish from now
// on (or no longer, with false) by closing the publisher's channel with
// PRECONDITION_FAILED, as RabbitMQ closes a channel on a channel-level
// error; the connection stays open.
func (s *Server) CloseChannelOnPublish(on bool) {
	s.mu.Lock()
	s.refuse = on
	s.mu.Unlock()
}

// Mute makes the broker read every method from now on and answer none
// (or answer again with false), as a broker that hangs with its socket
// open does: a synchronous call waits for a reply that never comes.
func (s *Server) Mute(on bool) {
	s.mu.Lock()
	s.mute = on
	s.mu.Unlock()
}

// Published returns the messages the broker took, routed or not.
func (s *Server) Published() []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Message(nil), s.published...)
}

// Acks returns the consumers' answers to deliveries, in order.
func (s *Server) Acks() []Ack {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Ack(nil), s.acks...)
}

// Queued returns how many messages wait in queue for a consumer.
func (s *Server) Queued(queue string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.queues[queue])
}

// Bindings returns the binding keys of queue.
func (s *Server) Bindings(queue string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.bindings[queue]...)
}

// Enqueue puts a message with id, type and body in queue, declaring the
// queue, as a publisher's routed message would be; a consumer of queue
// gets it at once.
func (s *Server) Enqueue(queue, id, typ string, body []byte) {
	s.EnqueueCounted(queue, id, typ, body, 0)
}

// EnqueueCounted is Enqueue with the x-delivery-count header a quorum
// queue sets on a message delivered n times before (none for 0).
func (s *Server) EnqueueCounted(queue, id, typ string, body []byte, n int64) {
	m := &Message{MessageID: id, Type: typ, RoutingKey: typ, Body: body, ContentType: "application/json", DeliveryMode: 2, DeliveryCount: n}
	m.header = buildHeader(m)
	s.mu.Lock()
	if _, ok := s.bindings[queue]; !ok {
		s.bindings[queue] = nil
	}
	s.queues[queue] = append(s.queues[queue], m)
	s.dispatchLocked()
	s.mu.Unlock()
}

func (s *Server) accept() {
	defer s.wg.Done()
	for {
		nc, err := s.l.Accept()
		if err != nil {
			return
		}
		c := &conn{s: s, nc: nc, w: bufio.NewWriter(nc), tags: map[uint16]uint64{}, unacked: map[uint64]*Message{}}
		s.mu.Lock()
		s.conns[c] = true
		s.dials++
		s.mu.Unlock()
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			_ = c.serve()
			_ = nc.Close()
			s.mu.Lock()
			delete(s.conns, c)
			kept := s.consumers[:0]
			for _, k := range s.consumers {
				if k.c != c {
					kept = append(kept, k)
				}
			}
			s.consumers = kept
			// Deliveries the connection never answered go back to their
			// queues, as RabbitMQ requeues them.
			for _, m := range c.unacked {
				s.queues[m.queue] = append(s.queues[m.queue], m)
			}
			s.dispatchLocked()
			s.mu.Unlock()
		}()
	}
}

// conn is one client connection.
type conn struct {
	s  *Server
	nc net.Conn

	wmu sync.Mutex
	w   *bufio.Writer

	// tags are the channels' publish sequence numbers in confirm mode;
	// deliveries count deliveries on the connection.
	tags       map[uint16]uint64
	deliveries uint64
	unacked    map[uint64]*Message // guarded by s.mu
}

const frameEnd = 0xCE

func (c *conn) serve() error {
	r := bufio.NewReader(c.nc)
	var proto [8]byte
	if _, err := io.ReadFull(r, proto[:]); err != nil {
		return err
	}
	if !bytes.Equal(proto[:], []byte("AMQP\x00\x00\x09\x01")) {
		return errors.New("amqptest: not AMQP 0-9-1")
	}
	start := &wbuf{}
	start.u16(10).u16(10).u8(0).u8(9)
	props := &wbuf{}
	caps := &wbuf{}
	caps.shortstr("publisher_confirms").u8('t').u8(1)
	caps.shortstr("basic.nack").u8('t').u8(1)
	props.shortstr("capabilities").u8('F').u32(uint32(len(caps.b))).raw(caps.b)
	start.u32(uint32(len(props.b))).raw(props.b).longstr("PLAIN").longstr("en_US")
	if err := c.send(1, 0, start.b); err != nil {
		return err
	}
	var pending *publish // a publish awaiting its header and body
	for {
		typ, ch, payload, err := readFrame(r)
		if err != nil {
			return err
		}
		switch typ {
		case 8: // heartbeat
			if err := c.send(8, 0, nil); err != nil {
				return err
			}
			continue
		case 2: // content header
			if pending == nil {
				return errors.New("amqptest: a content header without a publish")
			}
			pending.m.header = payload
			if len(payload) < 12 {
				return errors.New("amqptest: short content header")
			}
			pending.size = binary.BigEndian.Uint64(payload[4:12])
			parseProps(pending.m, payload[12:])
			if pending.size == 0 {
				if err := c.published(ch, pending.m); err != nil {
					return err
				}
				pending = nil
			}
			continue
		case 3: // body
			if pending == nil {
				return errors.New("amqptest: a body without a publish")
			}
			pending.m.Body = append(pending.m.Body, payload...)
			if uint64(len(pending.m.Body)) >= pending.size {
				if err := c.published(ch, pending.m); err != nil {
					return err
				}
				pending = nil
			}
			continue
		}
		c.s.mu.Lock()
		mute := c.s.mute
		c.s.mu.Unlock()
		if mute {
			continue
		}
		rd := &rbuf{b: payload}
		class, method := rd.u16(), rd.u16()
		reply := func(class, method uint16, args *wbuf) error {
			b := &wbuf{}
			b.u16(class).u16(method)
			if args != nil {
				b.raw(args.b)
			}
			return c.send(1, ch, b.b)
		}
		switch {
		case class == 10 && method == 11: // connection.start-ok
			args := &wbuf{}
			args.u16(2047).u32(131072).u16(0)
			if err := reply(10, 30, args); err != nil {
				return err
			}
		case class == 10 && method == 31: // connection.tune-ok
			rd.u16() // channel-max
			rd.u32() // frame-max
			beat := rd.u16()
			c.s.mu.Lock()
			c.s.beats = append(c.s.beats, beat)
			c.s.mu.Unlock()
		case class == 10 && method == 40: // connection.open
			if err := reply(10, 41, (&wbuf{}).shortstr("")); err != nil {
				return err
			}
		case class == 10 && method == 50: // connection.close
			_ = reply(10, 51, nil)
			return nil
		case class == 10 && method == 51: // connection.close-ok
			return nil
		case class == 20 && method == 10: // channel.open
			if err := reply(20, 11, (&wbuf{}).longstr("")); err != nil {
				return err
			}
		case class == 20 && method == 40: // channel.close
			if err := reply(20, 41, nil); err != nil {
				return err
			}
		case class == 20 && method == 41: // channel.close-ok
		case class == 85 && method == 10: // confirm.select
			c.s.mu.Lock()
			c.tags[ch] = 0
			c.s.mu.Unlock()
			if rd.u8() == 0 {
				if err := reply(85, 11, nil); err != nil {
					return err
				}
			}
		case class == 40 && (method == 10 || method == 20): // exchange.declare, delete
			if err := reply(40, method+1, nil); err != nil {
				return err
			}
		case class == 50 && method == 10: // queue.declare
			rd.u16()
			q := rd.shortstr()
			c.s.mu.Lock()
			if _, ok := c.s.bindings[q]; !ok {
				c.s.bindings[q] = nil
			}
			n := len(c.s.queues[q])
			c.s.mu.Unlock()
			if err := reply(50, 11, (&wbuf{}).shortstr(q).u32(uint32(n)).u32(0)); err != nil {
				return err
			}
		case class == 50 && (method == 20 || method == 50): // queue.bind, unbind
			rd.u16()
			q, _, key := rd.shortstr(), rd.shortstr(), rd.shortstr()
			c.s.mu.Lock()
			keys := c.s.bindings[q]
			if method == 20 {
				keys = append(keys, key)
			} else {
				var kept []string
				for _, k := range keys {
					if k != key {
						kept = append(kept, k)
					}
				}
				keys = kept
			}
			c.s.bindings[q] = keys
			c.s.mu.Unlock()
			if err := reply(50, method+1, nil); err != nil {
				return err
			}
		case class == 50 && method == 40: // queue.delete
			rd.u16()
			q := rd.shortstr()
			c.s.mu.Lock()
			n := len(c.s.queues[q])
			delete(c.s.bindings, q)
			delete(c.s.queues, q)
			c.s.mu.Unlock()
			if err := reply(50, 41, (&wbuf{}).u32(uint32(n))); err != nil {
				return err
			}
		case class == 60 && method == 10: // basic.qos
			if err := reply(60, 11, nil); err != nil {
				return err
			}
		case class == 60 && method == 20: // basic.consume
			rd.u16()
			q, tag := rd.shortstr(), rd.shortstr()
			if tag == "" {
				tag = fmt.Sprintf("amqptest-%d", ch)
			}
			if err := reply(60, 21, (&wbuf{}).shortstr(tag)); err != nil {
				return err
			}
			c.s.mu.Lock()
			c.s.consumers = append(c.s.consumers, &consumer{c: c, ch: ch, tag: tag, queue: q})
			c.s.dispatchLocked()
			c.s.mu.Unlock()
		case class == 60 && method == 30: // basic.cancel
			tag := rd.shortstr()
			c.s.mu.Lock()
			kept := c.s.consumers[:0]
			for _, k := range c.s.consumers {
				if k.c != c || k.tag != tag {
					kept = append(kept, k)
				}
			}
			c.s.consumers = kept
			c.s.mu.Unlock()
			if err := reply(60, 31, (&wbuf{}).shortstr(tag)); err != nil {
				return err
			}
		case class == 60 && method == 40: // basic.publish
			rd.u16()
			ex, key := rd.shortstr(), rd.shortstr()
			bits := rd.u8()
			pending = &publish{m: &Message{Exchange: ex, RoutingKey: key, Mandatory: bits&1 != 0}}
		case class == 60 && (method == 80 || method == 90 || method == 120): // basic.ack, reject, nack
			tag := rd.u64()
			bits := rd.u8()
			kind, requeue := "ack", false
			switch method {
			case 90:
				kind, requeue = "reject", bits&1 != 0
			case 120:
				kind, requeue = "nack", bits&2 != 0
			}
			c.s.mu.Lock()
			if m, ok := c.unacked[tag]; ok {
				delete(c.unacked, tag)
				c.s.acks = append(c.s.acks, Ack{MessageID: m.MessageID, Kind: kind, Requeue: requeue})
				if requeue {
					m.redelivered = true
					c.s.queues[m.queue] = append(c.s.queues[m.queue], m)
					c.s.dispatchLocked()
				}
			}
			c.s.mu.Unlock()
		default:
			return fmt.Errorf("amqptest: method %d.%d is not served", class, method)
		}
	}
}

type publish struct {
	m    *Message
	size uint64
}

// published routes a publish, returns it when mandatory and unroutable,
// and confirms it.
func (c *conn) published(ch uint16, m *Message) error {
	s := c.s
	s.mu.Lock()
	if s.refuse {
		s.mu.Unlock()
		b := &wbuf{}
		b.u16(20).u16(40).u16(406).shortstr("PRECONDITION_FAILED - refused by the test").u16(60).u16(40)
		return c.send(1, ch, b.b)
	}
	s.published = append(s.published, *m)
	var routed []string
	for q, keys := range s.bindings {
		for _, k := range keys {
			if k == "#" || k == m.RoutingKey {
				routed = append(routed, q)
				break
			}
		}
	}
	nack, hold := s.nack, s.hold
	tag, confirming := s.tags(c, ch)
	if !nack {
		for _, q := range routed {
			cp := *m
			cp.queue = q
			s.queues[q] = append(s.queues[q], &cp)
		}
		s.dispatchLocked()
	}
	s.mu.Unlock()
	if m.Mandatory && len(routed) == 0 && !nack {
		b := &wbuf{}
		b.u16(60).u16(50).u16(312).shortstr("NO_ROUTE").shortstr(m.Exchange).shortstr(m.RoutingKey)
		if err := c.sendContent(ch, b.b, m); err != nil {
			return err
		}
	}
	if !confirming || hold {
		return nil
	}
	b := &wbuf{}
	if nack {
		b.u16(60).u16(120).u64(tag).u8(0)
	} else {
		b.u16(60).u16(80).u64(tag).u8(0)
	}
	return c.send(1, ch, b.b)
}

// tags numbers a publish on a channel in confirm mode.
func (s *Server) tags(c *conn, ch uint16) (uint64, bool) {
	n, ok := c.tags[ch]
	if !ok {
		return 0, false
	}
	n++
	c.tags[ch] = n
	return n, true
}

// dispatchLocked hands queued messages to their queues' consumers.
func (s *Server) dispatchLocked() {
	for _, k := range s.consumers {
		q := s.queues[k.queue]
		for len(q) > 0 {
			m := q[0]
			q = q[1:]
			k.c.deliveries++
			tag := k.c.deliveries
			k.c.unacked[tag] = m
			m.queue = k.queue
			b := &wbuf{}
			red := uint8(0)
			if m.redelivered {
				red = 1
			}
			b.u16(60).u16(60).shortstr(k.tag).u64(tag).u8(red).shortstr(m.Exchange).shortstr(m.RoutingKey)
			go func(c *conn, ch uint16, method []byte, m *Message) { _ = c.sendContent(ch, method, m) }(k.c, k.ch, b.b, m)
		}
		s.queues[k.queue] = q
	}
}

func (c *conn) sendContent(ch uint16, method []byte, m *Message) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if err := c.frame(1, ch, method); err != nil {
		return err
	}
	if err := c.frame(2, ch, m.header); err != nil {
		return err
	}
	if len(m.Body) > 0 {
		if err := c.frame(3, ch, m.Body); err != nil {
			return err
		}
	}
	return c.w.Flush()
}

func (c *conn) send(typ uint8, ch uint16, payload []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if err := c.frame(typ, ch, payload); err != nil {
		return err
	}
	return c.w.Flush()
}

func (c *conn) frame(typ uint8, ch uint16, payload []byte) error {
	var h [7]byte
	h[0] = typ
	binary.BigEndian.PutUint16(h[1:3], ch)
	binary.BigEndian.PutUint32(h[3:7], uint32(len(payload)))
	if _, err := c.w.Write(h[:]); err != nil {
		return err
	}
	if _, err := c.w.Write(payload); err != nil {
		return err
	}
	return c.w.WriteByte(frameEnd)
}

func readFrame(r *bufio.Reader) (typ uint8, ch uint16, payload []byte, err error) {
	var h [7]byte
	if _, err = io.ReadFull(r, h[:]); err != nil {
		return
	}
	typ, ch = h[0], binary.BigEndian.Uint16(h[1:3])
	payload = make([]byte, binary.BigEndian.Uint32(h[3:7])+1)
	if _, err = io.ReadFull(r, payload); err != nil {
		return
	}
	if payload[len(payload)-1] != frameEnd {
		err = errors.New("amqptest: bad frame end")
	}
	return typ, ch, payload[:len(payload)-1], err
}

// Property flags of a content header, in wire order.
const (
	flagContentType     = 0x8000
	flagContentEncoding = 0x4000
	flagHeaders         = 0x2000
	flagDeliveryMode    = 0x1000
	flagPriority        = 0x0800
	flagCorrelationID   = 0x0400
	flagReplyTo         = 0x0200
	flagExpiration      = 0x0100
	flagMessageID       = 0x0080
	flagTimestamp       = 0x0040
	flagType            = 0x0020
)

func parseProps(m *Message, b []byte) {
	rd := &rbuf{b: b}
	flags := rd.u16()
	if flags&flagContentType != 0 {
		m.ContentType = rd.shortstr()
	}
	if flags&flagContentEncoding != 0 {
		rd.shortstr()
	}
	if flags&flagHeaders != 0 {
		rd.skip(int(rd.u32()))
	}
	if flags&flagDeliveryMode != 0 {
		m.DeliveryMode = rd.u8()
	}
	if flags&flagPriority != 0 {
		rd.u8()
	}
	if flags&flagCorrelationID != 0 {
		m.CorrelationID = rd.shortstr()
	}
	if flags&flagReplyTo != 0 {
		rd.shortstr()
	}
	if flags&flagExpiration != 0 {
		rd.shortstr()
	}
	if flags&flagMessageID != 0 {
		m.MessageID = rd.shortstr()
	}
	if flags&flagTimestamp != 0 {
		rd.u64()
	}
	if flags&flagType != 0 {
		m.Type = rd.shortstr()
	}
}

func buildHeader(m *Message) []byte {
	b := &wbuf{}
	b.u16(60).u16(0).u64(uint64(len(m.Body)))
	if m.DeliveryCount <= 0 {
		b.u16(flagContentType | flagDeliveryMode | flagMessageID | flagType)
		b.shortstr(m.ContentType).u8(m.DeliveryMode).shortstr(m.MessageID).shortstr(m.Type)
		return b.b
	}
	// A field table of one long-long integer ('l'), as amqp091 reads it.
	table := (&wbuf{}).shortstr("x-delivery-count").u8('l').u64(uint64(m.DeliveryCount))
	b.u16(flagContentType | flagHeaders | flagDeliveryMode | flagMessageID | flagType)
	b.shortstr(m.ContentType).u32(uint32(len(table.b))).raw(table.b).u8(m.DeliveryMode).shortstr(m.MessageID).shortstr(m.Type)
	return b.b
}

type wbuf struct{ b []byte }

func (w *wbuf) u8(v uint8) *wbuf   { w.b = append(w.b, v); return w }
func (w *wbuf) u16(v uint16) *wbuf { w.b = binary.BigEndian.AppendUint16(w.b, v); return w }
func (w *wbuf) u32(v uint32) *wbuf { w.b = binary.BigEndian.AppendUint32(w.b, v); return w }
func (w *wbuf) u64(v uint64) *wbuf { w.b = binary.BigEndian.AppendUint64(w.b, v); return w }
func (w *wbuf) raw(v []byte) *wbuf { w.b = append(w.b, v...); return w }
func (w *wbuf) shortstr(s string) *wbuf {
	return w.u8(uint8(len(s))).raw([]byte(s))
}
func (w *wbuf) longstr(s string) *wbuf { return w.u32(uint32(len(s))).raw([]byte(s)) }

type rbuf struct{ b []byte }

func (r *rbuf) take(n int) []byte {
	if n > len(r.b) {
		n = len(r.b)
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}
func (r *rbuf) skip(n int) { r.take(n) }
func (r *rbuf) u8() uint8 {
	v := r.take(1)
	if len(v) < 1 {
		return 0
	}
	return v[0]
}
func (r *rbuf) u16() uint16 {
	v := r.take(2)
	if len(v) < 2 {
		return 0
	}
	return binary.BigEndian.Uint16(v)
}
func (r *rbuf) u32() uint32 {
	v := r.take(4)
	if len(v) < 4 {
		return 0
	}
	return binary.BigEndian.Uint32(v)
}
func (r *rbuf) u64() uint64 {
	v := r.take(8)
	if len(v) < 8 {
		return 0
	}
	return binary.BigEndian.Uint64(v)
}
func (r *rbuf) shortstr() string { return string(r.take(int(r.u8()))) }
