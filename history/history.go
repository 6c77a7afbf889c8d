// Package history holds the record format every process of a run writes,
// and records and reads histories in it.
//
// The record format follows the model of Jepsen: a process invokes an
// operation, and later the same process completes it as ok, fail or info
// (outcome unknown). An operation (Op) carries its typed metadata (Meta) and,
// for the fault injector's records, the identity of a fault (Fault: name,
// kind, class, targets). Producers, relays, consumers and the fault injector
// all describe what they did in this format, and a relay writes its own
// records file (OUTBOX_RECORDS) in it.
//
// Operations are encoded as JSON Lines under a versioned header: the first
// line of a history file, and of every lifetime of a records file, is Header,
// and the readers refuse any other Version. WriteJSONL writes a history file
// and AppendJSON appends one record without reflection, to the same bytes.
//
// A Recorder, safe for concurrent use, records the operations of a run into
// one history, which checkers read after the run. ReadJSONL reads a history
// file back, ReadRecords reads a records file lifetime by lifetime, Merge
// merges the records of several processes by time, and Pairs and ByEvent
// arrange a history into timelines.
//
// Package history imports nothing but the standard library, so the
// production relay links it cheaply: it gets the record format and none of
// the harness.
package history

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"
)

// Recorder appends operations; it is safe for concurrent use. The zero
// value is ready and uses time.Now for ops recorded without a time.
type Recorder struct {
	mu  sync.Mutex
	ops []Op
	// Now stamps ops whose Time is zero. Default time.Now.
	Now func() time.Time
}

// Record appends op, assigning its Index (and Time, when zero), and returns
// it as stored.
func (r *Recorder) Record(op Op) Op {
	r.mu.Lock()
	defer r.mu.Unlock()
	op.Index = int64(len(r.ops))
	if op.Time.IsZero() {
		if r.Now != nil {
			op.Time = r.Now()
		} else {
			op.Time = time.Now()
		}
	}
	r.ops = append(r.ops, op)
	return op
}

// Ops returns a copy of the history so far.
func (r *Recorder) Ops() []Op {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Op(nil), r.ops...)
}

// Len returns the number of ops recorded.
func (r *Recorder) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.ops)
}

// ErrVersion is returned by ReadJSONL for a history of another format
// version, or one without the header.
var ErrVersion = errors.New("unsupported history format")

// WriteJSONL writes the header line and then ops as JSON Lines, one op per
// line.
func WriteJSONL(w io.Writer, ops []Op) error {
	bw := bufio.NewWriter(w)
	if _, err := bw.WriteString(Header + "\n"); err != nil {
		return fmt.Errorf("writing history header: %w", err)
	}
	enc := json.NewEncoder(bw)
	for _, op := range ops {
		if err := enc.Encode(op); err != nil {
			return fmt.Errorf("writing op %d: %w", op.Index, err)
		}
	}
	return bw.Flush()
}

// ReadJSONL reads a history written by WriteJSONL. A history without the
// header line, or with another version, is an error wrapping ErrVersion
// that says which version it has.
func ReadJSONL(r io.Reader) ([]Op, error) {
	var ops []Op
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	line := 0
	header := false
	for sc.Scan() {
		line++
		if len(sc.Bytes()) == 0 {
			continue
		}
		if !header {
			var h struct {
				Version *int `json:"outboxlab_history"`
			}
			if err := json.Unmarshal(sc.Bytes(), &h); err != nil || h.Version == nil {
				return nil, fmt.Errorf("history line %d: %w: no {\"outboxlab_history\":N} header (this build reads version %d)", line, ErrVersion, Version)
			}
			if *h.Version != Version {
				return nil, fmt.Errorf("history line %d: %w: version %d (this build reads version %d)", line, ErrVersion, *h.Version, Version)
			}
			header = true
			continue
		}
		var op Op
		if err := json.Unmarshal(sc.Bytes(), &op); err != nil {
			return nil, fmt.Errorf("history line %d: %w", line, err)
		}
		ops = append(ops, op)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading history: %w", err)
	}
	if !header {
		return nil, fmt.Errorf("%w: empty history file, no header", ErrVersion)
	}
	return ops, nil
}
