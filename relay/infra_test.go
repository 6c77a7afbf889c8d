package relay_test

import (
	"context"
	"testing"
	"time"

	"github.com/outboxlab/outboxlab/chaos"
	"github.com/outboxlab/outboxlab/testenv"
)

// infra is the shared infrastructure of the integration tests.
type infra struct {
	DatabaseURL string
	AMQPURL     string
}

// shared is the package's one environment.
var shared testenv.Shared

// testEnv starts the package's one environment on first use (the tests
// of this package run one at a time and share it), or skips: under -short,
// and when no Docker engine answers unless OUTBOXLAB_REQUIRE_DOCKER is set.
func testEnv(t testing.TB) *testenv.Env {
	t.Helper()
	return shared.Get(t)
}

// sharedEnv returns the URLs of the environment that bypass toxiproxy.
func sharedEnv(t testing.TB) infra {
	t.Helper()
	e := testEnv(t)
	return infra{DatabaseURL: e.DirectDatabaseURL(), AMQPURL: e.DirectAMQPURL()}
}

// sharedBrokerLink returns the environment's relay->broker link. Its proxy
// is healed (enabled, no toxics) when the test ends.
func sharedBrokerLink(t testing.TB) *brokerLink {
	t.Helper()
	e := testEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l, err := chaos.LinkByName(ctx, e.ToxiproxyClient(), testenv.LinkRelayBroker, "relay->broker")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p, err := e.Proxy(testenv.LinkRelayBroker)
		if err != nil {
			t.Errorf("healing relay->broker: %v", err)
			return
		}
		toxics, _ := p.Toxics()
		for _, tx := range toxics {
			_ = p.RemoveToxic(tx.Name)
		}
		if !p.Enabled {
			if err := p.Enable(); err != nil {
				t.Errorf("healing relay->broker: %v", err)
			}
		}
	})
	return &brokerLink{URL: e.AMQPURL(testenv.LinkRelayBroker), Link: l}
}
