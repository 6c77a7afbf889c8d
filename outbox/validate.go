package outbox

import (
	"encoding"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
)

// Validate reports whether payload decodes into the type registered for
// name, as Decode does, without building the value: nil where Decode
// succeeds, and otherwise Decode's error. A relay needs only that verdict.
//
// For a plain struct type (exported fields of string, bool, integer or
// float64 kinds, no embedded structs, no custom unmarshalers, no ",string"
// options) Validate first reads the payload in one pass that allocates
// nothing; it accepts only what encoding/json accepts too: a flat object
// whose keys name fields exactly and whose values are null or literals
// that fit their fields. Anything else it cannot vouch for (an escape in
// a string, a key in another case, a nested value, an exponent, trailing
// text) goes to Decode for the verdict.
func (r *Registry) Validate(name string, payload []byte) error {
	r.mu.RLock()
	_, ok := r.types[name]
	sh := r.shapes[name]
	r.mu.RUnlock()
	if !ok {
		return fmt.Errorf("%w: %q", ErrUnknownType, name)
	}
	if sh != nil && sh.accepts(payload) {
		return nil
	}
	_, err := r.Decode(name, payload)
	return err
}

// shape is what Validate's fast path knows of a struct type: the kind of
// each field by its exact JSON name.
type shape struct {
	fields map[string]fieldKind
}

// fieldKind is the kind of a field's values, with the bits of integers.
type fieldKind struct {
	kind reflect.Kind // String, Bool, Int, Uint or Float64; Invalid for any other
	bits int
}

var (
	jsonUnmarshalerType = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshalerType = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// customDecoded reports whether encoding/json hands values of t (or *t)
// to an unmarshaler of their own.
func customDecoded(t reflect.Type) bool {
	pt := reflect.PointerTo(t)
	return t.Implements(jsonUnmarshalerType) || t.Implements(textUnmarshalerType) ||
		pt.Implements(jsonUnmarshalerType) || pt.Implements(textUnmarshalerType)
}

// shapeOf returns the shape of t, or nil when t is not a plain struct.
func shapeOf(t reflect.Type) *shape {
	if t.Kind() != reflect.Struct || customDecoded(t) {
		return nil
	}
	sh := &shape{fields: make(map[string]fieldKind, t.NumField())}
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Anonymous {
			return nil // promoted fields follow rules of their own
		}
		if !f.IsExported() {
			continue
		}
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if strings.Contains(","+opts+",", ",string,") {
			return nil
		}
		if name == "" {
			name = f.Name
		} else if strings.Trim(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.") != "" {
			return nil // encoding/json may reject the tag and use the Go name
		}
		if _, dup := sh.fields[name]; dup {
			return nil // encoding/json then decodes neither field
		}
		k := fieldKind{}
		if !customDecoded(f.Type) {
			switch f.Type.Kind() {
			case reflect.String, reflect.Bool:
				k.kind = f.Type.Kind()
			case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
				k.kind, k.bits = reflect.Int, f.Type.Bits()
			case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
				k.kind, k.bits = reflect.Uint, f.Type.Bits()
			case reflect.Float64:
				k.kind = reflect.Float64
			}
		}
		sh.fields[name] = k
	}
	return sh
}

// accepts reports whether p is a flat JSON object that encoding/json
// certainly decodes into the shape's type with unknown fields rejected.
// False means only that the fast path cannot tell.
func (sh *shape) accepts(p []byte) bool {
	i := skipSpace(p, 0)
	if i >= len(p) || p[i] != '{' {
		return false
	}
	i = skipSpace(p, i+1)
	if i < len(p) && p[i] == '}' {
		return skipSpace(p, i+1) == len(p)
	}
	for {
		key, j, ok := plainString(p, i)
		if !ok {
			return false
		}
		k, known := sh.fields[string(key)]
		if !known || k.kind == reflect.Invalid {
			return false
		}
		i = skipSpace(p, j)
		if i >= len(p) || p[i] != ':' {
			return false
		}
		i = skipSpace(p, i+1)
		if i, ok = k.value(p, i); !ok {
			return false
		}
		i = skipSpace(p, i)
		if i >= len(p) {
			return false
		}
		switch p[i] {
		case ',':
			i = skipSpace(p, i+1)
		case '}':
			return skipSpace(p, i+1) == len(p)
		default:
			return false
		}
	}
}

// value reads a value for a field of kind k at p[i:] and returns the
// index after it, or false when encoding/json might not take it.
func (k fieldKind) value(p []byte, i int) (int, bool) {
	if j, ok := literal(p, i, "null"); ok {
		return j, true // null leaves any of these kinds as it is
	}
	switch k.kind {
	case reflect.String:
		_, j, ok := plainString(p, i)
		return j, ok
	case reflect.Bool:
		if j, ok := literal(p, i, "true"); ok {
			return j, true
		}
		return literal(p, i, "false")
	case reflect.Int, reflect.Uint:
		return integer(p, i, k.kind == reflect.Uint, k.bits)
	case reflect.Float64:
		return decimal(p, i)
	}
	return i, false
}

// skipSpace returns the index of the first byte at or after i that is not
// JSON whitespace.
func skipSpace(p []byte, i int) int {
	for i < len(p) {
		switch p[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// literal reads the literal word at p[i:].
func literal(p []byte, i int, word string) (int, bool) {
	if len(p)-i < len(word) || string(p[i:i+len(word)]) != word {
		return i, false
	}
	j := i + len(word)
	return j, j == len(p) || delimiter(p[j])
}

// delimiter reports whether c may follow a literal or a number.
func delimiter(c byte) bool {
	switch c {
	case ' ', '\t', '\n', '\r', ',', '}':
		return true
	}
	return false
}

// plainString reads a JSON string without escapes or control characters
// at p[i:] and returns its contents and the index after its closing quote.
func plainString(p []byte, i int) ([]byte, int, bool) {
	if i >= len(p) || p[i] != '"' {
		return nil, i, false
	}
	for j := i + 1; j < len(p); j++ {
		switch c := p[j]; {
		case c == '"':
			return p[i+1 : j], j + 1, true
		case c == '\\' || c < 0x20:
			return nil, j, false
		}
	}
	return nil, len(p), false
}

// integer reads a JSON integer (no fraction, no exponent) at p[i:] that
// fits a signed, or with unsigned a non-negative, integer of bits bits.
func integer(p []byte, i int, unsigned bool, bits int) (int, bool) {
	neg := i < len(p) && p[i] == '-'
	j := i
	if neg {
		if unsigned {
			return i, false
		}
		j++
	}
	start := j
	var n uint64
	for j < len(p) && p[j] >= '0' && p[j] <= '9' {
		if j-start >= 19 {
			return i, false // more digits than a uint64 surely holds
		}
		n = n*10 + uint64(p[j]-'0')
		j++
	}
	switch {
	case j == start, p[start] == '0' && j-start > 1:
		return i, false
	case j < len(p) && !delimiter(p[j]):
		return i, false // a fraction, an exponent or garbage
	}
	limit := uint64(1)<<(bits-1) - 1 // the largest signed value
	if unsigned {
		limit = uint64(1)<<bits - 1
		if bits == 64 {
			limit = ^uint64(0)
		}
	} else if neg {
		limit++ // one more below zero
	}
	return j, n <= limit
}

// decimal reads a JSON number without an exponent at p[i:]: short enough
// never to overflow a float64.
func decimal(p []byte, i int) (int, bool) {
	j := i
	if j < len(p) && p[j] == '-' {
		j++
	}
	start := j
	for j < len(p) && p[j] >= '0' && p[j] <= '9' {
		j++
	}
	if j == start || p[start] == '0' && j-start > 1 {
		return i, false
	}
	if j < len(p) && p[j] == '.' {
		j++
		frac := j
		for j < len(p) && p[j] >= '0' && p[j] <= '9' {
			j++
		}
		if j == frac {
			return i, false
		}
	}
	if j-i > 64 || j < len(p) && !delimiter(p[j]) {
		return i, false
	}
	return j, true
}
