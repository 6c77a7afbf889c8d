package history

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"
)

// RecordsSummary sums up what the processes of a run recorded of their
// own operations in records files (a relay's OUTBOX_RECORDS), every
// lifetime of every process included.
type RecordsSummary struct {
	// Known reports that the run gave its processes records files (the
	// relay declares that it writes them).
	Known bool `json:"known"`
	// Lifetimes counts the replicas' process lifetimes that wrote a
	// records file, and Ops the records merged into the history.
	Lifetimes int `json:"lifetimes"`
	Ops       int `json:"ops"`
	// Torn counts lifetimes whose last line was cut short (a kill in the
	// middle of a write): the line is dropped, not read as a record.
	Torn int `json:"torn"`
	// Died counts lifetimes whose records end without a stop record: the
	// process was killed, and the merged history has a crash of it there
	// unless the harness recorded one.
	Died int `json:"died"`
	// Missing counts lifetimes that left no records file at all, and
	// Unreadable the files that could not be read (each also a problem of
	// the run).
	Missing    int `json:"missing"`
	Unreadable int `json:"unreadable"`
}

// ObservedSummary sums up what a harness observed of the relays of a run
// from the database, whatever they record themselves: the changes a trigger on
// each outbox table logged, on the database clock, each replica logged in
// as a role of its own (outboxlab's internal/observe).
type ObservedSummary struct {
	// Known reports that the run observed its outbox tables; when it
	// could not, Unobserved says why.
	Known      bool   `json:"known"`
	Unobserved string `json:"unobserved,omitempty"`
	// Changes counts the logged changes of outbox rows (stages included),
	// and Ops the claims, marks, retries, parks and sweeps made of them
	// by the replicas.
	Changes int `json:"changes"`
	Ops     int `json:"ops"`
	// Others counts the changes, stages aside, made by sessions that are
	// no replica's (the harness's own): they are no relay's operations.
	Others int `json:"others,omitempty"`
	// Merged reports that the observed operations are the relays' in the
	// history the checkers judged: the relay writes no records of its
	// own. For a relay that does, they are kept apart (scenarios.Result.ObservedOps)
	// and its records are judged.
	Merged bool `json:"merged"`
	// Disagreements lists, for a relay that writes records, each of its
	// recorded claims, marks, retries, parks and sweeps of a row that the
	// observation does not show, or the other way round, with nothing in
	// the history to explain it .
	Disagreements []string `json:"disagreements,omitempty"`
	// Broker is what the broker's firehose showed of the relays'
	// publishes.
	Broker BrokerObserved `json:"broker"`
}

// BrokerObserved is what a run saw of the relays' publishes at the
// broker: every message the broker accepted for the run's exchanges, each
// replica publishing as a broker user of its own.
type BrokerObserved struct {
	// Known reports that the broker was observed; when it was not,
	// Unobserved says why.
	Known      bool   `json:"known"`
	Unobserved string `json:"unobserved,omitempty"`
	// Publishes counts the publishes the replicas made, Unroutable those
	// of them no queue took (a mandatory publish the broker returned),
	// Republished the events the replicas published more than once, and
	// Others the publishes of no replica's user or of no event of the
	// run.
	Publishes   int `json:"publishes"`
	Unroutable  int `json:"unroutable,omitempty"`
	Republished int `json:"republished"`
	Others      int `json:"others,omitempty"`
	// Gaps counts the spans in which the harness was not watching (the
	// broker was down): publishes in them were not seen.
	Gaps int `json:"gaps,omitempty"`
}

// Lifetime is what one lifetime of a process recorded in a records file:
// the ops after one header line, up to the next header or the end of the
// file.
type Lifetime struct {
	// Ops are the lifetime's records, in the order it wrote them.
	Ops []Op
	// Torn is the lifetime's last line when it is not a whole record: the
	// process died while writing it (kill -9 in the middle of a write).
	// Empty when the lifetime ended on a whole record.
	Torn string
}

// Stopped reports whether the lifetime ended with a Stop record: the
// process stopped cleanly rather than dying.
func (l Lifetime) Stopped() bool {
	return len(l.Ops) > 0 && l.Ops[len(l.Ops)-1].F == Stop && l.Torn == ""
}

// ReadRecords reads a records file: the JSON Lines a process appends its
// own operations to, one lifetime after another, each lifetime starting
// with the Header line (a process that opens the file again appends a new
// header, after a newline if the previous lifetime was cut short). A
// line that is not a whole record is tolerated only as the last line of
// its lifetime, where a process killed in the middle of a write leaves
// it (it is kept in Lifetime.Torn, never read as a record); anywhere else
// it is an error, as is a header of another version. An empty file has
// no lifetime.
func ReadRecords(r io.Reader) ([]Lifetime, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	var (
		out     []Lifetime
		pending []byte // an unparsable line, torn if a header or the end follows
		pendAt  int
		line    int
	)
	for {
		b, err := br.ReadBytes('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("reading records: %w", err)
		}
		if len(b) > 0 {
			line++
			text := bytes.TrimRight(b, "\r\n")
			switch v, isHeader := headerVersion(text); {
			case isHeader:
				if v != Version {
					return nil, fmt.Errorf("records line %d: %w: version %d (this build reads version %d)", line, ErrVersion, v, Version)
				}
				if pending != nil {
					out[len(out)-1].Torn = string(pending)
					pending = nil
				}
				out = append(out, Lifetime{})
			case len(bytes.TrimSpace(text)) == 0:
			case pending != nil:
				return nil, fmt.Errorf("records line %d: not a record, and not the last line of its lifetime: %.80q", pendAt, pending)
			case len(out) == 0:
				// A header cut short by a kill is the whole lifetime.
				if bytes.HasPrefix([]byte(Header), text) {
					out = append(out, Lifetime{})
					pending, pendAt = slices.Clone(text), line
					break
				}
				return nil, fmt.Errorf("records line %d: %w: no {\"outboxlab_history\":N} header (this build reads version %d)", line, ErrVersion, Version)
			default:
				var op Op
				if json.Unmarshal(text, &op) != nil || op.F == "" || op.Type == "" {
					pending, pendAt = slices.Clone(text), line
					break
				}
				cur := &out[len(out)-1]
				cur.Ops = append(cur.Ops, op)
			}
		}
		if errors.Is(err, io.EOF) {
			break
		}
	}
	if pending != nil {
		out[len(out)-1].Torn = string(pending)
	}
	return out, nil
}

// headerVersion reports whether line is a history header and its version.
func headerVersion(line []byte) (int, bool) {
	if !bytes.HasPrefix(bytes.TrimSpace(line), []byte(`{"outboxlab_history"`)) {
		return 0, false
	}
	var h struct {
		Version *int `json:"outboxlab_history"`
	}
	if json.Unmarshal(line, &h) != nil || h.Version == nil {
		return 0, false
	}
	return *h.Version, true
}

// Merge merges histories recorded by different processes into one. Each
// source keeps its own order; between sources, ops are ordered by Time,
// which must come from clocks that agree (the wall clock of one host),
// an op of an earlier source first when two times are equal. The result
// is indexed afresh from 0.
func Merge(sources ...[]Op) []Op {
	n := 0
	for _, s := range sources {
		n += len(s)
	}
	out := make([]Op, 0, n)
	pos := make([]int, len(sources))
	for len(out) < n {
		best := -1
		var bt time.Time
		for i, s := range sources {
			if pos[i] == len(s) {
				continue
			}
			t := s[pos[i]].Time
			if best < 0 || t.Before(bt) {
				best, bt = i, t
			}
		}
		op := sources[best][pos[best]]
		pos[best]++
		op.Index = int64(len(out))
		out = append(out, op)
	}
	return out
}
