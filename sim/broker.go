package sim

import (
	"slices"

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
	tag        uint64
	holder     string
}

// Broker is an in-memory RabbitMQ: a durable topic exchange bound to one
// durable queue with a dead-letter queue, publisher confirms, mandatory
// returns, consumer acknowledgements and restarts. Its faults (outage,
// unbinding, restart) are driven by the simulation. A Broker is not safe
// for concurrent use.
type Broker struct {
	up    bool
	bound bool
	// epoch counts restarts; channels and deliveries of an older epoch are
	// closed.
	epoch   int
	ready   []*Message
	unacked []*Message
	dead    []*Message
	nextTag uint64
	// Reject lists message types the broker always nacks (a poison the
	// broker refuses, e.g. over its size limit).
	Reject map[string]bool
}

// NewBroker returns a running broker with its queue bound.
func NewBroker() *Broker {
	return &Broker{up: true, bound: true}
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
	back := b.unacked
	b.unacked = nil
	b.requeue(back)
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

// requeue puts ms back at the head of the queue, in delivery order,
// flagged redelivered.
func (b *Broker) requeue(ms []*Message) {
	if len(ms) == 0 {
		return
	}
	slices.SortFunc(ms, func(x, y *Message) int {
		switch {
		case x.tag < y.tag:
			return -1
		case x.tag > y.tag:
			return 1
		}
		return 0
	})
	for _, m := range ms {
		m.Redelivered = true
		m.holder = ""
	}
	b.ready = slices.Insert(b.ready, 0, ms...)
}

// publish routes m. The caller has checked that the broker is up.
func (b *Broker) publish(m relay.Message, persistent bool) PublishOutcome {
	if b.Reject[m.Type] {
		return Nacked
	}
	if !b.bound {
		return Returned
	}
	b.ready = append(b.ready, &Message{Message: m, Persistent: persistent})
	return Confirmed
}

// next hands the head of the queue to holder, or nil when it is empty.
func (b *Broker) next(holder string) *Message {
	if len(b.ready) == 0 {
		return nil
	}
	m := b.ready[0]
	b.ready[0] = nil
	b.ready = b.ready[1:]
	b.nextTag++
	m.tag = b.nextTag
	m.holder = holder
	m.Deliveries++
	b.unacked = append(b.unacked, m)
	return m
}

// settle removes an unacked delivery; requeue puts it back, dead
// dead-letters it, neither drops it (an ack).
func (b *Broker) settle(m *Message, requeue, dead bool) bool {
	i := slices.Index(b.unacked, m)
	if i < 0 {
		return false
	}
	b.unacked = slices.Delete(b.unacked, i, i+1)
	switch {
	case requeue:
		b.requeue([]*Message{m})
	case dead:
		m.holder = ""
		b.dead = append(b.dead, m)
	}
	return true
}

// disconnect closes holder's channel: its unacked deliveries go back to
// the queue.
func (b *Broker) disconnect(holder string) {
	var back []*Message
	keep := b.unacked[:0]
	for _, m := range b.unacked {
		if m.holder == holder {
			back = append(back, m)
		} else {
			keep = append(keep, m)
		}
	}
	clear(b.unacked[len(keep):])
	b.unacked = keep
	b.requeue(back)
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
		Redelivered: m.Redelivered, Deliveries: m.Deliveries}
}
