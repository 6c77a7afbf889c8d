package bench

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/outboxlab/outboxlab/outbox"
	"github.com/outboxlab/outboxlab/relay"
)

// Options configures Run. The zero value runs the whole benchmark with its
// defaults.
type Options struct {
	// Events is the backlog N every drain starts from. Default 100,000.
	Events int
	// PayloadBytes is the approximate size of each JSON payload. Default
	// 256.
	PayloadBytes int
	// Seed makes the payloads and ids. Default 1.
	Seed uint64
	// Relay is the configuration of every replica (RelayID is set per
	// replica); its zero fields take the relay's defaults. The raw
	// publisher uses the same PublishWindow.
	Relay relay.Config
	// LatencyDuration is how long the producers run at LatencyRate in
	// each latency run: the event count is fixed from it and the measured
	// capacity, the same for every mode. Producers that fall behind stop
	// at twice this. Default 5 s.
	LatencyDuration time.Duration
	// LatencyWarmup is how long each latency run sends at its rate before
	// it starts timing: the events of the warm-up are delivered and
	// checked like the rest, but their latencies, which hold connections
	// being opened and statements being prepared, are left out, so that
	// the figures are those of the steady state. Default 1 s.
	LatencyWarmup time.Duration
	// LatencyRate is the events per second the producers of every latency
	// run are scheduled at. Default (0): half the rate at which one replica
	// drained the backlog.
	LatencyRate float64
	// Producers is how many connections stage events in the latency runs.
	// Default 16.
	Producers int
	// DrainTimeout bounds the raw publishing and each relay drain; when it
	// runs out, the rate is over what was confirmed until then and
	// result.Result.Notes says so. Every drain keeps the whole backlog
	// staged, so the rate is that of draining from a backlog of Events.
	// Default 20 s, which keeps the whole run within five minutes on a
	// two-core machine and the phases close together in time.
	DrainTimeout time.Duration
	// WatermillTimeout bounds the watermill drain; when it runs out, the
	// rate is what watermill forwarded until then and result.Result.Notes
	// says so. Default 20 s: the forwarder handles one message at a time,
	// so its rate is steady from the start.
	WatermillTimeout time.Duration
	// SkipWatermill and SkipLatency leave out those phases.
	SkipWatermill, SkipLatency bool
	// IsolateBroker runs the benchmark in result.LayoutIsolated: RabbitMQ
	// on the first core, PostgreSQL and this process on the others. It
	// needs two cores and the services as containers of this machine.
	IsolateBroker bool
	// ProfileDir receives relay-cpu.pprof, the CPU profile of the process
	// during the one-replica drain. Default: a new directory under the
	// system's temporary directory.
	ProfileDir string
	// Schema, Exchange and Queue are where the run works; all are dropped
	// first and removed at the end. Defaults "outboxlab_bench",
	// "outboxlab.bench" and "outboxlab.bench".
	Schema, Exchange, Queue string
	// Logf receives progress lines; nil discards them.
	Logf func(format string, args ...any)
}

// Defaults of Options.
const (
	DefaultEvents           = 100_000
	DefaultPayloadBytes     = 256
	DefaultLatencyDuration  = 5 * time.Second
	DefaultLatencyWarmup    = time.Second
	DefaultProducers        = 16
	DefaultDrainTimeout     = 20 * time.Second
	DefaultWatermillTimeout = 20 * time.Second
)

func (o Options) withDefaults() Options {
	if o.Events == 0 {
		o.Events = DefaultEvents
	}
	if o.PayloadBytes == 0 {
		o.PayloadBytes = DefaultPayloadBytes
	}
	if o.Seed == 0 {
		o.Seed = 1
	}
	o.Relay = o.Relay.WithDefaults()
	if o.LatencyDuration == 0 {
		o.LatencyDuration = DefaultLatencyDuration
	}
	if o.Producers == 0 {
		o.Producers = DefaultProducers
	}
	if o.LatencyWarmup == 0 {
		o.LatencyWarmup = DefaultLatencyWarmup
	}
	if o.DrainTimeout == 0 {
		o.DrainTimeout = DefaultDrainTimeout
	}
	if o.WatermillTimeout == 0 {
		o.WatermillTimeout = DefaultWatermillTimeout
	}
	if o.Schema == "" {
		o.Schema = "outboxlab_bench"
	}
	if o.Exchange == "" {
		o.Exchange = "outboxlab.bench"
	}
	if o.Queue == "" {
		o.Queue = "outboxlab.bench"
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	return o
}

// Validate reports what is wrong with o after defaults.
func (o Options) Validate() error {
	o = o.withDefaults()
	var errs []error
	if o.Events < 1 {
		errs = append(errs, fmt.Errorf("Events must be positive, got %d", o.Events))
	}
	if o.PayloadBytes < 1 {
		errs = append(errs, fmt.Errorf("PayloadBytes must be positive, got %d", o.PayloadBytes))
	}
	if o.Producers < 1 {
		errs = append(errs, fmt.Errorf("Producers must be positive, got %d", o.Producers))
	}
	if o.LatencyRate < 0 || math.IsNaN(o.LatencyRate) || math.IsInf(o.LatencyRate, 0) {
		errs = append(errs, fmt.Errorf("LatencyRate must be positive or 0 (half the drain rate), got %v", o.LatencyRate))
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"LatencyDuration", o.LatencyDuration}, {"LatencyWarmup", o.LatencyWarmup}, {"DrainTimeout", o.DrainTimeout}, {"WatermillTimeout", o.WatermillTimeout}} {
		if d.v <= 0 {
			errs = append(errs, fmt.Errorf("%s must be positive, got %s", d.name, d.v))
		}
	}
	cfg := o.Relay
	cfg.RelayID = "bench"
	if err := cfg.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("Relay: %w", err))
	}
	if _, err := outbox.ParseTable(o.Schema + ".outbox"); err != nil {
		errs = append(errs, fmt.Errorf("Schema: %w", err))
	}
	if o.Exchange == "" || o.Queue == "" {
		errs = append(errs, errors.New("Exchange and Queue must not be empty"))
	}
	return errors.Join(errs...)
}
