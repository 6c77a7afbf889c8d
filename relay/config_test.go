package relay

import (
	"errors"
	"slices"
	"testing"
	"time"
)

// TestValidateNamesTheFields checks that every problem Validate reports
// carries the Config fields it is about, so that cmd/relay can name the
// variables a user set.
func TestValidateNamesTheFields(t *testing.T) {
	for _, tc := range []struct {
		name   string
		c      Config
		fields []string
	}{
		{"no relay id", Config{}, []string{"RelayID"}},
		{"lease too short", Config{RelayID: "r", Lease: time.Second, PublishTimeout: time.Second}, []string{"Lease", "PublishTimeout"}},
		{"backoff inverted", Config{RelayID: "r", BackoffBase: time.Hour, BackoffMax: time.Minute}, []string{"BackoffMax", "BackoffBase"}},
		{"negative batch", Config{RelayID: "r", BatchSize: -1}, []string{"BatchSize"}},
	} {
		err := tc.c.WithDefaults().Validate()
		var fe *FieldError
		if !errors.As(err, &fe) || !slices.Equal(fe.Fields, tc.fields) {
			t.Errorf("%s: Validate = %v (%#v), want a FieldError about %v", tc.name, err, fe, tc.fields)
		}
	}
	if err := (Config{RelayID: "r"}).WithDefaults().Validate(); err != nil {
		t.Errorf("defaults: %v", err)
	}
}
