package scenarios

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxlab/outboxlab/history"
	"github.com/outboxlab/outboxlab/relay"
)

// TestRunMergesRelayRecords merges two lifetimes of a replica into the
// harness's history: the first killed in the middle of a line (the torn
// line dropped and counted, a crash added after its last record), the
// second stopped cleanly; and a lifetime that left no file is counted as
// missing.
func TestRunMergesRelayRecords(t *testing.T) {
	dir := t.TempDir()
	t0 := time.Now().Round(0)
	line := func(op history.Op) string { return recordLine(t, op) }
	first := history.Header + "\n" +
		line(history.Op{Time: t0.Add(1 * time.Millisecond), Process: "relay-a", Type: history.Invoke, F: history.Claim}) +
		line(history.Op{Time: t0.Add(2 * time.Millisecond), Process: "relay-a", Type: history.OK, F: history.Claim, Events: []string{"e1"}}) +
		`{"index":2,"time":"` // killed here
	second := history.Header + "\n" +
		line(history.Op{Time: t0.Add(5 * time.Millisecond), Process: "relay-a", Type: history.OK, F: history.Stop})
	paths := []string{filepath.Join(dir, "relay-a.1.jsonl"), filepath.Join(dir, "relay-a.2.jsonl"), filepath.Join(dir, "relay-a.3.jsonl")}
	for i, body := range []string{first, second} {
		if err := os.WriteFile(paths[i], []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r := &run{rec: &history.Recorder{}, recordsDir: dir}
	r.rec.Record(history.Op{Time: t0, Process: "producer-1", Type: history.OK, F: history.Commit, Events: []string{"e1"}})
	r.rec.Record(history.Op{Time: t0.Add(3 * time.Millisecond), Process: "consumer-1", Type: history.OK, F: history.Deliver, Events: []string{"e1"}})
	r.contexts = []*boundedCtx{{relays: []*Replica{{name: "relay-a", records: paths}}}}
	h, sum, _, _ := r.history(context.Background())
	want := history.RecordsSummary{Known: true, Lifetimes: 2, Ops: 3, Torn: 1, Died: 1, Missing: 1}
	if sum != want {
		t.Errorf("summary %+v, want %+v", sum, want)
	}
	var got []string
	for i, op := range h {
		if op.Index != int64(i) {
			t.Fatalf("op %d has index %d", i, op.Index)
		}
		got = append(got, op.Process+" "+string(op.F)+" "+string(op.Type))
	}
	wantOps := "producer-1 commit ok, relay-a claim invoke, relay-a claim ok, relay-a crash info, consumer-1 deliver ok, relay-a stop ok"
	if s := strings.Join(got, ", "); s != wantOps {
		t.Errorf("merged history:\n got %s\nwant %s", s, wantOps)
	}
	if len(r.problems) != 0 {
		t.Errorf("problems %v", r.problems)
	}

	// A crash the harness recorded closes the lifetime: none is added.
	r2 := &run{rec: &history.Recorder{}, recordsDir: dir}
	r2.rec.Record(history.Op{Time: t0.Add(4 * time.Millisecond), Process: "relay-a", Type: history.Info, F: history.Crash})
	r2.contexts = []*boundedCtx{{relays: []*Replica{{name: "relay-a", records: paths[:2]}}}}
	h2, _, _, _ := r2.history(context.Background())
	crashes := 0
	for _, op := range h2 {
		if op.F == history.Crash {
			crashes++
		}
	}
	if crashes != 1 {
		t.Errorf("%d crashes in the merged history, want the harness's one", crashes)
	}

	// Garbage in the middle of a lifetime is a problem, not a record.
	bad := filepath.Join(dir, "relay-b.1.jsonl")
	if err := os.WriteFile(bad, []byte(history.Header+"\nnot a record\n"+line(history.Op{Time: t0, Type: history.OK, F: history.Stop})), 0o644); err != nil {
		t.Fatal(err)
	}
	r3 := &run{rec: &history.Recorder{}, recordsDir: dir}
	r3.contexts = []*boundedCtx{{relays: []*Replica{{name: "relay-b", records: []string{bad}}}}}
	if _, sum, _, _ := r3.history(context.Background()); sum.Unreadable != 1 || len(r3.problems) != 1 {
		t.Errorf("garbage in a records file: summary %+v, problems %v; want it unreadable and a problem", sum, r3.problems)
	}
}

// TestPauseHealAwaitsTheLateWrite checks that the heal of a pause waits
// for the thawed replica's records to show the write the lease fence
// stopped: it returns once a fenced mark is appended to the replica's
// records file, well within its bound, and at once when the replica held
// nothing or records nothing.
func TestPauseHealAwaitsTheLateWrite(t *testing.T) {
	dir := t.TempDir()
	t0 := time.Now().Round(0)
	line := func(op history.Op) string { return recordLine(t, op) }
	path := filepath.Join(dir, "relay-a.1.jsonl")
	claim := history.Header + "\n" +
		line(history.Op{Time: t0, Process: "relay-a", Type: history.OK, F: history.Claim, Events: []string{"e1"}})
	if err := os.WriteFile(path, []byte(claim), 0o644); err != nil {
		t.Fatal(err)
	}
	f := &pauseHolding{slot: &Replica{name: "relay-a", records: []string{path}}}

	began := time.Now()
	f.awaitLateWrite(t.Context(), false)
	(&pauseHolding{slot: &Replica{name: "relay-a"}}).awaitLateWrite(t.Context(), true)
	if d := time.Since(began); d > time.Second {
		t.Errorf("with nothing held or no records the heal waited %s", d)
	}

	go func() {
		time.Sleep(200 * time.Millisecond)
		fenced := line(history.Op{Time: t0.Add(time.Second), Process: "relay-a", Type: history.OK, F: history.Mark, Meta: history.Meta{Fenced: 1}, Events: []string{"e1"}})
		_ = os.WriteFile(path, []byte(claim+fenced), 0o644)
	}()
	began = time.Now()
	f.awaitLateWrite(t.Context(), true)
	if d := time.Since(began); d < 150*time.Millisecond || d > lateWriteWithin-time.Second {
		t.Errorf("the heal returned after %s; the fenced mark came after 200ms (bound %s)", d, lateWriteWithin)
	}
}

// TestPauseHealThawsOnlyWhatItFroze checks that the heal of a pause that
// could not bite (the replica held no claim when it could be frozen, and
// was thawed at once) leaves the replica alone: thawing a running
// container is an error of the engine, which made such a run fail
// instead of being inconclusive. The slot has no container: an unpause
// would panic.
func TestPauseHealThawsOnlyWhatItFroze(t *testing.T) {
	f := &pauseHolding{slot: &Replica{name: "relay-a"}}
	f.active.Store(true)
	if err := f.Heal(t.Context()); err != nil {
		t.Fatalf("heal of a pause that froze nothing: %v", err)
	}
	if f.active.Load() {
		t.Error("the fault is still active after its heal")
	}
}

// recordLine is op as one line of a records file.
func recordLine(t *testing.T, op history.Op) string {
	t.Helper()
	var b strings.Builder
	if err := history.WriteJSONL(&b, []history.Op{op}); err != nil {
		t.Fatal(err)
	}
	return strings.TrimPrefix(b.String(), history.Header+"\n")
}

// TestPauseCountsOnlyAReplicaAsleep freezes a replica only where its
// records end in the failpoint it lingers in after a claim: a replica
// caught past it (its records end in a claim or a publish) would thaw in
// a publish whose deadline ran out, and never make the late mark the
// fault tests.
func TestPauseCountsOnlyAReplicaAsleep(t *testing.T) {
	dir := t.TempDir()
	t0 := time.Now().Round(0)
	line := func(op history.Op) string { return recordLine(t, op) }
	claim := line(history.Op{Time: t0, Process: "relay-a", Type: history.OK, F: history.Claim, Events: []string{"e1"}})
	asleep := line(history.Op{Time: t0.Add(time.Millisecond), Process: "relay-a", Type: history.OK, F: history.Failpoint,
		Meta: history.Meta{Failpoint: relay.FailAfterClaim}})
	publish := line(history.Op{Time: t0.Add(2 * time.Millisecond), Process: "relay-a", Type: history.Invoke, F: history.Publish, Events: []string{"e1"}})
	for _, tc := range []struct {
		name, body, asleep string
		want               bool
	}{
		{"in the failpoint", claim + asleep, relay.FailAfterClaim, true},
		{"past it, publishing", claim + asleep + publish, relay.FailAfterClaim, false},
		{"claimed, not yet in it", claim, relay.FailAfterClaim, false},
		{"no failpoint set", claim + asleep + publish, "", true},
	} {
		path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-")+".jsonl")
		if err := os.WriteFile(path, []byte(history.Header+"\n"+tc.body), 0o644); err != nil {
			t.Fatal(err)
		}
		f := &pauseHolding{slot: &Replica{name: "relay-a", records: []string{path}}, asleep: tc.asleep}
		if got := f.caughtAsleep(); got != tc.want {
			t.Errorf("%s: caught asleep %v, want %v", tc.name, got, tc.want)
		}
	}
	// A replica that records nothing is judged by its rows alone.
	if f := (&pauseHolding{slot: &Replica{name: "relay-b"}, asleep: relay.FailAfterClaim}); !f.caughtAsleep() {
		t.Error("a replica without records was held to its records: it must be judged by its rows alone")
	}
	h := []history.Op{
		{Process: "relay-a", Type: history.OK, F: history.Claim},
		{Process: "relay-a", Type: history.Invoke, F: history.Mark},
		{Process: "relay-a", Type: history.Info, F: history.Publish, Error: "publish timeout"},
		{Process: "relay-b", Type: history.OK, F: history.Mark},
	}
	if got, want := lastRecorded(h, "relay-a"), "its records end with info publish: publish timeout"; got != want {
		t.Errorf("lastRecorded %q, want %q", got, want)
	}
	if got := lastRecorded(h, "relay-c"); got != "it recorded nothing" {
		t.Errorf("lastRecorded of a silent replica %q", got)
	}
}

// TestConnectFailureIsToldFromAStatementError checks what readState tries
// again: a failure to connect (a server a fault just restarted), never a
// statement's error, which would only delay the same failure.
func TestConnectFailureIsToldFromAStatementError(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("counting effects: %w", io.ErrUnexpectedEOF), true},
		{&net.OpError{Op: "dial", Err: errors.New("connection refused")}, true},
		{fmt.Errorf("reading rows: %w", &pgconn.PgError{Code: "42703", Message: `column "processed_at" does not exist`}), false},
		{errors.New("reading the database clock: no rows"), false},
	} {
		if got := connectFailure(c.err); got != c.want {
			t.Errorf("connectFailure(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
