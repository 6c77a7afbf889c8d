package consumer

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Identity says where a delivery carries the id of its outbox event, the
// consumer's dedupe key. The zero value reads the AMQP message_id, as the
// black-box contract's relays publish it; an outbox library that names
// its messages elsewhere (watermill's "_watermill_message_uuid" header, a
// field of the JSON body) is read through Header or BodyField.
type Identity struct {
	// Header names the AMQP header that holds the id.
	Header string
	// BodyField names the top-level field of the JSON body that holds the
	// id.
	BodyField string
}

// ParseIdentity reads an identity as Identity.String writes it:
// "message_id", "header:NAME" or "body:FIELD".
func ParseIdentity(s string) (Identity, error) {
	s = strings.TrimSpace(s)
	kind, name, _ := strings.Cut(s, ":")
	switch {
	case s == "" || s == "message_id":
		return Identity{}, nil
	case kind == "header" && name != "":
		return Identity{Header: name}, nil
	case kind == "body" && name != "":
		return Identity{BodyField: name}, nil
	}
	return Identity{}, fmt.Errorf("delivery identity %q: want message_id, header:NAME or body:FIELD", s)
}

// String returns the identity as ParseIdentity reads it.
func (i Identity) String() string {
	switch {
	case i.Header != "":
		return "header:" + i.Header
	case i.BodyField != "":
		return "body:" + i.BodyField
	}
	return "message_id"
}

// ID returns the event id d carries, "" when it carries none where the
// identity looks. A header or body field may hold the id as text or as an
// integer (a key the database assigns, such as a bigint identity), read
// as its decimal digits; any other value is no id.
func (i Identity) ID(d amqp.Delivery) string {
	switch {
	case i.Header != "":
		return text(d.Headers[i.Header])
	case i.BodyField != "":
		var body map[string]any
		dec := json.NewDecoder(bytes.NewReader(d.Body))
		dec.UseNumber()
		if dec.Decode(&body) != nil || dec.More() {
			return ""
		}
		return text(body[i.BodyField])
	}
	return d.MessageId
}

// Type returns the event type of d: its AMQP type property, else its
// routing key (the contract routes by message_type; a library that sets
// no type property still routes by it).
func (Identity) Type(d amqp.Delivery) string { return cmp.Or(d.Type, d.RoutingKey) }

func text(v any) string {
	switch s := v.(type) {
	case string:
		return s
	case []byte:
		return string(s)
	case json.Number:
		// An integer within 64 bits, as the body writes it; not 1.5 or 1e3.
		if _, err := strconv.ParseInt(string(s), 10, 64); err == nil {
			return string(s)
		}
		if _, err := strconv.ParseUint(string(s), 10, 64); err == nil {
			return string(s)
		}
	case int8, int16, int32, int64, int:
		return fmt.Sprint(s)
	case uint8, uint16, uint32, uint64, uint:
		return fmt.Sprint(s)
	}
	return ""
}
