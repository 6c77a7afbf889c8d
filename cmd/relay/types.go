package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strings"

	"github.com/outboxlab/outboxlab/outbox"
	"github.com/outboxlab/outboxlab/relay"
)

// typeDecoder is the relay's message type registry when it runs as a
// process: OUTBOX_TYPES lists the known types and, optionally, the shape of
// each one's payload. A type not listed is unknown (parked at once); a
// payload that does not fit its type's shape is undecodable (retried, then
// parked).
//
// The grammar of OUTBOX_TYPES:
//
//	types  = entry {"," entry}
//	entry  = type [":" field {";" field}]
//	field  = name "=" kind
//	kind   = "string" | "number" | "integer" | "bool" | "object" | "array" | "any"
//
// A bare type accepts any payload (the column is jsonb: always valid JSON).
// A type with fields wants a JSON object whose keys are all among the
// fields (unknown keys are rejected) and whose values have the listed
// kinds; a missing field is allowed and null fits every kind, as in
// encoding/json. For example
// "order.placed:order_id=string;amount=integer,order.paid" knows two
// types and checks the payload of the first.
type typeDecoder struct {
	types map[string]map[string]string // nil map: any payload
}

var _ relay.Decoder = (*typeDecoder)(nil)

var (
	typeNameRe  = regexp.MustCompile(`^[A-Za-z0-9_.*#-]+$`)
	fieldNameRe = regexp.MustCompile(`^[A-Za-z0-9_.-]+$`)
	kinds       = map[string]bool{"string": true, "number": true, "integer": true, "bool": true, "object": true, "array": true, "any": true}
)

// parseTypes parses an OUTBOX_TYPES value.
func parseTypes(spec string) (*typeDecoder, error) {
	d := &typeDecoder{types: map[string]map[string]string{}}
	for _, entry := range strings.Split(spec, ",") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		name, fields, hasFields := strings.Cut(entry, ":")
		name = strings.TrimSpace(name)
		if !typeNameRe.MatchString(name) {
			return nil, fmt.Errorf("type %q: want a routing key word such as order.placed", name)
		}
		if _, dup := d.types[name]; dup {
			return nil, fmt.Errorf("type %q listed twice", name)
		}
		if !hasFields {
			d.types[name] = nil
			continue
		}
		shape := map[string]string{}
		for _, f := range strings.Split(fields, ";") {
			fname, kind, ok := strings.Cut(strings.TrimSpace(f), "=")
			fname, kind = strings.TrimSpace(fname), strings.TrimSpace(kind)
			switch {
			case !ok || !fieldNameRe.MatchString(fname):
				return nil, fmt.Errorf("type %q: field %q: want name=kind", name, f)
			case !kinds[kind]:
				return nil, fmt.Errorf("type %q: field %q: unknown kind %q (want string, number, integer, bool, object, array or any)", name, fname, kind)
			}
			shape[fname] = kind
		}
		d.types[name] = shape
	}
	if len(d.types) == 0 {
		return nil, fmt.Errorf("no type in %q", spec)
	}
	return d, nil
}

// Names returns the known types, sorted.
func (d *typeDecoder) Names() []string {
	names := make([]string, 0, len(d.types))
	for n := range d.types {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Decode checks payload against the shape of messageType. It wraps
// outbox.ErrUnknownType for a type not listed and outbox.ErrUndecodable
// for a payload that does not fit.
func (d *typeDecoder) Decode(messageType string, payload []byte) (any, error) {
	shape, ok := d.types[messageType]
	if !ok {
		return nil, fmt.Errorf("%w: %q", outbox.ErrUnknownType, messageType)
	}
	if !json.Valid(payload) {
		return nil, fmt.Errorf("%w: %s: not JSON", outbox.ErrUndecodable, messageType)
	}
	if shape == nil {
		return json.RawMessage(payload), nil
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(payload, &obj); err != nil || obj == nil {
		return nil, fmt.Errorf("%w: %s: want a JSON object", outbox.ErrUndecodable, messageType)
	}
	for key, raw := range obj {
		kind, ok := shape[key]
		if !ok {
			return nil, fmt.Errorf("%w: %s: unknown field %q", outbox.ErrUndecodable, messageType, key)
		}
		if !fits(kind, raw) {
			return nil, fmt.Errorf("%w: %s: field %q is not %s", outbox.ErrUndecodable, messageType, key, kind)
		}
	}
	return obj, nil
}

// fits reports whether the JSON value raw has the given kind; null fits
// every kind.
func fits(kind string, raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return false
	}
	if kind == "any" || bytes.Equal(raw, []byte("null")) {
		return true
	}
	switch raw[0] {
	case '"':
		return kind == "string"
	case '{':
		return kind == "object"
	case '[':
		return kind == "array"
	case 't', 'f':
		return kind == "bool"
	}
	// A number.
	switch kind {
	case "number":
		return true
	case "integer":
		var n json.Number
		if json.Unmarshal(raw, &n) != nil {
			return false
		}
		_, err := n.Int64()
		return err == nil
	}
	return false
}
