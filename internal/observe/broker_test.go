package observe_test

import (
	"context"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxlab/outboxlab/internal/observe"
	"github.com/outboxlab/outboxlab/outbox"
	"github.com/outboxlab/outboxlab/testenv"
)

// TestTapSeesEveryPublishByItsUser runs the firehose tap against the
// project's RabbitMQ image: a replica's broker user publishes through the
// fault proxy, and the tap must see each publish with that user, the
// message's id, type, headers and body, and the queue it was routed to;
// a publish to an exchange it does not watch is not seen. After the
// broker is killed and started again, tracing is still on (the image
// turns it on at boot), the tap reconnects on its own with a gap, and
// sees the next publish.
func TestTapSeesEveryPublishByItsUser(t *testing.T) {
	if testing.Short() {
		t.Skip("needs Docker")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	env := testenv.StartT(t, testenv.Options{})
	role, err := observe.NewRole(outbox.MustParseTable("tap_test.outbox"), "relay-a")
	if err != nil {
		t.Fatal(err)
	}
	expr, err := observe.AddBrokerUsersExpr([]observe.Role{role})
	if err != nil {
		t.Fatal(err)
	}
	if code, out, err := env.RabbitMQ().Exec(ctx, "rabbitmqctl", "eval", expr); err != nil || code != 0 {
		t.Fatalf("adding the broker user: %d %s %v", code, out, err)
	}
	url, err := observe.BrokerURL(env.AMQPURL(testenv.LinkRelayBroker), role)
	if err != nil {
		t.Fatal(err)
	}
	declare := func(ch *amqp.Channel) {
		t.Helper()
		for _, x := range []string{"tap.watched", "tap.other"} {
			if err := ch.ExchangeDeclare(x, "topic", true, false, false, false, nil); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := ch.QueueDeclare("tap.q", true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
		if err := ch.QueueBind("tap.q", "#", "tap.watched", false, nil); err != nil {
			t.Fatal(err)
		}
	}
	publish := func(exchange, id string) {
		t.Helper()
		conn, err := amqp.Dial(url)
		if err != nil {
			t.Fatalf("dialing as %s: %v", role.Name, err)
		}
		defer conn.Close()
		ch, err := conn.Channel()
		if err != nil {
			t.Fatal(err)
		}
		declare(ch)
		err = ch.PublishWithContext(ctx, exchange, "order.placed", false, false, amqp.Publishing{
			MessageId: id, Type: "order.placed", Headers: amqp.Table{"event-id": id}, Body: []byte(`{"n":1}`), DeliveryMode: amqp.Persistent,
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	// The exchanges must exist before the tap binds for them.
	publish("tap.other", "warm-up")
	tap, err := observe.StartTap(ctx, env.DirectAMQPURL(), []string{"tap.watched"})
	if err != nil {
		t.Fatal(err)
	}
	defer tap.Close()

	publish("tap.other", "not-watched")
	publish("tap.watched", "e1")
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	seen, err := tap.Next(wctx, 0)
	wcancel()
	if err != nil {
		t.Fatalf("waiting for the publish: %v", err)
	}
	p := seen[0]
	if len(seen) != 1 || p.User != role.Name || p.Exchange != "tap.watched" || p.RoutingKey != "order.placed" ||
		p.Message.MessageId != "e1" || p.Message.Type != "order.placed" || p.Message.Headers["event-id"] != "e1" ||
		string(p.Message.Body) != `{"n":1}` || len(p.Routed) != 1 || p.Routed[0] != "tap.q" || p.Message.DeliveryMode != amqp.Persistent {
		t.Fatalf("seen %+v, want one publish of e1 by %s to tap.watched routed to tap.q", seen, role.Name)
	}

	if err := env.RabbitMQ().Kill(ctx); err != nil {
		t.Fatal(err)
	}
	if err := env.RabbitMQ().Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := env.RabbitMQ().WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	// The tap binds again within its reconnect interval; publish until it
	// sees one, so that the test does not bet on when it is back.
	var after []observe.Published
	deadline := time.Now().Add(30 * time.Second)
	for len(after) == 0 && time.Now().Before(deadline) {
		publish("tap.watched", "e2")
		wctx, wcancel := context.WithTimeout(ctx, time.Second)
		after, _ = tap.Next(wctx, 1)
		wcancel()
	}
	if len(after) == 0 || after[0].Message.MessageId != "e2" || after[0].User != role.Name {
		t.Fatalf("after the broker's restart the tap saw %+v, want e2 by %s", after, role.Name)
	}
	gaps := tap.Gaps()
	if len(gaps) != 1 || gaps[0].To.IsZero() || !gaps[0].To.After(gaps[0].From) {
		t.Errorf("gaps %+v, want one closed gap for the restart", gaps)
	}
	del, err := observe.DeleteBrokerUsersExpr([]observe.Role{role})
	if err != nil {
		t.Fatal(err)
	}
	if code, out, err := env.RabbitMQ().Exec(ctx, "rabbitmqctl", "eval", del); err != nil || code != 0 {
		t.Fatalf("deleting the broker user: %d %s %v", code, out, err)
	}
	if _, err := amqp.Dial(url); err == nil || !strings.Contains(err.Error(), "403") {
		t.Errorf("dialing as the deleted user: %v, want access refused", err)
	}
}

// TestBrokerUsersRefuseWhatErlangWouldNeedEscaped checks the expressions
// and URLs the broker users are made with.
func TestBrokerUsersRefuseWhatErlangWouldNeedEscaped(t *testing.T) {
	bad := observe.Role{Name: `a">>, evil`, Password: "x", Process: "relay-a"}
	if _, err := observe.AddBrokerUsersExpr([]observe.Role{bad}); err == nil {
		t.Error("AddBrokerUsersExpr took a name with quotes")
	}
	if _, err := observe.DeleteBrokerUsersExpr([]observe.Role{bad}); err == nil {
		t.Error("DeleteBrokerUsersExpr took a name with quotes")
	}
	good := observe.Role{Name: "run_1_relay_a", Password: "abc123", Process: "relay-a"}
	u, err := observe.BrokerURL("amqp://outbox:outbox@h1:1/,amqp://outbox:outbox@h2:2/", good)
	if err != nil || u != "amqp://run_1_relay_a:abc123@h1:1/,amqp://run_1_relay_a:abc123@h2:2/" {
		t.Errorf("BrokerURL: %q, %v", u, err)
	}
	expr, err := observe.AddBrokerUsersExpr([]observe.Role{good})
	if err != nil || !strings.Contains(expr, `{<<"run_1_relay_a">>, <<"abc123">>}`) {
		t.Errorf("AddBrokerUsersExpr: %s, %v", expr, err)
	}
}
