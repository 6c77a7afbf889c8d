package scenarios

import (
	"strings"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
)

func TestCapabilitiesRoundTrip(t *testing.T) {
	for _, list := range []string{"none", "parks", "fenced,sweeps", "parks,fenced,sweeps,failpoints", "failpoints,records", "fenced,lease=20s", "parks,attempts=5", "parks,fenced,lease=4s,attempts=3,backoff=100ms/2s"} {
		u, err := RelayUnderTest{Image: "x"}.WithCapabilities(list)
		if err != nil {
			t.Fatalf("%s: %v", list, err)
		}
		if got := u.CapabilitiesString(); got != list {
			t.Errorf("WithCapabilities(%q).CapabilitiesString() = %q", list, got)
		}
	}
	u, _ := RelayUnderTest{Image: "x"}.WithCapabilities("parks, failpoints")
	if !u.Features.Parks || u.Features.Fenced || u.Features.Sweeps || !u.Failpoints {
		t.Errorf("parks, failpoints declared %+v, failpoints %v", u.Features, u.Failpoints)
	}
	if _, err := (RelayUnderTest{}).WithCapabilities("fenced,lease=soon"); err == nil || !strings.Contains(err.Error(), "duration") {
		t.Errorf("a bad lease: %v", err)
	}
	for _, bad := range []string{"attempts=0", "attempts=three", "backoff=2s", "backoff=2s/1s", "backoff=0s/1s", "backoff=x/1s"} {
		if _, err := (RelayUnderTest{}).WithCapabilities(bad); err == nil {
			t.Errorf("WithCapabilities(%q): no error", bad)
		}
	}
	for _, bad := range []string{"parks,", "teleports", ""} {
		if _, err := (RelayUnderTest{}).WithCapabilities(bad); err == nil || !strings.Contains(err.Error(), "parks, fenced, sweeps, failpoints, records") {
			t.Errorf("WithCapabilities(%q) = %v, want an error listing the capabilities", bad, err)
		}
	}
}

// TestOnlyDeclaredLimitsAreJudged checks that the checkers judge a relay's
// attempt count and retry spacing only by what it declares: a relay that
// declares no attempt limit (one that parks after its own 5, say) gets
// none, never the limit the harness gives our relay; ours declares its
// own, as does a relay that says attempts=5.
func TestOnlyDeclaredLimitsAreJudged(t *testing.T) {
	cfgOf := func(u RelayUnderTest) (int, bool) {
		r := &run{relay: u.resolve(), recordsDir: "records"}
		cfg := r.checkerConfig()
		return cfg.MaxAttempts, cfg.Backoff != nil
	}
	other, err := RelayUnderTest{Command: []string{"./their-relay"}}.WithCapabilities("parks,fenced,records")
	if err != nil {
		t.Fatal(err)
	}
	if n, backoff := cfgOf(other); n != 0 || backoff {
		t.Errorf("a relay that declares no limit and no backoff is judged by attempt limit %d, backoff %v; want neither", n, backoff)
	}
	five, err := other.WithCapabilities("parks,fenced,records,attempts=5")
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := cfgOf(five); n != 5 {
		t.Errorf("attempts=5 declared, judged by limit %d", n)
	}
	if n, backoff := cfgOf(Ours()); n != MaxAttempts || !backoff {
		t.Errorf("ours is judged by limit %d, backoff %v; want %d and its backoff", n, backoff, MaxAttempts)
	}
	if n, backoff := cfgOf(RelayUnderTest{Mutants: true}); n != MaxAttempts || !backoff {
		t.Errorf("a mutant of ours is judged by limit %d, backoff %v; want %d and its backoff", n, backoff, MaxAttempts)
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
