package relay

import (
	"context"
	"testing"
	"time"
)

// TestPublishDeadlineIsSharedWithinItsShare: publishes that start within
// PublishTimeout/deadlineShare of a deadline's first publish share it; a
// publish after that gets a deadline of its own, PublishTimeout from its
// start; a deadline ends when its last publish releases it and not
// before, and only the current one is forgotten when it ends.
func TestPublishDeadlineIsSharedWithinItsShare(t *testing.T) {
	const timeout = time.Hour // a share of 36 s: the first two calls are well inside it
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	d := &drain{r: &Relay{cfg: Config{PublishTimeout: timeout}}, ctx: ctx}

	before := time.Now()
	a := d.publishDeadline()
	if a.until.Before(before.Add(timeout)) || a.until.After(time.Now().Add(timeout)) {
		t.Fatalf("a first publish's deadline is %v from its start, want %v", a.until.Sub(before), timeout)
	}
	if b := d.publishDeadline(); b != a {
		t.Fatal("a publish started right after another got a deadline of its own, want the shared one")
	}
	if a.refs != 2 {
		t.Fatalf("the shared deadline holds %d references, want 2", a.refs)
	}

	// The first publish began just over a share ago: the next one must not
	// share its deadline, which would bound it by less than the timeout.
	a.until = time.Now().Add(timeout - timeout/deadlineShare - time.Second)
	before = time.Now()
	c := d.publishDeadline()
	if c == a {
		t.Fatal("a publish started more than a share after the deadline's first one shares it")
	}
	if c.until.Before(before.Add(timeout)) || c.refs != 1 || d.dl != c {
		t.Fatalf("the new deadline: %v from its start, %d references, current %v; want %v, 1, true",
			c.until.Sub(before), c.refs, d.dl == c, timeout)
	}

	d.release(a)
	if a.ctx.Err() != nil {
		t.Fatal("a deadline ended while one of its two publishes still held it")
	}
	d.release(a)
	if a.ctx.Err() == nil {
		t.Fatal("a deadline outlived the release of its last publish")
	}
	if d.dl != c {
		t.Fatal("the end of an earlier deadline made the drain forget the current one")
	}
	d.release(c)
	if c.ctx.Err() == nil || d.dl != nil {
		t.Fatalf("after its last release the current deadline: ended %v, still current %v; want true, false", c.ctx.Err() != nil, d.dl != nil)
	}
	if e := d.publishDeadline(); e == c || e.ctx.Err() != nil {
		t.Fatal("a publish after the current deadline ended got the ended one")
	}
}
