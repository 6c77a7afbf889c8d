package main

import (
	"errors"
	"testing"

	"github.com/outboxlab/outboxlab/outbox"
	"github.com/outboxlab/outboxlab/relay"
)

func TestTypeDecoder(t *testing.T) {
	d, err := parseTypes(" order.placed:order_id=string; amount=integer , order.paid, note:text=string;tags=array;meta=object;ok=bool;n=number;x=any")
	if err != nil {
		t.Fatalf("parseTypes: %v", err)
	}
	for _, tc := range []struct {
		typ, payload string
		want         error
	}{
		{"order.placed", `{"order_id":"o1","amount":3}`, nil},
		{"order.placed", `{"order_id":"o1"}`, nil},
		{"order.placed", `{"order_id":null,"amount":3}`, nil},
		{"order.placed", `{"order_id":"o1","amount":"lots"}`, outbox.ErrUndecodable},
		{"order.placed", `{"order_id":"o1","amount":1.5}`, outbox.ErrUndecodable},
		{"order.placed", `{"order_id":"o1","colour":"red"}`, outbox.ErrUndecodable},
		{"order.placed", `[1,2]`, outbox.ErrUndecodable},
		{"order.placed", `"text"`, outbox.ErrUndecodable},
		{"order.placed", `{bad json`, outbox.ErrUndecodable},
		{"order.paid", `"anything"`, nil},
		{"order.paid", `not json`, outbox.ErrUndecodable},
		{"note", `{"text":"hi","tags":[],"meta":{},"ok":true,"n":2.5,"x":[{}]}`, nil},
		{"note", `{"tags":{}}`, outbox.ErrUndecodable},
		{"note", `{"meta":[]}`, outbox.ErrUndecodable},
		{"note", `{"ok":"true"}`, outbox.ErrUndecodable},
		{"note", `{"n":"2"}`, outbox.ErrUndecodable},
		{"order.teleported", `{}`, outbox.ErrUnknownType},
	} {
		_, err := d.Decode(tc.typ, []byte(tc.payload))
		switch {
		case tc.want == nil && err != nil:
			t.Errorf("Decode(%s, %s) = %v, want success", tc.typ, tc.payload, err)
		case tc.want != nil && !errors.Is(err, tc.want):
			t.Errorf("Decode(%s, %s) = %v, want %v", tc.typ, tc.payload, err, tc.want)
		}
	}
	// The relay parks unknown types at once and retries undecodable ones.
	if _, err := d.Decode("order.teleported", []byte(`{}`)); relay.Classify(err) != relay.ClassPoison {
		t.Errorf("unknown type classified %v, want poison", relay.Classify(err))
	}
}

func TestParseTypesRejects(t *testing.T) {
	for _, spec := range []string{
		"", ",", "order placed", "a,a", "order.placed:amount", "order.placed:amount=money", "order.placed:=string", "x:a=string;;",
	} {
		if _, err := parseTypes(spec); err == nil {
			t.Errorf("parseTypes(%q) accepted", spec)
		}
	}
}
