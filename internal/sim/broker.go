package sim

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/outboxlab/outboxlab/consumer"
	"github.com/outboxlab/outboxlab/relay"
)

// Queue and exchange names of the simulated broker.
const (
	Exchange        = "outbox"
	QueueName       = "events"
	DeadLetterQueue = "events.dead"
)

// PublishOutcome is what the broker did with one publish, as the confirm
// will tell it.
type PublishOutcome int

// Publish outcomes.
const (
	// Confirmed: routed to the queue and confirmed.
	Confirmed PublishOutcome = iota + 1
	// Nacked: refused with a negative confirm; not enqueued.
	Nacked
	// Returned: unroutable (the queue is unbound); returned, not enqueued.
	Returned
)

// Message is one message inside the broker.
type Message struct {
	relay.Message
	// Persistent messages survive a broker restart; transient ones do not.
	Persistent bool
	// Redelivered is set once the message went back to the queue.
	Redelivered bool
	// Deliveries counts the deliveries so far.
	Deliveries int
	// Tag is the delivery tag of the message's current delivery, on the
	// channel that holds it; 0 while it is not delivered.
	Tag uint64
	// seq orders the deliveries of the whole broker: messages requeued
	// together go back in the order they left the queue.
	seq uint64
	ch  *Channel
}

// Delivery errors, as RabbitMQ closes a channel for them.
var (
	// ErrUnknownDeliveryTag is the channel error of an ack, nack or
	// reject of a tag the channel has not delivered or has settled
	// already (PRECONDITION_FAILED): the channel closes and its unacked
	// deliveries go back to the queue.
	ErrUnknownDeliveryTag = errors.New("PRECONDITION_FAILED - unknown delivery tag")
	// ErrChannelClosed is the error of a call on a closed channel.
	ErrChannelClosed = errors.New("channel/connection is not open")
)

// Broker is an in-memory RabbitMQ: a durable topic exchange bound to one
// durable queue with a dead-letter queue, publisher confirms, mandatory
// returns, consumer channels with their own delivery tags and prefetch,
// acknowledgements, nacks and rejects, and restarts. Its faults (outage,
// unbinding, restart) are driven by the simulation. A Broker is not safe
// for concurrent use.
//
// Deliveries are pushed as RabbitMQ pushes them to basic.consume
// consumers: as soon as a message is ready and a channel has room under
// its prefetch, the message is the channel's (unacked, its tag the
// channel's next), in the order the channels were opened, one message
// each in turn; a consumer takes what its channel holds in tag order
// (Channel.Next).
type Broker struct {
	up    bool
	bound bool
	// key is the binding key of the queue (a topic pattern).
	key string
	// epoch counts restarts; channels and deliveries of an older epoch are
	// closed.
	epoch   int
	ready   []*Message
	unacked []*Message
	dead    []*Message
	nextSeq uint64
	// channels are the open consumer channels, in the order they opened;
	// turn is the index of the one the next dispatch tries first.
	channels []*Channel
	turn     int
	// Reject lists message types no queue binds, whatever the binding
	// key: a mandatory publish of one is returned, as RabbitMQ returns
	// workload.TypeRejected, which the harness's queues do not bind.
	Reject map[string]bool
}

// NewBroker returns a running broker with its queue bound.
func NewBroker() *Broker {
	return &Broker{up: true, bound: true, key: "#"}
}

// Bind binds the queue to the exchange with a topic binding key ("#" by
// default: every type).
func (b *Broker) Bind(key string) {
	b.key = key
	b.bound = true
}

// Up reports whether the broker accepts connections.
func (b *Broker) Up() bool { return b.up }

// SetUp starts (true) or stops (false) accepting connections. Stopping is
// an outage, not a restart: queues keep their messages and unacked
// deliveries stay with their consumers until their channels are used.
func (b *Broker) SetUp(up bool) { b.up = up }

// Bound reports whether the queue is bound to the exchange.
func (b *Broker) Bound() bool { return b.bound }

// SetBound binds or unbinds the queue; while unbound every mandatory
// publish is returned.
func (b *Broker) SetBound(bound bool) { b.bound = bound }

// Epoch returns the number of restarts so far.
func (b *Broker) Epoch() int { return b.epoch }

// Restart restarts the broker: transient messages are dropped, unacked
// deliveries go back to the queue (in front, redelivered), and every
// channel of the old epoch is closed. It returns the ids of the messages
// dropped.
func (b *Broker) Restart() (dropped []string) {
	b.epoch++
	for _, c := range b.channels {
		c.closed = true
		c.held = nil
	}
	b.channels = nil
	back := b.unacked
	b.unacked = nil
	b.putBack(back)
	keep := b.ready[:0]
	for _, m := range b.ready {
		if m.Persistent {
			keep = append(keep, m)
		} else {
			dropped = append(dropped, m.ID)
		}
	}
	clear(b.ready[len(keep):])
	b.ready = keep
	return dropped
}

// putBack puts ms back at the head of the queue, in the order they left
// it, flagged redelivered. It dispatches nothing.
func (b *Broker) putBack(ms []*Message) {
	if len(ms) == 0 {
		return
	}
	slices.SortFunc(ms, func(x, y *Message) int { return cmp.Compare(x.seq, y.seq) })
	for _, m := range ms {
		m.Redelivered = true
		m.ch, m.Tag = nil, 0
	}
	b.ready = slices.Insert(b.ready, 0, ms...)
}

// requeue puts ms back at the head of the queue and dispatches.
func (b *Broker) requeue(ms []*Message) {
	b.putBack(ms)
	b.dispatch()
}

// Publish routes m by its type as the routing key and reports the
// confirm it earns: returned
// when no queue takes it and it is mandatory (a message no queue takes
// that is not mandatory is confirmed and dropped), otherwise confirmed
// and enqueued. The broker must be up; the simulation checks that before.
func (b *Broker) Publish(m relay.Message, opts relay.PublishOptions) PublishOutcome {
	if !b.bound || b.Reject[m.Type] || !topicMatch(b.key, m.Type) {
		if opts.Mandatory {
			return Returned
		}
		return Confirmed
	}
	b.ready = append(b.ready, &Message{Message: m, Persistent: opts.Persistent})
	b.dispatch()
	return Confirmed
}

// Get takes the head of the queue and acknowledges it at once (basic.get
// with auto-ack); false when the queue is empty.
func (b *Broker) Get() (Message, bool) {
	if len(b.ready) == 0 {
		return Message{}, false
	}
	m := b.take()
	return *m, true
}

// take removes the head of the queue and counts its delivery.
func (b *Broker) take() *Message {
	m := b.ready[0]
	b.ready[0] = nil
	b.ready = b.ready[1:]
	b.nextSeq++
	m.seq = b.nextSeq
	m.Deliveries++
	return m
}

// Channel is a consumer's channel on the broker (basic.consume with
// manual acknowledgements): it holds the deliveries pushed to it until
// they are settled, numbers them with tags of its own from 1, and holds
// at most its prefetch unacked at once. A channel closes when its
// consumer closes it or loses its connection, when it settles a tag it
// does not hold, and when the broker restarts; its unacked deliveries go
// back to the queue then, flagged redelivered.
type Channel struct {
	b        *Broker
	holder   string
	prefetch int
	nextTag  uint64
	// unacked are the channel's deliveries not yet settled, in tag order;
	// held are those of them not yet taken by the consumer (Next).
	unacked []*Message
	held    []*Message
	closed  bool
}

// Open opens a consumer channel for holder with prefetch (0: no limit)
// and starts pushing deliveries to it.
func (b *Broker) Open(holder string, prefetch int) *Channel {
	c := &Channel{b: b, holder: holder, prefetch: prefetch}
	b.channels = append(b.channels, c)
	b.dispatch()
	return c
}

// room reports whether c may take one more delivery.
func (c *Channel) room() bool {
	return !c.closed && (c.prefetch == 0 || len(c.unacked) < c.prefetch)
}

// dispatch pushes ready messages to the open channels with room, one
// each in turn, starting with the channel after the last one served.
func (b *Broker) dispatch() {
	for len(b.ready) > 0 && len(b.channels) > 0 {
		served := false
		for range b.channels {
			c := b.channels[b.turn%len(b.channels)]
			b.turn = (b.turn + 1) % len(b.channels)
			if c.room() {
				c.push(b.take())
				served = true
				break
			}
		}
		if !served {
			return
		}
	}
}

// push delivers m on c.
func (c *Channel) push(m *Message) {
	c.nextTag++
	m.Tag, m.ch = c.nextTag, c
	c.unacked = append(c.unacked, m)
	c.held = append(c.held, m)
	c.b.unacked = append(c.b.unacked, m)
}

// Holder returns the name the channel was opened for.
func (c *Channel) Holder() string { return c.holder }

// Closed reports whether the channel is closed.
func (c *Channel) Closed() bool { return c.closed }

// Next takes the first delivery the broker pushed to the channel and the
// consumer has not taken yet; false when there is none or the channel is
// closed.
func (c *Channel) Next() (Message, bool) {
	if c.closed || len(c.held) == 0 {
		return Message{}, false
	}
	m := c.held[0]
	c.held[0] = nil
	c.held = c.held[1:]
	return *m, true
}

// Ack acknowledges the delivery tag (and with multiple every earlier one
// of the channel).
func (c *Channel) Ack(tag uint64, multiple bool) error {
	return c.settle(tag, multiple, func([]*Message) {})
}

// Nack rejects the delivery tag (and with multiple every earlier one):
// requeue puts them back at the head of the queue, redelivered; otherwise
// they are dead-lettered.
func (c *Channel) Nack(tag uint64, multiple, requeue bool) error {
	return c.settle(tag, multiple, func(ms []*Message) {
		if requeue {
			c.b.putBack(ms)
			return
		}
		for _, m := range ms {
			m.ch, m.Tag = nil, 0
			c.b.dead = append(c.b.dead, m)
		}
	})
}

// Reject is Nack of one delivery (basic.reject).
func (c *Channel) Reject(tag uint64, requeue bool) error { return c.Nack(tag, false, requeue) }

// settle removes tag (with multiple, every tag up to it) from the
// channel's unacked deliveries and hands them to then. A tag the channel
// does not hold closes the channel.
func (c *Channel) settle(tag uint64, multiple bool, then func([]*Message)) error {
	if c.closed {
		return ErrChannelClosed
	}
	i := slices.IndexFunc(c.unacked, func(m *Message) bool { return m.Tag == tag })
	if i < 0 {
		c.Close()
		return fmt.Errorf("settling delivery tag %d: %w", tag, ErrUnknownDeliveryTag)
	}
	lo := i
	if multiple {
		lo = 0
	}
	ms := slices.Clone(c.unacked[lo : i+1])
	c.unacked = slices.Delete(c.unacked, lo, i+1)
	for _, m := range ms {
		c.held = slices.DeleteFunc(c.held, func(h *Message) bool { return h == m })
		c.b.unacked = slices.DeleteFunc(c.b.unacked, func(u *Message) bool { return u == m })
	}
	then(ms)
	c.b.dispatch()
	return nil
}

// Close closes the channel: its unacked deliveries, taken or not, go
// back to the queue. Closing a closed channel does nothing.
func (c *Channel) Close() {
	if c.closed {
		return
	}
	c.closed = true
	b := c.b
	b.channels = slices.DeleteFunc(b.channels, func(o *Channel) bool { return o == c })
	if len(b.channels) > 0 {
		b.turn %= len(b.channels)
	} else {
		b.turn = 0
	}
	back := c.unacked
	c.unacked, c.held = nil, nil
	b.unacked = slices.DeleteFunc(b.unacked, func(u *Message) bool { return u.ch == c })
	b.requeue(back)
}

// topicMatch matches an AMQP topic routing key against a binding pattern:
// words separated by dots, "*" matches one word, "#" zero or more.
func topicMatch(pattern, key string) bool {
	return matchWords(strings.Split(pattern, "."), strings.Split(key, "."))
}

func matchWords(p, k []string) bool {
	for len(p) > 0 {
		switch p[0] {
		case "#":
			for i := 0; i <= len(k); i++ {
				if matchWords(p[1:], k[i:]) {
					return true
				}
			}
			return false
		case "*":
			if len(k) == 0 {
				return false
			}
		default:
			if len(k) == 0 || k[0] != p[0] {
				return false
			}
		}
		p, k = p[1:], k[1:]
	}
	return len(k) == 0
}

// disconnect closes every channel of holder: their unacked deliveries
// go back to the queue.
func (b *Broker) disconnect(holder string) {
	for _, c := range slices.Clone(b.channels) {
		if c.holder == holder {
			c.Close()
		}
	}
}

// Ready returns the messages waiting in the queue, head first.
func (b *Broker) Ready() []Message { return copyMessages(b.ready) }

// Unacked returns the messages delivered and not yet acknowledged.
func (b *Broker) Unacked() []Message { return copyMessages(b.unacked) }

// Dead returns the dead-lettered messages.
func (b *Broker) Dead() []Message { return copyMessages(b.dead) }

func copyMessages(ms []*Message) []Message {
	out := make([]Message, len(ms))
	for i, m := range ms {
		out[i] = *m
	}
	return out
}

// consumerMessage is what a consumer sees of m.
func consumerMessage(m *Message) consumer.Message {
	return consumer.Message{ID: m.ID, Type: m.Type, CorrelationID: m.CorrelationID, Payload: m.Payload,
		Redelivered: m.Redelivered, Deliveries: m.Deliveries, DeliveryTag: m.Tag}
}
