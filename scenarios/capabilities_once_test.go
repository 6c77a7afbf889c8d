package scenarios

import (
	"strings"
	"testing"
)

func TestCheckCapabilitiesOnce(t *testing.T) {
	for _, list := range []string{"none", "parks,fenced,lease=20s", "parks, fenced", ""} {
		if err := CheckCapabilitiesOnce(list); err != nil {
			t.Errorf("CheckCapabilitiesOnce(%q) = %v", list, err)
		}
	}
	for list, name := range map[string]string{
		"lease=1ns,lease=2s":         "lease",
		"parks,fenced,parks":         "parks",
		"fenced, lease=3s ,lease=3s": "lease",
	} {
		err := CheckCapabilitiesOnce(list)
		if err == nil || !strings.Contains(err.Error(), name+" is given twice") {
			t.Errorf("CheckCapabilitiesOnce(%q) = %v, want %s named twice", list, err, name)
		}
	}
}

func TestParseTargetRefusesACapabilityGivenTwice(t *testing.T) {
	_, err := ParseTarget([]byte("relay: {image: a}\ncapabilities: fenced,lease=1ns,lease=2s\noutbox: {migrate: x, stage: x, rows: x}"), ".")
	if err == nil || !strings.Contains(err.Error(), "lease is given twice") {
		t.Errorf("a target whose capabilities give lease twice: error %v", err)
	}
}
