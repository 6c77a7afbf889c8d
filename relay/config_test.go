package relay

import (
	"errors"
	"reflect"
	"slices"
	"strings"
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

// TestWithDefaults checks every default the fields document, and that a
// field set (even to a value Validate refuses) is kept.
func TestWithDefaults(t *testing.T) {
	c := Config{RelayID: "r"}.WithDefaults()
	want := Config{RelayID: "r", PollInterval: 5 * time.Second, BatchSize: 200, Lease: 120 * time.Second, MaxAttempts: 5,
		BackoffBase: 30 * time.Second, BackoffMax: time.Hour, Retention: 7 * 24 * time.Hour, SweepBatch: 500,
		SweepInterval: time.Minute, PublishTimeout: 10 * time.Second, StoreTimeout: 30 * time.Second, PublishWindow: 100}
	if c.Now == nil {
		t.Error("no default clock")
	}
	c.Now = nil
	if !reflect.DeepEqual(c, want) {
		t.Errorf("defaults\n%+v, want\n%+v", c, want)
	}
	set := Config{RelayID: "r", PollInterval: -1, BatchSize: -1, Lease: 1, MaxAttempts: 1, BackoffBase: 1, BackoffMax: 1,
		Retention: 1, SweepBatch: 1, SweepInterval: 1, PublishTimeout: 1, StoreTimeout: 1, PublishWindow: 1}
	got := set.WithDefaults()
	got.Now = nil
	if !reflect.DeepEqual(got, set) {
		t.Errorf("set fields changed: %+v, want %+v", got, set)
	}
}

// TestValidateBoundaries checks each rule of Validate at its boundary.
func TestValidateBoundaries(t *testing.T) {
	ok := func(c Config) Config { return c.WithDefaults() }
	fields := func(err error) [][]string {
		var out [][]string
		for _, e := range unwrapAll(err) {
			var fe *FieldError
			if errors.As(e, &fe) {
				out = append(out, fe.Fields)
			}
		}
		return out
	}
	long := string(make([]byte, 200))
	for _, tc := range []struct {
		name string
		c    Config
		want [][]string // nil: valid
	}{
		{"relay id of 200 bytes", ok(Config{RelayID: long}), nil},
		{"relay id of 201 bytes", ok(Config{RelayID: long + "x"}), [][]string{{"RelayID"}}},
		{"backoff max equal to its base", ok(Config{RelayID: "r", BackoffBase: time.Minute, BackoffMax: time.Minute}), nil},
		{"lease twice the publish timeout", ok(Config{RelayID: "r", Lease: 20 * time.Second, PublishTimeout: 10 * time.Second}), [][]string{{"Lease", "PublishTimeout"}}},
		{"lease just over twice the publish timeout", ok(Config{RelayID: "r", Lease: 20*time.Second + 1, PublishTimeout: 10 * time.Second}), nil},
		{"every field zero but the id", Config{RelayID: "r"}, [][]string{{"PollInterval"}, {"Lease"}, {"BackoffBase"}, {"BackoffMax"},
			{"Retention"}, {"SweepInterval"}, {"PublishTimeout"}, {"StoreTimeout"}, {"BatchSize"}, {"MaxAttempts"}, {"SweepBatch"}, {"PublishWindow"}}},
		{"smallest positive values", Config{RelayID: "r", PollInterval: 1, Lease: 3, BackoffBase: 1, BackoffMax: 1, Retention: 1, SweepInterval: 1,
			PublishTimeout: 1, StoreTimeout: 1, BatchSize: 1, MaxAttempts: 1, SweepBatch: 1, PublishWindow: 1}, nil},
	} {
		if got := fields(tc.c.Validate()); !slices.EqualFunc(got, tc.want, func(a, b []string) bool { return slices.Equal(a, b) }) {
			t.Errorf("%s: Validate reports %v, want %v", tc.name, got, tc.want)
		}
	}
}

// unwrapAll flattens errors.Join.
func unwrapAll(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// TestValidateZeroLeaseSaysSoOnce: a zero lease is reported as a lease
// that must be positive, not also as one shorter than twice the publish
// timeout.
func TestValidateZeroLeaseSaysSoOnce(t *testing.T) {
	c := Config{RelayID: "r"}.WithDefaults()
	c.Lease = 0
	err := c.Validate()
	if err == nil || !strings.Contains(err.Error(), "Lease must be positive") {
		t.Fatalf("Validate with a zero lease = %v", err)
	}
	if strings.Contains(err.Error(), "twice") {
		t.Errorf("a zero lease is also reported against the publish timeout: %v", err)
	}
}

// TestClassZeroIsNoClass: the zero Class is no class of failure, so that
// an unclassified failure is never taken for one.
func TestClassZeroIsNoClass(t *testing.T) {
	var zero Class
	for _, c := range []Class{ClassBroker, ClassRow, ClassPoison} {
		if zero == c {
			t.Errorf("the zero Class is %v", c)
		}
	}
	if got := zero.String(); got != "Class(0)" {
		t.Errorf("zero Class prints %q", got)
	}
}
