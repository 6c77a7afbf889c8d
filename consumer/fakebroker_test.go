package consumer_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/outboxlab/outboxlab/consumer"
	"github.com/outboxlab/outboxlab/relay/amqptest"
)

// memInbox is an in-memory inbox whose Apply fails the first failures[id]
// times for an id.
type memInbox struct {
	mu       sync.Mutex
	seen     map[string]bool
	failures map[string]int
	applied  []string
}

func (in *memInbox) Apply(_ context.Context, m consumer.Message) (bool, error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.failures[m.ID] > 0 {
		in.failures[m.ID]--
		return false, errors.New("the inbox is down")
	}
	if in.seen[m.ID] {
		return true, nil
	}
	in.seen[m.ID] = true
	in.applied = append(in.applied, m.ID)
	return false, nil
}

// TestFakeBrokerSource runs the AMQP source against relay/amqptest, a
// broker in the test's process: a delivery is applied and acked, a
// redelivered duplicate acked without a second effect, one the inbox fails
// is requeued and applied on its redelivery, one that fails MaxDeliveries
// times dead-lettered, one without a message id dead-lettered at once;
// after the broker drops the connection the source consumes again, and
// every delivery it saw was observed with its outcome.
func TestFakeBrokerSource(t *testing.T) {
	b := amqptest.Start(t)
	in := &memInbox{seen: map[string]bool{}, failures: map[string]int{"flaky": 1, "poison": 100}}
	c, err := consumer.New(consumer.Config{Name: "c", MaxDeliveries: 3}, in, nil)
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu       sync.Mutex
		outcomes = map[string][]consumer.Outcome{}
	)
	s := &consumer.AMQPSource{URL: b.URL(), Queue: "q", MinBackoff: 10 * time.Millisecond, MaxBackoff: 20 * time.Millisecond,
		Observe: func(m consumer.Message, o consumer.Outcome, _ error) {
			mu.Lock()
			outcomes[m.ID] = append(outcomes[m.ID], o)
			mu.Unlock()
		}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx, c) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for !ok() {
			if time.Now().After(deadline) {
				mu.Lock()
				defer mu.Unlock()
				t.Fatalf("%s: not within 5 s (outcomes %v, acks %+v)", what, outcomes, b.Acks())
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	seen := func(id string, n int) func() bool {
		return func() bool { mu.Lock(); defer mu.Unlock(); return len(outcomes[id]) >= n }
	}
	for _, id := range []string{"e1", "e1", "flaky", "poison", ""} {
		b.Enqueue("q", id, "t", []byte(`{}`))
	}
	waitFor("every delivery handled", func() bool {
		return seen("e1", 2)() && seen("flaky", 2)() && seen("poison", 3)() && seen("", 1)()
	})
	mu.Lock()
	want := map[string][]consumer.Outcome{
		"e1":     {consumer.Applied, consumer.Duplicate},
		"flaky":  {consumer.Requeued, consumer.Applied},
		"poison": {consumer.Requeued, consumer.Requeued, consumer.DeadLettered},
		"":       {consumer.DeadLettered},
	}
	for id, w := range want {
		if got := outcomes[id]; !slices.Equal(got, w) {
			t.Errorf("outcomes of %q: %v, want %v", id, got, w)
		}
	}
	mu.Unlock()
	kinds := map[string][]string{}
	for _, a := range b.Acks() {
		k := a.Kind
		if a.Requeue {
			k += "+requeue"
		}
		kinds[a.MessageID] = append(kinds[a.MessageID], k)
	}
	for id, w := range map[string][]string{
		"e1": {"ack", "ack"}, "flaky": {"nack+requeue", "ack"}, "poison": {"nack+requeue", "nack+requeue", "nack"}, "": {"nack"},
	} {
		if got := kinds[id]; !slices.Equal(got, w) {
			t.Errorf("broker saw %v for %q, want %v", got, id, w)
		}
	}
	if len(in.applied) != 2 {
		t.Errorf("applied %v, want e1 and flaky once each", in.applied)
	}
	// A dropped connection: the source dials again and consumes on.
	b.DropConnections()
	waitFor("a second connection", func() bool { return b.Dials() >= 2 })
	b.Enqueue("q", "e2", "t", []byte(`{}`))
	waitFor("a delivery after the reconnect", seen("e2", 1))
}
