package workload

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/google/uuid"

	"github.com/outboxlab/outboxlab/checker"
	"github.com/outboxlab/outboxlab/outbox"
)

// Message types of the workload. The relay under test knows the first two;
// TypeUnknown is poison it must park, and an OrderPlaced payload that does
// not decode is poison of the other kind.
const (
	TypeOrderPlaced = "order.placed"
	TypeOrderPaid   = "order.paid"
	TypeUnknown     = "order.teleported"
	// TypeRejected is a type the relays know and a broker refuses: on
	// RabbitMQ no queue binds it (BindingKey), so a mandatory publish of
	// it is returned; the simulation's broker nacks it. Poison of a third
	// kind, that only the broker's answer reveals.
	TypeRejected = "audit.oversized"
)

// BindingKey binds the workload's queues to every type but TypeRejected.
const BindingKey = "order.#"

// OrderPlaced is the payload of TypeOrderPlaced and TypeOrderPaid.
type OrderPlaced struct {
	OrderID string `json:"order_id"`
	Amount  int    `json:"amount"`
	// Version numbers the events of one order (Shape.Entities) from 1,
	// in the order its producer commits them; 0 when the workload has no
	// entities.
	Version int `json:"version,omitempty"`
}

// EntityVersion reads the order and version an event of a workload with
// entities carries in its payload; ok is false for any other payload.
func EntityVersion(payload []byte) (entity string, version int, ok bool) {
	var p OrderPlaced
	if json.Unmarshal(payload, &p) != nil || p.OrderID == "" || p.Version <= 0 {
		return "", 0, false
	}
	return p.OrderID, p.Version, true
}

// Registry returns the message types the workload's relay knows.
func Registry() *outbox.Registry {
	r := outbox.NewRegistry()
	r.Register(TypeOrderPlaced, OrderPlaced{})
	r.Register(TypeOrderPaid, OrderPlaced{})
	return r
}

// KnownTypes lists the types of Registry, for a relay configured by
// environment.
var KnownTypes = []string{TypeOrderPlaced, TypeOrderPaid}

// TypesSpec is the OUTBOX_TYPES value that makes ./cmd/relay know the
// workload's types and their payload shape: TypeUnknown is parked at once,
// an OrderPlaced payload with a string amount is undecodable.
const TypesSpec = TypeOrderPlaced + ":" + orderFields + "," + TypeOrderPaid + ":" + orderFields + "," + TypeRejected + ":" + orderFields

// VersionedTypesSpec is TypesSpec for a workload with entities
// (Shape.Entities), whose payloads carry a version as well.
const VersionedTypesSpec = TypeOrderPlaced + ":" + versionedFields + "," + TypeOrderPaid + ":" + versionedFields + "," +
	TypeRejected + ":" + versionedFields

const (
	orderFields     = "order_id=string;amount=integer"
	versionedFields = orderFields + ";version=integer"
)

// Shape shapes the business transactions of a run.
type Shape struct {
	// Events is how many events the producers try to stage in all.
	Events int
	// Producers run their transactions concurrently.
	Producers int
	// MaxEventsPerTxn bounds events staged by one transaction (at least 1).
	MaxEventsPerTxn int
	// RollbackRate is the share of transactions that roll back.
	RollbackRate float64
	// PoisonRate is the share of events that are poison (half of unknown
	// type, half undecodable).
	PoisonRate float64
	// RejectRate is the share of events of TypeRejected, poison the
	// relay can only learn of from the broker.
	RejectRate float64
	// HoldRate is the share of transactions held open for Hold before
	// COMMIT, so that later ones commit first.
	HoldRate float64
	Hold     time.Duration
	// CrashAfterCommitRate is the share of committed transactions after
	// which the producer "dies" before anything else runs.
	CrashAfterCommitRate float64
	// CrashAtCommitRate is the share of transactions during whose COMMIT
	// the producer dies: the connection closes up to MaxCrashDelay after
	// COMMIT was sent, so the outcome is unknown.
	CrashAtCommitRate float64
	MaxCrashDelay     time.Duration
	// Entities, when above zero, makes the events updates of that many
	// orders (at least one per producer): every transaction updates one
	// order, each order belongs to one producer, and its events carry
	// versions 1, 2, ... in the order the producer stages them, so that
	// commit order is version order. Plan.Versions says which event is
	// which version of which order.
	Entities int
	// Contexts, when above one with Entities, spreads each order's
	// transactions over that many bounded contexts in turn: its first
	// transaction goes to context 0, its second to context 1, and so on.
	// Plan.Contexts says where each event goes.
	Contexts int
	// Pace spaces one producer's transactions, so that faults land while
	// the workload runs. Zero lets the runner spread the transactions over
	// most of the safety phase.
	Pace time.Duration
}

// Scaled returns w with its events multiplied by k (at least 1 event).
func (w Shape) Scaled(k float64) Shape {
	w.Events = max(1, int(float64(w.Events)*k))
	return w
}

// Plan is the workload drawn from a seed: one list of transactions per
// producer, and the ids of the events made poison.
type Plan struct {
	Txns   [][]Txn
	Poison map[string]bool
	Total  int
	// Versions gives, for a workload with entities, each event's order
	// and version; nil otherwise.
	Versions map[string]checker.EntityVersion
	// Contexts gives, for a workload spread over contexts, the context
	// each event is staged in; nil otherwise.
	Contexts map[string]int
}

// Draw builds the plan from rng alone: the same seed gives the same
// transactions, event ids included.
func (w Shape) Draw(rng *rand.Rand) Plan {
	producers := max(w.Producers, 1)
	per := max(w.MaxEventsPerTxn, 1)
	p := Plan{Txns: make([][]Txn, producers), Poison: map[string]bool{}}
	entities := 0
	var versions, txns []int
	if w.Entities > 0 {
		entities = max(w.Entities, producers)
		versions, txns = make([]int, entities), make([]int, entities)
		p.Versions = map[string]checker.EntityVersion{}
		if w.Contexts > 1 {
			p.Contexts = map[string]int{}
		}
	}
	for n, i := 0, 0; n < w.Events; i++ {
		k := min(1+rng.IntN(per), w.Events-n)
		t := Txn{
			Rollback:         rng.Float64() < w.RollbackRate,
			CrashAfterCommit: rng.Float64() < w.CrashAfterCommitRate,
		}
		if rng.Float64() < w.HoldRate {
			t.Hold = w.Hold
		}
		if rng.Float64() < w.CrashAtCommitRate {
			t.CrashAtCommit = true
			if w.MaxCrashDelay > 0 {
				t.CrashDelay = time.Duration(rng.Int64N(int64(w.MaxCrashDelay) + 1))
			}
		}
		for j := 0; j < k; j++ {
			e := event(rng, n+j)
			if rng.Float64() < w.PoisonRate {
				if rng.IntN(2) == 0 {
					e.Type = TypeUnknown
				} else {
					e.Payload = json.RawMessage(fmt.Sprintf(`{"order_id":"o%d","amount":"lots"}`, n+j))
				}
				p.Poison[e.ID.String()] = true
			} else if w.RejectRate > 0 && rng.Float64() < w.RejectRate {
				e.Type = TypeRejected
				p.Poison[e.ID.String()] = true
			}
			t.Events = append(t.Events, e)
		}
		if entities > 0 {
			// The producer's transactions go round its own orders in turn.
			owner := i % producers
			k := owner + producers*(i/producers%((entities-owner+producers-1)/producers))
			for j := range t.Events {
				versions[k]++
				t.Events[j] = versioned(t.Events[j], fmt.Sprintf("o%d", k), versions[k])
				p.Versions[t.Events[j].ID.String()] = checker.EntityVersion{Entity: fmt.Sprintf("o%d", k), Version: versions[k]}
				if p.Contexts != nil {
					p.Contexts[t.Events[j].ID.String()] = txns[k] % w.Contexts
				}
			}
			txns[k]++
		}
		n += k
		p.Total = n
		p.Txns[i%producers] = append(p.Txns[i%producers], t)
	}
	return p
}

// versioned returns e as the version-th update of the order entity.
func versioned(e outbox.Event, entity string, version int) outbox.Event {
	var p OrderPlaced
	_ = json.Unmarshal(e.Payload, &p)
	p.OrderID, p.Version = entity, version
	e.Payload, _ = json.Marshal(p)
	return e
}

// event makes the n-th event with an id drawn from rng, time-ordered by n
// so that id order is staging order (as UUIDv7 would be).
func event(rng *rand.Rand, n int) outbox.Event {
	var id uuid.UUID
	for i := range id {
		id[i] = byte(rng.Uint32())
	}
	// A UUIDv7 layout: 48 bits of sequence number in place of the
	// millisecond timestamp, version 7, variant 10.
	seq := uint64(n)
	for i := 5; i >= 0; i-- {
		id[i] = byte(seq)
		seq >>= 8
	}
	id[6] = id[6]&0x0f | 0x70
	id[8] = id[8]&0x3f | 0x80
	typ := TypeOrderPlaced
	if rng.IntN(3) == 0 {
		typ = TypeOrderPaid
	}
	body, _ := json.Marshal(OrderPlaced{OrderID: fmt.Sprintf("o%d", n), Amount: 1 + rng.IntN(1000)})
	return outbox.Event{ID: id, Type: typ, Payload: body}
}
