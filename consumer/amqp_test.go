package consumer

import (
	"context"
	"testing"
)

func TestDeliveryCountsCountAndForget(t *testing.T) {
	c := newDeliveryCounts(3)
	for i, want := range []int{1, 2, 3} {
		if got := c.inc("a"); got != want {
			t.Fatalf("delivery %d of a counted %d, want %d", i+1, got, want)
		}
	}
	c.forget("a")
	if got := c.inc("a"); got != 1 {
		t.Errorf("after forget, a counted %d, want 1", got)
	}
	if got := c.inc(""); got != 1 {
		t.Errorf("an id-less delivery counted %d, want 1", got)
	}
}

func TestDeliveryCountsBounded(t *testing.T) {
	c := newDeliveryCounts(2)
	c.inc("a")
	c.inc("a")
	c.inc("b")
	c.inc("c") // evicts a, the oldest
	if len(c.n) > 2 {
		t.Fatalf("tracking %d ids, bound is 2", len(c.n))
	}
	if got := c.inc("a"); got != 1 {
		t.Errorf("evicted a counted %d, want a fresh 1", got)
	}
	if got := c.inc("c"); got != 2 {
		t.Errorf("c counted %d, want 2", got)
	}
	for i := 0; i < 1000; i++ {
		id := string(rune('A' + i%50))
		c.inc(id)
		c.forget(id)
	}
	if len(c.order) > 2*len(c.n)+64 {
		t.Errorf("order grew to %d entries for %d ids", len(c.order), len(c.n))
	}
}

func TestAMQPSourceRejectsBadConfig(t *testing.T) {
	cons, err := New(Config{Name: "c"}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []*AMQPSource{
		{Queue: "q"},
		{URL: "amqp://broker/"},
		{URL: "http://broker/", Queue: "q"},
	} {
		if err := s.Run(context.Background(), cons); err == nil {
			t.Errorf("Run(%+v) accepted a bad configuration", s)
		}
	}
}

// TestDeliveryCountsEvictTheOldest: an id forgotten and counted again is
// the newest; the entry it left behind when forgotten does not evict its
// new count before older ids.
func TestDeliveryCountsEvictTheOldest(t *testing.T) {
	c := newDeliveryCounts(2)
	c.inc("x")
	c.forget("x")
	c.inc("y")
	c.inc("x")
	c.inc("x") // x counted twice since it came back
	c.inc("z") // the bound: evicts y, the oldest kept
	if _, ok := c.n["y"]; ok {
		t.Errorf("y, the oldest id, was kept: tracking %v", c.n)
	}
	if got := c.inc("x"); got != 3 {
		t.Errorf("x counted %d, want 3: its count was evicted before y's", got)
	}
}
