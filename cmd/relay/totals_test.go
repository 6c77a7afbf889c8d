package main

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"maps"
	"slices"
	"testing"

	"github.com/outboxlab/outboxlab/relay"
)

// TestTotalsLogEachCountOnceUnderItsName logs totals whose counts all
// differ: every count is logged once, under its own name, and no name
// carries another's count.
func TestTotalsLogEachCountOnceUnderItsName(t *testing.T) {
	var tot relay.Totals
	want := map[string]float64{
		"ticks": 1, "claimed": 2, "published": 3, "lost_leases": 4, "attempts": 5,
		"parked": 6, "swept": 7, "broker_failures": 8,
	}
	tot.Ticks.Store(1)
	tot.Claimed.Store(2)
	tot.Published.Store(3)
	tot.LostLeases.Store(4)
	tot.Attempts.Store(5)
	tot.Parked.Store(6)
	tot.Swept.Store(7)
	tot.BrokerFailures.Store(8)
	var buf bytes.Buffer
	logTotals(slog.New(slog.NewJSONHandler(&buf, nil)), "relay totals", &tot)
	var line map[string]any
	if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for k, v := range line {
		if n, ok := v.(float64); ok {
			got[k] = n
		}
	}
	if !maps.Equal(got, want) {
		t.Errorf("logged counts %v, want %v (keys %v)", got, want, slices.Sorted(maps.Keys(got)))
	}
}
