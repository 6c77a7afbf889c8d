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

// TestDrawEntities: with entities, every event updates one order, each
// order belongs to one producer, and its versions count from 1 in the
// order that producer stages them; Plan.Versions and the payloads agree.
func TestDrawEntities(t *testing.T) {
	w := Shape{Events: 240, Producers: 3, MaxEventsPerTxn: 4, RollbackRate: 0.1, Entities: 30}
	p := w.Draw(seed.Rand(1, seed.Workload))
	if len(p.Versions) != w.Events {
		t.Fatalf("%d events versioned, want %d", len(p.Versions), w.Events)
	}
	owner := map[string]int{}
	last := map[string]int{}
	for prod, txns := range p.Txns {
		for _, txn := range txns {
			for _, e := range txn.Events {
				entity, v, ok := EntityVersion(e.Payload)
				want := p.Versions[e.ID.String()]
				if !ok || entity != want.Entity || v != want.Version {
					t.Fatalf("event %s: payload %s reads %q v%d %v, plan says %+v", e.ID, e.Payload, entity, v, ok, want)
				}
				if o, seen := owner[entity]; seen && o != prod {
					t.Errorf("%s is staged by producers %d and %d", entity, o, prod)
				}
				owner[entity] = prod
				if v != last[entity]+1 {
					t.Errorf("%s: version %d after %d", entity, v, last[entity])
				}
				last[entity] = v
			}
		}
	}
	if len(last) != w.Entities {
		t.Errorf("%d orders updated, want all %d", len(last), w.Entities)
	}
	if _, _, ok := EntityVersion([]byte(`{"order_id":"o1","amount":3}`)); ok {
		t.Error("a payload without a version reads as one")
	}
	if plain := (Shape{Events: 10, Producers: 2}).Draw(seed.Rand(1, seed.Workload)); plain.Versions != nil {
		t.Error("a workload without entities has versions")
	}
}

// TestDrawContexts: spread over contexts, each order's transactions go to
// the contexts in turn, every event of a transaction to the same one.
func TestDrawContexts(t *testing.T) {
	w := Shape{Events: 180, Producers: 3, MaxEventsPerTxn: 2, Entities: 18, Contexts: 2}
	p := w.Draw(seed.Rand(1, seed.Workload))
	if len(p.Contexts) != w.Events {
		t.Fatalf("%d events have a context, want %d", len(p.Contexts), w.Events)
	}
	txns := map[string]int{}
	for _, ts := range p.Txns {
		for _, txn := range ts {
			entity := p.Versions[txn.Events[0].ID.String()].Entity
			for _, e := range txn.Events {
				if got, want := p.Contexts[e.ID.String()], txns[entity]%2; got != want {
					t.Errorf("%s's transaction %d stages %s in context %d, want %d", entity, txns[entity], e.ID, got, want)
				}
			}
			txns[entity]++
		}
	}
	if (Shape{Events: 10, Producers: 2, Entities: 4}).Draw(seed.Rand(1, seed.Workload)).Contexts != nil {
		t.Error("a workload in one context has contexts")
	}
}
