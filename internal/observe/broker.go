package observe

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// TraceExchange is the topic exchange to which RabbitMQ's firehose
// tracer copies every message a vhost routes once tracing is on for it
// (rabbitmqctl trace_on, or the rabbit application's trace_vhosts
// setting, which outboxlab's RabbitMQ image sets for "/" so that tracing
// survives a restart): a publish to exchange X as "publish.X", with the
// message's body, its properties in the header "properties", and the
// publishing connection's user in "user".
const TraceExchange = "amq.rabbitmq.trace"

// Published is one message the broker accepted from a publisher, as its
// firehose told it.
type Published struct {
	// Seen is when the tap received the notice, on the harness's clock:
	// at most a few milliseconds after the broker routed the message.
	Seen time.Time
	// Exchange is the exchange the message was published to, RoutingKey
	// its first routing key.
	Exchange, RoutingKey string
	// User is the AMQP user of the connection that published it: a
	// replica's broker user (BrokerUser) names the replica.
	User string
	// Connection is the broker's name of that connection, Channel its
	// channel number.
	Connection string
	Channel    int
	// Routed names the queues the broker routed it to; none for a
	// message no queue was bound for (which a mandatory publish has
	// returned to its publisher).
	Routed []string
	// Message is the message as a consumer would have received it: its
	// properties (MessageId, Type, CorrelationId, Headers...), routing
	// key and body, so that the event it carries is read as a delivery's
	// (consumer.Identity.ID).
	Message amqp.Delivery
}

// Gap is a span in which the tap was not consuming the firehose (the
// broker was down or restarting): publishes in it were not seen.
type Gap struct {
	From, To time.Time
}

// Tap consumes the firehose's publish notices for a set of exchanges
// into memory, from StartTap until Close, and reconnects when the broker
// goes away: what it missed meanwhile is a Gap. It never publishes or
// declares anything but its own exclusive queue.
type Tap struct {
	url       string
	exchanges []string
	stop      chan struct{}
	done      chan struct{}

	mu     sync.Mutex
	seen   []Published
	gaps   []Gap
	wake   chan struct{} // closed and replaced on every notice
	closed bool
	err    error // why the tap last lost the broker, for Close
}

// StartTap connects to the broker at url (the harness's own, not through
// a fault proxy), binds an exclusive queue of its own to TraceExchange
// for the publishes to each of exchanges, and consumes it until Close.
// It returns once the queue is bound, so that every publish after it
// returns is seen while the broker stays up. Tracing must be on for the
// vhost (see TraceExchange); StartTap cannot tell, and a tap of a broker
// that traces nothing sees nothing (Probe proves it sees).
func StartTap(ctx context.Context, url string, exchanges []string) (*Tap, error) {
	if len(exchanges) == 0 {
		return nil, errors.New("tapping the broker: no exchange to watch")
	}
	t := &Tap{url: url, exchanges: slices.Clone(exchanges), stop: make(chan struct{}), done: make(chan struct{}), wake: make(chan struct{})}
	conn, deliveries, err := t.dial(ctx)
	if err != nil {
		return nil, err
	}
	go t.loop(conn, deliveries)
	return t, nil
}

// dial connects and binds the tap's queue.
func (t *Tap) dial(ctx context.Context) (*amqp.Connection, <-chan amqp.Delivery, error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, fmt.Errorf("tapping the broker: %w", err)
	}
	conn, err := amqp.DialConfig(t.url, amqp.Config{Dial: amqp.DefaultDial(5 * time.Second), Heartbeat: time.Second, Properties: amqp.Table{"connection_name": "outboxlab-tap"}})
	if err != nil {
		return nil, nil, fmt.Errorf("tapping the broker: %w", err)
	}
	fail := func(what string, err error) (*amqp.Connection, <-chan amqp.Delivery, error) {
		_ = conn.Close()
		return nil, nil, fmt.Errorf("tapping the broker: %s: %w", what, err)
	}
	ch, err := conn.Channel()
	if err != nil {
		return fail("opening a channel", err)
	}
	q, err := ch.QueueDeclare("", false, true, true, false, nil)
	if err != nil {
		return fail("declaring its queue", err)
	}
	for _, x := range t.exchanges {
		if err := ch.QueueBind(q.Name, "publish."+x, TraceExchange, false, nil); err != nil {
			return fail("binding to "+TraceExchange, err)
		}
	}
	// Not ConsumeWithContext: the consumer lives until Close, not until
	// the dial's context ends.
	deliveries, err := ch.Consume(q.Name, "outboxlab-tap", true, true, false, false, nil)
	if err != nil {
		return fail("consuming", err)
	}
	return conn, deliveries, nil
}

// loop consumes until Close, reconnecting every 200 ms while the broker
// is away.
func (t *Tap) loop(conn *amqp.Connection, deliveries <-chan amqp.Delivery) {
	defer close(t.done)
	for {
		closed := conn.NotifyClose(make(chan *amqp.Error, 1))
		t.consume(deliveries)
		select {
		case <-t.stop:
			_ = conn.Close()
			return
		default:
		}
		lost := time.Now()
		select {
		case e := <-closed:
			if e != nil {
				t.setErr(e)
			}
		default:
		}
		_ = conn.Close()
		for {
			select {
			case <-t.stop:
				t.addGap(Gap{From: lost})
				return
			case <-time.After(200 * time.Millisecond):
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			c, d, err := t.dial(ctx)
			cancel()
			if err == nil {
				conn, deliveries = c, d
				t.addGap(Gap{From: lost, To: time.Now()})
				break
			}
			t.setErr(err)
		}
	}
}

// consume reads notices until the channel closes or Close.
func (t *Tap) consume(deliveries <-chan amqp.Delivery) {
	for {
		select {
		case <-t.stop:
			return
		case d, ok := <-deliveries:
			if !ok {
				return
			}
			t.add(notice(d, time.Now()))
		}
	}
}

// notice reads a firehose publish notice.
func notice(d amqp.Delivery, seen time.Time) Published {
	p := Published{Seen: seen, User: text(d.Headers["user"]), Connection: text(d.Headers["connection"])}
	p.Exchange = text(d.Headers["exchange_name"])
	if p.Exchange == "" {
		p.Exchange = strings.TrimPrefix(d.RoutingKey, "publish.")
	}
	if keys, ok := d.Headers["routing_keys"].([]any); ok && len(keys) > 0 {
		p.RoutingKey = text(keys[0])
	}
	p.Channel = integer(d.Headers["channel"])
	if qs, ok := d.Headers["routed_queues"].([]any); ok {
		for _, q := range qs {
			p.Routed = append(p.Routed, text(q))
		}
	}
	m := amqp.Delivery{Exchange: p.Exchange, RoutingKey: p.RoutingKey, Body: d.Body}
	if props, ok := d.Headers["properties"].(amqp.Table); ok {
		m.MessageId = text(props["message_id"])
		m.Type = text(props["type"])
		m.CorrelationId = text(props["correlation_id"])
		m.ContentType = text(props["content_type"])
		if h, ok := props["headers"].(amqp.Table); ok {
			m.Headers = h
		}
		m.DeliveryMode = uint8(integer(props["delivery_mode"]))
	}
	p.Message = m
	return p
}

// integer reads an AMQP table's integer of any width; 0 for anything
// else.
func integer(v any) int {
	switch n := v.(type) {
	case int8:
		return int(n)
	case uint8:
		return int(n)
	case int16:
		return int(n)
	case uint16:
		return int(n)
	case int32:
		return int(n)
	case uint32:
		return int(n)
	case int64:
		return int(n)
	case int:
		return n
	}
	return 0
}

func text(v any) string {
	switch s := v.(type) {
	case string:
		return s
	case []byte:
		return string(s)
	}
	return ""
}

func (t *Tap) add(p Published) {
	t.mu.Lock()
	t.seen = append(t.seen, p)
	close(t.wake)
	t.wake = make(chan struct{})
	t.mu.Unlock()
}

func (t *Tap) addGap(g Gap) {
	t.mu.Lock()
	t.gaps = append(t.gaps, g)
	t.mu.Unlock()
}

func (t *Tap) setErr(err error) {
	t.mu.Lock()
	t.err = err
	t.mu.Unlock()
}

// Published returns every publish seen so far, in the order seen.
func (t *Tap) Published() []Published {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.seen)
}

// Gaps returns the spans the tap was away from the broker; a gap still
// open at Close has a zero To.
func (t *Tap) Gaps() []Gap {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.gaps)
}

// Next waits until more than from publishes have been seen and returns
// those after the first from; it returns ctx's error when ctx ends
// first, and an error when the tap is closed.
func (t *Tap) Next(ctx context.Context, from int) ([]Published, error) {
	for {
		t.mu.Lock()
		if len(t.seen) > from {
			out := slices.Clone(t.seen[from:])
			t.mu.Unlock()
			return out, nil
		}
		wake, closed := t.wake, t.closed
		t.mu.Unlock()
		if closed {
			return nil, errors.New("the broker tap is closed")
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-wake:
		case <-t.done:
		}
	}
}

// Close stops the tap and closes its connection; what it saw stays
// readable.
func (t *Tap) Close() error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.closed = true
	t.mu.Unlock()
	close(t.stop)
	<-t.done
	return nil
}

// BrokerUser is the AMQP user of one relay replica, named and keyed like
// its database role, so that the firehose names the replica in every
// publish it makes.
func BrokerUser(role Role) (user, password string) { return role.Name, role.Password }

// brokerName is what AddBrokerUsers accepts as a user name or password:
// nothing an Erlang binary literal would need escaped.
var brokerName = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,128}$`)

// AddBrokerUsersExpr returns the Erlang expression that `rabbitmqctl
// eval` runs to create the broker users of roles (BrokerUser) in vhost
// "/", each allowed to configure, write and read anything there, in one
// call (rabbitmqctl starts a virtual machine per call); an existing user
// keeps its password and gets the permissions again.
func AddBrokerUsersExpr(roles []Role) (string, error) {
	var users []string
	for _, r := range roles {
		u, p := BrokerUser(r)
		if !brokerName.MatchString(u) || !brokerName.MatchString(p) {
			return "", fmt.Errorf("broker user of %s: %w: %q", r.Process, ErrInvalidRole, u)
		}
		users = append(users, fmt.Sprintf(`{<<"%s">>, <<"%s">>}`, u, p))
	}
	return `lists:foreach(fun({U, P}) -> catch rabbit_auth_backend_internal:add_user(U, P, <<"outboxlab">>), ` +
		`ok = rabbit_auth_backend_internal:set_permissions(U, <<"/">>, <<".*">>, <<".*">>, <<".*">>, <<"outboxlab">>) end, [` +
		strings.Join(users, ", ") + `]), ok.`, nil
}

// DeleteBrokerUsersExpr returns the expression that deletes the broker
// users of roles; a user already gone is no error.
func DeleteBrokerUsersExpr(roles []Role) (string, error) {
	var users []string
	for _, r := range roles {
		u, _ := BrokerUser(r)
		if !brokerName.MatchString(u) {
			return "", fmt.Errorf("broker user of %s: %w: %q", r.Process, ErrInvalidRole, u)
		}
		users = append(users, fmt.Sprintf(`<<"%s">>`, u))
	}
	return `lists:foreach(fun(U) -> catch rabbit_auth_backend_internal:delete_user(U, <<"outboxlab">>) end, [` +
		strings.Join(users, ", ") + `]), ok.`, nil
}

// BrokerURL returns amqpURL (one URL, or several separated by commas for
// a cluster) logged in as role's broker user.
func BrokerURL(amqpURL string, role Role) (string, error) {
	parts := strings.Split(amqpURL, ",")
	for i, p := range parts {
		u, err := url.Parse(strings.TrimSpace(p))
		if err != nil {
			return "", fmt.Errorf("the broker URL of %s: %w", role.Process, err)
		}
		user, pass := BrokerUser(role)
		u.User = url.UserPassword(user, pass)
		parts[i] = u.String()
	}
	return strings.Join(parts, ","), nil
}
