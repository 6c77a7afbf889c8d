package relay_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"regexp"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxlab/outboxlab/relay"
	"github.com/outboxlab/outboxlab/relay/amqptest"
	"github.com/outboxlab/outboxlab/testenv/tcpfake"
)

// TestAMQPPublisherDefaults checks the settings a publisher applies when
// the caller leaves them out (zero or negative) and keeps those it gives.
func TestAMQPPublisherDefaults(t *testing.T) {
	for _, c := range []struct {
		name               string
		dial, beat         time.Duration
		wantDial, wantBeat time.Duration
	}{
		{"zero", 0, 0, 5 * time.Second, 10 * time.Second},
		{"negative", -time.Second, -time.Second, 5 * time.Second, 10 * time.Second},
		{"given", time.Millisecond, 3 * time.Second, time.Millisecond, 3 * time.Second},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, err := relay.NewAMQPPublisher(relay.AMQPConfig{URL: "amqp://127.0.0.1:1/", Exchange: "events", DialTimeout: c.dial, Heartbeat: c.beat})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			cfg, opts := p.Settings()
			if cfg.DialTimeout != c.wantDial || cfg.Heartbeat != c.wantBeat {
				t.Errorf("dial timeout %s, heartbeat %s; want %s and %s", cfg.DialTimeout, cfg.Heartbeat, c.wantDial, c.wantBeat)
			}
			if opts != relay.DefaultPublishOptions() {
				t.Errorf("options %+v, want the defaults %+v", opts, relay.DefaultPublishOptions())
			}
		})
	}
	transient := relay.PublishOptions{}
	p, err := relay.NewAMQPPublisher(relay.AMQPConfig{URL: "amqp://127.0.0.1:1/", Exchange: "events", Options: &transient})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, opts := p.Settings(); opts != transient {
		t.Errorf("options %+v, want the given %+v", opts, transient)
	}
}

// silentBroker accepts connections and never says a word, as a broker
// whose host is up but whose process hangs: an AMQP handshake with it
// never ends on its own.
func silentBroker(t *testing.T) string {
	t.Helper()
	return "amqp://outbox:s3cret@" + tcpfake.Listen(t, func(net.Conn) bool { return true }) + "/"
}

// TestAMQPPublisherDialTimeout: a dial to a broker that never answers
// gives up after DialTimeout, or at the caller's deadline when that comes
// first, as broker-unavailable; a deadline already past fails at once.
func TestAMQPPublisherDialTimeout(t *testing.T) {
	url := silentBroker(t)
	publish := func(dialTimeout, ctxTimeout time.Duration) (time.Duration, error) {
		p, err := relay.NewAMQPPublisher(relay.AMQPConfig{URL: url, Exchange: "events", DialTimeout: dialTimeout})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		ctx, cancel := context.WithTimeout(context.Background(), ctxTimeout)
		defer cancel()
		start := time.Now()
		_, err = p.Publish(ctx, relay.Message{ID: "x", Type: "t", Payload: []byte(`{}`)})
		return time.Since(start), err
	}
	for _, c := range []struct {
		name          string
		dial, ctx     time.Duration
		least, most   time.Duration
		deadlineFirst bool
	}{
		{"dial timeout first", 300 * time.Millisecond, 20 * time.Second, 250 * time.Millisecond, 5 * time.Second, false},
		{"caller's deadline first", 20 * time.Second, 300 * time.Millisecond, 250 * time.Millisecond, 5 * time.Second, true},
		{"deadline already past", 20 * time.Second, -time.Second, 0, time.Second, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			took, err := publish(c.dial, c.ctx)
			if !errors.Is(err, relay.ErrBrokerUnavailable) {
				t.Fatalf("publish to a silent broker: %v, want ErrBrokerUnavailable", err)
			}
			if took < c.least || took > c.most {
				t.Errorf("gave up after %s, want between %s and %s", took, c.least, c.most)
			}
			if regexp.MustCompile(`s3cret`).MatchString(err.Error()) {
				t.Errorf("error leaks the password: %v", err)
			}
		})
	}
}

// TestAMQPPublisherDialClosesItsSocketWhenCancelled: a publish whose
// context is cancelled while the broker holds the handshake gives up, and
// its socket is closed at once, not left open until the dial's own
// timeout.
func TestAMQPPublisherDialClosesItsSocketWhenCancelled(t *testing.T) {
	closed := make(chan time.Time, 1)
	addr := tcpfake.Listen(t, func(c net.Conn) bool {
		go func() {
			_, _ = io.Copy(io.Discard, c)
			closed <- time.Now()
		}()
		return true
	})
	p, err := relay.NewAMQPPublisher(relay.AMQPConfig{URL: "amqp://" + addr + "/", Exchange: "events", DialTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(200*time.Millisecond, cancel)
	if _, err := p.Publish(ctx, relay.Message{ID: "x", Type: "t", Payload: []byte(`{}`)}); !errors.Is(err, relay.ErrBrokerUnavailable) {
		t.Fatalf("a publish cancelled during the handshake: %v, want ErrBrokerUnavailable", err)
	}
	cancelled := time.Now()
	select {
	case at := <-closed:
		if d := at.Sub(cancelled); d > 2*time.Second {
			t.Errorf("the socket closed %s after the publish gave up, want at once", d)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the socket of a cancelled dial was still open 10 s after the publish gave up")
	}
}

// TestDialAnyTriesEveryNodeFromStart: nodes are tried in turn from the
// start index, wrapping around, and when none answers every node's error
// comes back, in that order, with the start index.
func TestDialAnyTriesEveryNodeFromStart(t *testing.T) {
	// The three listeners stay open until all are made, so their ports
	// are distinct (a port closed at once can be handed out again, and two
	// nodes on one address cannot be told apart in the error).
	var urls []string
	var ls []net.Listener
	for i := 0; i < 3; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		urls = append(urls, "amqp://"+l.Addr().String()+"/")
	}
	for _, l := range ls {
		_ = l.Close() // nothing listens there any more: refused at once
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	k, err := relay.DialAny(ctx, relay.AMQPConfig{URL: urls[0], Exchange: "events", DialTimeout: 2 * time.Second, Heartbeat: time.Second}, urls, 1)
	if err == nil {
		t.Fatal("dialled a node nothing listens on")
	}
	if k != 1 {
		t.Errorf("failed dial returned node %d, want the start 1", k)
	}
	msg := err.Error()
	var at []int
	for _, i := range []int{1, 2, 0} {
		if loc := regexp.MustCompile(regexp.QuoteMeta(urls[i])).FindStringIndex(msg); loc != nil {
			at = append(at, loc[0])
		}
	}
	if len(at) != 3 || !(at[0] < at[1] && at[1] < at[2]) {
		t.Errorf("errors %q: want every node's, 1, 2, 0 in that order (found at %s)", msg, fmt.Sprint(at))
	}
}

// TestWithChannelGivesUpAHungBrokerAtTheDeadline: a call on the channel
// that waits for a reply the broker never sends (it hangs with its socket
// open) returns the context's error at the deadline, not when the
// broker's heartbeats time out.
func TestWithChannelGivesUpAHungBrokerAtTheDeadline(t *testing.T) {
	srv := amqptest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		done <- relay.WithChannel(ctx, srv.URL(), func(ch *amqp.Channel) error {
			srv.Mute(true)
			_, err := ch.QueueDeclare("q", true, false, false, false, nil)
			return err
		})
	}()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("a declare the broker never answers: %v, want the context's deadline", err)
		}
		if took := time.Since(start); took > 3*time.Second {
			t.Errorf("gave up after %s, the deadline was 300ms", took)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a declare the broker never answers still waited 10 s after a 300ms deadline")
	}
}
