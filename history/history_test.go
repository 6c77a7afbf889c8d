package history

import (
	"bytes"
	"errors"
	"reflect"
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
	b := r.Record(Op{Process: "runner", Type: OK, F: Phase, Meta: Meta{Phase: PhaseLiveness}})
	if !a.Time.Equal(skewed) || !b.Time.Equal(at) {
		t.Errorf("times = %s, %s; want the process's own %s and the recorder's %s", a.Time, b.Time, skewed, at)
	}
}

func TestJSONLRoundTrip(t *testing.T) {
	at := time.Date(2030, 1, 1, 12, 0, 0, 123456789, time.UTC)
	ops := []Op{
		{Index: 0, Time: at, Process: "producer-1", Type: Invoke, F: Commit, Events: []string{"e1", "e2"}, Meta: Meta{CausedBy: []string{"e0"}}},
		{Index: 1, Time: at.Add(time.Millisecond), Process: "producer-1", Type: Info, F: Commit, Events: []string{"e1", "e2"}, Error: "connection reset"},
		{Index: 2, Time: at.Add(2 * time.Millisecond), Process: "nemesis", Type: OK, F: FaultStart, Meta: Meta{Fault: &Fault{Name: "f1", Kind: "down", Class: ClassBroker, Targets: []string{"relay-a"}}}},
		{Index: 3, Time: at.Add(3 * time.Millisecond), Process: "relay-a", Type: OK, F: Retry, Events: []string{"e1"},
			Meta: Meta{Attempts: 5, Parked: true, DBTime: at.Add(time.Hour), Detail: "nack"}},
		{Index: 4, Time: at.Add(4 * time.Millisecond), Process: "consumer-1", Type: OK, F: Deliver, Events: []string{"e1"},
			Meta: Meta{Queue: "q", Redelivered: true}},
	}
	var buf bytes.Buffer
	if err := WriteJSONL(&buf, ops); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(buf.String(), "\n"); n != len(ops)+1 {
		t.Fatalf("%d lines for %d ops and the header", n, len(ops))
	}
	if !strings.HasPrefix(buf.String(), Header+"\n") {
		t.Fatalf("history does not start with the header %s", Header)
	}
	got, err := ReadJSONL(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(ops) {
		t.Fatalf("read %d ops, want %d", len(got), len(ops))
	}
	for i := range ops {
		if !reflect.DeepEqual(got[i], ops[i]) {
			t.Errorf("op %d: read %+v, wrote %+v", i, got[i], ops[i])
		}
	}
}

func TestReadJSONLRejectsABrokenLine(t *testing.T) {
	_, err := ReadJSONL(strings.NewReader(Header + "\n{\"index\":0,\"process\":\"p\",\"type\":\"ok\",\"f\":\"commit\"}\n{not json\n"))
	if err == nil || !strings.Contains(err.Error(), "line 3") {
		t.Fatalf("err = %v, want one naming line 2", err)
	}
}

func TestReadJSONLRefusesOtherVersions(t *testing.T) {
	op := `{"index":0,"time":"2030-01-01T00:00:00Z","process":"p","type":"ok","f":"commit"}`
	for name, in := range map[string]string{
		"no header":     op + "\n",
		"version 1":     `{"outboxlab_history":1}` + "\n" + op + "\n",
		"version 3":     `{"outboxlab_history":3}` + "\n" + op + "\n",
		"empty":         "",
		"not a history": "hello\n",
	} {
		_, err := ReadJSONL(strings.NewReader(in))
		if !errors.Is(err, ErrVersion) {
			t.Errorf("%s: err = %v, want ErrVersion", name, err)
		}
	}
	if _, err := ReadJSONL(strings.NewReader(`{"outboxlab_history":1}` + "\n")); err == nil || !strings.Contains(err.Error(), "version 1") {
		t.Errorf("error for version 1 does not say which version it read: %v", err)
	}
}
