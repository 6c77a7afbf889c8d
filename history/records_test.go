package history

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestReadRecordsToleratesOnlyATornLastLine: a line that is not a whole
// record is reported as torn when it ends its lifetime (the end of the
// file, or a new header after it), and is an error anywhere else.
func TestReadRecordsToleratesOnlyATornLastLine(t *testing.T) {
	op := `{"index":0,"time":"2024-01-01T00:00:00Z","process":"relay-a","type":"ok","f":"stop"}`
	for _, c := range []struct {
		name, in  string
		lifetimes int
		torn      []string
		wantErr   bool
	}{
		{name: "empty", in: "", lifetimes: 0},
		{name: "whole", in: Header + "\n" + op + "\n", lifetimes: 1, torn: []string{""}},
		{name: "no final newline but whole", in: Header + "\n" + op, lifetimes: 1, torn: []string{""}},
		{name: "torn at the end", in: Header + "\n" + op + "\n" + `{"index":1,"ti`, lifetimes: 1, torn: []string{`{"index":1,"ti`}},
		{name: "torn then a new lifetime", in: Header + "\n" + `{"ind` + "\n" + Header + "\n" + op + "\n", lifetimes: 2, torn: []string{`{"ind`, ""}},
		{name: "torn header", in: `{"outboxlab_hi`, lifetimes: 1, torn: []string{`{"outboxlab_hi`}},
		{name: "garbage in the middle", in: Header + "\n" + `{"ind` + "\n" + op + "\n", wantErr: true},
		{name: "no header", in: op + "\n", wantErr: true},
		{name: "other version", in: `{"outboxlab_history":1}` + "\n", wantErr: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			lives, err := ReadRecords(strings.NewReader(c.in))
			if c.wantErr {
				if err == nil {
					t.Fatalf("read %+v, want an error", lives)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(lives) != c.lifetimes {
				t.Fatalf("%d lifetimes, want %d", len(lives), c.lifetimes)
			}
			for i, l := range lives {
				if l.Torn != c.torn[i] {
					t.Errorf("lifetime %d torn %q, want %q", i, l.Torn, c.torn[i])
				}
			}
		})
	}
	if _, err := ReadRecords(strings.NewReader(`{"outboxlab_history":1}` + "\n")); !errors.Is(err, ErrVersion) {
		t.Errorf("other version: %v, want ErrVersion", err)
	}
}

// TestMergeKeepsEachSourcesOrder: ops of several sources are merged by
// time, each source's own order kept even where its times go backwards,
// and indexed afresh.
func TestMergeKeepsEachSourcesOrder(t *testing.T) {
	at := func(s int) time.Time { return time.Unix(int64(s), 0) }
	a := []Op{{Process: "a", Time: at(1)}, {Process: "a", Time: at(5)}, {Process: "a", Time: at(4)}}
	b := []Op{{Process: "b", Time: at(2)}, {Process: "b", Time: at(6)}}
	got := Merge(a, b)
	var order []string
	for i, op := range got {
		if op.Index != int64(i) {
			t.Fatalf("op %d has index %d", i, op.Index)
		}
		order = append(order, op.Process+op.Time.Format("5"))
	}
	if s := strings.Join(order, " "); s != "a1 b2 a5 a4 b6" {
		t.Fatalf("merged %s, want a1 b2 a5 a4 b6", s)
	}
}
