package chaos

import (
	"slices"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2/client"

	"github.com/outboxlab/outboxlab/history"
)

// TestLinkFaultsCarryTheLinksClassAndTargets checks that a link's faults
// are classified and scoped by what the link declares, never by its name.
func TestLinkFaultsCarryTheLinksClassAndTargets(t *testing.T) {
	p := &toxiproxy.Proxy{Name: "relay-broker"}
	plain := NewLink("relay->broker", p)
	if f := Ref(Down(plain)); f.Class != history.ClassOther || len(f.Targets) != 0 {
		t.Errorf("an undeclared link's fault is %+v: want class other and no targets, whatever its name", f)
	}
	l := NewLink("x", p).WithClass(history.ClassBroker).WithTargets("relay-a", "relay-b")
	for _, f := range []Fault{Down(l), Latency(l, Downstream, time.Second, 0), Timeout(l, Upstream, 0)} {
		ref := Ref(f)
		if ref.Class != history.ClassBroker || !slices.Equal(ref.Targets, []string{"relay-a", "relay-b"}) || ref.Name != f.Name() || ref.Kind != f.Kind() {
			t.Errorf("%s: Ref = %+v, want the link's class and targets", f.Name(), ref)
		}
	}
}
