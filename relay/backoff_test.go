package relay_test

import (
	"testing"
	"time"

	"github.com/outboxlab/outboxlab/relay"
)

// TestRetryPolicyBackoff checks min(2^attempts x base, max), also for a
// maximum so large that doubling it would overflow.
func TestRetryPolicyBackoff(t *testing.T) {
	p := relay.RetryPolicy{BackoffBase: 30 * time.Second, BackoffMax: time.Hour}
	for attempts, want := range map[int]time.Duration{
		0: 30 * time.Second, 1: time.Minute, 2: 2 * time.Minute, 6: 32 * time.Minute, 7: time.Hour, 100: time.Hour,
	} {
		if got := p.Backoff(attempts); got != want {
			t.Errorf("Backoff(%d) = %s, want %s", attempts, got, want)
		}
	}
	flat := relay.RetryPolicy{BackoffBase: time.Minute, BackoffMax: time.Minute}
	if got := flat.Backoff(3); got != time.Minute {
		t.Errorf("Backoff(3) with base = max = 1m: %s", got)
	}
	huge := relay.RetryPolicy{BackoffBase: 1 << 62, BackoffMax: 1 << 62}
	if got := huge.Backoff(1); got != 1<<62 {
		t.Errorf("Backoff(1) with base = max = 2^62 ns: %d, want 2^62 (no overflow)", got)
	}
}
