package consumer

import (
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
)

func TestIdentityReadsWhereItIsTold(t *testing.T) {
	d := amqp.Delivery{
		MessageId:  "from-property",
		Headers:    amqp.Table{"_watermill_message_uuid": "from-header", "n": int64(3), "u": uint32(7), "f": 2.5, "b": true},
		Body:       []byte(`{"event_id":"from-body","n":9007199254740993,"f":1.5,"e":1e3,"neg":-4,"o":{}}`),
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
		// An integer is read as its digits (a bigint key the database
		// assigns); any other value is no id.
		{"header:n", "3"},
		{"header:u", "7"},
		{"header:f", ""},
		{"header:b", ""},
		{"body:event_id", "from-body"},
		{"body:n", "9007199254740993"}, // beyond a float64's integers, kept exact
		{"body:neg", "-4"},
		{"body:f", ""},
		{"body:e", ""},
		{"body:o", ""},
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
	for _, body := range []string{"not json", `{"event_id":"x"} trailing`} {
		if got := (Identity{BodyField: "event_id"}).ID(amqp.Delivery{Body: []byte(body)}); got != "" {
			t.Errorf("an undecodable body %q gave id %q", body, got)
		}
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
