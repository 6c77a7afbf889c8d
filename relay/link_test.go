package relay_test

import (
	"net/url"
	"os"
	"strings"
	"testing"

	toxiproxy "github.com/Shopify/toxiproxy/v2/client"

	"github.com/outboxlab/outboxlab/chaos"
)

// brokerLink is the relay's link to the broker through a toxiproxy proxy.
type brokerLink struct {
	// URL reaches the broker through the proxy.
	URL  string
	Link *chaos.Link
}

// newBrokerLink returns a proxied link to the test broker.
func newBrokerLink(t testing.TB) *brokerLink {
	t.Helper()
	direct := baseAMQPURL(t)
	api := os.Getenv("OUTBOX_TEST_TOXIPROXY_URL")
	if api == "" {
		return sharedBrokerLink(t)
	}
	u, err := url.Parse(direct)
	if err != nil {
		t.Fatal(err)
	}
	c := toxiproxy.NewClient(api)
	name := strings.Trim(nonIdent.ReplaceAllString(strings.ToLower(t.Name()), "_"), "_")
	if old, err := c.Proxy(name); err == nil {
		_ = old.Delete()
	}
	p, err := c.CreateProxy(name, "127.0.0.1:0", u.Host)
	if err != nil {
		t.Fatalf("creating proxy: %v", err)
	}
	t.Cleanup(func() { _ = p.Delete() })
	u.Host = p.Listen
	return &brokerLink{URL: u.String(), Link: chaos.NewLink("relay->broker", p)}
}
