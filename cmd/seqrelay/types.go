package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Why a row is poison: it is parked at once and never published.
var (
	errUnknownType = errors.New("unknown message type")
	errUndecodable = errors.New("undecodable payload")
)

// field is one required field of a type's payload.
type field struct {
	name string
	kind string
}

// typeSet is what OUTBOX_TYPES says: the known message types and, for
// each, the fields its payload must have. A nil *typeSet knows every type
// and accepts any JSON payload.
type typeSet struct {
	fields map[string][]field
}

// kindNames are the kinds a field may have.
var kindNames = []string{"string", "number", "integer", "bool", "object", "array", "any"}

// parseTypes reads an OUTBOX_TYPES value:
//
//	"order.placed:order_id=string;amount=integer,order.paid"
//
// is two types, the first with two required fields. Entries are separated
// by commas, a type from its fields by a colon, fields by semicolons, a
// field's name from its kind by "="; blanks around any of them are
// ignored.
func parseTypes(spec string) (*typeSet, error) {
	ts := &typeSet{fields: map[string][]field{}}
	for _, entry := range strings.Split(spec, ",") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		name, rest, hasFields := strings.Cut(entry, ":")
		name = strings.TrimSpace(name)
		if err := checkTypeName(name); err != nil {
			return nil, err
		}
		if _, dup := ts.fields[name]; dup {
			return nil, fmt.Errorf("type %q is listed twice", name)
		}
		var fs []field
		if hasFields {
			seen := map[string]bool{}
			for _, f := range strings.Split(rest, ";") {
				f = strings.TrimSpace(f)
				if f == "" {
					continue
				}
				fname, kind, ok := strings.Cut(f, "=")
				fname, kind = strings.TrimSpace(fname), strings.TrimSpace(kind)
				switch {
				case !ok || fname == "":
					return nil, fmt.Errorf("type %q: %q is not name=kind", name, f)
				case !isKind(kind):
					return nil, fmt.Errorf("type %q: field %q: kind %q is not one of %s", name, fname, kind, strings.Join(kindNames, ", "))
				case seen[fname]:
					return nil, fmt.Errorf("type %q: field %q is listed twice", name, fname)
				}
				seen[fname] = true
				fs = append(fs, field{name: fname, kind: kind})
			}
		}
		ts.fields[name] = fs
	}
	if len(ts.fields) == 0 {
		return nil, fmt.Errorf("%q names no type", spec)
	}
	return ts, nil
}

// checkTypeName accepts a routing-key-like name: not empty, at most 255
// bytes, no blanks and none of the separators of OUTBOX_TYPES.
func checkTypeName(name string) error {
	switch {
	case name == "":
		return errors.New("an entry has no type name")
	case len(name) > maxShortString:
		return fmt.Errorf("type %q is longer than %d bytes", name, maxShortString)
	case strings.ContainsAny(name, " \t\r\n;=:"):
		return fmt.Errorf("type %q holds a blank or one of ;=:", name)
	}
	return nil
}

func isKind(k string) bool {
	for _, n := range kindNames {
		if n == k {
			return true
		}
	}
	return false
}

// names returns the known types, sorted; nil for a nil set.
func (ts *typeSet) names() []string {
	if ts == nil {
		return nil
	}
	out := make([]string, 0, len(ts.fields))
	for n := range ts.fields {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// check says whether a row of type typ with this payload may be
// published: nil, or an error wrapping errUnknownType or errUndecodable.
func (ts *typeSet) check(typ string, payload []byte) error {
	if !json.Valid(payload) {
		return fmt.Errorf("%w: %s: not JSON", errUndecodable, typ)
	}
	if ts == nil {
		return nil
	}
	fs, ok := ts.fields[typ]
	if !ok {
		return fmt.Errorf("%w %q", errUnknownType, typ)
	}
	if len(fs) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return fmt.Errorf("%w: %s: %v", errUndecodable, typ, err)
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return fmt.Errorf("%w: %s: want a JSON object", errUndecodable, typ)
	}
	for _, f := range fs {
		val, present := obj[f.name]
		if !present {
			return fmt.Errorf("%w: %s: field %q is missing", errUndecodable, typ, f.name)
		}
		if !hasKind(val, f.kind) {
			return fmt.Errorf("%w: %s: field %q is %s, want %s", errUndecodable, typ, f.name, kindOf(val), f.kind)
		}
	}
	return nil
}

// hasKind reports whether a value decoded with UseNumber has the kind; a
// required field may be null only when its kind is any.
func hasKind(v any, kind string) bool {
	if kind == "any" {
		return true
	}
	return kindOf(v) == kind || (kind == "number" && kindOf(v) == "integer")
}

// kindOf names the kind of a value decoded with UseNumber: integer for a
// number written without fraction or exponent that fits an int64.
func kindOf(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case string:
		return "string"
	case bool:
		return "bool"
	case json.Number:
		if _, err := strconv.ParseInt(x.String(), 10, 64); err == nil {
			return "integer"
		}
		return "number"
	case map[string]any:
		return "object"
	case []any:
		return "array"
	}
	return fmt.Sprintf("%T", v)
}
