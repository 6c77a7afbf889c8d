package bench

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestSoakOptions: the zero value is a million events through our relay;
// an unknown contender and negative figures are refused before anything
// starts.
func TestSoakOptions(t *testing.T) {
	o, err := SoakOptions{}.withDefaults()
	if err != nil || o.Contender != SoakRelay || o.Events != DefaultSoakEvents || o.Backlog != DefaultSoakBacklog || o.Every != 5*time.Second {
		t.Errorf("defaults %+v, %v", o, err)
	}
	for _, bad := range []SoakOptions{{Contender: "kafka"}, {Events: -1}, {Timeout: -time.Second}} {
		if _, err := bad.withDefaults(); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
	if _, err := Soak(context.Background(), nil, SoakOptions{Contender: "kafka"}); err == nil || !strings.Contains(err.Error(), "kafka") {
		t.Errorf("Soak with an unknown contender: %v", err)
	}
}
