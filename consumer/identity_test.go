package consumer

import (
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
)

func TestIdentityReadsWhereItIsTold(t *testing.T) {
	d := amqp.Delivery{
		MessageId:  "from-property",
		Headers:    amqp.Table{"_watermill_message_uuid": "from-header", "n": int64(3)},
		Body:       []byte(`{"event_id":"from-body","n":3}`),
		RoutingKey: "order.created",
	}
	for _, c := range []struct {
		spec string
		want string
	}{
		{"", "from-property"},
		{"message_id", "from-property"},
		{"header:_watermill_message_uuid", "from-header"},
		{"header:missing", ""},
		{"header:n", ""}, // not text: no id, rather than a number's digits
		{"body:event_id", "from-body"},
		{"body:missing", ""},
	} {
		id, err := ParseIdentity(c.spec)
		if err != nil {
			t.Fatalf("ParseIdentity(%q): %v", c.spec, err)
		}
		if got := id.ID(d); got != c.want {
			t.Errorf("%s: ID = %q, want %q", c.spec, got, c.want)
		}
		if c.spec != "" {
			if back, _ := ParseIdentity(id.String()); back != id {
				t.Errorf("%s: String %q does not read back", c.spec, id.String())
			}
		}
	}
	if got := (Identity{BodyField: "event_id"}).ID(amqp.Delivery{Body: []byte("not json")}); got != "" {
		t.Errorf("an undecodable body gave id %q", got)
	}
	if got := (Identity{}).Type(d); got != "order.created" {
		t.Errorf("Type without a type property = %q, want the routing key", got)
	}
	d.Type = "order.paid"
	if got := (Identity{}).Type(d); got != "order.paid" {
		t.Errorf("Type = %q, want the type property", got)
	}
	for _, bad := range []string{"header:", "body:", "property:x", "msgid"} {
		if _, err := ParseIdentity(bad); err == nil {
			t.Errorf("ParseIdentity(%q) accepted it", bad)
		}
	}
}
