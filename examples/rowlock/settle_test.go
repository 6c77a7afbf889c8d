package main

import (
	"errors"
	"slices"
	"testing"
)

func TestSettle(t *testing.T) {
	rows := []row{{seq: 1}, {seq: 2}, {seq: 3}, {seq: 4}, {seq: 5}}
	outage := errors.New("no confirm within 1s")
	results := []result{
		{confirmed, nil},
		{refused, errors.New("returned by the broker: 312 NO_ROUTE")},
		{confirmed, nil},
		{unconfirmed, outage},
		{unconfirmed, errNotPublished},
	}
	failed := func(s settlement) []int64 {
		var out []int64
		for _, f := range s.fail {
			out = append(out, f.row.seq)
		}
		return out
	}
	for _, c := range []struct {
		bug        bug
		mark, fail []int64
	}{
		// A confirmed row is marked, a refused one fails, an unconfirmed
		// one is left pending: no attempt consumed.
		{bugNone, []int64{1, 3}, []int64{2}},
		{bugSkipLate, []int64{1, 3}, []int64{2}},
		{bugTransient, []int64{1, 3}, []int64{2}},
		// The outage costs the unconfirmed rows an attempt.
		{bugBurnAttempts, []int64{1, 3}, []int64{2, 4, 5}},
	} {
		s := settle(c.bug, rows, results)
		if !slices.Equal(s.mark, c.mark) || !slices.Equal(failed(s), c.fail) {
			t.Errorf("%s: mark %v, fail %v; want %v, %v", c.bug, s.mark, failed(s), c.mark, c.fail)
		}
		for _, f := range s.fail {
			if f.why == nil {
				t.Errorf("%s: seq %d fails without a reason", c.bug, f.row.seq)
			}
		}
	}
	if s := settle(bugNone, nil, nil); s.mark != nil || s.fail != nil {
		t.Errorf("an empty batch settles %+v", s)
	}
}

func TestOutcomeNames(t *testing.T) {
	for o, want := range map[outcome]string{unconfirmed: "unconfirmed", confirmed: "confirmed", refused: "refused"} {
		if o.String() != want {
			t.Errorf("%d is %q, want %q", o, o.String(), want)
		}
	}
}
