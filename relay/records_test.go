package relay

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/outboxlab/outboxlab/history"
)

// memRecords keeps the records of a relay in memory.
type memRecords struct {
	mu      sync.Mutex
	ops     []history.Op
	flushes int
}

func (m *memRecords) Record(op history.Op) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.ops = append(m.ops, op)
}

func (m *memRecords) Flush() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.flushes++
}

func (m *memRecords) all() []history.Op {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]history.Op(nil), m.ops...)
}

// TestRecordsEncodeAsJSON: the encoding of a record is the bytes
// encoding/json writes for the same history.Op, for every field a relay
// records and for one it does not.
func TestRecordsEncodeAsJSON(t *testing.T) {
	at := time.Date(2024, 5, 6, 7, 8, 9, 123456000, time.UTC)
	for _, op := range []history.Op{
		{Index: 3, Time: at, Process: "relay-a", Type: history.Invoke, F: history.Claim},
		{Index: 4, Time: at, Process: "relay-a", Type: history.OK, F: history.Claim, Events: []string{"a", "b"},
			Meta: history.Meta{DBTime: at, Until: at.Add(time.Minute)}},
		{Time: at, Process: "relay-a", Type: history.Info, F: history.Publish, Events: []string{"a"},
			Meta: history.Meta{Confirm: history.ConfirmTimeout}, Error: `confirming "a": context deadline exceeded`},
		{Time: at, Process: "r", Type: history.OK, F: history.Retry, Events: []string{"a"},
			Meta: history.Meta{Attempts: 5, Parked: true, DBTime: at, Until: at.Add(time.Hour)}},
		{Time: at, Process: "r", Type: history.OK, F: history.Mark, Meta: history.Meta{Fenced: 2}},
		{Time: at, Process: "r", Type: history.OK, F: history.Sweep, Events: []string{"x"}, Meta: history.Meta{DBTime: at, Cutoff: at.Add(-time.Hour)}},
		{Time: at.In(time.FixedZone("x", 3600)), Process: "r", Type: history.OK, F: history.Failpoint, Meta: history.Meta{Failpoint: "after-claim", Detail: "<&>"}},
		{Time: at, Process: "r", Type: history.OK, F: history.Deliver, Meta: history.Meta{Redelivered: true}},
	} {
		want, err := json.Marshal(op)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, '\n')
		if got := history.AppendJSON(nil, &op); !bytes.Equal(got, want) {
			t.Errorf("AppendJSON:\n got %s\nwant %s", got, want)
		}
	}
}

// returnFirst has the first publish returned unroutable and confirms the
// others.
type returnFirst struct {
	mu sync.Mutex
	n  int
}

type returned struct{}

func (returned) Wait(context.Context) error { return ErrReturned }

func (p *returnFirst) Publish(context.Context, Message) (Confirmation, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.n++
	if p.n == 1 {
		return returned{}, nil
	}
	return acked{}, nil
}

// TestRelayRecordsWhatItDoes runs a tick with records on: the claim with
// its lease on the store's clock, each publish and its confirm (a return
// included), the retry of the returned row with its next eligible time, the
// mark of the confirmed rows, and flushes after the claim and at the stop.
func TestRelayRecordsWhatItDoes(t *testing.T) {
	db := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	rows := rowsOf(3)
	for i := range rows {
		rows[i].LockedAt, rows[i].LockedUntil = db, db.Add(time.Minute)
	}
	store := &fakeStore{claim: func(_ context.Context, n int) ([]Row, error) {
		if n == 1 {
			return rows, nil
		}
		return nil, nil
	}}
	rec := &memRecords{}
	r, err := New(Config{RelayID: "relay-a", BatchSize: 10}, store, &returnFirst{}, Options{Records: rec, SerialStore: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Tick(context.Background()); err != nil {
		t.Fatal(err)
	}
	ops := rec.all()
	var got []string
	for _, op := range ops {
		got = append(got, string(op.F)+" "+string(op.Type))
	}
	want := []string{
		"claim invoke", "claim ok",
		"publish invoke", "publish invoke", "publish invoke",
		"publish fail", "retry invoke", "retry ok",
		"publish ok", "publish ok",
		"mark invoke", "mark ok",
	}
	if strings.Join(got, ", ") != strings.Join(want, ", ") {
		t.Fatalf("records:\n got %s\nwant %s", strings.Join(got, ", "), strings.Join(want, ", "))
	}
	claim := ops[1]
	if len(claim.Events) != 3 || !claim.DBTime.Equal(db) || !claim.Until.Equal(db.Add(time.Minute)) {
		t.Errorf("claim ok = %v, want 3 rows leased from %s to %s", claim, db, db.Add(time.Minute))
	}
	if ops[5].Confirm != history.ConfirmReturn || ops[5].Events[0] != rows[0].ID.String() {
		t.Errorf("first confirm = %v, want a return of %s", ops[5], rows[0].ID)
	}
	if ops[7].Attempts != 1 || ops[7].Events[0] != rows[0].ID.String() {
		t.Errorf("retry = %v, want attempt 1 of %s", ops[7], rows[0].ID)
	}
	if m := ops[11]; len(m.Events) != 2 || m.Fenced != 0 {
		t.Errorf("mark ok = %v, want the 2 confirmed rows, none fenced", m)
	}
	if rec.flushes == 0 {
		t.Error("the claim was not flushed")
	}

	// Run records the clean stop.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := r.Run(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if last := rec.all()[len(rec.all())-1]; last.F != history.Stop {
		t.Errorf("last record after Run = %v, want a stop", last)
	}
}

// fencingStore marks none of the rows it is asked to: their lease was
// lost.
type fencingStore struct{ fakeStore }

func (s *fencingStore) Mark(context.Context, string, []uuid.UUID) ([]uuid.UUID, error) {
	return nil, nil
}

// TestRelayRecordsFencedMarks: a mark that the lease fence kept from
// every row is recorded as a mark ok naming no row, with the rows fenced.
func TestRelayRecordsFencedMarks(t *testing.T) {
	rows := rowsOf(2)
	store := &fencingStore{fakeStore{claim: func(_ context.Context, n int) ([]Row, error) {
		if n == 1 {
			return rows, nil
		}
		return nil, nil
	}}}
	rec := &memRecords{}
	r, err := New(Config{RelayID: "relay-a", BatchSize: 10}, store, &hookPublisher{}, Options{Records: rec, SerialStore: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Tick(context.Background()); err != nil {
		t.Fatal(err)
	}
	ops := rec.all()
	last := ops[len(ops)-1]
	if last.F != history.Mark || last.Type != history.OK || len(last.Events) != 0 || last.Fenced != 2 {
		t.Fatalf("last record = %v, want a mark ok of no row with 2 fenced", last)
	}
}

// TestFileRecordsLifetimes writes two lifetimes to one records file, the
// first cut short in the middle of a line as kill -9 leaves it, and
// reads them back: the torn line is reported, never read as a record,
// and the second lifetime starts on a line of its own.
func TestFileRecordsLifetimes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "relay-a.jsonl")
	fr, err := OpenFileRecords(path, "relay-a")
	if err != nil {
		t.Fatal(err)
	}
	fr.Record(history.Op{Type: history.Invoke, F: history.Claim})
	fr.Record(history.Op{Type: history.OK, F: history.Claim, Events: []string{"e1"}})
	fr.Flush()
	// Buffered and never flushed: lost with the process.
	fr.Record(history.Op{Type: history.Invoke, F: history.Publish, Events: []string{"e1"}})
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(`{"index":2,"time":"2024-01-01T00:00:00Z","process":"relay-a","type":"inv`); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()

	fr2, err := OpenFileRecords(path, "relay-a")
	if err != nil {
		t.Fatal(err)
	}
	fr2.Record(history.Op{Type: history.OK, F: history.Stop})
	if err := fr2.Close(); err != nil {
		t.Fatal(err)
	}

	in, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	lives, err := history.ReadRecords(in)
	if err != nil {
		t.Fatal(err)
	}
	if len(lives) != 2 {
		t.Fatalf("%d lifetimes, want 2", len(lives))
	}
	if n := len(lives[0].Ops); n != 2 || lives[0].Torn == "" || lives[0].Stopped() {
		t.Errorf("first lifetime: %d ops, torn %q, stopped %v; want 2 ops and a torn line, not stopped", n, lives[0].Torn, lives[0].Stopped())
	}
	if lives[0].Ops[1].Process != "relay-a" || lives[0].Ops[1].Index != 1 || lives[0].Ops[1].Time.IsZero() {
		t.Errorf("record not stamped: %+v", lives[0].Ops[1])
	}
	if len(lives[1].Ops) != 1 || !lives[1].Stopped() || lives[1].Torn != "" {
		t.Errorf("second lifetime = %+v, want one stop record", lives[1])
	}

	// A file that ends with a whole line gets no blank line before the
	// next lifetime's header.
	fr3, err := OpenFileRecords(path, "relay-a")
	if err != nil {
		t.Fatal(err)
	}
	if err := fr3.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "\n\n") {
		t.Errorf("a blank line after a whole one:\n%s", b)
	}
}

// TestConfirmOutcome checks how each confirm error is recorded.
func TestConfirmOutcome(t *testing.T) {
	for _, c := range []struct {
		err     error
		typ     history.Type
		confirm string
	}{
		{nil, history.OK, history.ConfirmAck},
		{fmt.Errorf("x: %w", ErrNacked), history.Fail, history.ConfirmNack},
		{fmt.Errorf("x: %w", ErrReturned), history.Fail, history.ConfirmReturn},
		{fmt.Errorf("x: %w", context.DeadlineExceeded), history.Info, history.ConfirmTimeout},
		{fmt.Errorf("x: %w", ErrBrokerUnavailable), history.Info, history.ConfirmClosed},
		{errors.New("something else"), history.Fail, ""},
	} {
		if typ, confirm := confirmOutcome(c.err); typ != c.typ || confirm != c.confirm {
			t.Errorf("confirmOutcome(%v) = %v, %q; want %v, %q", c.err, typ, confirm, c.typ, c.confirm)
		}
	}
}

// BenchmarkTickRecords drains a batch of 100 rows per tick through fakes
// (no database or broker, so the relay's own work is all there is to
// compare), without records and with records written to a file.
func BenchmarkTickRecords(b *testing.B) {
	for _, withRecords := range []bool{false, true} {
		name := "records=off"
		if withRecords {
			name = "records=file"
		}
		b.Run(name, func(b *testing.B) {
			rows := rowsOf(100)
			now := time.Now()
			for i := range rows {
				rows[i].LockedAt, rows[i].LockedUntil = now, now.Add(time.Minute)
			}
			var calls int
			store := &fakeStore{claim: func(context.Context, int) ([]Row, error) {
				calls++
				if calls%2 == 1 {
					return rows, nil
				}
				return nil, nil
			}}
			opts := Options{SerialStore: true}
			if withRecords {
				fr, err := OpenFileRecords(filepath.Join(b.TempDir(), "r.jsonl"), "relay-a")
				if err != nil {
					b.Fatal(err)
				}
				defer fr.Close()
				opts.Records = fr
			}
			r, err := New(Config{RelayID: "relay-a", BatchSize: 100}, store, &hookPublisher{}, opts)
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if _, err := r.Tick(ctx); err != nil {
					b.Fatal(err)
				}
				r.flushRecords()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(rows)), "ns/row")
		})
	}
}

// timedStore is a fakeStore that tells the database time of its marks
// and sweeps, as PGStore does; its sweeps delete the rows swept.
type timedStore struct {
	fakeStore
	at       time.Time
	markedAt int
	swept    []uuid.UUID
}

func (s *timedStore) MarkAt(ctx context.Context, owner string, ids []uuid.UUID) ([]uuid.UUID, time.Time, error) {
	s.markedAt++
	got, err := s.Mark(ctx, owner, ids)
	return got, s.at, err
}

func (s *timedStore) SweepIDs(ctx context.Context, retention time.Duration, limit int) ([]uuid.UUID, time.Time, error) {
	_, err := s.Sweep(ctx, retention, limit)
	return s.swept, s.at, err
}

// TestRelayRecordsDatabaseTimes: with records, a store that tells its
// database time (TimedStore) is asked for it, and the mark's record
// carries it; without records the relay never asks, as the time would go
// nowhere.
func TestRelayRecordsDatabaseTimes(t *testing.T) {
	db := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, withRecords := range []bool{true, false} {
		rows := rowsOf(2)
		store := &timedStore{at: db}
		store.claim = func(_ context.Context, n int) ([]Row, error) {
			if n == 1 {
				return rows, nil
			}
			return nil, nil
		}
		rec := &memRecords{}
		opts := Options{SerialStore: true}
		if withRecords {
			opts.Records = rec
		}
		r, err := New(Config{RelayID: "relay-a", BatchSize: 10}, store, &hookPublisher{}, opts)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.Tick(context.Background()); err != nil {
			t.Fatal(err)
		}
		if !withRecords {
			if store.markedAt != 0 {
				t.Errorf("without records the relay asked the store for its time %d times", store.markedAt)
			}
			continue
		}
		var mark *history.Op
		for _, op := range rec.all() {
			if op.F == history.Mark && op.Type == history.OK {
				mark = &op
			}
		}
		if mark == nil || !mark.DBTime.Equal(db) || len(mark.Events) != 2 {
			t.Errorf("mark ok record %v, want the 2 rows marked at %s", mark, db)
		}
	}
}

// TestNewRefusesMissingParts: a relay needs a store and a publisher.
func TestNewRefusesMissingParts(t *testing.T) {
	cfg := Config{RelayID: "r"}
	if _, err := New(cfg, nil, &hookPublisher{}, Options{}); err == nil {
		t.Error("New accepted a nil store")
	}
	if _, err := New(cfg, &fakeStore{}, nil, Options{}); err == nil {
		t.Error("New accepted a nil publisher")
	}
	if _, err := New(Config{}, &fakeStore{}, &hookPublisher{}, Options{}); err == nil {
		t.Error("New accepted a configuration without a relay id")
	}
}

// failingWriter fails every write, as a full disk does.
type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("no space left on device") }

// TestFileRecordsKeepTheFirstWriteError: a record the file could not
// take is reported by Err at once, and nothing more is written after it.
func TestFileRecordsKeepTheFirstWriteError(t *testing.T) {
	fr := &FileRecords{process: "relay-a", now: time.Now, w: bufio.NewWriterSize(failingWriter{}, 16)}
	fr.Record(history.Op{Type: history.Invoke, F: history.Claim, Events: []string{"a record longer than the buffer"}})
	if err := fr.Err(); err == nil || !strings.Contains(err.Error(), "no space") {
		t.Fatalf("Err after a failed write = %v, want the write's error", err)
	}
	index := fr.index
	fr.Record(history.Op{Type: history.OK, F: history.Claim})
	if fr.index != index {
		t.Errorf("a record after the failure was written (index %d, was %d)", fr.index, index)
	}
}
