package scenarios

import (
	"strings"
	"testing"
)

func TestCapabilitiesRoundTrip(t *testing.T) {
	for _, list := range []string{"none", "parks", "fenced,sweeps", "parks,fenced,sweeps,failpoints", "failpoints,records", "fenced,lease=20s"} {
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
	for _, bad := range []string{"parks,", "teleports", ""} {
		if _, err := (RelayUnderTest{}).WithCapabilities(bad); err == nil || !strings.Contains(err.Error(), "parks, fenced, sweeps, failpoints, records") {
			t.Errorf("WithCapabilities(%q) = %v, want an error listing the capabilities", bad, err)
		}
	}
}
