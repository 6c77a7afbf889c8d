package outbox

import (
	"errors"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"
)

// manyKinds has a field of every kind Validate's fast path reads, and some
// it leaves to Decode.
type manyKinds struct {
	S      string  `json:"s"`
	B      bool    `json:"b"`
	I8     int8    `json:"i8"`
	I64    int64   `json:"i64"`
	U16    uint16  `json:"u16"`
	U64    uint64  `json:"u64"`
	F      float64 `json:"f"`
	F32    float32 `json:"f32"`
	Nested struct {
		X int `json:"x"`
	} `json:"nested"`
	When    time.Time `json:"when"`
	Untag   string
	Skipped string `json:"-"`
	hidden  string // encoding/json ignores it, and so must Validate
}

var manyKeys = []string{"s", "b", "i8", "i64", "u16", "u64", "f", "f32", "nested", "when", "Untag",
	"S", "I8", "untag", "UNTAG", "Skipped", "-", "hidden", "colour", ""}

var manyValues = []string{
	`null`, `true`, `false`, `nul`, `truex`,
	`"plain"`, `""`, `"with \"escape\""`, `"tab\there"`, `"caf` + "\xc3\xa9" + `"`, "\"bad\xffutf8\"", "\"ctl\x01\"", `"unterminated`,
	`0`, `-0`, `7`, `-7`, `127`, `128`, `-128`, `-129`, `255`, `65535`, `65536`, `-1`,
	`9223372036854775807`, `9223372036854775808`, `-9223372036854775808`, `-9223372036854775809`,
	`18446744073709551615`, `18446744073709551616`, `12345678901234567890123`,
	`01`, `1.5`, `-0.25`, `1e3`, `1E-2`, `1.`, `.5`, `-`, `1.7976931348623157e309`,
	`"2024-01-02T03:04:05Z"`, `"12"`, `{}`, `{"x":1}`, `[]`, `[1]`,
}

// TestValidateAgreesWithDecode feeds Validate and Decode the same
// payloads, near misses of manyKinds' shape drawn from a fixed seed, and
// wants the same verdict from both.
func TestValidateAgreesWithDecode(t *testing.T) {
	r := NewRegistry()
	r.Register("many", manyKinds{})
	sh := r.shapes["many"]
	rng := rand.New(rand.NewPCG(1, 2))
	pick := func(xs []string) string { return xs[rng.IntN(len(xs))] }
	spaces := []string{"", "", " ", "\n", "\t ", "\r\n"}
	fast, slow := 0, 0
	for range 20000 {
		var b strings.Builder
		b.WriteString(pick(spaces))
		if rng.IntN(20) == 0 {
			b.WriteString(pick(manyValues))
		} else {
			b.WriteString("{")
			for i := range rng.IntN(7) {
				if i > 0 {
					b.WriteString(pick(spaces) + "," + pick(spaces))
				}
				b.WriteString(`"` + pick(manyKeys) + `"` + pick(spaces) + ":" + pick(spaces) + pick(manyValues))
			}
			b.WriteString(pick(spaces))
			if rng.IntN(15) > 0 {
				b.WriteString("}")
			}
		}
		b.WriteString(pick([]string{"", "", " ", "\n", " {}", "x", ","}))
		payload := []byte(b.String())
		_, derr := r.Decode("many", payload)
		verr := r.Validate("many", payload)
		if (derr == nil) != (verr == nil) {
			t.Fatalf("payload %q: Decode says %v, Validate says %v", payload, derr, verr)
		}
		if verr != nil && !errors.Is(verr, ErrUndecodable) {
			t.Fatalf("payload %q: Validate error %v is not ErrUndecodable", payload, verr)
		}
		if sh.accepts(payload) {
			fast++
		} else if derr == nil {
			slow++
		}
	}
	t.Logf("%d payloads decoded by the fast path, %d by Decode alone", fast, slow)
	// Both paths must have been taken by payloads that decode.
	if fast < 100 || slow < 100 {
		t.Errorf("of the payloads that decode, %d took the fast path and %d went to Decode; want many of each", fast, slow)
	}
}

func TestValidateFastPath(t *testing.T) {
	sh := shapeOf(reflectTypeOf[manyKinds]())
	if sh == nil {
		t.Fatal("manyKinds has no shape")
	}
	for _, tc := range []struct {
		payload string
		fast    bool
	}{
		{`{"s":"x","b":true,"i8":-128,"i64":1,"u16":65535,"u64":9999999999999999999,"f":-1.25,"Untag":null}`, true},
		{` { } `, true},
		{`{"s": "x", "s": "y"}`, true},
		{`{"S":"x"}`, false},        // another case: Decode decides
		{`{"f32":1}`, false},        // a kind the fast path does not read
		{`{"s":"a\"b"}`, false},     // an escape
		{`{"i8":128}`, false},       // out of range: Decode refuses
		{`{"f":1e3}`, false},        // an exponent
		{`{"colour":"red"}`, false}, // unknown: Decode refuses
		{`{"s":"x"} {}`, false},     // trailing text
	} {
		if got := sh.accepts([]byte(tc.payload)); got != tc.fast {
			t.Errorf("accepts(%s) = %v, want %v", tc.payload, got, tc.fast)
		}
	}
	for _, typ := range []any{
		struct {
			N int `json:"n,string"`
		}{},
		struct{ orderPlaced }{},
		time.Time{},
		map[string]any{},
	} {
		if shapeOf(reflectTypeOfValue(typ)) != nil {
			t.Errorf("%T has a shape; want Decode for every payload", typ)
		}
	}
	// Two fields of one JSON name: encoding/json decodes neither.
	dup := reflect.StructOf([]reflect.StructField{
		{Name: "A", Type: reflect.TypeFor[string](), Tag: `json:"x"`},
		{Name: "B", Type: reflect.TypeFor[string](), Tag: `json:"x"`},
	})
	if shapeOf(dup) != nil {
		t.Errorf("%v has a shape; want Decode for every payload", dup)
	}
}

func TestValidateUnknownType(t *testing.T) {
	r := NewRegistry()
	if err := r.Validate("nope", []byte(`{}`)); !errors.Is(err, ErrUnknownType) {
		t.Errorf("unknown type: %v, want ErrUnknownType", err)
	}
}

func reflectTypeOf[T any]() reflect.Type { return reflect.TypeFor[T]() }

func reflectTypeOfValue(v any) reflect.Type { return reflect.TypeOf(v) }

// BenchmarkRegistryCheck compares Validate with Decode on a payload of the
// benchmark's size.
func BenchmarkRegistryCheck(b *testing.B) {
	type order struct {
		Seq     int64  `json:"seq"`
		OrderID string `json:"order_id"`
		Amount  int64  `json:"amount"`
		Note    string `json:"note"`
	}
	r := NewRegistry()
	r.Register("order", order{})
	payload := []byte(`{"seq": 12345, "note": "` + strings.Repeat("abcdefghij", 19) + `", "amount": 123456, "order_id": "o-1234abcd"}`)
	b.Run("decode", func(b *testing.B) {
		for range b.N {
			if _, err := r.Decode("order", payload); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("validate", func(b *testing.B) {
		for range b.N {
			if err := r.Validate("order", payload); err != nil {
				b.Fatal(err)
			}
		}
	})
}
