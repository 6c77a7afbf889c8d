package scenarios

import (
	"strings"
	"testing"

	"github.com/outboxlab/outboxlab/history"
)

// TestConcurrentApplies: the bite of concurrent-duplicates counts an
// event only when two consumers were applying it at the same moment; a
// redelivery applied after the first apply ended, or one consumer's
// applies, count nothing.
func TestConcurrentApplies(t *testing.T) {
	op := func(i int64, p string, typ history.Type, id string) history.Op {
		return history.Op{Index: i, Process: p, Type: typ, F: history.Apply, Events: []string{id}}
	}
	h := []history.Op{
		// e1: consumer-2 begins before consumer-1 ends.
		op(1, "consumer-1", history.Invoke, "e1"),
		op(2, "consumer-2", history.Invoke, "e1"),
		op(3, "consumer-1", history.OK, "e1"),
		op(4, "consumer-2", history.OK, "e1"),
		// e2: one after the other.
		op(5, "consumer-1", history.Invoke, "e2"),
		op(6, "consumer-1", history.Info, "e2"),
		op(7, "consumer-2", history.Invoke, "e2"),
		op(8, "consumer-2", history.OK, "e2"),
		// e3: the same consumer twice.
		op(9, "consumer-1", history.Invoke, "e3"),
		op(10, "consumer-1", history.OK, "e3"),
		op(11, "consumer-1", history.Invoke, "e3"),
		op(12, "consumer-1", history.OK, "e3"),
	}
	n, example := concurrentApplies(h)
	if n != 1 || !strings.HasPrefix(example, "e1 by consumer-1 in ops 1-3 and by consumer-2 in ops 2-4") {
		t.Fatalf("concurrentApplies = %d, %q; want 1 (e1)", n, example)
	}
	if n, _ := concurrentApplies(h[4:]); n != 0 {
		t.Fatalf("concurrentApplies without overlap = %d, want 0", n)
	}
}
