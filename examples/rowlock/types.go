package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Why a row is poison: it is parked at once and never published.
var (
	errUnknownType = errors.New("unknown message type")
	errUndecodable = errors.New("undecodable payload")
)

// kinds are the kinds a required payload field may have in OUTBOX_TYPES.
var kinds = []string{"string", "number", "integer", "bool", "object", "array", "any"}

// required is one field a type's payload must have, of a kind.
type required struct {
	name, kind string
}

// typeSet is what OUTBOX_TYPES says: the known message types and the
// fields each one's payload must have. A nil *typeSet knows every type
// and takes any JSON payload.
type typeSet struct {
	types map[string][]required
}

// parseTypes reads an OUTBOX_TYPES value (docs/contract.md §3.2): types
// separated by commas, each optionally followed by ":" and its required
// fields separated by semicolons, each field "name=kind":
//
//	order.placed:order_id=string;amount=integer,order.paid
//
// Blanks around every part are ignored; empty entries are skipped.
func parseTypes(spec string) (*typeSet, error) {
	ts := &typeSet{types: map[string][]required{}}
	for entry := range strings.SplitSeq(spec, ",") {
		if strings.TrimSpace(entry) == "" {
			continue
		}
		name, fields, _ := strings.Cut(entry, ":")
		name = strings.TrimSpace(name)
		switch {
		case name == "":
			return nil, fmt.Errorf("entry %q has no type name", strings.TrimSpace(entry))
		case len(name) > maxShortString:
			return nil, fmt.Errorf("type %q is longer than the %d bytes of a routing key", name, maxShortString)
		case strings.ContainsAny(name, " \t\r\n=;:"):
			return nil, fmt.Errorf("type %q holds a blank or one of =;:", name)
		}
		if _, twice := ts.types[name]; twice {
			return nil, fmt.Errorf("type %q is listed twice", name)
		}
		var rs []required
		for f := range strings.SplitSeq(fields, ";") {
			if strings.TrimSpace(f) == "" {
				continue
			}
			fname, kind, ok := strings.Cut(f, "=")
			fname, kind = strings.TrimSpace(fname), strings.TrimSpace(kind)
			switch {
			case !ok || fname == "":
				return nil, fmt.Errorf("type %q: field %q is not name=kind", name, strings.TrimSpace(f))
			case !slices.Contains(kinds, kind):
				return nil, fmt.Errorf("type %q: field %q has kind %q, want one of %s", name, fname, kind, strings.Join(kinds, ", "))
			case slices.ContainsFunc(rs, func(r required) bool { return r.name == fname }):
				return nil, fmt.Errorf("type %q: field %q is listed twice", name, fname)
			}
			rs = append(rs, required{fname, kind})
		}
		ts.types[name] = rs
	}
	if len(ts.types) == 0 {
		return nil, fmt.Errorf("%q names no type", spec)
	}
	return ts, nil
}

// names lists the known types, sorted; nil for a nil set.
func (ts *typeSet) names() []string {
	if ts == nil {
		return nil
	}
	out := make([]string, 0, len(ts.types))
	for n := range ts.types {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// check says whether a row of type typ with this body may be published:
// nil, or an error wrapping errUnknownType or errUndecodable.
func (ts *typeSet) check(typ string, body []byte) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return fmt.Errorf("%w: %s: not JSON: %v", errUndecodable, typ, err)
	}
	if dec.More() {
		return fmt.Errorf("%w: %s: more than one JSON value", errUndecodable, typ)
	}
	if ts == nil {
		return nil
	}
	rs, ok := ts.types[typ]
	if !ok {
		return fmt.Errorf("%w %q", errUnknownType, typ)
	}
	if len(rs) == 0 {
		return nil
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return fmt.Errorf("%w: %s: %s, want a JSON object", errUndecodable, typ, kindOf(v))
	}
	for _, r := range rs {
		val, present := obj[r.name]
		switch {
		case !present:
			return fmt.Errorf("%w: %s: field %q is missing", errUndecodable, typ, r.name)
		case !fits(val, r.kind):
			return fmt.Errorf("%w: %s: field %q is %s, want %s", errUndecodable, typ, r.name, kindOf(val), r.kind)
		}
	}
	return nil
}

// fits reports whether a value decoded with UseNumber is of the kind: an
// integer is a number too, and only kind any takes null.
func fits(v any, kind string) bool {
	k := kindOf(v)
	return kind == "any" || k == kind || (kind == "number" && k == "integer")
}

// kindOf names the kind of a value decoded with UseNumber: integer for a
// number written without a fraction or an exponent.
func kindOf(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case string:
		return "string"
	case bool:
		return "bool"
	case json.Number:
		if strings.ContainsAny(x.String(), ".eE") {
			return "number"
		}
		return "integer"
	case map[string]any:
		return "object"
	case []any:
		return "array"
	}
	return fmt.Sprintf("%T", v)
}
