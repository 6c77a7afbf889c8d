package workload

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/outboxlab/outboxlab/seed"
)

func TestParseMode(t *testing.T) {
	for _, m := range Modes {
		got, err := ParseMode(string(m))
		if err != nil || got != m {
			t.Errorf("ParseMode(%q) = %q, %v", m, got, err)
		}
		if m.Unsafe() == (m == Outbox) {
			t.Errorf("%s: Unsafe() = %v", m, m.Unsafe())
		}
	}
	if _, err := ParseMode("optimistic-publish"); err == nil || !strings.Contains(err.Error(), "outbox") {
		t.Errorf("an unknown mode is an error that lists the known ones: %v", err)
	}
}

func TestDrawIsSeededAndMarksPoison(t *testing.T) {
	w := Shape{Events: 200, Producers: 3, MaxEventsPerTxn: 4, PoisonRate: 0.2, RollbackRate: 0.1}
	a, b := w.Draw(seed.Rand(7, seed.Workload)), w.Draw(seed.Rand(7, seed.Workload))
	c := w.Draw(seed.Rand(8, seed.Workload))
	flat := func(p Plan) (ids []string) {
		for _, txns := range p.Txns {
			for _, t := range txns {
				for _, e := range t.Events {
					ids = append(ids, e.ID.String())
				}
			}
		}
		return ids
	}
	if !slices.Equal(flat(a), flat(b)) || a.Total != w.Events || len(flat(a)) != w.Events {
		t.Fatalf("same seed, different plans, or not %d events (%d)", w.Events, a.Total)
	}
	if slices.Equal(flat(a), flat(c)) {
		t.Fatal("two seeds drew the same plan")
	}
	reg := Registry()
	poison := 0
	for _, txns := range a.Txns {
		for _, txn := range txns {
			for _, e := range txn.Events {
				_, err := reg.Decode(e.Type, e.Payload)
				bad := err != nil || !json.Valid(e.Payload)
				if bad != a.Poison[e.ID.String()] {
					t.Errorf("event %s (%s %s): decodes with error %v, marked poison %v", e.ID, e.Type, e.Payload, err, a.Poison[e.ID.String()])
				}
				if bad {
					poison++
				}
			}
		}
	}
	if poison == 0 {
		t.Error("a 20% poison rate drew no poison")
	}
}

func TestTypesSpecNamesEveryKnownType(t *testing.T) {
	for _, typ := range KnownTypes {
		if !strings.Contains(TypesSpec, typ+":") {
			t.Errorf("TypesSpec %q lacks %s", TypesSpec, typ)
		}
		if !Registry().Known(typ) {
			t.Errorf("Registry does not know %s", typ)
		}
	}
	if Registry().Known(TypeUnknown) {
		t.Errorf("%s must be unknown: it is the poison a relay parks", TypeUnknown)
	}
}
