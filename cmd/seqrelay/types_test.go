package main

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

// harnessTypes is the OUTBOX_TYPES value the harness gives every relay
// (workload.TypesSpec), written out: seqrelay imports nothing of it.
const harnessTypes = "order.placed:order_id=string;amount=integer,order.paid:order_id=string;amount=integer"

func TestParseTypes(t *testing.T) {
	ts, err := parseTypes(" order.placed : order_id = string ; amount=integer , order.paid,order.* ")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]field{
		"order.placed": {{"order_id", "string"}, {"amount", "integer"}},
		"order.paid":   nil,
		"order.*":      nil,
	}
	if !reflect.DeepEqual(ts.fields, want) {
		t.Errorf("parsed %#v, want %#v", ts.fields, want)
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
		{":a=string", "no type name"},
		{"a b", "holds a blank"},
		{"a,a", `"a" is listed twice`},
		{"a:x", `"x" is not name=kind`},
		{"a:=string", `"=string" is not name=kind`},
		{"a:x=float", `kind "float" is not one of string, number, integer, bool, object, array, any`},
		{"a:x=string;x=integer", `field "x" is listed twice`},
		{strings.Repeat("t", 256), "longer than 255 bytes"},
	} {
		_, err := parseTypes(c.spec)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: got %v, want an error containing %q", c.spec, err, c.want)
		}
	}
}

func TestTypeCheck(t *testing.T) {
	ts, err := parseTypes(harnessTypes + ",blob,shape:s=string;n=number;i=integer;b=bool;o=object;a=array;x=any")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		typ, payload string
		want         error // nil, errUnknownType or errUndecodable
	}{
		// What the harness's workload stages.
		{"order.placed", `{"order_id":"o1","amount":12}`, nil},
		{"order.paid", `{"amount":12,"order_id":"o1"}`, nil},
		{"order.teleported", `{"order_id":"o1","amount":12}`, errUnknownType},
		{"order.placed", `{"order_id":"o1","amount":"lots"}`, errUndecodable},
		// Required fields, extra keys allowed.
		{"order.placed", `{"order_id":"o1"}`, errUndecodable},
		{"order.placed", `{"order_id":"o1","amount":12,"note":"x"}`, nil},
		{"order.placed", `{"order_id":null,"amount":12}`, errUndecodable},
		{"order.placed", `{"order_id":"o1","amount":12.5}`, errUndecodable},
		{"order.placed", `{"order_id":"o1","amount":1e3}`, errUndecodable},
		{"order.placed", `[1,2]`, errUndecodable},
		{"order.placed", `not json`, errUndecodable},
		// A bare type takes any JSON.
		{"blob", `"just a string"`, nil},
		{"blob", `{"x":`, errUndecodable},
		// Every kind.
		{"shape", `{"s":"","n":1.5,"i":-3,"b":false,"o":{},"a":[],"x":null}`, nil},
		{"shape", `{"s":"","n":7,"i":-3,"b":false,"o":{},"a":[],"x":[1]}`, nil},
		{"shape", `{"s":1,"n":1.5,"i":-3,"b":false,"o":{},"a":[],"x":1}`, errUndecodable},
		{"shape", `{"s":"","n":"1","i":-3,"b":false,"o":{},"a":[],"x":1}`, errUndecodable},
		{"shape", `{"s":"","n":1,"i":99999999999999999999,"b":false,"o":{},"a":[],"x":1}`, errUndecodable},
		{"shape", `{"s":"","n":1,"i":1,"b":"false","o":{},"a":[],"x":1}`, errUndecodable},
		{"shape", `{"s":"","n":1,"i":1,"b":true,"o":[],"a":[],"x":1}`, errUndecodable},
		{"shape", `{"s":"","n":1,"i":1,"b":true,"o":{},"a":{},"x":1}`, errUndecodable},
	} {
		err := ts.check(c.typ, []byte(c.payload))
		switch {
		case c.want == nil && err != nil:
			t.Errorf("%s %s: %v, want it accepted", c.typ, c.payload, err)
		case c.want != nil && !errors.Is(err, c.want):
			t.Errorf("%s %s: %v, want %v", c.typ, c.payload, err, c.want)
		}
	}
}

func TestNoTypesAcceptsAnyJSON(t *testing.T) {
	var ts *typeSet
	if err := ts.check("anything.at.all", []byte(`{"a":1}`)); err != nil {
		t.Errorf("no OUTBOX_TYPES: %v", err)
	}
	if err := ts.check("anything", []byte(`{`)); !errors.Is(err, errUndecodable) {
		t.Errorf("no OUTBOX_TYPES, broken JSON: %v, want undecodable", err)
	}
	if ts.names() != nil {
		t.Errorf("names of no set: %v", ts.names())
	}
}
