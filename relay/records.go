package relay

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/outboxlab/outboxlab/history"
)

// Records receives what a relay does, as it does it, as operations of
// package history, the record format: Claim (invoke, then ok with the rows
// claimed, their lease on the database clock in DBTime and Until, or info
// when it failed), Publish (an
// invoke per row sent, then ok once confirmed, fail when nacked, returned
// or not sent, info when the confirm timed out or the channel closed;
// Meta.Confirm says which), Mark (invoke with the confirmed rows, then ok
// with the rows marked, their processed_at in DBTime and the rows the
// lease fence left untouched in Fenced), Retry (ok with the attempts, the
// next eligible time in Until), Park, Sweep (ok with the rows deleted and
// the retention cutoff), Failpoint before each failpoint acts, and Stop
// when Run returns. The relay leaves Time, Index and Process for the sink
// to stamp. A nil Records costs one comparison per call site.
//
// Record may be called from several goroutines at once. Flush is called
// after each claim, after each tick, before each failpoint and at the
// stop: what was recorded before it must survive the process being
// killed right after.
type Records interface {
	Record(op history.Op)
	Flush()
}

// record hands op to the relay's Records, if any.
func (r *Relay) record(t history.Type, f history.Func, ids []string, m history.Meta, err error) {
	if r.rec == nil {
		return
	}
	op := history.Op{Type: t, F: f, Events: ids, Meta: m}
	if err != nil {
		op.Error = err.Error()
	}
	r.rec.Record(op)
}

func (r *Relay) flushRecords() {
	if r.rec != nil {
		r.rec.Flush()
	}
}

// idStrings renders ids for a record.
func idStrings(ids []uuid.UUID) []string {
	if len(ids) == 0 {
		return nil
	}
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = id.String()
	}
	return out
}

func rowIDStrings(rows []Row) []string {
	out := make([]string, len(rows))
	for i, row := range rows {
		out[i] = row.ID.String()
	}
	return out
}

// confirmOutcome classifies a confirm's error for a Publish record: the
// record's type and Meta.Confirm.
func confirmOutcome(err error) (history.Type, string) {
	switch {
	case err == nil:
		return history.OK, history.ConfirmAck
	case errors.Is(err, ErrNacked):
		return history.Fail, history.ConfirmNack
	case errors.Is(err, ErrReturned):
		return history.Fail, history.ConfirmReturn
	case errors.Is(err, context.DeadlineExceeded):
		return history.Info, history.ConfirmTimeout
	case Classify(err) == ClassBroker:
		return history.Info, history.ConfirmClosed
	}
	return history.Fail, ""
}

// FileRecords writes a relay's records to a records file as JSON Lines
// of package history: it opens the file for appending, starts the
// lifetime with the header line history.Header (after a newline when the
// file ends in a line cut short), and writes one op per line, stamped with
// the host's wall clock (time.Now, never an offset process clock, so
// that a harness on the same host can merge the records with its own),
// the relay's id as Process and an Index counting this lifetime's
// records. Lines are buffered and written out at each Flush, so what the
// relay flushed survives a kill -9; history.ReadRecords reads the file
// back. It is safe for concurrent use.
type FileRecords struct {
	process string
	now     func() time.Time

	mu    sync.Mutex
	f     *os.File
	w     *bufio.Writer
	buf   []byte
	index int64
	err   error
}

var _ Records = (*FileRecords)(nil)

// OpenFileRecords opens (or creates) path for the records of the relay
// process named process.
func OpenFileRecords(path, process string) (*FileRecords, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening records file: %w", err)
	}
	fr := &FileRecords{process: process, now: time.Now, f: f, w: bufio.NewWriterSize(f, 64<<10)}
	torn, err := endsTorn(f)
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("reading records file %s: %w", path, err)
	}
	if torn {
		_ = fr.w.WriteByte('\n')
	}
	_, _ = fr.w.WriteString(history.Header + "\n")
	if err := fr.w.Flush(); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("writing records file %s: %w", path, err)
	}
	return fr, nil
}

// endsTorn reports whether f is not empty and does not end in a newline.
func endsTorn(f *os.File) (bool, error) {
	st, err := f.Stat()
	if err != nil || st.Size() == 0 {
		return false, err
	}
	var last [1]byte
	if _, err := f.ReadAt(last[:], st.Size()-1); err != nil && !errors.Is(err, io.EOF) {
		return false, err
	}
	return last[0] != '\n', nil
}

// Record implements Records.
func (fr *FileRecords) Record(op history.Op) {
	fr.mu.Lock()
	defer fr.mu.Unlock()
	if fr.err != nil {
		return
	}
	if op.Time.IsZero() {
		op.Time = fr.now()
	}
	op.Index = fr.index
	fr.index++
	op.Process = fr.process
	fr.buf = history.AppendJSON(fr.buf[:0], &op)
	if _, err := fr.w.Write(fr.buf); err != nil {
		fr.err = err
	}
}

// Flush implements Records: it writes out what was recorded.
func (fr *FileRecords) Flush() {
	fr.mu.Lock()
	defer fr.mu.Unlock()
	if fr.err == nil {
		fr.err = fr.w.Flush()
	}
}

// Err returns the first write error, after which nothing more is
// written.
func (fr *FileRecords) Err() error {
	fr.mu.Lock()
	defer fr.mu.Unlock()
	return fr.err
}

// Close flushes and closes the file.
func (fr *FileRecords) Close() error {
	fr.Flush()
	fr.mu.Lock()
	defer fr.mu.Unlock()
	return errors.Join(fr.err, fr.f.Close())
}
