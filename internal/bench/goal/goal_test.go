package goal

import (
	"math"
	"testing"
)

// figures are a run's Figures as values.
type figures struct{ toRaw, toRaw2, notify, toWatermill, cpu float64 }

func (f figures) RatioToRaw() float64               { return f.toRaw }
func (f figures) Ratio2ToRaw() float64              { return f.toRaw2 }
func (f figures) NotifyOverBrokerP99() float64      { return f.notify }
func (f figures) RatioToWatermill() float64         { return f.toWatermill }
func (f figures) CPURelayPlusDBOverBroker() float64 { return f.cpu }

// TestJudgeMeetsAndMissesEachGoal judges figures on both sides of every
// bound, and a figure not measured, which is never met.
func TestJudgeMeetsAndMissesEachGoal(t *testing.T) {
	met := Judge(figures{toRaw: 0.85, toRaw2: 0.96, notify: 2, toWatermill: 10.5, cpu: 0.49})
	missed := Judge(figures{toRaw: 0.84, toRaw2: 0.94, notify: 2.01, toWatermill: 9.9, cpu: 0.51})
	none := Judge(figures{})
	if len(met) != 5 || len(missed) != 5 || len(none) != 5 {
		t.Fatalf("judged %d, %d, %d goals, want 5 each", len(met), len(missed), len(none))
	}
	for i := range met {
		if !met[i].Ran || !met[i].Met {
			t.Errorf("%s at %g %s: not met", met[i].Figure, met[i].Measured, met[i].Bound())
		}
		if !missed[i].Ran || missed[i].Met {
			t.Errorf("%s at %g %s: met", missed[i].Figure, missed[i].Measured, missed[i].Bound())
		}
		if none[i].Ran || none[i].Met {
			t.Errorf("%s not measured: ran %v, met %v", none[i].Figure, none[i].Ran, none[i].Met)
		}
		if met[i].Figure != missed[i].Figure {
			t.Errorf("goal %d is %q once and %q once", i, met[i].Figure, missed[i].Figure)
		}
	}
	if b := met[2].Bound(); b != "<= 2" {
		t.Errorf("the NOTIFY goal's bound reads %q", b)
	}
	if b := met[0].Bound(); b != ">= 0.85" {
		t.Errorf("the relay-1 goal's bound reads %q", b)
	}
}

// TestBrokerFactorsMultiplyToTheRateRatio checks that the two factors of
// a drain against raw multiply to its rate over raw's, and that a drain
// missing a figure has no factors.
func TestBrokerFactorsMultiplyToTheRateRatio(t *testing.T) {
	// raw: 9000 events in 1 s, 1.0 core of RabbitMQ; relay: 9000 events in
	// 1.25 s (0.8 of raw's rate), 0.9 cores busy, so 1.125 CPU seconds.
	raw := Drain{Events: 9000, BrokerBusy: 1.0, BrokerSeconds: 1.0}
	relay := Drain{Events: 9000, BrokerBusy: 0.9, BrokerSeconds: 0.9 * 1.25}
	busy, cost := BrokerFactors(raw, relay)
	if math.Abs(busy-0.9) > 1e-9 || math.Abs(cost-1/1.125) > 1e-9 {
		t.Errorf("factors %g x %g, want 0.9 x %g", busy, cost, 1/1.125)
	}
	if p := busy * cost; math.Abs(p-0.8) > 1e-9 {
		t.Errorf("busy x cost = %g, want the rate ratio 0.8", p)
	}
	for _, d := range []Drain{{}, {Events: 9000, BrokerBusy: 0.9}, {BrokerBusy: 0.9, BrokerSeconds: 1}} {
		if b, c := BrokerFactors(raw, d); b != 0 || c != 0 {
			t.Errorf("drain %+v: factors %g x %g, want none", d, b, c)
		}
	}
	if b, c := BrokerFactors(Drain{}, relay); b != 0 || c != 0 {
		t.Errorf("no raw drain: factors %g x %g, want none", b, c)
	}
}

// TestRawSelfRatio scores the slower raw phase against the faster, in
// either order, and needs two measured rates.
func TestRawSelfRatio(t *testing.T) {
	if got := RawSelfRatio(8000, 6800); got != 0.85 {
		t.Errorf("RawSelfRatio(8000, 6800) = %g, want 0.85", got)
	}
	if got := RawSelfRatio(6800, 8000); got != 0.85 {
		t.Errorf("RawSelfRatio(6800, 8000) = %g, want 0.85", got)
	}
	for _, rates := range [][]float64{nil, {8000}, {8000, 0}} {
		if got := RawSelfRatio(rates...); got != 0 {
			t.Errorf("RawSelfRatio(%v) = %g, want 0", rates, got)
		}
	}
}
