package relay

import (
	"errors"
	"fmt"
	"time"
)

// Config configures a relay. The zero value of every field but RelayID
// takes the default documented on it; Validate reports what is wrong.
type Config struct {
	// RelayID names this replica in locked_by. Required, and unique among
	// the replicas of one table.
	RelayID string
	// PollInterval is the longest sleep between two ticks. Default 5 s.
	PollInterval time.Duration
	// BatchSize is how many rows one claim leases. Default 200, twice the
	// default PublishWindow: a drain then sends half the claims and marks
	// of batches of 100 for the same rows, and the window still fills from
	// one claim.
	BatchSize int
	// Lease is how long a claim holds its rows. Default 120 s. It must
	// outlast publishing a whole batch.
	Lease time.Duration
	// MaxAttempts parks a row after this many row-level failures. Default 5.
	MaxAttempts int
	// BackoffBase and BackoffMax bound the retry delay
	// min(2^attempts x BackoffBase, BackoffMax). Defaults 30 s and 1 h.
	BackoffBase time.Duration
	BackoffMax  time.Duration
	// Retention keeps processed rows this long before the sweep deletes
	// them. Default 7 days.
	Retention time.Duration
	// SweepBatch is how many rows one sweep statement deletes. Default 500.
	SweepBatch int
	// SweepInterval is how often the sweep runs. Default 1 minute.
	SweepInterval time.Duration
	// PublishTimeout bounds one publish and the wait for its confirm.
	// Publishes that start within a hundredth of it of one another share
	// one deadline, the first one's, so a publish may get up to 1% less.
	// Default 10 s.
	PublishTimeout time.Duration
	// StoreTimeout bounds one store call. Default 30 s.
	StoreTimeout time.Duration
	// PublishWindow is how many publishes may await their confirms at once.
	// Default 100.
	PublishWindow int
	// Now is the process clock, used only for logs, metrics and sleeping,
	// never for leases. Default time.Now.
	Now func() time.Time
}

// Defaults of Config.
const (
	DefaultPollInterval   = 5 * time.Second
	DefaultBatchSize      = 200
	DefaultLease          = 120 * time.Second
	DefaultMaxAttempts    = 5
	DefaultBackoffBase    = 30 * time.Second
	DefaultBackoffMax     = time.Hour
	DefaultRetention      = 7 * 24 * time.Hour
	DefaultSweepBatch     = 500
	DefaultSweepInterval  = time.Minute
	DefaultPublishTimeout = 10 * time.Second
	DefaultStoreTimeout   = 30 * time.Second
	DefaultPublishWindow  = 100
)

// WithDefaults returns c with every unset field set to its default.
func (c Config) WithDefaults() Config {
	set := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	seti := func(n *int, v int) {
		if *n == 0 {
			*n = v
		}
	}
	set(&c.PollInterval, DefaultPollInterval)
	seti(&c.BatchSize, DefaultBatchSize)
	set(&c.Lease, DefaultLease)
	seti(&c.MaxAttempts, DefaultMaxAttempts)
	set(&c.BackoffBase, DefaultBackoffBase)
	set(&c.BackoffMax, DefaultBackoffMax)
	set(&c.Retention, DefaultRetention)
	seti(&c.SweepBatch, DefaultSweepBatch)
	set(&c.SweepInterval, DefaultSweepInterval)
	set(&c.PublishTimeout, DefaultPublishTimeout)
	set(&c.StoreTimeout, DefaultStoreTimeout)
	seti(&c.PublishWindow, DefaultPublishWindow)
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// FieldError is one problem Validate found, with the Config fields it is
// about (two for a rule that ties fields together), so that a caller that
// reads them from elsewhere (flags, environment variables) can name the
// settings its user gave.
type FieldError struct {
	// Fields are the names of the Config fields, e.g. "Lease".
	Fields []string
	Err    error
}

func (e *FieldError) Error() string { return e.Err.Error() }
func (e *FieldError) Unwrap() error { return e.Err }

// Validate reports every problem with c (after defaults), joined; each is
// a *FieldError.
func (c Config) Validate() error {
	var errs []error
	bad := func(fields []string, format string, args ...any) {
		errs = append(errs, &FieldError{Fields: fields, Err: fmt.Errorf(format, args...)})
	}
	if c.RelayID == "" {
		bad([]string{"RelayID"}, "RelayID is required")
	} else if len(c.RelayID) > 200 {
		bad([]string{"RelayID"}, "RelayID is longer than 200 bytes")
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"PollInterval", c.PollInterval}, {"Lease", c.Lease}, {"BackoffBase", c.BackoffBase},
		{"BackoffMax", c.BackoffMax}, {"Retention", c.Retention}, {"SweepInterval", c.SweepInterval},
		{"PublishTimeout", c.PublishTimeout}, {"StoreTimeout", c.StoreTimeout},
	} {
		if d.v <= 0 {
			bad([]string{d.name}, "%s must be positive, got %s", d.name, d.v)
		}
	}
	for _, n := range []struct {
		name string
		v    int
	}{{"BatchSize", c.BatchSize}, {"MaxAttempts", c.MaxAttempts}, {"SweepBatch", c.SweepBatch}, {"PublishWindow", c.PublishWindow}} {
		if n.v <= 0 {
			bad([]string{n.name}, "%s must be positive, got %d", n.name, n.v)
		}
	}
	if c.BackoffMax < c.BackoffBase {
		bad([]string{"BackoffMax", "BackoffBase"}, "BackoffMax (%s) is shorter than BackoffBase (%s)", c.BackoffMax, c.BackoffBase)
	}
	if c.Lease > 0 && c.PublishTimeout > 0 && c.Lease <= 2*c.PublishTimeout {
		bad([]string{"Lease", "PublishTimeout"}, "Lease (%s) must be longer than twice PublishTimeout (%s): a claim must outlast its publishes", c.Lease, c.PublishTimeout)
	}
	return errors.Join(errs...)
}

// Policy returns the retry policy of c.
func (c Config) Policy() RetryPolicy {
	return RetryPolicy{MaxAttempts: c.MaxAttempts, BackoffBase: c.BackoffBase, BackoffMax: c.BackoffMax}
}
