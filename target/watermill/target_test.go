package wmtarget_test

import (
	"testing"

	wamqp "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill/message"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxlab/outboxlab/contract"
	wmtarget "github.com/outboxlab/outboxlab/target/watermill"
	"github.com/outboxlab/outboxlab/testenv"
)

// TestIdentityReadsWatermillsDelivery marshals a message as the replica's
// publisher does (watermill-amqp's DefaultMarshaler) and reads the event
// id and type back from the delivery the consumer would get.
func TestIdentityReadsWatermillsDelivery(t *testing.T) {
	m := message.NewMessage("0192f1a2-0000-7000-8000-000000000001", []byte(`{"order_id":"o1","amount":1}`))
	m.Metadata.Set("correlation_id", "c1")
	p, err := wamqp.DefaultMarshaler{}.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	d := amqp.Delivery{Headers: p.Headers, Body: p.Body, MessageId: p.MessageId, Type: p.Type, RoutingKey: "order.placed", DeliveryMode: p.DeliveryMode}
	if got := wmtarget.Identity.ID(d); got != m.UUID {
		t.Errorf("identity %s reads %q, want the message UUID %s", wmtarget.Identity, got, m.UUID)
	}
	if d.MessageId != "" || d.Type != "" {
		t.Errorf("watermill's marshaler now sets message_id %q, type %q: the identity may read them instead", d.MessageId, d.Type)
	}
	if got := wmtarget.Identity.Type(d); got != "order.placed" {
		t.Errorf("type %q, want the routing key", got)
	}
	if d.DeliveryMode != amqp.Persistent {
		t.Errorf("delivery mode %d, want persistent", d.DeliveryMode)
	}
}

func TestTarget(t *testing.T) {
	u := wmtarget.Target()
	if err := u.Outbox.Validate(); err != nil || !u.Outbox.Own() {
		t.Fatalf("outbox: own %v, %v", u.Outbox.Own(), err)
	}
	switch {
	case u.Image != testenv.ImageWatermillRelay || len(u.Command) > 0:
		t.Errorf("image %q, command %q", u.Image, u.Command)
	case u.Promises != (contract.Promises{Failpoints: true, Locking: contract.RowLocks}):
		t.Errorf("declares %s, want its row locks, the replica's failpoints and nothing else", u.Promises)
	case u.Replay != "--relay watermill" || u.Identity != wmtarget.Identity:
		t.Errorf("replay %q, identity %s", u.Replay, u.Identity)
	}
}
