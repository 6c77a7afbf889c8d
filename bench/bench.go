// Package bench measures the production relay side by side with the
// broker's own limit and with a peer relay, on the same PostgreSQL and
// RabbitMQ, in one run:
//
//  1. raw: amqp091 publishing the events straight from memory with
//     asynchronous publisher confirms, as many in flight as the relay's
//     publish window: the broker's limit for this workload. It runs before
//     and after the relay's drains (raw-after), and the higher rate is the
//     limit the relay is compared with;
//  2. relay: the production relay (relay.New over relay.PGStore and
//     relay.AMQPPublisher, in this process) draining a backlog of N staged
//     events, with one replica and with two, each replica with its own
//     pool and broker connection;
//  3. watermill: watermill's SQL forwarder (components/forwarder over
//     watermill-sql and watermill-amqp) draining the same backlog staged
//     through its own SQL publisher;
//  4. latency: one replica at half the measured capacity, polling only and
//     woken by LISTEN/NOTIFY: COMMIT -> confirmed publish and COMMIT ->
//     consumer delivery, p50, p99 and max; and, for comparison, with the
//     NOTIFY sent after the staging COMMIT instead of inside it.
//
// Every contender publishes the same payloads to the same exchange and
// queue. Each drain starts from the whole backlog and is bounded in time
// (Options.DrainTimeout); its rate counts the messages confirmed within
// the bound, and the queue must then hold every confirmed message exactly
// once. Throughput is stated as ratios measured side by side: machines are
// noisy and absolute figures move from run to run.
package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxlab/outboxlab/bench/goal"
	"github.com/outboxlab/outboxlab/outbox"
	"github.com/outboxlab/outboxlab/relay"
	"github.com/outboxlab/outboxlab/testenv"
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
	// Result.Notes says so. Every drain keeps the whole backlog staged, so
	// the rate is that of draining from a backlog of Events. Default 20 s,
	// which keeps the whole run within five minutes on a two-core machine
	// and the phases close together in time.
	DrainTimeout time.Duration
	// WatermillTimeout bounds the watermill drain; when it runs out, the
	// rate is what watermill forwarded until then and Result.Notes says so.
	// Default 20 s: the forwarder handles one message at a time, so its
	// rate is steady from the start.
	WatermillTimeout time.Duration
	// SkipWatermill and SkipLatency leave out those phases.
	SkipWatermill, SkipLatency bool
	// IsolateBroker runs the benchmark in LayoutIsolated: RabbitMQ on the
	// first core, PostgreSQL and this process on the others. It needs
	// two cores and the services as containers of this machine.
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

// Result is what one run measured. The first fields are the summary the
// command prints with --json; the rest are the details behind them.
type Result struct {
	Events              int     `json:"events"`
	RawMsgsPerSec       float64 `json:"raw_msgs_per_sec"`
	RelayMsgsPerSec     float64 `json:"relay_msgs_per_sec"`
	Relay2MsgsPerSec    float64 `json:"relay2_msgs_per_sec"`
	WatermillMsgsPerSec float64 `json:"watermill_msgs_per_sec"`
	// RatioToRaw is RelayMsgsPerSec / RawMsgsPerSec (one replica).
	RatioToRaw float64 `json:"ratio_to_raw"`
	// RatioToWatermill is RelayMsgsPerSec / WatermillMsgsPerSec (one
	// replica against one forwarder).
	RatioToWatermill float64 `json:"ratio_to_watermill"`
	// RawOverWatermill is RawMsgsPerSec / WatermillMsgsPerSec: the ratio
	// to watermill of a relay as fast as publishing from memory, so the
	// most any relay through this broker reaches on this machine. Below
	// the watermill goal, the goal is out of reach here, whatever the
	// relay does.
	RawOverWatermill float64 `json:"raw_over_watermill"`
	// The latency fields are COMMIT -> confirmed publish at the latency
	// runs' rate (LatencyRateText).
	LatencyPollP50Ms   float64 `json:"latency_poll_p50_ms"`
	LatencyPollP99Ms   float64 `json:"latency_poll_p99_ms"`
	LatencyNotifyP50Ms float64 `json:"latency_notify_p50_ms"`
	LatencyNotifyP99Ms float64 `json:"latency_notify_p99_ms"`

	// LatencyPollMaxMs and LatencyNotifyMaxMs complete the summary.
	LatencyPollMaxMs   float64 `json:"latency_poll_max_ms"`
	LatencyNotifyMaxMs float64 `json:"latency_notify_max_ms"`
	// LatencyBrokerP50Ms and LatencyBrokerP99Ms are publish -> confirm of
	// the same messages published from memory at the rate the NOTIFY run
	// reached: the broker's own share, which no relay can beat.
	LatencyBrokerP50Ms float64 `json:"latency_broker_p50_ms"`
	LatencyBrokerP99Ms float64 `json:"latency_broker_p99_ms"`
	// LatencyInlineP99Ms is commit -> confirm with no relay, each producer
	// publishing its event as its COMMIT returns, at the notify run's
	// commits (the "inline" mode): the floor of any relay's at this rate
	// on this machine, the database's load included. NotifyOverInlineP99
	// is LatencyNotifyP99Ms over it: what the relay adds to that floor.
	LatencyInlineP99Ms  float64 `json:"latency_inline_p99_ms"`
	NotifyOverInlineP99 float64 `json:"notify_p99_over_inline_p99"`
	// InlineOverBrokerP99 is LatencyInlineP99Ms over LatencyBrokerP99Ms:
	// above the NOTIFY goal's bound, no relay at all meets it at these
	// commits on this machine.
	InlineOverBrokerP99 float64 `json:"inline_p99_over_broker_p99"`
	// LatencyClaimCallP99Ms is the p99, over the notify run's events, of
	// the duration of the claim statement that leased each one's row
	// (LatencyStages.ClaimCall), and ClaimCallOverBrokerP99 it over
	// LatencyBrokerP99Ms: every event's commit -> confirm holds its
	// claim, so above the NOTIFY goal's bound no relay whose claims take
	// as long as these, leasing rows before it publishes them, meets the
	// goal at these commits on this machine.
	LatencyClaimCallP99Ms  float64 `json:"latency_claim_call_p99_ms"`
	ClaimCallOverBrokerP99 float64 `json:"claim_call_p99_over_broker_p99"`
	// LatencyKeyedP99Ms is commit -> confirm of the keyed lease run at the
	// notify run's commits: no relay, each row leased by its key in one
	// statement after its NOTIFY and then published (keyedLeaser), the
	// three hops of a relay that leases a row after the NOTIFY and before
	// it publishes it, and nothing else. KeyedOverBrokerP99 is it over
	// LatencyBrokerP99Ms: above the NOTIFY goal's bound, no such relay
	// meets the goal at these commits on this machine. NotifyOverKeyedP99
	// is LatencyNotifyP99Ms over it: how far the relay is from that floor.
	LatencyKeyedP99Ms  float64 `json:"latency_keyed_p99_ms"`
	KeyedOverBrokerP99 float64 `json:"keyed_p99_over_broker_p99"`
	NotifyOverKeyedP99 float64 `json:"notify_p99_over_keyed_p99"`
	// NotifyRelayStatementMeanMs is the mean duration of the notify run's
	// claims and marks as the relay timed them, and
	// NotifyRelayStatementCPUWaitMs how long, per statement, the
	// PostgreSQL processes serving them waited runnable for a core
	// (Latency.RelayStatementCPUWaitMs); NotifyBusyCores is how many
	// cores the machine kept busy meanwhile. Where the wait is most of
	// the statement, the relay's statements are slowed by the cores the
	// run shares, not by their own work.
	NotifyRelayStatementMeanMs    float64 `json:"notify_relay_statement_mean_ms"`
	NotifyRelayStatementCPUWaitMs float64 `json:"notify_relay_statement_cpu_wait_ms"`
	NotifyBusyCores               float64 `json:"notify_busy_cores"`
	// CPUMicrosPerMsgRawProcess is the CPU time of this process per
	// message in the raw phase that set the broker's limit: what amqp091
	// publishing alone costs, a floor of the relay's own share.
	CPUMicrosPerMsgRawProcess float64 `json:"cpu_us_per_msg_raw_process"`
	// Ratio2ToRaw is Relay2MsgsPerSec / RawMsgsPerSec.
	Ratio2ToRaw float64 `json:"relay2_ratio_to_raw"`
	// NotifyOverBrokerP99 is LatencyNotifyP99Ms / LatencyBrokerP99Ms: what
	// the relay's tail is against the broker's own at the same rate.
	NotifyOverBrokerP99 float64 `json:"notify_p99_over_broker_p99"`
	// CPUMicrosPerMsgRelayPlusDB is the CPU time of this process (the
	// relay, with the harness's little share) and PostgreSQL per message
	// of the one-replica drain; CPUMicrosPerMsgBroker is RabbitMQ's in the
	// same drain, and CPURelayPlusDBOverBroker the first over the second.
	CPUMicrosPerMsgRelayPlusDB float64 `json:"cpu_us_per_msg_relay_plus_db"`
	CPUMicrosPerMsgBroker      float64 `json:"cpu_us_per_msg_broker"`
	CPURelayPlusDBOverBroker   float64 `json:"cpu_relay_plus_db_over_broker"`
	// CPUCeilingRatioToRaw is the CPU per message of the raw phase that
	// set the broker's limit over relay-1's, and CPUCeiling2RatioToRaw
	// the same over relay-2's: the ratio to raw that the machine's cores
	// allow a relay with that cost when they are the limit of both phases
	// (a phase's rate is then its busy cores over its CPU per message).
	// RatioToRaw over its ceiling says how close the relay came to it.
	CPUCeilingRatioToRaw  float64 `json:"cpu_ceiling_ratio_to_raw"`
	CPUCeiling2RatioToRaw float64 `json:"cpu_ceiling_relay2_ratio_to_raw"`
	// CPUBudgetRelayPlusDB is the CPU per message relay-1's process and
	// PostgreSQL may take, RabbitMQ's share in relay-1 unchanged, for its
	// CPU ceiling to reach GoalRatioToRaw: what the relay-1 goal asks of
	// the relay on a machine whose cores are the limit.
	CPUBudgetRelayPlusDB float64 `json:"cpu_budget_us_per_msg_relay_plus_db"`
	// CoresBound is true when every phase of the throughput comparison
	// (raw, relay-1, relay-2, raw-after) kept the cores busy, less than
	// coresBoundIdle of them idle on average: the ceilings then hold.
	CoresBound bool `json:"cores_bound"`
	// BrokerBusyRaw is how many cores RabbitMQ kept busy in the raw phase
	// that set the limit. BrokerBusyRatio is RabbitMQ's busy cores in
	// relay-1 over that, and BrokerCostRatio raw's RabbitMQ CPU per
	// message over relay-1's. Their product is RatioToRaw exactly (each
	// phase's rate is RabbitMQ's busy cores over its CPU per message);
	// where the broker is the limit (about a core busy in raw while cores
	// stay idle: its queue and channel run as a few Erlang processes),
	// they say how fully the relay kept the broker busy and how much
	// more work each of its messages gave the broker.
	BrokerBusyRaw   float64 `json:"broker_busy_raw"`
	BrokerBusyRatio float64 `json:"broker_busy_ratio"`
	BrokerCostRatio float64 `json:"broker_cost_ratio"`
	// Broker2BusyRatio and Broker2CostRatio are the same two factors of
	// Ratio2ToRaw, for the two-replica drain.
	Broker2BusyRatio float64 `json:"broker2_busy_ratio"`
	Broker2CostRatio float64 `json:"broker2_cost_ratio"`
	// RawSelfRatio is the slower raw phase's rate over the faster's
	// (goal.RawSelfRatio): raw publishing itself against the broker's
	// limit, the broker's own noise from one phase to the next.
	RawSelfRatio float64 `json:"raw_self_ratio"`
	// Raw2RatioToRaw is the raw-2 phase's rate (the backlog published
	// from memory over two connections at once, each with the relay's
	// window) over RawMsgsPerSec: relay-2 / raw of a two-replica relay as
	// fast as raw publishing, since each replica publishes on a
	// connection of its own. Below the relay-2 goal, no two-replica relay
	// meets it through this broker on this machine.
	Raw2RatioToRaw float64 `json:"raw2_ratio_to_raw"`

	// Phases are the drains in the order they ran.
	Phases []Phase `json:"phases"`
	// Latency holds the latency runs in full: poll, notify (the summary's
	// two), notify-after-commit and broker (publish -> confirm from memory,
	// no database: the floor).
	Latency []Latency `json:"latency,omitempty"`
	// Profile summarises the CPU profile of the one-replica drain.
	Profile *Profile `json:"profile,omitempty"`
	// ClaimPlan is EXPLAIN of the claim with the whole backlog pending;
	// ClaimUsesPendingIndex says whether it scans the partial index.
	ClaimPlan             string `json:"claim_plan"`
	ClaimUsesPendingIndex bool   `json:"claim_uses_pending_index"`
	// Hygiene is the one-replica table after its drain, after sweeping
	// every processed row, and after a VACUUM standing in for
	// autovacuum's next visit.
	Hygiene []TableStats `json:"hygiene,omitempty"`
	// Config is what the run used.
	Config RunConfig `json:"config"`
	// Notes say what a reader must know to read the figures.
	Notes []string `json:"notes,omitempty"`
	// Seconds is the run's wall time, setup included.
	Seconds float64 `json:"seconds"`
}

// RunConfig records the settings of a run.
type RunConfig struct {
	Events         int     `json:"events"`
	PayloadBytes   int     `json:"payload_bytes"`
	Seed           uint64  `json:"seed"`
	BatchSize      int     `json:"batch_size"`
	PublishWindow  int     `json:"publish_window"`
	PollIntervalMs float64 `json:"poll_interval_ms"`
	LatencyEvents  int     `json:"latency_events"`
	LatencyRate    float64 `json:"latency_rate"`
	// LatencyWarmupMs is how long each latency run sent before it started
	// timing (Options.LatencyWarmup).
	LatencyWarmupMs float64 `json:"latency_warmup_ms"`
	Producers       int     `json:"producers"`
	WatermillConfig string  `json:"watermill_config"`
	// Layout is LayoutShared or LayoutIsolated; Addressing how the
	// contenders reached the servers: at the containers' own addresses,
	// or through ports Docker publishes on the host (and its port proxy).
	Layout     string `json:"layout,omitempty"`
	Addressing string `json:"addressing,omitempty"`
}

// Phase is one drain of the backlog.
type Phase struct {
	// Name is raw, relay-1, relay-2, raw-after or watermill.
	Name string `json:"name"`
	// Events is how many messages the phase got confirmed within its
	// bound: N, or fewer when the bound ran out (Complete is false and
	// Result.Notes says so). The rate is over those.
	Events     int     `json:"events"`
	Complete   bool    `json:"complete"`
	Seconds    float64 `json:"seconds"`
	MsgsPerSec float64 `json:"msgs_per_sec"`
	// CPU is the CPU time spent during the phase, and CPUMicrosPerMsg the
	// part of it per message (process, PostgreSQL and RabbitMQ together,
	// as far as they are readable). When the machine's cores are the
	// limit, the ratio of two contenders' CPU per message bounds the ratio
	// of their rates.
	CPU             CPU     `json:"cpu"`
	CPUMicrosPerMsg float64 `json:"cpu_us_per_msg"`
	// LoadAverage is the machine's one-minute load average at the end of
	// the phase: above the number of cores, the contenders shared the
	// machine with other work and the figures are noisier.
	LoadAverage float64 `json:"load_average"`
	// QueueDepth is the queue's depth after the phase: every message
	// once, no more.
	QueueDepth int `json:"queue_depth"`
	// Breakdown says where the relay's replicas spent the drain.
	Breakdown *Breakdown `json:"breakdown,omitempty"`
	// Resources says how busy the machine's cores were during the phase,
	// and with what.
	Resources *Resources `json:"resources,omitempty"`
}

// Resources is how many of the machine's cores each party kept busy during
// a phase, on average (CPU seconds per wall second): this process,
// PostgreSQL, RabbitMQ, the rest of the machine (work that is not the
// benchmark's) and what stayed idle. With Idle near 0 the cores were the
// limit of the phase, and the parties' shares say who had them.
type Resources struct {
	Cores    int     `json:"cores"`
	Process  float64 `json:"process"`
	Postgres float64 `json:"postgres"`
	RabbitMQ float64 `json:"rabbitmq"`
	Other    float64 `json:"other"`
	Idle     float64 `json:"idle"`
	// DiskBusy is the share of the phase the busiest disk had I/O in
	// flight (near 1: the disk was the limit), and FlushesPerSec the
	// flushes the disks served per second: PostgreSQL's WAL and
	// RabbitMQ's message store both fsync on them.
	DiskBusy      float64 `json:"disk_busy"`
	FlushesPerSec float64 `json:"flushes_per_sec"`
	// ProcessWaiting, PostgresWaiting and RabbitMQWaiting are how many of
	// each party's threads waited, runnable, for a core on average (run
	// queue seconds per wall second), where the threads are readable: a
	// party kept waiting while cores stay idle on average had its work
	// land in bursts on cores the others held.
	ProcessWaiting  float64 `json:"process_waiting,omitempty"`
	PostgresWaiting float64 `json:"postgres_waiting,omitempty"`
	RabbitMQWaiting float64 `json:"rabbitmq_waiting,omitempty"`
}

// resourcesOf returns the Resources of a phase, or nil when the machine's
// CPU time could not be read.
func resourcesOf(c CPU, wall time.Duration) *Resources {
	if c.MachineSeconds == 0 || wall <= 0 {
		return nil
	}
	w := wall.Seconds()
	r := &Resources{Cores: runtime.NumCPU(), Process: c.ProcessSeconds / w, Postgres: c.PostgresSeconds / w, RabbitMQ: c.RabbitMQSeconds / w}
	r.Other = max(0, c.MachineSeconds/w-r.Process-r.Postgres-r.RabbitMQ)
	r.Idle = max(0, float64(r.Cores)-c.MachineSeconds/w)
	r.DiskBusy = min(1, c.DiskBusySeconds/w)
	r.FlushesPerSec = float64(c.DiskFlushes) / w
	r.ProcessWaiting, r.PostgresWaiting, r.RabbitMQWaiting = c.ProcessWaitSeconds/w, c.PostgresWaitSeconds/w, c.RabbitMQWaitSeconds/w
	return r
}

// TableStats describes an outbox table at one moment.
type TableStats struct {
	Moment string `json:"moment"`
	// LiveTuples and DeadTuples are counted by pgstattuple when the
	// database has it (Exact), and otherwise PostgreSQL's estimates from
	// pg_stat_user_tables, which lag and extrapolate.
	LiveTuples int64 `json:"live_tuples"`
	DeadTuples int64 `json:"dead_tuples"`
	Exact      bool  `json:"exact"`
	TableBytes int64 `json:"table_bytes"`
	IndexBytes int64 `json:"index_bytes"`
	Updates    int64 `json:"updates"`
	HOTUpdates int64 `json:"hot_updates"`
}

// Run runs the benchmark on env and returns what it measured. It fails
// when a contender loses, duplicates or fails to deliver a message: a
// throughput figure is only reported for a drain that delivered every
// event exactly once to the queue.
func Run(ctx context.Context, env Env, opts Options) (Result, error) {
	if err := opts.Validate(); err != nil {
		return Result{}, fmt.Errorf("bench options: %w", err)
	}
	o := opts.withDefaults()
	began := time.Now()
	res := Result{Events: o.Events}
	res.Config = RunConfig{
		Events: o.Events, PayloadBytes: o.PayloadBytes, Seed: o.Seed,
		BatchSize: o.Relay.BatchSize, PublishWindow: o.Relay.PublishWindow,
		PollIntervalMs: float64(o.Relay.PollInterval) / 1e6, Producers: o.Producers,
		WatermillConfig: "watermill v1.5.1 forwarder, watermill-sql v4.1.2 (pgx, default PostgreSQL schema and offsets adapters, batch 100), " +
			"watermill-amqp v3.0.2 publisher with ConfirmDelivery and ChannelPoolSize 1",
	}
	if o.ProfileDir == "" {
		dir, err := os.MkdirTemp("", "outboxlab-bench-")
		if err != nil {
			return res, fmt.Errorf("bench: profile directory: %w", err)
		}
		o.ProfileDir = dir
	} else if err := os.MkdirAll(o.ProfileDir, 0o755); err != nil {
		return res, fmt.Errorf("bench: profile directory: %w", err)
	}

	res.Config.Layout = LayoutShared
	if o.IsolateBroker {
		lift, err := isolateBroker(ctx, env)
		if err != nil {
			return res, fmt.Errorf("bench: %w", err)
		}
		defer lift()
		res.Config.Layout = LayoutIsolated
	}
	in, err := newInfra(ctx, env, o.Schema, o.Exchange, o.Queue)
	if err != nil {
		return res, err
	}
	defer in.close()
	res.Config.Addressing = in.addressing
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if cerr := in.cleanup(cctx); cerr != nil {
			o.Logf("bench: cleaning up: %v", cerr)
		}
	}()
	w, err := newWorkload(o.Events, o.PayloadBytes, o.Seed, time.Now().Truncate(time.Millisecond))
	if err != nil {
		return res, err
	}
	b := &runner{o: o, in: in, w: w, cpu: cpuClock{in: in}}

	// 0. warm-up, 1. raw, 2. the relay with one replica then two, raw
	// over two connections (raw-2), 1 again: raw-after.
	if err := b.warmUp(ctx, &res); err != nil {
		return res, err
	}
	if err := b.raw(ctx, &res, "raw"); err != nil {
		return res, err
	}
	for _, replicas := range []int{1, 2} {
		if err := b.relayDrain(ctx, &res, replicas); err != nil {
			return res, err
		}
	}
	if err := b.rawSplit(ctx, &res, 2); err != nil {
		return res, err
	}
	if err := b.raw(ctx, &res, "raw-after"); err != nil {
		return res, err
	}
	// 3. watermill
	if !o.SkipWatermill {
		if err := b.watermill(ctx, &res); err != nil {
			return res, err
		}
	}
	// 4. latency at half capacity
	if !o.SkipLatency {
		if err := b.latency(ctx, &res); err != nil {
			return res, err
		}
	}
	res.limits()
	var busiest float64
	for _, ph := range res.Phases {
		busiest = max(busiest, ph.LoadAverage)
	}
	if cores := runtime.NumCPU(); busiest > float64(cores) {
		res.Notes = append(res.Notes, fmt.Sprintf(
			"the machine was busy with other work (load average up to %.1f on %d cores): the rates are noisy; compare the ratios of phases run close together", busiest, cores))
	}
	res.Seconds = time.Since(began).Seconds()
	return res, nil
}

// drainPoll is how often a drain's end is checked: a fiftieth of a second
// is noise on a drain of seconds, and the check costs the process little.
const drainPoll = 20 * time.Millisecond

// runner carries one run's state between phases.
type runner struct {
	o   Options
	in  *infra
	w   *workload
	cpu cpuClock
}

// Quiet is how busy PostgreSQL and RabbitMQ may be, together, for a phase
// to start: a tenth of a core over quietWindow. A purge of 100,000
// persistent messages or the vacuum after a load keeps them busy for
// seconds, which the next phase would otherwise pay for.
const (
	quietShare   = 0.10
	quietWindow  = 500 * time.Millisecond
	quietTimeout = 30 * time.Second
)

// quiesce waits until the service containers are quiet, so that every
// phase starts on a broker and a database that are not still finishing the
// previous one. Where their CPU time cannot be read it returns at once; when
// they do not settle within quietTimeout, Result.Notes says so.
func (b *runner) quiesce(ctx context.Context, res *Result, phase string) {
	began := time.Now()
	prev := b.cpu.sample()
	if len(prev.services) == 0 {
		return
	}
	timer := time.NewTimer(quietWindow)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		cur := b.cpu.sample()
		c := cpuBetween(prev, cur)
		busy := (c.PostgresSeconds + c.RabbitMQSeconds) / cur.wall.Sub(prev.wall).Seconds()
		if busy < quietShare {
			return
		}
		if time.Since(began) > quietTimeout {
			res.Notes = append(res.Notes, fmt.Sprintf(
				"%s started with PostgreSQL and RabbitMQ still busy (%.0f%% of a core after %s)", phase, 100*busy, quietTimeout))
			return
		}
		prev = cur
		timer.Reset(quietWindow)
	}
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// warmUp publishes the backlog from memory once, unmeasured, and purges
// it: a fresh broker's first drain is slower than its later ones (the
// message store's files are new, its caches cold), and the phase that
// came first would pay for it.
func (b *runner) warmUp(ctx context.Context, res *Result) error {
	b.o.Logf("bench: warm-up: publishing %d messages, not measured", b.w.len())
	confirmed, elapsed, err := publishRaw(ctx, b.in, b.w, b.o.Relay.PublishWindow, b.o.DrainTimeout)
	if err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}
	if err := b.in.purge(ctx); err != nil {
		return err
	}
	res.Notes = append(res.Notes, fmt.Sprintf(
		"warm-up: the backlog was published from memory once before the first phase, not measured (%d messages at %.0f/s), and purged: a fresh broker's first drain is slower than its later ones",
		confirmed, float64(confirmed)/elapsed.Seconds()))
	return nil
}

// raw publishes the backlog from memory with a sliding window of the
// relay's size: the broker's limit. It runs twice, before and after the
// relay's drains, and the higher rate counts as the limit: a broker that
// was slower in one of the runs (a cold start, a purge still settling)
// would otherwise flatter the relay.
func (b *runner) raw(ctx context.Context, res *Result, name string) error {
	b.quiesce(ctx, res, name)
	b.o.Logf("bench: %s: publishing %d messages, window %d", name, b.w.len(), b.o.Relay.PublishWindow)
	c0 := b.cpu.sample()
	confirmed, elapsed, err := publishRaw(ctx, b.in, b.w, b.o.Relay.PublishWindow, b.o.DrainTimeout)
	c1 := b.cpu.sample()
	if err != nil {
		return err
	}
	b.partial(res, name, confirmed, b.o.DrainTimeout)
	ph, err := b.finishPhase(ctx, name, confirmed, confirmed, elapsed, c0, c1)
	if err != nil {
		return err
	}
	res.Phases = append(res.Phases, ph)
	if ph.MsgsPerSec > res.RawMsgsPerSec && ph.Events > 0 {
		res.CPUMicrosPerMsgRawProcess = ph.CPU.ProcessSeconds * 1e6 / float64(ph.Events)
	}
	res.RawMsgsPerSec = max(res.RawMsgsPerSec, ph.MsgsPerSec)
	res.RatioToRaw = ratio(res.RelayMsgsPerSec, res.RawMsgsPerSec)
	res.Ratio2ToRaw = ratio(res.Relay2MsgsPerSec, res.RawMsgsPerSec)
	return nil
}

// rawSplit publishes the backlog from memory over parts connections at
// once (publishRawSplit), each with the relay's window: the broker's
// limit for a relay of that many replicas, each on a connection of its
// own. It is not the broker's limit for the ratios to raw; its ratio to
// raw bounds relay-2's (Result.Raw2RatioToRaw).
func (b *runner) rawSplit(ctx context.Context, res *Result, parts int) error {
	name := fmt.Sprintf("raw-%d", parts)
	b.quiesce(ctx, res, name)
	b.o.Logf("bench: %s: publishing %d messages over %d connections, window %d each", name, b.w.len(), parts, b.o.Relay.PublishWindow)
	c0 := b.cpu.sample()
	confirmed, elapsed, err := publishRawSplit(ctx, b.in, b.w, parts, b.o.Relay.PublishWindow, b.o.DrainTimeout)
	c1 := b.cpu.sample()
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	b.partial(res, name, confirmed, b.o.DrainTimeout)
	ph, err := b.finishPhase(ctx, name, confirmed, confirmed, elapsed, c0, c1)
	if err != nil {
		return err
	}
	res.Phases = append(res.Phases, ph)
	return nil
}

// coresBoundIdle is the idle share of the cores, on average over a
// phase, below which the cores were the phase's limit.
const coresBoundIdle = 0.1

// limits sets, from the phases that ran, the CPU ceilings of the relay's
// ratios to raw, the CPU budget of the relay-1 goal, whether the cores
// bound every phase of the comparison, and relay-1's ratio to raw as the
// broker's busy cores and its CPU per message: what limited the drains.
func (r *Result) limits() {
	var limit, one, two, split *Phase
	var raws []float64
	bound, seen := true, 0
	for i := range r.Phases {
		ph := &r.Phases[i]
		switch ph.Name {
		case "raw", "raw-after":
			raws = append(raws, ph.MsgsPerSec)
			if limit == nil || ph.MsgsPerSec > limit.MsgsPerSec {
				limit = ph
			}
		case "relay-1":
			one = ph
		case "relay-2":
			two = ph
		case "raw-2":
			split = ph
			continue
		default:
			continue
		}
		seen++
		bound = bound && ph.Resources != nil && ph.Resources.Idle < coresBoundIdle
	}
	r.CoresBound = bound && seen == 4
	r.RawSelfRatio = goal.RawSelfRatio(raws...)
	if split != nil && limit != nil {
		r.Raw2RatioToRaw = ratio(split.MsgsPerSec, limit.MsgsPerSec)
	}
	if limit != nil && limit.Resources != nil {
		r.BrokerBusyRaw = limit.Resources.RabbitMQ
		r.BrokerBusyRatio, r.BrokerCostRatio = goal.BrokerFactors(limit.drain(), one.drain())
		r.Broker2BusyRatio, r.Broker2CostRatio = goal.BrokerFactors(limit.drain(), two.drain())
	}
	if limit == nil || limit.CPUMicrosPerMsg == 0 {
		return
	}
	if one != nil {
		r.CPUCeilingRatioToRaw = ratio(limit.CPUMicrosPerMsg, one.CPUMicrosPerMsg)
		if one.Events > 0 {
			broker := one.CPU.RabbitMQSeconds * 1e6 / float64(one.Events)
			r.CPUBudgetRelayPlusDB = max(0, limit.CPUMicrosPerMsg/GoalRatioToRaw-broker)
		}
	}
	if two != nil {
		r.CPUCeiling2RatioToRaw = ratio(limit.CPUMicrosPerMsg, two.CPUMicrosPerMsg)
	}
}

// drain is what ph asked of the broker; a phase not run (nil) or
// without its resources asks nothing.
func (ph *Phase) drain() goal.Drain {
	if ph == nil || ph.Resources == nil {
		return goal.Drain{}
	}
	return goal.Drain{Events: ph.Events, BrokerBusy: ph.Resources.RabbitMQ, BrokerSeconds: ph.CPU.RabbitMQSeconds}
}

// partial notes a phase that did not get through the whole backlog within
// its bound.
func (b *runner) partial(res *Result, name string, done int, bound time.Duration) {
	if done < b.w.len() {
		res.Notes = append(res.Notes, fmt.Sprintf(
			"%s got %d of %d events confirmed within its bound of %s; its rate is over those %d",
			name, done, b.w.len(), bound, done))
	}
}

// finishPhase checks that the queue holds every confirmed message once,
// empties it and returns the phase's figures: the rate is timed events
// over elapsed; total counts the ones confirmed after the bound too.
func (b *runner) finishPhase(ctx context.Context, name string, timed, total int, elapsed time.Duration, c0, c1 cpuSample) (Phase, error) {
	ph := Phase{Name: name, Events: timed, Complete: timed == b.w.len(), Seconds: elapsed.Seconds(), CPU: cpuBetween(c0, c1),
		LoadAverage: loadAverage()}
	if elapsed > 0 {
		ph.MsgsPerSec = float64(timed) / elapsed.Seconds()
	}
	if timed > 0 {
		ph.CPUMicrosPerMsg = (ph.CPU.ProcessSeconds + ph.CPU.PostgresSeconds + ph.CPU.RabbitMQSeconds) * 1e6 / float64(timed)
	}
	ph.Resources = resourcesOf(ph.CPU, elapsed)
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err := b.in.waitQueueDepth(wctx, total)
	cancel()
	if err != nil {
		return ph, fmt.Errorf("%s: %w", name, err)
	}
	depth, err := b.in.queueDepth(ctx)
	if err != nil {
		return ph, err
	}
	ph.QueueDepth = depth
	if depth != total {
		return ph, fmt.Errorf("%s: queue holds %d messages after %d confirmed publishes: duplicates", name, depth, total)
	}
	if err := b.in.purge(ctx); err != nil {
		return ph, err
	}
	b.o.Logf("bench: %s: %d messages in %s: %.0f msgs/s", name, timed, elapsed.Round(time.Millisecond), ph.MsgsPerSec)
	return ph, nil
}

func (b *runner) relayDrain(ctx context.Context, res *Result, replicas int) error {
	name := fmt.Sprintf("relay-%d", replicas)
	table, err := b.in.newOutbox(ctx, fmt.Sprintf("outbox_drain_%d", replicas))
	if err != nil {
		return err
	}
	b.o.Logf("bench: %s: staging %d events", name, b.w.len())
	staged := time.Now()
	if err := b.in.stageCopy(ctx, table, b.w); err != nil {
		return err
	}
	b.o.Logf("bench: %s: staged %d events in %s (COPY, not timed)", name, b.w.len(), time.Since(staged).Round(time.Millisecond))
	var store *relay.PGStore
	if replicas == 1 {
		store = relay.NewPGStore(b.in.admin, table)
		plan, err := explain(ctx, b.in, store)
		if err != nil {
			return err
		}
		res.ClaimPlan = plan
		res.ClaimUsesPendingIndex = strings.Contains(plan, "Index Scan using "+table.PendingIndex()) &&
			!strings.Contains(plan, "Seq Scan")
	}
	if err := b.in.purge(ctx); err != nil {
		return err
	}
	b.quiesce(ctx, res, name)
	var prof *cpuProfile
	if replicas == 1 {
		if prof, err = startCPUProfile(filepath.Join(b.o.ProfileDir, "relay-cpu.pprof")); err != nil {
			return err
		}
	}
	b.o.Logf("bench: %s: draining", name)
	c0 := b.cpu.sample()
	start := time.Now()
	rs, err := startReplicas(ctx, b.in, replicaOptions{table: table, count: replicas, config: b.o.Relay})
	if err != nil {
		if prof != nil {
			_, _ = prof.stop(0)
		}
		return err
	}
	want := int64(b.w.len())
	wctx, cancel := context.WithTimeout(ctx, b.o.DrainTimeout)
	err = testenv.WaitUntil(wctx, drainPoll, func(context.Context) error {
		if n := rs.published(); n < want {
			return fmt.Errorf("%d of %d published", n, want)
		}
		return nil
	})
	if err != nil && wctx.Err() != nil && ctx.Err() == nil {
		err = nil // bounded: the rate is over what was published
	}
	cancel()
	elapsed := time.Since(start)
	timed := rs.published()
	c1 := b.cpu.sample()
	if prof != nil {
		p, perr := prof.stop(15)
		if perr != nil && err == nil {
			err = perr
		}
		res.Profile = p
	}
	breakdown := rs.breakdown(elapsed, b.o.Relay.PublishWindow)
	if serr := rs.stop(); serr != nil && err == nil {
		err = serr
	}
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	// Every replica finished its batch in flight before it stopped.
	total := int(rs.published())
	pending, processed, faulted, err := b.in.outboxCounts(ctx, table)
	if err != nil {
		return err
	}
	if faulted != 0 || processed != int64(total) || pending != want-int64(total) {
		return fmt.Errorf("%s: after the drain %d rows pending, %d processed, %d faulted; the relay marked %d of %d",
			name, pending, processed, faulted, total, want)
	}
	b.partial(res, name, int(timed), b.o.DrainTimeout)
	ph, err := b.finishPhase(ctx, name, int(timed), total, elapsed, c0, c1)
	if err != nil {
		return err
	}
	ph.Breakdown = breakdown
	res.Phases = append(res.Phases, ph)
	if replicas == 1 {
		res.RelayMsgsPerSec = ph.MsgsPerSec
		res.RatioToRaw = ratio(res.RelayMsgsPerSec, res.RawMsgsPerSec)
		if ph.Events > 0 {
			res.CPUMicrosPerMsgRelayPlusDB = (ph.CPU.ProcessSeconds + ph.CPU.PostgresSeconds) * 1e6 / float64(ph.Events)
			res.CPUMicrosPerMsgBroker = ph.CPU.RabbitMQSeconds * 1e6 / float64(ph.Events)
			res.CPURelayPlusDBOverBroker = ratio(res.CPUMicrosPerMsgRelayPlusDB, res.CPUMicrosPerMsgBroker)
		}
		if res.Hygiene, err = hygiene(ctx, b.in, store); err != nil {
			return err
		}
	} else {
		res.Relay2MsgsPerSec = ph.MsgsPerSec
		res.Ratio2ToRaw = ratio(res.Relay2MsgsPerSec, res.RawMsgsPerSec)
	}
	if _, err := b.in.admin.Exec(ctx, `DROP TABLE `+table.Ident()); err != nil {
		return fmt.Errorf("%s: dropping %s: %w", name, table, err)
	}
	return nil
}

// explain returns the plan of the claim statement.
func explain(ctx context.Context, in *infra, store *relay.PGStore) (string, error) {
	rows, err := in.admin.Query(ctx, `EXPLAIN `+store.ClaimSQL(), 100, "explain", int64(120e6))
	if err != nil {
		return "", fmt.Errorf("explaining the claim: %w", err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return "", fmt.Errorf("explaining the claim: %w", err)
	}
	return strings.Join(lines, "\n"), nil
}

// tableStats reads the size and tuple counts of table.
func tableStats(ctx context.Context, in *infra, table outbox.Table, moment string) (TableStats, error) {
	st := TableStats{Moment: moment}
	// The statistics of other sessions arrive when they end or every
	// second; read a fresh snapshot.
	if _, err := in.admin.Exec(ctx, `SELECT pg_stat_clear_snapshot()`); err != nil {
		return st, fmt.Errorf("reading stats of %s: %w", table, err)
	}
	err := in.admin.QueryRow(ctx, `SELECT n_live_tup, n_dead_tup, n_tup_upd, n_tup_hot_upd,
		pg_table_size(relid), pg_indexes_size(relid)
		FROM pg_stat_user_tables WHERE relid = $1::regclass`, table.Ident()).
		Scan(&st.LiveTuples, &st.DeadTuples, &st.Updates, &st.HOTUpdates, &st.TableBytes, &st.IndexBytes)
	if err != nil {
		return st, fmt.Errorf("reading stats of %s: %w", table, err)
	}
	return st, nil
}

// hygiene reads the drained table, sweeps every processed row as the
// relay does once they pass retention, and reads it again before and
// after a VACUUM.
func hygiene(ctx context.Context, in *infra, store *relay.PGStore) (_ []TableStats, err error) {
	table := store.Table()
	var out []TableStats
	exact, drop := pgstattuple(ctx, in)
	defer func() {
		if derr := drop(); derr != nil && err == nil {
			err = derr
		}
	}()
	snap := func(moment string) error {
		st, err := tableStats(ctx, in, table, moment)
		if err == nil && exact {
			err = in.admin.QueryRow(ctx, `SELECT tuple_count, dead_tuple_count FROM pgstattuple($1::regclass)`,
				table.Ident()).Scan(&st.LiveTuples, &st.DeadTuples)
			st.Exact = err == nil
		}
		out = append(out, st)
		return err
	}
	if err := waitStatsFlushed(ctx, in, table); err != nil {
		return out, err
	}
	if err := snap("after drain"); err != nil {
		return out, err
	}
	for {
		n, err := store.Sweep(ctx, 0, relay.DefaultSweepBatch)
		if err != nil {
			return out, err
		}
		if n < relay.DefaultSweepBatch {
			break
		}
	}
	if err := waitStatsFlushed(ctx, in, table); err != nil {
		return out, err
	}
	if err := snap("after sweep"); err != nil {
		return out, err
	}
	if _, err := in.admin.Exec(ctx, `VACUUM `+table.Ident()); err != nil {
		return out, fmt.Errorf("vacuuming %s: %w", table, err)
	}
	if err := snap("after vacuum"); err != nil {
		return out, err
	}
	return out, nil
}

// pgstattuple makes the pgstattuple extension available when the
// database has it, and returns whether it is, and how to drop it again if
// this run created it.
func pgstattuple(ctx context.Context, in *infra) (bool, func() error) {
	var had bool
	if err := in.admin.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'pgstattuple')`).Scan(&had); err != nil {
		return false, func() error { return nil }
	}
	if had {
		return true, func() error { return nil }
	}
	if _, err := in.admin.Exec(ctx, `CREATE EXTENSION pgstattuple`); err != nil {
		return false, func() error { return nil }
	}
	return true, func() error {
		if _, err := in.admin.Exec(context.WithoutCancel(ctx), `DROP EXTENSION IF EXISTS pgstattuple`); err != nil {
			return fmt.Errorf("dropping the pgstattuple extension: %w", err)
		}
		return nil
	}
}

// waitStatsFlushed waits until the cumulative statistics of table have
// settled: two reads a quarter second apart agree.
func waitStatsFlushed(ctx context.Context, in *infra, table outbox.Table) error {
	var last TableStats
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	err := testenv.WaitUntil(wctx, 250*time.Millisecond, func(ctx context.Context) error {
		st, err := tableStats(ctx, in, table, "")
		if err != nil {
			return err
		}
		same := st == last
		last = st
		if !same {
			return errors.New("statistics still moving")
		}
		return nil
	})
	if err != nil && wctx.Err() != nil && ctx.Err() == nil {
		return nil // best effort: report what there is
	}
	return err
}

func (b *runner) watermill(ctx context.Context, res *Result) error {
	peer, err := newWatermillPeer(ctx, b.in)
	if err != nil {
		return err
	}
	defer peer.close()
	b.o.Logf("bench: watermill: staging %d events", b.w.len())
	staged := time.Now()
	if err := peer.stage(ctx, b.w); err != nil {
		return err
	}
	b.o.Logf("bench: watermill: staged %d events in %s (SQL publisher, %d per transaction, not timed)",
		b.w.len(), time.Since(staged).Round(time.Millisecond), watermillStageChunk)
	if err := b.in.purge(ctx); err != nil {
		return err
	}
	b.quiesce(ctx, res, "watermill")
	b.o.Logf("bench: watermill: draining (at most %s)", b.o.WatermillTimeout)
	c0 := b.cpu.sample()
	start := time.Now()
	run, err := peer.start(ctx)
	if err != nil {
		return err
	}
	want := int64(b.w.len())
	wctx, cancel := context.WithTimeout(ctx, b.o.WatermillTimeout)
	err = testenv.WaitUntil(wctx, drainPoll, func(context.Context) error {
		if n := run.forwarded.Load(); n < want {
			return fmt.Errorf("%d of %d forwarded", n, want)
		}
		return nil
	})
	timedOut := err != nil && wctx.Err() != nil && ctx.Err() == nil
	cancel()
	elapsed := time.Since(start)
	forwarded := run.forwarded.Load()
	c1 := b.cpu.sample()
	// Errors while stopping (a query cut by the close) are not the
	// drain's.
	nerr, firstErr := peer.logger.summary()
	if serr := run.stop(); serr != nil && err == nil {
		err = serr
	}
	if err != nil && !timedOut {
		return fmt.Errorf("watermill: %w", err)
	}
	// A message forwarded after the count was read is in the queue too.
	final := int(run.forwarded.Load())
	if nerr > 0 {
		res.Notes = append(res.Notes, fmt.Sprintf("watermill logged %d errors during the drain; the first: %s", nerr, firstErr))
	}
	if timedOut && forwarded == 0 {
		return fmt.Errorf("watermill: forwarded nothing within %s: %w", b.o.WatermillTimeout, err)
	}
	b.partial(res, "watermill", int(forwarded), b.o.WatermillTimeout)
	ph, err := b.finishPhase(ctx, "watermill", int(forwarded), final, elapsed, c0, c1)
	if err != nil {
		return err
	}
	res.Phases = append(res.Phases, ph)
	res.WatermillMsgsPerSec = ph.MsgsPerSec
	res.RatioToWatermill = ratio(res.RelayMsgsPerSec, res.WatermillMsgsPerSec)
	res.RawOverWatermill = ratio(res.RawMsgsPerSec, res.WatermillMsgsPerSec)
	return nil
}

func (b *runner) latency(ctx context.Context, res *Result) error {
	if res.RelayMsgsPerSec <= 0 {
		return errors.New("latency: no measured capacity")
	}
	rate := res.RelayMsgsPerSec / 2
	if b.o.LatencyRate > 0 {
		rate = b.o.LatencyRate
	}
	// warm is the warm-up of a run at rate r that times count events: its
	// first events, at most half the workload and within what it holds
	// beside the count.
	warm := func(r float64, count int) int {
		return max(0, min(int(r*b.o.LatencyWarmup.Seconds()), b.w.len()/2, b.w.len()-count))
	}
	count := min(b.w.len()-warm(rate, 0), max(100, int(rate*b.o.LatencyDuration.Seconds())))
	res.Config.LatencyEvents = count
	res.Config.LatencyRate = rate
	res.Config.LatencyWarmupMs = float64(b.o.LatencyWarmup) / 1e6
	settle := 2*b.o.Relay.PollInterval + time.Minute
	for _, mode := range []struct {
		name                               string
		notify, afterCommit, inline, keyed bool
	}{
		{name: "poll"}, {name: "notify", notify: true}, {name: "notify-after-commit", notify: true, afterCommit: true},
		{name: "inline", notify: true, inline: true}, {name: "keyed", notify: true, keyed: true},
	} {
		rate, count := rate, count
		if mode.inline || mode.keyed {
			// The floor of the notify run: the rate its producers reached.
			rate = notifyRate(res.Latency, rate)
			count = min(count, max(100, int(rate*b.o.LatencyDuration.Seconds())))
		}
		b.quiesce(ctx, res, "latency "+mode.name)
		b.o.Logf("bench: latency %s: %d events at %.0f/s", mode.name, count, rate)
		wn := warm(rate, count)
		l, err := measureLatency(ctx, b.in, b.w.slice(wn+count), latencyOptions{
			name: mode.name, notify: mode.notify, afterCommit: mode.afterCommit, inline: mode.inline, keyed: mode.keyed, rate: rate, producers: b.o.Producers,
			config: b.o.Relay, settle: settle, produceFor: 2 * b.o.LatencyDuration, warm: wn,
		})
		if err != nil {
			return err
		}
		b.o.Logf("bench: latency %s: commit->confirm p50 %.1f ms, p99 %.1f ms, max %.1f ms (rate %.0f/s)",
			mode.name, l.Confirm.P50, l.Confirm.P99, l.Confirm.Max, l.Rate)
		if l.Rate < 0.9*rate || l.Events < count {
			res.Notes = append(res.Notes, fmt.Sprintf(
				"latency %s: the producers reached %.0f of the %.0f events/s scheduled (%d of %d events committed)",
				mode.name, l.Rate, rate, l.Events, count))
		}
		res.Latency = append(res.Latency, l)
		switch {
		case mode.inline:
			res.LatencyInlineP99Ms = l.Confirm.P99
		case mode.keyed:
			res.LatencyKeyedP99Ms = l.Confirm.P99
		case !mode.notify:
			res.LatencyPollP50Ms, res.LatencyPollP99Ms, res.LatencyPollMaxMs = l.Confirm.P50, l.Confirm.P99, l.Confirm.Max
		case !mode.afterCommit:
			res.LatencyNotifyP50Ms, res.LatencyNotifyP99Ms, res.LatencyNotifyMaxMs = l.Confirm.P50, l.Confirm.P99, l.Confirm.Max
			if l.Stages != nil {
				res.LatencyClaimCallP99Ms = l.Stages.ClaimCall.P99
			}
			res.NotifyRelayStatementMeanMs, res.NotifyRelayStatementCPUWaitMs = l.RelayStatementMeanMs, l.RelayStatementCPUWaitMs
			res.NotifyBusyCores = l.BusyCores
		}
	}
	res.Notes = append(res.Notes, fmt.Sprintf(
		"latency: each run first sent for %s at its rate to warm up (connections opened, statements prepared); those events were delivered and checked like the rest, and left out of the figures",
		b.o.LatencyWarmup))
	res.NotifyOverInlineP99 = ratio(res.LatencyNotifyP99Ms, res.LatencyInlineP99Ms)
	res.NotifyOverKeyedP99 = ratio(res.LatencyNotifyP99Ms, res.LatencyKeyedP99Ms)
	res.Notes = append(res.Notes, "latency inline: no relay; each producer stages its event as in notify (with the NOTIFY), at the rate the notify producers reached, and publishes it itself the moment its COMMIT returns, the dual write the outbox replaces: the floor of a relay's commit -> confirm at these commits on this machine")
	res.Notes = append(res.Notes, "latency keyed: no relay; each producer stages its event as in notify, its NOTIFY naming the row, at the rate the notify producers reached; a leaser LISTENs, leases the rows named by their key in one statement (asynchronous commit, as the relay's claim) and publishes them: the NOTIFY's delivery, one round trip to the database and publish -> confirm, the floor of a relay that leases a row after its NOTIFY and before it publishes it (no scan, no order, no mark)")
	// The broker's own share: the same messages at the rate the NOTIFY
	// producers reached, published from memory.
	brate := notifyRate(res.Latency, rate)
	bcount := min(count, max(100, int(brate*b.o.LatencyDuration.Seconds())))
	b.quiesce(ctx, res, "latency broker")
	b.o.Logf("bench: latency broker: %d messages at %.0f/s, no database", bcount, brate)
	bwarm := warm(brate, bcount)
	l, err := measureBrokerLatency(ctx, b.in, b.w.slice(bwarm+bcount), brate, bwarm)
	if err != nil {
		return err
	}
	b.o.Logf("bench: latency broker: publish->confirm p50 %.1f ms, p99 %.1f ms, max %.1f ms (rate %.0f/s)",
		l.Confirm.P50, l.Confirm.P99, l.Confirm.Max, l.Rate)
	res.Latency = append(res.Latency, l)
	res.LatencyBrokerP50Ms, res.LatencyBrokerP99Ms = l.Confirm.P50, l.Confirm.P99
	res.InlineOverBrokerP99 = ratio(res.LatencyInlineP99Ms, res.LatencyBrokerP99Ms)
	res.NotifyOverBrokerP99 = ratio(res.LatencyNotifyP99Ms, res.LatencyBrokerP99Ms)
	res.ClaimCallOverBrokerP99 = ratio(res.LatencyClaimCallP99Ms, res.LatencyBrokerP99Ms)
	res.KeyedOverBrokerP99 = ratio(res.LatencyKeyedP99Ms, res.LatencyBrokerP99Ms)
	res.Notes = append(res.Notes, fmt.Sprintf(
		"latency broker: no relay and no database; %d messages published from memory at %.0f/s (the rate the notify producers reached), timed from each publish: the broker's own share of every other mode's latency",
		l.Events, brate))
	return nil
}

// Target is one goal of the benchmark and what a run measured against it.
type Target = goal.Target

// Goals of the benchmark (see package goal): the relay against the
// broker's limit, its tail latency against the broker's own, against its
// peer, and its CPU cost against the broker's.
const (
	GoalRatioToRaw        = goal.RatioToRaw
	GoalRatio2ToRaw       = goal.Ratio2ToRaw
	GoalNotifyOverBroker  = goal.NotifyOverBroker
	GoalRatioToWatermill  = goal.RatioToWatermill
	GoalCPUOverBrokerUpTo = goal.CPUOverBrokerUpTo
)

// Targets returns the run's figures against the goals; a figure whose
// phases did not run is not judged.
func (r Result) Targets() []Target {
	return goal.Judge(r.goalFigures())
}

// goalFigures are the ratios of r that the goals judge, each zero where
// a phase it needs did not run.
func (r Result) goalFigures() goal.Figures {
	f := goal.Figures{RatioToWatermill: r.RatioToWatermill}
	if r.RawMsgsPerSec > 0 {
		f.RatioToRaw, f.Ratio2ToRaw = r.RatioToRaw, r.Ratio2ToRaw
	}
	if r.LatencyBrokerP99Ms > 0 {
		f.NotifyOverBroker = r.NotifyOverBrokerP99
	}
	if r.CPUMicrosPerMsgBroker > 0 {
		f.CPUOverBroker = r.CPURelayPlusDBOverBroker
	}
	return f
}

// Summary is the JSON the command prints with --json: the summary fields
// of a Result and nothing else.
type Summary struct {
	Events              int     `json:"events"`
	RawMsgsPerSec       float64 `json:"raw_msgs_per_sec"`
	RelayMsgsPerSec     float64 `json:"relay_msgs_per_sec"`
	Relay2MsgsPerSec    float64 `json:"relay2_msgs_per_sec"`
	WatermillMsgsPerSec float64 `json:"watermill_msgs_per_sec"`
	RatioToRaw          float64 `json:"ratio_to_raw"`
	RatioToWatermill    float64 `json:"ratio_to_watermill"`
	RawOverWatermill    float64 `json:"raw_over_watermill"`
	LatencyPollP50Ms    float64 `json:"latency_poll_p50_ms"`
	LatencyPollP99Ms    float64 `json:"latency_poll_p99_ms"`
	LatencyNotifyP50Ms  float64 `json:"latency_notify_p50_ms"`
	LatencyNotifyP99Ms  float64 `json:"latency_notify_p99_ms"`

	Relay2RatioToRaw           float64 `json:"relay2_ratio_to_raw"`
	LatencyBrokerP99Ms         float64 `json:"latency_broker_p99_ms"`
	NotifyOverBrokerP99        float64 `json:"notify_p99_over_broker_p99"`
	CPUMicrosPerMsgRelayPlusDB float64 `json:"cpu_us_per_msg_relay_plus_db"`
	CPUMicrosPerMsgBroker      float64 `json:"cpu_us_per_msg_broker"`
	CPURelayPlusDBOverBroker   float64 `json:"cpu_relay_plus_db_over_broker"`
	LatencyInlineP99Ms         float64 `json:"latency_inline_p99_ms"`
	NotifyOverInlineP99        float64 `json:"notify_p99_over_inline_p99"`
	CPUCeilingRatioToRaw       float64 `json:"cpu_ceiling_ratio_to_raw"`
	CPUCeiling2RatioToRaw      float64 `json:"cpu_ceiling_relay2_ratio_to_raw"`
	CoresBound                 bool    `json:"cores_bound"`
	BrokerBusyRaw              float64 `json:"broker_busy_raw"`
	BrokerBusyRatio            float64 `json:"broker_busy_ratio"`
	BrokerCostRatio            float64 `json:"broker_cost_ratio"`
	Broker2BusyRatio           float64 `json:"broker2_busy_ratio"`
	Broker2CostRatio           float64 `json:"broker2_cost_ratio"`
	RawSelfRatio               float64 `json:"raw_self_ratio"`
	Raw2RatioToRaw             float64 `json:"raw2_ratio_to_raw"`
	LatencyClaimCallP99Ms      float64 `json:"latency_claim_call_p99_ms"`
	ClaimCallOverBrokerP99     float64 `json:"claim_call_p99_over_broker_p99"`
	LatencyKeyedP99Ms          float64 `json:"latency_keyed_p99_ms"`
	KeyedOverBrokerP99         float64 `json:"keyed_p99_over_broker_p99"`
	NotifyOverKeyedP99         float64 `json:"notify_p99_over_keyed_p99"`

	NotifyRelayStatementMeanMs    float64 `json:"notify_relay_statement_mean_ms"`
	NotifyRelayStatementCPUWaitMs float64 `json:"notify_relay_statement_cpu_wait_ms"`
	NotifyBusyCores               float64 `json:"notify_busy_cores"`
}

// keyedNoFloor says, where the relay's NOTIFY p99 was below the keyed
// lease's, that the keyed lease was no floor in the run: it queued
// behind cores the run saturated.
func (r Result) keyedNoFloor() string {
	if r.NotifyOverKeyedP99 > 0 && r.NotifyOverKeyedP99 < 1 {
		return " (the relay's p99 was below it: no floor in this run)"
	}
	return ""
}

// LatencyRateText says what the latency runs' rate was: half the
// one-replica drain rate (the default) or a rate the caller chose.
func (r Result) LatencyRateText() string {
	if r.Config.LatencyRate == r.RelayMsgsPerSec/2 {
		return "half capacity"
	}
	return "a chosen rate"
}

// Summary returns the summary fields of r.
func (r Result) Summary() Summary {
	return Summary{
		Events: r.Events, RawMsgsPerSec: r.RawMsgsPerSec, RelayMsgsPerSec: r.RelayMsgsPerSec,
		Relay2MsgsPerSec: r.Relay2MsgsPerSec, WatermillMsgsPerSec: r.WatermillMsgsPerSec,
		RatioToRaw: r.RatioToRaw, RatioToWatermill: r.RatioToWatermill, RawOverWatermill: r.RawOverWatermill,
		LatencyPollP50Ms: r.LatencyPollP50Ms, LatencyPollP99Ms: r.LatencyPollP99Ms,
		LatencyNotifyP50Ms: r.LatencyNotifyP50Ms, LatencyNotifyP99Ms: r.LatencyNotifyP99Ms,
		Relay2RatioToRaw: r.Ratio2ToRaw, LatencyBrokerP99Ms: r.LatencyBrokerP99Ms, NotifyOverBrokerP99: r.NotifyOverBrokerP99,
		CPUMicrosPerMsgRelayPlusDB: r.CPUMicrosPerMsgRelayPlusDB, CPUMicrosPerMsgBroker: r.CPUMicrosPerMsgBroker,
		CPURelayPlusDBOverBroker: r.CPURelayPlusDBOverBroker,
		LatencyInlineP99Ms:       r.LatencyInlineP99Ms, NotifyOverInlineP99: r.NotifyOverInlineP99,
		CPUCeilingRatioToRaw: r.CPUCeilingRatioToRaw, CPUCeiling2RatioToRaw: r.CPUCeiling2RatioToRaw,
		CoresBound: r.CoresBound, BrokerBusyRaw: r.BrokerBusyRaw, BrokerBusyRatio: r.BrokerBusyRatio, BrokerCostRatio: r.BrokerCostRatio,
		Broker2BusyRatio: r.Broker2BusyRatio, Broker2CostRatio: r.Broker2CostRatio, RawSelfRatio: r.RawSelfRatio, Raw2RatioToRaw: r.Raw2RatioToRaw,
		LatencyClaimCallP99Ms: r.LatencyClaimCallP99Ms, ClaimCallOverBrokerP99: r.ClaimCallOverBrokerP99,
		LatencyKeyedP99Ms: r.LatencyKeyedP99Ms, KeyedOverBrokerP99: r.KeyedOverBrokerP99, NotifyOverKeyedP99: r.NotifyOverKeyedP99,
		NotifyRelayStatementMeanMs: r.NotifyRelayStatementMeanMs, NotifyRelayStatementCPUWaitMs: r.NotifyRelayStatementCPUWaitMs,
		NotifyBusyCores: r.NotifyBusyCores,
	}
}

// WriteJSON writes the summary as one JSON object, or the whole result
// when full is true.
func (r Result) WriteJSON(w io.Writer, full bool) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if full {
		return enc.Encode(r)
	}
	return enc.Encode(r.Summary())
}

// WriteTable writes the result as the tables REPORT.md shows.
func (r Result) WriteTable(out io.Writer) error {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(out, "Throughput: draining %d events (batch %d, window %d, payload ~%d B; layout %s, servers reached at %s)\n\n",
		r.Events, r.Config.BatchSize, r.Config.PublishWindow, r.Config.PayloadBytes, orValue(r.Config.Layout, LayoutShared), orValue(r.Config.Addressing, addressPublished))
	fmt.Fprintln(tw, "contender\tmsgs/s\tseconds\tvs raw\tCPU s (proc/pg/rmq)\tCPU us/msg\tload\t")
	for _, ph := range r.Phases {
		fmt.Fprintf(tw, "%s\t%.0f\t%.2f\t%.2f\t%.1f/%.1f/%.1f\t%.0f\t%.1f\t\n", ph.Name, ph.MsgsPerSec, ph.Seconds,
			ratio(ph.MsgsPerSec, r.RawMsgsPerSec), ph.CPU.ProcessSeconds, ph.CPU.PostgresSeconds, ph.CPU.RabbitMQSeconds,
			ph.CPUMicrosPerMsg, ph.LoadAverage)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(out, "\nTargets\n\n")
	for _, t := range r.Targets() {
		op := ">="
		if t.AtMost {
			op = "<="
		}
		met := "no"
		switch {
		case !t.Ran:
			met = "not run"
		case t.Met:
			met = "yes"
		}
		fmt.Fprintf(out, "  %-50s %6.2f  (goal %s %g)  met: %s\n", t.Figure, t.Measured, op, t.Goal, met)
	}
	if r.CPUMicrosPerMsgBroker > 0 {
		fmt.Fprintf(out, "  CPU per message in relay-1: relay + PostgreSQL %.1f us, RabbitMQ %.1f us; raw's process (amqp091 publishing alone) %.1f us\n",
			r.CPUMicrosPerMsgRelayPlusDB, r.CPUMicrosPerMsgBroker, r.CPUMicrosPerMsgRawProcess)
	}
	if r.CPUCeilingRatioToRaw > 0 && r.CoresBound {
		fmt.Fprintf(out, "  the cores were the limit of every phase: CPU ceiling of relay-1 / raw (raw's CPU per message over relay-1's) %.2f, relay-1 at %.0f%% of it; relay-2's ceiling %.2f\n",
			r.CPUCeilingRatioToRaw, 100*ratio(r.RatioToRaw, r.CPUCeilingRatioToRaw), r.CPUCeiling2RatioToRaw)
		fmt.Fprintf(out, "  relay + PostgreSQL CPU per message that a ceiling of %g needs: %.1f us (measured %.1f us)\n",
			GoalRatioToRaw, r.CPUBudgetRelayPlusDB, r.CPUMicrosPerMsgRelayPlusDB)
	}
	if r.BrokerBusyRatio > 0 {
		fmt.Fprintf(out, "  RabbitMQ kept %.2f cores busy in raw; relay-1 / raw %.2f = RabbitMQ's busy cores, relay-1 / raw, %.2f x its CPU per message, raw / relay-1, %.2f\n",
			r.BrokerBusyRaw, r.RatioToRaw, r.BrokerBusyRatio, r.BrokerCostRatio)
	}
	if r.RawSelfRatio > 0 {
		fmt.Fprintf(out, "  raw's slower phase / its faster (raw publishing itself against the broker's limit): %.2f\n", r.RawSelfRatio)
	}
	if r.Raw2RatioToRaw > 0 {
		fmt.Fprintf(out, "  raw over two connections / raw (relay-2 / raw of a two-replica relay as fast as raw; below %g, no two-replica relay meets that goal here): %.2f\n",
			GoalRatio2ToRaw, r.Raw2RatioToRaw)
	}
	if r.Broker2BusyRatio > 0 {
		fmt.Fprintf(out, "  relay-2 / raw %.2f = RabbitMQ's busy cores, relay-2 / raw, %.2f x its CPU per message, raw / relay-2, %.2f\n",
			r.Ratio2ToRaw, r.Broker2BusyRatio, r.Broker2CostRatio)
	}
	if r.ClaimCallOverBrokerP99 > 0 {
		fmt.Fprintf(out, "  the notify run's claim statements, p99 over its events / broker-alone p99: %.2f (%.1f ms; every event's commit -> confirm holds its claim)\n",
			r.ClaimCallOverBrokerP99, r.LatencyClaimCallP99Ms)
	}
	if r.RawOverWatermill > 0 {
		fmt.Fprintf(out, "  raw / watermill (relay-1 / watermill of a relay as fast as raw; below %g, no relay meets that goal here): %.2f\n",
			GoalRatioToWatermill, r.RawOverWatermill)
	}
	if r.InlineOverBrokerP99 > 0 {
		fmt.Fprintf(out, "  inline p99 / broker-alone p99 (no relay at all): %.2f\n", r.InlineOverBrokerP99)
	}
	if r.KeyedOverBrokerP99 > 0 {
		fmt.Fprintf(out, "  keyed lease p99 / broker-alone p99 (a row leased by its key after its NOTIFY, then published; above %g, no relay that leases after the NOTIFY meets that goal here, unless the relay beat it): %.2f%s\n",
			GoalNotifyOverBroker, r.KeyedOverBrokerP99, r.keyedNoFloor())
	}
	if r.NotifyRelayStatementMeanMs > 0 && r.NotifyRelayStatementCPUWaitMs > 0 {
		fmt.Fprintf(out, "  the notify run's claims and marks: %.2f ms mean, of which their PostgreSQL processes waited %.2f ms for a core (%.0f%%), %.2f of the cores busy\n",
			r.NotifyRelayStatementMeanMs, r.NotifyRelayStatementCPUWaitMs, 100*ratio(r.NotifyRelayStatementCPUWaitMs, r.NotifyRelayStatementMeanMs), r.NotifyBusyCores)
	}
	if len(r.Latency) > 0 {
		fmt.Fprintf(out, "\nLatency at %s (%d events at %.0f/s per mode from %d producers after a %s warm-up, one replica)\n\n",
			r.LatencyRateText(), r.Config.LatencyEvents, r.Config.LatencyRate, r.Config.Producers, time.Duration(r.Config.LatencyWarmupMs*1e6))
		tw = tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "mode\trate/s\tconfirm p50\tp99\tmax\tdelivery p50\tp99\tmax\t")
		for _, l := range r.Latency {
			fmt.Fprintf(tw, "%s\t%.0f\t%.1f ms\t%.1f ms\t%.1f ms\t%.1f ms\t%.1f ms\t%.1f ms\t\n", l.Mode, l.Rate,
				l.Confirm.P50, l.Confirm.P99, l.Confirm.Max, l.Delivery.P50, l.Delivery.P99, l.Delivery.Max)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		fmt.Fprintf(out, "\nNOTIFY p99 commit -> confirm %.1f ms; the broker alone, publish -> confirm at that rate: p99 %.1f ms (x%.1f)\n",
			r.LatencyNotifyP99Ms, r.LatencyBrokerP99Ms, r.NotifyOverBrokerP99)
		if r.LatencyInlineP99Ms > 0 {
			fmt.Fprintf(out, "no relay, each event published as its COMMIT returns (inline): p99 %.1f ms (the relay's NOTIFY p99 is x%.1f that floor)\n",
				r.LatencyInlineP99Ms, r.NotifyOverInlineP99)
		}
		if r.LatencyKeyedP99Ms > 0 {
			fmt.Fprintf(out, "each row leased by its key after its NOTIFY, then published (keyed): p99 %.1f ms (the relay's NOTIFY p99 is x%.2f that floor)\n",
				r.LatencyKeyedP99Ms, r.NotifyOverKeyedP99)
		}
		if err := writeSched(out, r.Latency); err != nil {
			return err
		}
		for _, l := range r.Latency {
			if st := l.Stages; st != nil {
				fmt.Fprintf(out, "  %s stages, p50 / p99 ms: commit -> claim %.1f / %.1f (the claim statement %.1f / %.1f), claim -> publish %.1f / %.1f, publish -> confirm %.1f / %.1f\n",
					l.Mode, st.CommitToClaim.P50, st.CommitToClaim.P99, st.ClaimCall.P50, st.ClaimCall.P99, st.ClaimToPublish.P50, st.ClaimToPublish.P99,
					st.PublishToConfirm.P50, st.PublishToConfirm.P99)
			}
		}
	}
	for _, ph := range r.Phases {
		if b := ph.Breakdown; b != nil {
			fmt.Fprintf(out, "\nWhere %s spent its time (share of the replicas' wall time)\n", ph.Name)
			fmt.Fprintf(out, "  claim %4.1f%% (%d calls, %.2f ms mean; first tenth %.2f ms, last tenth %.2f ms)\n",
				100*b.Claim.ShareOfWall, b.Claim.Calls, b.Claim.MeanMs, b.ClaimFirstTenthMs, b.ClaimLastTenthMs)
			fmt.Fprintf(out, "  publish %4.1f%%, confirm wait %4.1f%%, mark %4.1f%% (%.2f ms mean), decode %4.1f%%, lost leases %d\n",
				100*b.Publish.ShareOfWall, 100*b.ConfirmWait.ShareOfWall, 100*b.Mark.ShareOfWall, b.Mark.MeanMs,
				100*b.Decode.ShareOfWall, b.LostLeases)
			fmt.Fprintf(out, "  loop waiting for claims and marks or on its own bookkeeping %4.1f%%; publish window %.0f%% full on average\n",
				100*b.LoopOther, 100*b.WindowFill)
		}
	}
	header := false
	for _, ph := range r.Phases {
		if c := ph.Resources; c != nil {
			if !header {
				header = true
				fmt.Fprintf(out, "\nCores busy during each phase (of %d): this process / PostgreSQL / RabbitMQ / other work / idle; the busiest disk's busy share, flushes/s; threads waiting for a core on average: this process / PostgreSQL / RabbitMQ\n", c.Cores)
			}
			fmt.Fprintf(out, "  %-10s %.2f / %.2f / %.2f / %.2f / %.2f; disk %.0f%%, %.0f flushes/s; waiting %.2f / %.2f / %.2f\n", ph.Name, c.Process, c.Postgres, c.RabbitMQ, c.Other, c.Idle,
				100*c.DiskBusy, c.FlushesPerSec, c.ProcessWaiting, c.PostgresWaiting, c.RabbitMQWaiting)
		}
	}
	if p := r.Profile; p != nil {
		fmt.Fprintf(out, "\nCPU profile of the one-replica drain: %s (%.1f s sampled)\n", p.Path, p.SampledSeconds)
		for _, e := range p.TopCum[:min(10, len(p.TopCum))] {
			fmt.Fprintf(out, "  cum %5.1f%%  flat %5.1f%%  %s\n", 100*e.CumShare, 100*e.FlatShare, e.Func)
		}
	}
	if len(r.Hygiene) > 0 {
		how := "estimated by pg_stat_user_tables"
		if r.Hygiene[0].Exact {
			how = "counted by pgstattuple"
		}
		fmt.Fprintf(out, "\nOutbox table hygiene (one-replica table, tuples %s; claim uses the pending index: %v)\n\n",
			how, r.ClaimUsesPendingIndex)
		tw = tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "moment\tlive\tdead\ttable\tindexes\tupdates\tHOT\t")
		for _, s := range r.Hygiene {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%d\t%d\t\n", s.Moment, s.LiveTuples, s.DeadTuples,
				bytesString(s.TableBytes), bytesString(s.IndexBytes), s.Updates, s.HOTUpdates)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	for _, n := range r.Notes {
		fmt.Fprintf(out, "\nnote: %s\n", n)
	}
	return nil
}

func bytesString(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.0f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// orValue returns s, or def when s is empty (a result from before the
// field existed).
func orValue(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// notifyRate is the rate the notify run's producers reached, at most
// scheduled; scheduled when there is no notify run yet.
func notifyRate(runs []Latency, scheduled float64) float64 {
	for _, l := range runs {
		if l.Mode == "notify" && l.Rate > 0 {
			return min(scheduled, l.Rate)
		}
	}
	return scheduled
}
