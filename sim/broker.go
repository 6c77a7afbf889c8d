package sim

import (
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
	// key is the binding key of the queue (a topic pattern).
	key string
	// epoch counts restarts; channels and deliveries of an older epoch are
	// closed.
	epoch   int
	ready   []*Message
	unacked []*Message
	dead    []*Message
	nextTag uint64
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
	return Confirmed
}

// Get takes the head of the queue and acknowledges it at once (basic.get
// with auto-ack); false when the queue is empty.
func (b *Broker) Get() (Message, bool) {
	m := b.next("")
	if m == nil {
		return Message{}, false
	}
	b.settle(m, false, false)
	return *m, true
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
