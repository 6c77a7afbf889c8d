package main

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

// harnessTypes is the OUTBOX_TYPES value the harness gives every relay
// (workload.TypesSpec), written out: the relay imports nothing of it.
const harnessTypes = "order.placed:order_id=string;amount=integer,order.paid:order_id=string;amount=integer," +
	"audit.oversized:order_id=string;amount=integer"

func TestParseTypes(t *testing.T) {
	ts, err := parseTypes(" order.placed : order_id = string ; amount=integer , order.paid,, order.* ")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]required{
		"order.placed": {{"order_id", "string"}, {"amount", "integer"}},
		"order.paid":   nil,
		"order.*":      nil,
	}
	if !reflect.DeepEqual(ts.types, want) {
		t.Errorf("parsed %#v, want %#v", ts.types, want)
	}
	if got := ts.names(); !reflect.DeepEqual(got, []string{"order.*", "order.paid", "order.placed"}) {
		t.Errorf("names %v", got)
	}
	if _, err := parseTypes(harnessTypes); err != nil {
		t.Errorf("the harness's OUTBOX_TYPES: %v", err)
	}
}

func TestParseTypesRefuses(t *testing.T) {
	for _, c := range []struct{ spec, want string }{
		{",", "names no type"},
		{":a=string", "has no type name"},
		{"a b", "holds a blank"},
		{"a=b", "holds a blank or one of =;:"},
		{"a,a", `type "a" is listed twice`},
		{"a:x", `field "x" is not name=kind`},
		{"a:=string", `field "=string" is not name=kind`},
		{"a:x=text", `kind "text"`},
		{"a:x=string;x=bool", `field "x" is listed twice`},
		{strings.Repeat("t", 256), "longer than the 255 bytes"},
	} {
		_, err := parseTypes(c.spec)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("parseTypes(%q) = %v, want an error saying %q", c.spec, err, c.want)
		}
	}
}

func TestCheckTypes(t *testing.T) {
	ts, err := parseTypes(harnessTypes + ",note.any,note.kinds:n=number;a=array;o=object;b=bool;x=any")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		typ, body string
		want      error
	}{
		{"order.placed", `{"order_id": "o1", "amount": 5}`, nil},
		{"order.placed", `{"order_id": "o1", "amount": 5, "extra": [1]}`, nil},
		{"order.teleported", `{"order_id": "o1", "amount": 5}`, errUnknownType},
		// The workload's undecodable payload: a string amount.
		{"order.placed", `{"order_id": "o1", "amount": "lots"}`, errUndecodable},
		{"order.placed", `{"order_id": "o1", "amount": 5.5}`, errUndecodable},
		{"order.placed", `{"order_id": "o1", "amount": 5e3}`, errUndecodable},
		{"order.placed", `{"order_id": "o1"}`, errUndecodable},
		{"order.placed", `{"order_id": null, "amount": 5}`, errUndecodable},
		{"order.placed", `["o1", 5]`, errUndecodable},
		{"order.placed", `not json`, errUndecodable},
		{"order.placed", `{} {}`, errUndecodable},
		{"note.any", `"any JSON at all"`, nil},
		{"note.kinds", `{"n": 1, "a": [], "o": {}, "b": false, "x": null}`, nil},
		{"note.kinds", `{"n": 1.5, "a": [], "o": {}, "b": true, "x": 1}`, nil},
		{"note.kinds", `{"n": "1", "a": [], "o": {}, "b": true, "x": 1}`, errUndecodable},
		{"note.kinds", `{"n": 1, "a": {}, "o": {}, "b": true, "x": 1}`, errUndecodable},
		{"note.kinds", `{"n": 1, "a": [], "o": [], "b": true, "x": 1}`, errUndecodable},
		{"note.kinds", `{"n": 1, "a": [], "o": {}, "b": 0, "x": 1}`, errUndecodable},
	} {
		err := ts.check(c.typ, []byte(c.body))
		if (c.want == nil) != (err == nil) || (c.want != nil && !errors.Is(err, c.want)) {
			t.Errorf("check(%s, %s) = %v, want %v", c.typ, c.body, err, c.want)
		}
	}
	// Without OUTBOX_TYPES every type and any JSON body is accepted.
	var none *typeSet
	if err := none.check("anything.at.all", []byte(`[1, "two"]`)); err != nil {
		t.Errorf("no OUTBOX_TYPES: %v", err)
	}
	if err := none.check("anything", []byte(`{`)); !errors.Is(err, errUndecodable) {
		t.Errorf("no OUTBOX_TYPES, not JSON: %v", err)
	}
	if none.names() != nil {
		t.Errorf("names of no set: %v", none.names())
	}
}
