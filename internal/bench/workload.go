package bench

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"time"

	seedpkg "github.com/outboxlab/outboxlab/seed"

	"github.com/google/uuid"
)

// MessageType is the message type (and routing key) of every benchmark
// event.
const MessageType = "bench.order_placed"

// OrderPlaced is the payload of every benchmark event. The relay's decoder
// knows it, so each row is decoded as in production.
type OrderPlaced struct {
	Seq     int64  `json:"seq"`
	OrderID string `json:"order_id"`
	Amount  int64  `json:"amount"`
	Note    string `json:"note"`
}

// workload is a fixed list of events, the same for every contender: ids,
// payloads and occurred_at offsets, all from the run's seed.
type workload struct {
	ids      []uuid.UUID
	idStr    []string
	payloads [][]byte
	// index maps a message id to its position.
	index map[string]int
	base  time.Time
}

// newWorkload builds n events whose JSON payloads are about payloadBytes
// long. The ids are time-ordered like outbox.NewEvent's UUIDv7 (the order
// of the btree inserts matters to PostgreSQL), but every bit of them comes
// from base and the seeded source.
func newWorkload(n, payloadBytes int, seed uint64, base time.Time) (*workload, error) {
	rng := seedpkg.Rand(seed, seedpkg.Bench)
	w := &workload{
		ids:      make([]uuid.UUID, n),
		idStr:    make([]string, n),
		payloads: make([][]byte, n),
		index:    make(map[string]int, n),
		base:     base,
	}
	ms := uint64(base.UnixMilli())
	const letters = "abcdefghijklmnopqrstuvwxyz"
	for i := range n {
		var id uuid.UUID
		// 48 bits of milliseconds, 1,000 ids per millisecond, so that the
		// ids sort in staging order.
		t := ms + uint64(i/1000)
		binary.BigEndian.PutUint64(id[0:8], t<<16)
		binary.BigEndian.PutUint16(id[6:8], 0x7000|uint16(i%1000))
		binary.BigEndian.PutUint64(id[8:16], rng.Uint64())
		id[8] = id[8]&0x3f | 0x80 // RFC 4122 variant
		w.ids[i] = id
		w.idStr[i] = id.String()
		w.index[w.idStr[i]] = i

		p := OrderPlaced{
			Seq:     int64(i),
			OrderID: fmt.Sprintf("o-%08x", rng.Uint32()),
			Amount:  rng.Int64N(1_000_000),
		}
		body, err := json.Marshal(p)
		if err != nil {
			return nil, fmt.Errorf("encoding payload %d: %w", i, err)
		}
		if pad := payloadBytes - len(body); pad > 0 {
			note := make([]byte, pad)
			for j := range note {
				note[j] = letters[rng.IntN(len(letters))]
			}
			p.Note = string(note)
			if body, err = json.Marshal(p); err != nil {
				return nil, fmt.Errorf("encoding payload %d: %w", i, err)
			}
		}
		w.payloads[i] = body
	}
	return w, nil
}

// len returns the number of events.
func (w *workload) len() int { return len(w.ids) }

// occurredAt returns the occurred_at of event i: one microsecond apart, in
// staging order.
func (w *workload) occurredAt(i int) time.Time {
	return w.base.Add(time.Duration(i) * time.Microsecond)
}

// slice returns the first n events as a workload of their own.
func (w *workload) slice(n int) *workload {
	n = min(n, w.len())
	s := &workload{
		ids:      w.ids[:n],
		idStr:    w.idStr[:n],
		payloads: w.payloads[:n],
		index:    make(map[string]int, n),
		base:     w.base,
	}
	for i, id := range s.idStr {
		s.index[id] = i
	}
	return s
}
