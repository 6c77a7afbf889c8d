package scenarios

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/outboxlab/outboxlab/history"
	"github.com/outboxlab/outboxlab/workload"
)

// readRelayRecords reads every lifetime of every replica's records file
// and returns them as history sources, with a summary and the problems
// found; the events are named by their own ids (nameEvents). A lifetime
// that ends without a Stop record gets a Crash of its process after its
// last record, unless a harness op in base (a crash it caused, a restart
// it made) already closes it before the process's next lifetime.
func (r *run) readRelayRecords(base []history.Op) ([][]history.Op, history.RecordsSummary, []string) {
	sum := history.RecordsSummary{Known: r.recordsDir != ""}
	if !sum.Known {
		return nil, sum, nil
	}
	var (
		sources  [][]history.Op
		problems []string
	)
	for _, bc := range r.contexts {
		for _, s := range bc.relays {
			var lives []history.Lifetime
			for _, path := range s.recordsFiles() {
				got, err := readRecordsFile(path)
				switch {
				case errors.Is(err, os.ErrNotExist):
					// The lifetime never got as far as opening it (it died at
					// once, or the relay ignores OUTBOX_RECORDS).
					sum.Missing++
					continue
				case err != nil:
					sum.Unreadable++
					problems = append(problems, fmt.Sprintf("records of %s: %v", s.name, err))
					continue
				}
				lives = append(lives, got...)
			}
			for i, l := range lives {
				sum.Lifetimes++
				if l.Torn != "" {
					sum.Torn++
					r.logf("records of %s: lifetime %d ends in a torn line (dropped): %.80q", s.name, i+1, l.Torn)
				}
				ops := l.Ops
				for j := range ops {
					ops[j].Process = s.name
				}
				nameEvents(ops, bc.ids)
				sum.Ops += len(ops)
				if l.Stopped() || len(ops) == 0 {
					sources = append(sources, ops)
					continue
				}
				sum.Died++
				last := ops[len(ops)-1].Time
				next := time.Time{}
				if i+1 < len(lives) && len(lives[i+1].Ops) > 0 {
					next = lives[i+1].Ops[0].Time
				}
				if !closedBy(base, s.name, last, next) {
					ops = append(ops, history.Op{
						Time: last, Process: s.name, Type: history.Info, F: history.Crash,
						Meta: history.Meta{Detail: "its records end without a stop record"},
					})
				}
				sources = append(sources, ops)
			}
		}
	}
	return sources, sum, problems
}

// nameEvents names the events of a relay's records by their own ids
// where the relay's outbox gives its rows ids of the database's, which
// its records carry: through ids, as the consumers name what they are
// delivered.
func nameEvents(ops []history.Op, ids *workload.IDs) {
	if ids == nil {
		return
	}
	for i := range ops {
		ops[i].Events = ids.Events(ops[i].Events)
		ops[i].CausedBy = ids.Events(ops[i].CausedBy)
	}
}

// closedBy reports whether base has a Crash or Restart of process after
// from and, when until is not zero, before until.
func closedBy(base []history.Op, process string, from, until time.Time) bool {
	for _, op := range base {
		if op.Process != process || (op.F != history.Crash && op.F != history.Restart) {
			continue
		}
		if op.Time.Before(from) || (!until.IsZero() && op.Time.After(until)) {
			continue
		}
		return true
	}
	return false
}

// readRecordsFile reads one records file.
func readRecordsFile(path string) ([]history.Lifetime, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	lives, err := history.ReadRecords(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return lives, nil
}

// history returns the run's history: the harness's own records merged
// by time with the relays' records, or, for a relay that records
// nothing, with what was observed of it on the database; what the
// relays' records brought; and what was observed, with its operations.
func (r *run) history(ctx context.Context) ([]history.Op, history.RecordsSummary, history.ObservedSummary, []history.Op) {
	base := r.rec.Ops()
	for i := range base {
		// Compared with the relays' times by the wall clock alone.
		base[i].Time = base[i].Time.Round(0)
	}
	sources, sum, problems := r.readRelayRecords(base)
	r.problems = append(r.problems, problems...)
	observed, obs, err := r.readObserved(ctx)
	if err != nil {
		r.problems = append(r.problems, err.Error())
	}
	published, broker := r.brokerOps()
	obs.Broker = broker
	if obs.Known && broker.Known {
		observed = append(observed, published)
	}
	var observedOps []history.Op
	if len(observed) > 0 {
		observedOps = history.Merge(observed...)
	}
	if !sum.Known && err == nil && obs.Known {
		sources = append(sources, observed...)
		obs.Merged = true
	}
	if len(sources) == 0 {
		return base, sum, obs, observedOps
	}
	return history.Merge(append([][]history.Op{base}, sources...)...), sum, obs, observedOps
}

// lastLifetime returns the last lifetime in the records file at path,
// and whether the file has any.
func lastLifetime(path string) (history.Lifetime, bool, error) {
	lives, err := readRecordsFile(path)
	if err != nil || len(lives) == 0 {
		return history.Lifetime{}, false, err
	}
	return lives[len(lives)-1], true, nil
}

// lastFailpoint returns the failpoint of the last Failpoint record of l,
// "" when it has none.
func lastFailpoint(l history.Lifetime) string {
	for i := len(l.Ops) - 1; i >= 0; i-- {
		if l.Ops[i].F == history.Failpoint {
			return l.Ops[i].Failpoint
		}
	}
	return ""
}

// fencedWrites counts the rows of process's records that the lease fence
// kept its writes from: fenced rows of its marks, retries and parks.
func fencedWrites(h []history.Op, process string) int {
	n := 0
	for _, op := range h {
		if op.Process == process && op.Type != history.Invoke &&
			(op.F == history.Mark || op.F == history.Retry || op.F == history.Park) {
			n += op.Fenced
		}
	}
	return n
}

// lastRecorded describes the last completion process recorded, as
// evidence of where it stopped: "its records end with info publish:
// timeout".
func lastRecorded(h []history.Op, process string) string {
	for i := len(h) - 1; i >= 0; i-- {
		op := h[i]
		if op.Process != process || op.Type == history.Invoke {
			continue
		}
		s := fmt.Sprintf("its records end with %s %s", op.Type, op.F)
		if op.Error != "" {
			s += ": " + op.Error
		}
		return s
	}
	return "it recorded nothing"
}
