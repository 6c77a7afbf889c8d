package bound

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestCallReturnsTheAnswer(t *testing.T) {
	want := errors.New("no")
	if err := Call(context.Background(), func() error { return want }, nil); err != want {
		t.Fatalf("Call = %v, want fn's error", err)
	}
}

func TestCallGivesUpWhenTheContextEnds(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	release := make(chan struct{})
	cancelled := make(chan struct{})
	began := time.Now()
	err := Call(ctx, func() error { <-release; return nil }, func() { close(cancelled); close(release) })
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Call = %v, want the deadline", err)
	}
	if time.Since(began) > 2*time.Second {
		t.Fatalf("Call waited %s for a call its context had given up on", time.Since(began))
	}
	select {
	case <-cancelled:
	default:
		t.Fatal("onCancel did not run")
	}
}

func TestCallRunsNothingOnAnEndedContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ran := false
	if err := Call(ctx, func() error { ran = true; return nil }, nil); !errors.Is(err, context.Canceled) || ran {
		t.Fatalf("Call on an ended context = %v, ran %v", err, ran)
	}
}
