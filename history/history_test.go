package history

import (
	"bytes"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestRecorderIndexesConcurrentRecords(t *testing.T) {
	var r Recorder
	const procs, each = 8, 200
	var wg sync.WaitGroup
	for p := 0; p < procs; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				r.Record(Op{Process: "p", Type: Invoke, F: Commit})
			}
		}()
	}
	wg.Wait()
	ops := r.Ops()
	if len(ops) != procs*each || r.Len() != procs*each {
		t.Fatalf("recorded %d ops (Len %d), want %d", len(ops), r.Len(), procs*each)
	}
	for i, op := range ops {
		if op.Index != int64(i) {
			t.Fatalf("op %d has index %d: indexes must be the record order", i, op.Index)
		}
		if op.Time.IsZero() {
			t.Fatalf("op %d has no time", i)
		}
	}
}

func TestRecorderKeepsGivenTimeAndUsesItsClock(t *testing.T) {
	at := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	r := Recorder{Now: func() time.Time { return at }}
	skewed := at.Add(-5 * time.Minute)
	a := r.Record(Op{Process: "relay-a", Type: OK, F: Mark, Time: skewed})
	b := r.Record(Op{Process: "runner", Type: OK, F: Phase, Value: "liveness"})
	if !a.Time.Equal(skewed) || !b.Time.Equal(at) {
		t.Errorf("times = %s, %s; want the process's own %s and the recorder's %s", a.Time, b.Time, skewed, at)
	}
}

func TestJSONLRoundTrip(t *testing.T) {
	at := time.Date(2030, 1, 1, 12, 0, 0, 123456789, time.UTC)
	ops := []Op{
		{Index: 0, Time: at, Process: "producer-1", Type: Invoke, F: Commit, Events: []string{"e1", "e2"}, Value: "caused-by=e0"},
		{Index: 1, Time: at.Add(time.Millisecond), Process: "producer-1", Type: Info, F: Commit, Events: []string{"e1", "e2"}, Error: "connection reset"},
		{Index: 2, Time: at.Add(2 * time.Millisecond), Process: "nemesis", Type: OK, F: FaultStart, Value: "relay-broker down"},
	}
	var buf bytes.Buffer
	if err := WriteJSONL(&buf, ops); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(buf.String(), "\n"); n != len(ops) {
		t.Fatalf("%d lines for %d ops", n, len(ops))
	}
	got, err := ReadJSONL(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(ops) {
		t.Fatalf("read %d ops, want %d", len(got), len(ops))
	}
	for i := range ops {
		if got[i].String() != ops[i].String() || !got[i].Time.Equal(ops[i].Time) || got[i].Value != ops[i].Value {
			t.Errorf("op %d: read %+v, wrote %+v", i, got[i], ops[i])
		}
	}
}

func TestReadJSONLRejectsABrokenLine(t *testing.T) {
	_, err := ReadJSONL(strings.NewReader("{\"index\":0,\"process\":\"p\",\"type\":\"ok\",\"f\":\"commit\"}\n{not json\n"))
	if err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("err = %v, want one naming line 2", err)
	}
}
