package scenarios

import (
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxlab/outboxlab/contract"
	"github.com/outboxlab/outboxlab/relay"
	"github.com/outboxlab/outboxlab/workload"
)

// TestOnlyDeclaredLimitsAreJudged checks that the checkers judge a relay's
// attempt count and retry spacing only by what it declares: a relay that
// declares no attempt limit (one that parks after its own 5, say) gets
// none, never the limit the harness gives our relay; ours declares its
// own, as does a relay that says attempts=5.
func TestOnlyDeclaredLimitsAreJudged(t *testing.T) {
	cfgOf := func(u RelayUnderTest) (int, bool) {
		r := &run{relay: u.resolve(), recordsDir: "records", mode: workload.Outbox}
		cfg := r.checkerConfig()
		return cfg.MaxAttempts, cfg.Backoff != nil
	}
	declare := func(list string) RelayUnderTest {
		p, err := contract.Parse(list)
		if err != nil {
			t.Fatal(err)
		}
		return RelayUnderTest{Command: []string{"./their-relay"}, Promises: p}
	}
	if n, backoff := cfgOf(declare("parks,fenced,locking=lease,records")); n != 0 || backoff {
		t.Errorf("a relay that declares no limit and no backoff is judged by attempt limit %d, backoff %v; want neither", n, backoff)
	}
	if n, _ := cfgOf(declare("parks,fenced,locking=lease,records,attempts=5")); n != 5 {
		t.Errorf("attempts=5 declared, judged by limit %d", n)
	}
	if n, backoff := cfgOf(Ours()); n != MaxAttempts || !backoff {
		t.Errorf("ours is judged by limit %d, backoff %v; want %d and its backoff", n, backoff, MaxAttempts)
	}
	if n, backoff := cfgOf(RelayUnderTest{Mutants: true}); n != MaxAttempts || !backoff {
		t.Errorf("a mutant of ours is judged by limit %d, backoff %v; want %d and its backoff", n, backoff, MaxAttempts)
	}
	// The backoff judged is the one our relay runs: after a failure that
	// left a row at n attempts, RetryPolicy.Backoff of the n-1 before it.
	r := &run{relay: Ours().resolve(), mode: workload.Outbox}
	policy := relay.RetryPolicy{BackoffBase: BackoffBase, BackoffMax: BackoffMax}
	for n := range 8 {
		if got, want := r.checkerConfig().Backoff(n), policy.Backoff(n-1); got != want {
			t.Errorf("after %d attempts the checkers want a backoff of %s, our relay waits %s", n, got, want)
		}
	}
	// A declared retention wins over the one the replicas get; without
	// one, the replicas' is judged.
	sc, _ := Lookup(BrokerKilled)
	for _, tc := range []struct {
		list string
		want time.Duration
	}{{"sweeps", time.Second}, {"sweeps,retention=1h", time.Hour}, {"parks", time.Second}} {
		if got := (&run{relay: declare(tc.list).resolve(), sc: sc, mode: workload.Outbox}).checkerConfig().Retention; got != tc.want {
			t.Errorf("%s in %s: retention %s judged, want %s", tc.list, sc.Name, got, tc.want)
		}
	}
}

// TestIdentitiesOf checks the hint of a refused delivery identity: every
// place where the delivery does carry the staged id.
func TestIdentitiesOf(t *testing.T) {
	d := amqp.Delivery{MessageId: "e1", Headers: amqp.Table{"x-id": "e1", "x-other": "e2"}, Body: []byte(`{"event":"e1","n":1}`)}
	if got := strings.Join(identitiesOf(d, "e1"), ","); got != "message_id,header:x-id,body:event" {
		t.Errorf("identitiesOf = %s, want message_id,header:x-id,body:event", got)
	}
	if got := identitiesOf(d, "e9"); len(got) != 0 {
		t.Errorf("identitiesOf an id the delivery does not carry = %v", got)
	}
}
