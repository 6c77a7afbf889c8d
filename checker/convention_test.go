package checker

import (
	"slices"
	"testing"
	"time"

	"github.com/outboxlab/outboxlab/history"
)

func TestClassOf(t *testing.T) {
	for name, want := range map[string]FaultClass{
		"broker-down":            FaultBroker,
		"broker-killed":          FaultBroker,
		"relay-broker-timeout":   FaultBroker,
		"relay->broker latency":  FaultBroker,
		"pause rabbitmq":         FaultBroker,
		"db-down":                FaultDB,
		"relay-db-latency":       FaultDB,
		"postgres-killed":        FaultDB,
		"kill relay-a":           FaultProcess,
		"pause relay-b":          FaultProcess,
		"crash-after-mark":       FaultProcess,
		"clock-skew relay-a":     FaultClock,
		"commit-order-inversion": FaultOther,
		"dbx":                    FaultOther, // words, not substrings
	} {
		if got := ClassOf(name); got != want {
			t.Errorf("ClassOf(%q) = %s, want %s", name, got, want)
		}
	}
}

func TestValueFields(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	v := RetryValue(5, true, at)
	if n, ok := Attempts(v); !ok || n != 5 {
		t.Errorf("Attempts(%q) = %d, %v", v, n, ok)
	}
	if !HasFlag(v, FlagParked) || HasFlag(RetryValue(2, false, time.Time{}), FlagParked) {
		t.Errorf("parked flag wrong in %q", v)
	}
	if got, ok := DBTime(v); !ok || !got.Equal(at) {
		t.Errorf("DBTime(%q) = %v, %v", v, got, ok)
	}
	if _, ok := DBTime("attempts=1"); ok {
		t.Error("DBTime found a time in a value without one")
	}
	if _, ok := Attempts("attempts=x"); ok {
		t.Error("Attempts parsed a non-number")
	}
	if got := CausedBy(CausedByValue("a1", "a2") + " other=1"); !slices.Equal(got, []string{"a1", "a2"}) {
		t.Errorf("CausedBy = %v", got)
	}
	if HasFlag("redelivered-not", FlagRedelivered) {
		t.Error("HasFlag matched a longer token")
	}
}

func TestPairs(t *testing.T) {
	h := build().
		invoke("relay-a", history.Publish, "e1").
		invoke("relay-a", history.Publish, "e2").
		ok("relay-a", history.Publish, "e2"). // completes e2's publish, not the older e1
		invoke("relay-a", history.Claim).
		ok("relay-a", history.Claim, "e3", "e4"). // a claim names its rows on completion
		invoke("relay-a", history.Mark, "e3", "e4").
		ok("relay-a", history.Mark, "e3"). // a mark completes with the rows it marked
		crash("relay-a").                  // closes e1's publish
		ok("relay-a", history.Publish, "e1").
		deliver("consumer-1", "e2").h()
	pairs := history.Pairs(h)
	type row struct {
		start   int64
		done    int64 // -1 when open
		crashed bool
	}
	var got []row
	for _, p := range pairs {
		r := row{start: p.Start().Index, done: -1, crashed: p.Crashed}
		if p.Done != nil {
			r.done = p.Done.Index
		}
		got = append(got, r)
	}
	want := []row{
		{0, -1, true}, // publish e1, open at the crash
		{1, 2, false}, // publish e2
		{3, 4, false}, // claim
		{5, 6, false}, // mark
		{7, 7, false}, // the crash itself
		{8, 8, false}, // late completion stands alone
		{9, 9, false}, // delivery, an observation
	}
	if !slices.Equal(got, want) {
		t.Errorf("Pairs = %+v, want %+v", got, want)
	}
	if pairs[0].Outcome() != history.Info || pairs[1].Outcome() != history.OK {
		t.Errorf("outcomes = %s, %s; want info, ok", pairs[0].Outcome(), pairs[1].Outcome())
	}
	if ev := pairs[3].Events(); !slices.Equal(ev, []string{"e3", "e4"}) {
		t.Errorf("mark pair events = %v, want the invoke's", ev)
	}

	by := history.ByEvent(h)
	var idx []int64
	for _, op := range by["e2"] {
		idx = append(idx, op.Index)
	}
	if !slices.Equal(idx, []int64{1, 2, 9}) {
		t.Errorf("ByEvent[e2] indexes = %v, want [1 2 9]", idx)
	}
}
