package relay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// PublishOptions are the delivery properties the publisher asks of the
// broker. They sit in one struct so that a variant of the relay can change
// them (a transient or non-mandatory publish) without another publisher.
type PublishOptions struct {
	// Persistent asks for delivery mode 2, so the message survives a broker
	// restart once confirmed.
	Persistent bool
	// Mandatory asks the broker to return a message no queue takes.
	Mandatory bool
}

// DefaultPublishOptions are persistent, mandatory publishes.
func DefaultPublishOptions() PublishOptions {
	return PublishOptions{Persistent: true, Mandatory: true}
}

// AMQPConfig configures an AMQPPublisher.
type AMQPConfig struct {
	// URL is the broker's AMQP URI. Required. Several URIs separated by
	// commas name the nodes of one cluster (see SplitAMQPURLs): the
	// publisher connects to the first it can reach and, when its
	// connection is lost, tries the next node first.
	URL string
	// Exchange receives every message, routed by its type. Required.
	Exchange string
	// DeclareExchange declares Exchange as a durable topic exchange on every
	// new channel. Off by default: the topology is the deployment's (see
	// DeclareTopology).
	DeclareExchange bool
	// Options are the delivery properties; nil means DefaultPublishOptions.
	Options *PublishOptions
	// Name is sent as the connection name, shown in the broker's management
	// views. Optional.
	Name string
	// DialTimeout bounds a dial and channel setup when the caller's context
	// has no earlier deadline. Default 5 s.
	DialTimeout time.Duration
	// Heartbeat is the AMQP heartbeat interval. Default 10 s.
	Heartbeat time.Duration
	// Logger receives connection events; nil discards them.
	Logger *slog.Logger
}

// AMQPPublisher is the RabbitMQ implementation of Publisher. It owns one
// connection and one channel in confirm mode, dialled on first use and
// dialled again on the next Publish after either closes, so a relay
// survives broker outages without restarting. It is meant for one relay
// goroutine; Close may be called from any goroutine.
type AMQPPublisher struct {
	cfg  AMQPConfig
	opts PublishOptions
	log  *slog.Logger
	// urls are the cluster's nodes; node is the one of the open or last
	// session.
	urls []string
	node int

	mu     sync.Mutex
	sess   *amqpSession
	closed bool
	dials  atomic.Int64
}

var (
	_ Publisher        = (*AMQPPublisher)(nil)
	_ DoneConfirmation = (*amqpConfirmation)(nil)
)

// NewAMQPPublisher checks cfg and returns a publisher; it does not dial.
func NewAMQPPublisher(cfg AMQPConfig) (*AMQPPublisher, error) {
	if cfg.URL == "" {
		return nil, errors.New("amqp publisher: URL is required")
	}
	urls, err := SplitAMQPURLs(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("amqp publisher: %w", err)
	}
	if cfg.Exchange == "" {
		return nil, errors.New("amqp publisher: Exchange is required")
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = 5 * time.Second
	}
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = 10 * time.Second
	}
	opts := DefaultPublishOptions()
	if cfg.Options != nil {
		opts = *cfg.Options
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return &AMQPPublisher{cfg: cfg, opts: opts, log: log, urls: urls}, nil
}

// SplitAMQPURLs splits s, one AMQP URI or several separated by commas
// (the nodes of one cluster), and checks each. A comma inside a password
// must be percent-encoded (%2C). Errors name the URI without its password.
func SplitAMQPURLs(s string) ([]string, error) {
	var urls []string
	for _, u := range strings.Split(s, ",") {
		u = strings.TrimSpace(u)
		if u == "" {
			return nil, fmt.Errorf("AMQP URL list %q has an empty entry", RedactURL(s))
		}
		if _, err := amqp.ParseURI(u); err != nil {
			return nil, fmt.Errorf("URL %s: %w", RedactURL(u), redactErr(err, u))
		}
		urls = append(urls, u)
	}
	return urls, nil
}

// dialAny dials the nodes of urls in turn from start until one answers,
// all within ctx; it returns the session and the node's index, or every
// node's error.
func dialAny(ctx context.Context, cfg AMQPConfig, urls []string, start int) (*amqpSession, int, error) {
	var errs []error
	for i := range urls {
		k := (start + i) % len(urls)
		c := cfg
		c.URL = urls[k]
		s, err := dialSession(ctx, c)
		if err == nil {
			return s, k, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	return nil, start, errors.Join(errs...)
}

// Dials returns how many connections the publisher has opened.
func (p *AMQPPublisher) Dials() int64 { return p.dials.Load() }

// Publish sends m to the configured exchange with routing key m.Type and
// returns the handle on its confirm. It dials first when there is no open
// channel; a failed dial or a send on a dead connection wraps
// ErrBrokerUnavailable.
func (p *AMQPPublisher) Publish(ctx context.Context, m Message) (Confirmation, error) {
	s, err := p.session(ctx)
	if err != nil {
		return nil, err
	}
	pub := amqp.Publishing{
		ContentType:   "application/json",
		MessageId:     m.ID,
		Type:          m.Type,
		CorrelationId: m.CorrelationID,
		Timestamp:     time.Now().UTC(),
		Body:          m.Payload,
	}
	if p.opts.Persistent {
		pub.DeliveryMode = amqp.Persistent
	} else {
		pub.DeliveryMode = amqp.Transient
	}
	s.forget(m.ID)
	var dc *amqp.DeferredConfirmation
	err = s.bounded(ctx, func() error {
		var perr error
		dc, perr = s.ch.PublishWithDeferredConfirmWithContext(ctx, p.cfg.Exchange, m.Type, p.opts.Mandatory, false, pub)
		return perr
	})
	if err != nil {
		s.breakOff()
		return nil, fmt.Errorf("publishing %s: %w", m.ID, brokerErr(err))
	}
	if dc == nil {
		s.breakOff()
		return nil, fmt.Errorf("publishing %s: %w: channel not in confirm mode", m.ID, ErrBrokerUnavailable)
	}
	return &amqpConfirmation{sess: s, dc: dc, id: m.ID}, nil
}

// Close closes the connection. Publishes after Close fail.
func (p *AMQPPublisher) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	if p.sess != nil {
		p.sess.close()
		p.sess = nil
	}
	return nil
}

// session returns the open session, dialling a new one when there is none.
func (p *AMQPPublisher) session(ctx context.Context) (*amqpSession, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, fmt.Errorf("amqp publisher closed: %w", ErrBrokerUnavailable)
	}
	if p.sess != nil && p.sess.alive() {
		return p.sess, nil
	}
	start := p.node
	if p.sess != nil {
		// The node of a lost session is tried last.
		p.sess.close()
		p.sess = nil
		start = (p.node + 1) % len(p.urls)
	}
	s, node, err := dialAny(ctx, p.cfg, p.urls, start)
	if err != nil {
		p.log.Warn("broker unreachable", "url", RedactURL(p.cfg.URL), "err", err)
		return nil, err
	}
	// Publishes hold their writes; the topology helpers' sessions
	// (WithChannel) wait for every answer, so they write at once.
	s.raw.hold()
	p.node = node
	p.dials.Add(1)
	p.log.Info("broker connected", "url", RedactURL(p.urls[node]), "exchange", p.cfg.Exchange)
	p.sess = s
	return s, nil
}

// amqpSession is one connection with its confirm-mode channel and the
// bookkeeping of returned messages.
//
// A basic.return reaches the session on returns, which amqp091's reader
// goroutine fills before it resolves the confirm of the same message
// (RabbitMQ sends basic.return before basic.ack, and the one reader
// dispatches both in order). Whoever takes a return from returns records
// it in returned under mu: Publish and Wait take what is buffered, Wait
// also takes returns while it blocks on a confirm, and returnGuard takes
// them every returnGuardInterval, so that the reader never waits on a full
// channel (amqp091 drops a return it cannot hand over within 5 s). A Wait
// that saw its confirm and then takes what is buffered under mu sees the
// return of its message if there was one; no goroutine is woken for it.
type amqpSession struct {
	conn *amqp.Connection
	// raw is the socket, which batches the publishes' writes once the
	// session is set up.
	raw    *batchConn
	ch     *amqp.Channel
	broken atomic.Bool

	returns chan amqp.Return
	// guardStop ends returnGuard when the session closes.
	guardStop chan struct{}
	closeOnce sync.Once

	mu       sync.Mutex
	returned map[string]struct{}
	// returnsClosed is set once returns was closed (the channel shut
	// down): nothing more arrives on it.
	returnsClosed bool
}

// maxReturned bounds the memory of returned ids that nobody asked about.
const maxReturned = 4096

// returnGuardInterval is how often returnGuard takes the returns nobody
// took meanwhile: well within the 5 s amqp091's reader waits for room.
const returnGuardInterval = 500 * time.Millisecond

// dialSession connects, opens a channel in confirm mode and starts
// tracking returns, all bounded by ctx and cfg.DialTimeout.
func dialSession(ctx context.Context, cfg AMQPConfig) (*amqpSession, error) {
	timeout := cfg.DialTimeout
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < timeout {
		timeout = time.Until(dl)
	}
	if timeout <= 0 {
		return nil, fmt.Errorf("dialing broker %s: %w: %w", RedactURL(cfg.URL), ErrBrokerUnavailable, context.DeadlineExceeded)
	}
	dctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	s := &amqpSession{
		guardStop: make(chan struct{}),
		returned:  make(map[string]struct{}),
	}
	var rawMu sync.Mutex
	props := amqp.NewConnectionProperties()
	if cfg.Name != "" {
		props.SetClientConnectionName(cfg.Name)
	}
	acfg := amqp.Config{
		Heartbeat:  cfg.Heartbeat,
		Locale:     "en_US",
		Properties: props,
		Dial: func(network, addr string) (net.Conn, error) {
			var d net.Dialer
			c, err := d.DialContext(dctx, network, addr)
			if err != nil {
				return nil, err
			}
			// The handshake must finish within the dial's bound; amqp091
			// clears this deadline once the connection is open.
			_ = c.SetDeadline(time.Now().Add(timeout))
			bc := newBatchConn(c)
			rawMu.Lock()
			s.raw = bc
			rawMu.Unlock()
			return bc, nil
		},
	}
	setup := func() error {
		conn, err := amqp.DialConfig(cfg.URL, acfg)
		if err != nil {
			return fmt.Errorf("connecting: %w", err)
		}
		s.conn = conn
		ch, err := conn.Channel()
		if err != nil {
			return fmt.Errorf("opening channel: %w", err)
		}
		s.ch = ch
		if err := ch.Confirm(false); err != nil {
			return fmt.Errorf("enabling confirms: %w", err)
		}
		if cfg.DeclareExchange {
			if err := ch.ExchangeDeclare(cfg.Exchange, "topic", true, false, false, false, nil); err != nil {
				return fmt.Errorf("declaring exchange %q: %w", cfg.Exchange, err)
			}
		}
		s.returns = ch.NotifyReturn(make(chan amqp.Return, 256))
		return nil
	}
	done := make(chan error, 1)
	go func() { done <- setup() }()
	var err error
	select {
	case err = <-done:
	case <-dctx.Done():
		err = dctx.Err()
		// Unblock the setup goroutine: a closed socket fails its I/O.
		rawMu.Lock()
		if s.raw != nil {
			_ = s.raw.Close()
		}
		rawMu.Unlock()
		go func() {
			if <-done == nil {
				s.close()
			}
		}()
		return nil, fmt.Errorf("dialing broker %s: %w: %w", RedactURL(cfg.URL), ErrBrokerUnavailable, err)
	}
	if err != nil {
		s.close()
		return nil, fmt.Errorf("dialing broker %s: %w: %w", RedactURL(cfg.URL), ErrBrokerUnavailable, redactErr(err, cfg.URL))
	}
	go s.returnGuard()
	return s, nil
}

// returnGuard takes the returns nobody took, every returnGuardInterval,
// until the session closes or returns is closed.
func (s *amqpSession) returnGuard() {
	t := time.NewTicker(returnGuardInterval)
	defer t.Stop()
	for {
		select {
		case <-s.guardStop:
			return
		case <-t.C:
		}
		s.mu.Lock()
		s.takeReturns()
		closed := s.returnsClosed
		s.mu.Unlock()
		if closed {
			return
		}
	}
}

// takeReturns records every buffered return. The caller holds s.mu.
func (s *amqpSession) takeReturns() {
	for !s.returnsClosed {
		select {
		case r, ok := <-s.returns:
			s.took(r, ok)
		default:
			return
		}
	}
}

// took records r, or that returns was closed when ok is false. The caller
// holds s.mu.
func (s *amqpSession) took(r amqp.Return, ok bool) {
	if !ok {
		s.returnsClosed = true
		return
	}
	if len(s.returned) >= maxReturned {
		clear(s.returned)
	}
	s.returned[r.MessageId] = struct{}{}
}

// forget drops a stale return of an earlier publish of id.
func (s *amqpSession) forget(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.takeReturns()
	delete(s.returned, id)
}

// wasReturned reports (and forgets) whether id was returned. Its caller
// saw the confirm of id, so a return of id is recorded or buffered.
func (s *amqpSession) wasReturned(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.takeReturns()
	_, ok := s.returned[id]
	delete(s.returned, id)
	return ok
}

// await blocks until done closes (nil) or ctx ends (its error, unless
// done closed too), taking the returns that arrive meanwhile.
func (s *amqpSession) await(ctx context.Context, done <-chan struct{}) error {
	s.mu.Lock()
	returns := s.returns
	if s.returnsClosed {
		returns = nil
	}
	s.mu.Unlock()
	for {
		select {
		case <-done:
			return nil
		case r, ok := <-returns:
			s.mu.Lock()
			s.took(r, ok)
			s.mu.Unlock()
			if !ok {
				returns = nil
			}
		case <-ctx.Done():
			// A confirm that did arrive wins over the deadline.
			select {
			case <-done:
				return nil
			default:
				return ctx.Err()
			}
		}
	}
}

// alive reports whether the session can still publish.
func (s *amqpSession) alive() bool {
	return !s.broken.Load() && !s.conn.IsClosed() && !s.ch.IsClosed()
}

// breakOff marks the session unusable and closes it in the background; the
// next Publish dials again.
func (s *amqpSession) breakOff() {
	if s.broken.Swap(true) {
		return
	}
	go s.close()
}

// close closes the connection, briefly waiting for the broker, then the
// socket.
func (s *amqpSession) close() {
	s.broken.Store(true)
	s.closeOnce.Do(func() { close(s.guardStop) })
	if s.conn != nil {
		_ = s.conn.CloseDeadline(time.Now().Add(time.Second))
	}
	if s.raw != nil {
		_ = s.raw.Close()
	}
}

// bounded runs fn, a blocking amqp091 call that ignores contexts, on the
// caller's goroutine and gives up when ctx ends first: it then closes the
// socket, which fails the call at once (amqp091 blocks only on the socket
// and on locks held around socket I/O), the session is broken and bounded
// returns ctx's error. No goroutine is started unless ctx ends.
func (s *amqpSession) bounded(ctx context.Context, fn func() error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	stop := context.AfterFunc(ctx, func() {
		s.broken.Store(true)
		if s.raw != nil {
			_ = s.raw.Close()
		}
	})
	err := fn()
	if !stop() {
		return ctx.Err()
	}
	return err
}

// amqpConfirmation awaits the confirm of one publish.
type amqpConfirmation struct {
	sess *amqpSession
	dc   *amqp.DeferredConfirmation
	id   string
}

// Wait returns nil for an ack of a message that was not returned,
// ErrReturned for an ack of a returned one, ErrNacked for a nack,
// ErrBrokerUnavailable when the channel closed first, and an error wrapping
// both ErrBrokerUnavailable and ctx's error when ctx ends first.
// Done implements DoneConfirmation: it is closed when the broker's ack or
// nack came, or the channel closed.
// A caller about to wait on Done has the publishes held on the socket
// written at once.
func (c *amqpConfirmation) Done() <-chan struct{} {
	select {
	case <-c.dc.Done():
	default:
		c.sess.raw.flushSoon()
	}
	return c.dc.Done()
}

// Wait writes the publishes held on the socket before it blocks: the
// confirm cannot come before its publish went out.
func (c *amqpConfirmation) Wait(ctx context.Context) error {
	var err error
	select {
	case <-c.dc.Done():
	default:
		err = c.sess.bounded(ctx, c.sess.raw.flush)
		if err == nil {
			err = c.sess.await(ctx, c.dc.Done())
		}
	}
	if err != nil {
		// A confirm this late means the connection is not to be trusted:
		// dial afresh on the next publish.
		c.sess.breakOff()
		return fmt.Errorf("awaiting confirm of %s: %w: %w", c.id, ErrBrokerUnavailable, err)
	}
	if !c.dc.Acked() {
		// amqp091 resolves outstanding confirms as nacks when the channel
		// or connection closes; the channel is marked closed before that.
		if c.sess.ch.IsClosed() || c.sess.conn.IsClosed() {
			c.sess.breakOff()
			return fmt.Errorf("awaiting confirm of %s: %w: channel closed", c.id, ErrBrokerUnavailable)
		}
		return fmt.Errorf("awaiting confirm of %s: %w", c.id, ErrNacked)
	}
	if c.sess.wasReturned(c.id) {
		return fmt.Errorf("awaiting confirm of %s: %w", c.id, ErrReturned)
	}
	return nil
}

// brokerErr wraps err as a broker-level failure.
func brokerErr(err error) error {
	if errors.Is(err, ErrBrokerUnavailable) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrBrokerUnavailable, err)
}

// Topology is the broker side of one bounded context: the durable topic
// exchange a relay publishes to and, when Queue is set, a durable classic
// queue bound to it with BindingKey ("#" takes every type), which
// dead-letters into the fanout exchange DeadLetterExchange, bound to the
// durable queue DeadLetterQueue.
type Topology struct {
	Exchange   string
	Queue      string
	BindingKey string
	// QueueType is the consumer queue's x-queue-type: QueueClassic (the
	// default, on one node) or QueueQuorum (replicated over a cluster's
	// nodes by Raft). The dead-letter queue has the same type, so that the
	// dead letters of a replicated queue are replicated too.
	QueueType string
}

// Queue types of Topology.QueueType.
const (
	QueueClassic = "classic"
	QueueQuorum  = "quorum"
)

// DeadLetterExchange returns the exchange Queue dead-letters into.
func (t Topology) DeadLetterExchange() string { return t.Queue + ".dlx" }

// DeadLetterQueue returns the queue that keeps Queue's dead letters.
func (t Topology) DeadLetterQueue() string { return t.Queue + ".dead" }

// Queues returns the queues of the topology: Queue and its dead letters.
func (t Topology) Queues() []string {
	if t.Queue == "" {
		return nil
	}
	return []string{t.Queue, t.DeadLetterQueue()}
}

// Declare declares the topology on the broker at url. Declaring is
// idempotent.
func (t Topology) Declare(ctx context.Context, url string) error {
	if t.Exchange == "" {
		return errors.New("declaring topology: exchange is required")
	}
	return WithChannel(ctx, url, t.DeclareOn)
}

// DeclareOn declares the topology on an open channel, as Declare does; a
// consumer that fails over declares it again on its new connection.
func (t Topology) DeclareOn(ch *amqp.Channel) error {
	if t.Exchange == "" {
		return errors.New("declaring topology: exchange is required")
	}
	if err := ch.ExchangeDeclare(t.Exchange, "topic", true, false, false, false, nil); err != nil {
		return fmt.Errorf("declaring exchange %q: %w", t.Exchange, err)
	}
	if t.Queue == "" {
		return nil
	}
	dlx, dead := t.DeadLetterExchange(), t.DeadLetterQueue()
	if err := ch.ExchangeDeclare(dlx, "fanout", true, false, false, false, nil); err != nil {
		return fmt.Errorf("declaring exchange %q: %w", dlx, err)
	}
	if _, err := ch.QueueDeclare(dead, true, false, false, false, amqp.Table{"x-queue-type": t.queueType()}); err != nil {
		return fmt.Errorf("declaring queue %q: %w", dead, err)
	}
	if err := ch.QueueBind(dead, "", dlx, false, nil); err != nil {
		return fmt.Errorf("binding %q to %q: %w", dead, dlx, err)
	}
	if _, err := ch.QueueDeclare(t.Queue, true, false, false, false, t.QueueArgs()); err != nil {
		return fmt.Errorf("declaring queue %q: %w", t.Queue, err)
	}
	if err := ch.QueueBind(t.Queue, t.BindingKey, t.Exchange, false, nil); err != nil {
		return fmt.Errorf("binding %q to %q with %q: %w", t.Queue, t.Exchange, t.BindingKey, err)
	}
	return nil
}

// queueType is QueueType, QueueClassic when empty.
func (t Topology) queueType() string {
	if t.QueueType == "" {
		return QueueClassic
	}
	return t.QueueType
}

// QueueArgs returns the arguments Queue is declared with, which a passive
// declaration must repeat.
func (t Topology) QueueArgs() amqp.Table {
	return amqp.Table{"x-queue-type": t.queueType(), "x-dead-letter-exchange": t.DeadLetterExchange()}
}

// Remove deletes the topology's queues and exchanges from the broker at
// url, whatever they hold. Removing what does not exist is no error.
func (t Topology) Remove(ctx context.Context, url string) error {
	return WithChannel(ctx, url, func(ch *amqp.Channel) error {
		var errs []error
		for _, q := range t.Queues() {
			if _, err := ch.QueueDelete(q, false, false, false); err != nil {
				errs = append(errs, fmt.Errorf("deleting queue %q: %w", q, err))
			}
		}
		if t.Queue != "" {
			if err := ch.ExchangeDelete(t.DeadLetterExchange(), false, false); err != nil {
				errs = append(errs, fmt.Errorf("deleting exchange %q: %w", t.DeadLetterExchange(), err))
			}
		}
		if t.Exchange != "" {
			if err := ch.ExchangeDelete(t.Exchange, false, false); err != nil {
				errs = append(errs, fmt.Errorf("deleting exchange %q: %w", t.Exchange, err))
			}
		}
		return errors.Join(errs...)
	})
}

// DeclareTopology declares Topology{exchange, queue, bindingKey} on the
// broker at url.
func DeclareTopology(ctx context.Context, url, exchange, queue, bindingKey string) error {
	return Topology{Exchange: exchange, Queue: queue, BindingKey: bindingKey}.Declare(ctx, url)
}

// WithChannel dials url (one AMQP URI, or the comma-separated nodes of a
// cluster: the first that answers), runs fn on a fresh channel and closes
// both; the whole is bounded by ctx (default 10 s when ctx has no
// deadline). Tests and tools use it for one-off broker work.
func WithChannel(ctx context.Context, url string, fn func(ch *amqp.Channel) error) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
	}
	urls, err := SplitAMQPURLs(url)
	if err != nil {
		return err
	}
	s, node, err := dialAny(ctx, AMQPConfig{DialTimeout: 10 * time.Second, Heartbeat: 10 * time.Second}, urls, 0)
	if err != nil {
		return err
	}
	defer s.close()
	if err := s.bounded(ctx, func() error { return fn(s.ch) }); err != nil {
		return redactErr(err, urls[node])
	}
	return nil
}

var passwordKV = regexp.MustCompile(`(?i)(password\s*=\s*)('[^']*'|[^\s&]+)`)

// urlStart finds where a URL of a comma-separated list starts: after a
// comma (and spaces), a scheme and "://". A comma inside a URL is not
// followed by a scheme (a password with a comma in it is percent-encoded
// in a list, and in a single URL is followed by the rest of the password).
var urlStart = regexp.MustCompile(`,\s*[A-Za-z][A-Za-z0-9+.-]*://`)

// splitURLs splits u, one URL or a comma-separated list of them (the
// nodes of a broker cluster), at the commas that start a URL. Each part
// keeps the spaces it has; one URL is returned whole.
func splitURLs(u string) []string {
	var parts []string
	prev := 0
	for _, loc := range urlStart.FindAllStringIndex(u, -1) {
		parts = append(parts, u[prev:loc[0]])
		prev = loc[0] + 1 // past the comma
	}
	return append(parts, u[prev:])
}

// RedactURL returns u with any password replaced by "xxxxx", for logs and
// errors; every URL a process logs goes through it. It handles URLs
// (amqp://user:pass@host, postgres://...) and comma-separated lists of
// them (OUTBOX_AMQP_URL's cluster nodes), their password query parameter,
// and PostgreSQL key=value strings (password=...). An unparsable URL
// loses its whole user part.
func RedactURL(u string) string {
	parts := splitURLs(u)
	for i, p := range parts {
		trimmed := strings.TrimLeft(p, " \t")
		parts[i] = p[:len(p)-len(trimmed)] + redactOne(trimmed)
	}
	return strings.Join(parts, ",")
}

// redactOne is RedactURL of one URL or connection string.
func redactOne(u string) string {
	if i := strings.Index(u, "://"); i >= 0 {
		if parsed, err := url.Parse(u); err == nil {
			u = parsed.Redacted()
		} else if j := strings.LastIndex(u[i+3:], "@"); j >= 0 {
			u = u[:i+3] + "xxxxx@" + u[i+3+j+1:]
		}
	}
	return passwordKV.ReplaceAllString(u, "${1}xxxxx")
}

// RedactError returns err with the password of rawURL removed from its
// text; the error chain is kept when the text holds no secret.
func RedactError(err error, rawURL string) error { return redactErr(err, rawURL) }

func redactErr(err error, rawURL string) error {
	if err == nil {
		return nil
	}
	text := err.Error()
	// The secrets go where a URL or a connection string carries them, and
	// wherever they stand as words of their own; inside a longer name
	// (the password outbox in the queue outboxlab.orders.q) they stay, so
	// that errors still name their queues and tables. Each URL of a list
	// is redacted on its own, the list too.
	redacted := strings.ReplaceAll(text, rawURL, RedactURL(rawURL))
	parts := splitURLs(rawURL)
	for _, p := range parts {
		p = strings.TrimSpace(p)
		if len(parts) > 1 && p != "" {
			redacted = strings.ReplaceAll(redacted, p, RedactURL(p))
		}
		redacted = redactSecret(redacted, urlPassword(p))
	}
	if redacted == text {
		return err
	}
	return errors.New(redacted)
}

// redactSecret blanks out secret, the password of a URL, in text.
func redactSecret(redacted, secret string) string {
	if secret != "" {
		for _, esc := range []string{secret, url.UserPassword("", secret).String()[1:]} {
			redacted = strings.ReplaceAll(redacted, ":"+esc+"@", ":xxxxx@")
		}
		redacted = passwordKV.ReplaceAllString(redacted, "${1}xxxxx")
		word := regexp.MustCompile(`(^|[^A-Za-z0-9_.\-])` + regexp.QuoteMeta(secret) + `($|[^A-Za-z0-9_.\-])`)
		for prev := ""; prev != redacted; {
			prev, redacted = redacted, word.ReplaceAllString(redacted, "${1}xxxxx${2}")
		}
	}
	return redacted
}

// urlPassword returns the password in rawURL, if any.
func urlPassword(rawURL string) string {
	if parsed, err := url.Parse(rawURL); err == nil && parsed.User != nil {
		if p, ok := parsed.User.Password(); ok {
			return p
		}
	}
	if m := passwordKV.FindStringSubmatch(rawURL); m != nil {
		return strings.Trim(m[2], "'")
	}
	return ""
}
