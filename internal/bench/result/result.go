// Package result is the data model of one benchmark run: what package
// bench measured (Result, its figures by concern, its phases and runs in
// full), the ratios and limits derived from it, the goals it is judged
// against (through package goal), and its JSON and text forms. It imports
// nothing that starts or reaches a container, so that the report reads a
// run's result without the benchmark's machinery.
package result

import (
	"bytes"
	"encoding/json"

	"github.com/outboxlab/outboxlab/internal/bench/goal"
)

// Result is what one run measured: its figures by concern (Throughput,
// LatencySummary, CPUCost), each with the ratios between its figures as
// methods, and the phases and runs behind them, from which Limits derives
// what bound the drains. Summary is the figures and limits without the
// details, as the command prints them with --json.
//
// On the wire (WriteJSON, and the result in bench.json) a Result is one
// flat object: the figures, the details, and the ratios and limits as
// the runs before this type wrote them. Reading one drops the ratios and
// limits it carries and derives them again, and refuses a key it does
// not know.
type Result struct {
	Throughput
	LatencySummary
	CPUCost

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

// Throughput is how fast each contender drained the backlog of Events:
// the messages it got confirmed within its bound, per second.
type Throughput struct {
	Events int `json:"events"`
	// RawMsgsPerSec is the faster of the raw phases (raw, raw-after):
	// the broker's limit, which the ratios to raw are against.
	RawMsgsPerSec float64 `json:"raw_msgs_per_sec"`
	// RelayMsgsPerSec and Relay2MsgsPerSec are the relay's drains with
	// one replica and with two.
	RelayMsgsPerSec  float64 `json:"relay_msgs_per_sec"`
	Relay2MsgsPerSec float64 `json:"relay2_msgs_per_sec"`
	// WatermillMsgsPerSec is watermill's forwarder's drain.
	WatermillMsgsPerSec float64 `json:"watermill_msgs_per_sec"`
}

// RatioToRaw is RelayMsgsPerSec / RawMsgsPerSec (one replica).
func (t Throughput) RatioToRaw() float64 { return ratio(t.RelayMsgsPerSec, t.RawMsgsPerSec) }

// Ratio2ToRaw is Relay2MsgsPerSec / RawMsgsPerSec.
func (t Throughput) Ratio2ToRaw() float64 { return ratio(t.Relay2MsgsPerSec, t.RawMsgsPerSec) }

// RatioToWatermill is RelayMsgsPerSec / WatermillMsgsPerSec (one replica
// against one forwarder).
func (t Throughput) RatioToWatermill() float64 {
	return ratio(t.RelayMsgsPerSec, t.WatermillMsgsPerSec)
}

// RawOverWatermill is RawMsgsPerSec / WatermillMsgsPerSec: the ratio to
// watermill of a relay as fast as publishing from memory, so the most any
// relay through this broker reaches on this machine. Below the watermill
// goal, the goal is out of reach here, whatever the relay does.
func (t Throughput) RawOverWatermill() float64 {
	return ratio(t.RawMsgsPerSec, t.WatermillMsgsPerSec)
}

// LatencySummary is what the latency runs (Result.Latency) measured, in
// ms: COMMIT -> confirmed publish at the latency runs' rate
// (Result.LatencyRateText) of the relay and of its floors.
type LatencySummary struct {
	// The relay polling only (poll) and woken by LISTEN/NOTIFY (notify).
	LatencyPollP50Ms   float64 `json:"latency_poll_p50_ms"`
	LatencyPollP99Ms   float64 `json:"latency_poll_p99_ms"`
	LatencyNotifyP50Ms float64 `json:"latency_notify_p50_ms"`
	LatencyNotifyP99Ms float64 `json:"latency_notify_p99_ms"`
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
	// on this machine, the database's load included.
	LatencyInlineP99Ms float64 `json:"latency_inline_p99_ms"`
	// LatencyClaimCallP99Ms is the p99, over the notify run's events, of
	// the duration of the claim statement that leased each one's row
	// (LatencyStages.ClaimCall).
	LatencyClaimCallP99Ms float64 `json:"latency_claim_call_p99_ms"`
	// NotifyRelayStatementMeanMs is the mean duration of the notify run's
	// claims and marks as the relay timed them, and
	// NotifyRelayStatementCPUWaitMs how long, per statement, the
	// PostgreSQL processes serving them waited runnable for a core
	// (Latency.RelayStatementCPUWaitMs); NotifyBusyCores is how many
	// cores the machine kept busy meanwhile.
	NotifyRelayStatementMeanMs    float64 `json:"notify_relay_statement_mean_ms"`
	NotifyRelayStatementCPUWaitMs float64 `json:"notify_relay_statement_cpu_wait_ms"`
	NotifyBusyCores               float64 `json:"notify_busy_cores"`
	// LatencyKeyedP99Ms is commit -> confirm of the keyed lease run at the
	// notify run's commits: no relay, each row leased by its key in one
	// statement after its NOTIFY and then published (package bench's
	// keyed leaser), the three hops of a relay that leases a row after the
	// NOTIFY and before it publishes it, and nothing else.
	LatencyKeyedP99Ms float64 `json:"latency_keyed_p99_ms"`
}

// NotifyOverBrokerP99 is LatencyNotifyP99Ms / LatencyBrokerP99Ms: what
// the relay's tail is against the broker's own at the same rate.
func (l LatencySummary) NotifyOverBrokerP99() float64 {
	return ratio(l.LatencyNotifyP99Ms, l.LatencyBrokerP99Ms)
}

// NotifyOverInlineP99 is LatencyNotifyP99Ms / LatencyInlineP99Ms: what
// the relay adds to the floor of no relay at all.
func (l LatencySummary) NotifyOverInlineP99() float64 {
	return ratio(l.LatencyNotifyP99Ms, l.LatencyInlineP99Ms)
}

// InlineOverBrokerP99 is LatencyInlineP99Ms / LatencyBrokerP99Ms: above
// the NOTIFY goal's bound, no relay at all meets it at these commits on
// this machine.
func (l LatencySummary) InlineOverBrokerP99() float64 {
	return ratio(l.LatencyInlineP99Ms, l.LatencyBrokerP99Ms)
}

// ClaimCallOverBrokerP99 is LatencyClaimCallP99Ms / LatencyBrokerP99Ms:
// every event's commit -> confirm holds its claim, so above the NOTIFY
// goal's bound no relay whose claims take as long as these, leasing rows
// before it publishes them, meets the goal at these commits on this
// machine.
func (l LatencySummary) ClaimCallOverBrokerP99() float64 {
	return ratio(l.LatencyClaimCallP99Ms, l.LatencyBrokerP99Ms)
}

// KeyedOverBrokerP99 is LatencyKeyedP99Ms / LatencyBrokerP99Ms: above the
// NOTIFY goal's bound, no relay that leases a row after its NOTIFY and
// before it publishes it meets the goal at these commits on this machine.
func (l LatencySummary) KeyedOverBrokerP99() float64 {
	return ratio(l.LatencyKeyedP99Ms, l.LatencyBrokerP99Ms)
}

// NotifyOverKeyedP99 is LatencyNotifyP99Ms / LatencyKeyedP99Ms: how far
// the relay is from the keyed lease's floor.
func (l LatencySummary) NotifyOverKeyedP99() float64 {
	return ratio(l.LatencyNotifyP99Ms, l.LatencyKeyedP99Ms)
}

// StatementWaitShare is NotifyRelayStatementCPUWaitMs /
// NotifyRelayStatementMeanMs: where it is most of the statement, the
// relay's statements are slowed by the cores the run shares, not by their
// own work.
func (l LatencySummary) StatementWaitShare() float64 {
	return ratio(l.NotifyRelayStatementCPUWaitMs, l.NotifyRelayStatementMeanMs)
}

// keyedNoFloor says, where the relay's NOTIFY p99 was below the keyed
// lease's, that the keyed lease was no floor in the run: it queued
// behind cores the run saturated.
func (l LatencySummary) keyedNoFloor() string {
	if r := l.NotifyOverKeyedP99(); r > 0 && r < 1 {
		return " (the relay's p99 was below it: no floor in this run)"
	}
	return ""
}

// CPUCost is the CPU time per message, in microseconds, of the drains
// that set the ratios to raw.
type CPUCost struct {
	// CPUMicrosPerMsgRawProcess is this process's in the raw phase that
	// set the broker's limit: what amqp091 publishing alone costs, a
	// floor of the relay's own share.
	CPUMicrosPerMsgRawProcess float64 `json:"cpu_us_per_msg_raw_process"`
	// CPUMicrosPerMsgRelayPlusDB is this process's (the relay, with the
	// harness's little share) and PostgreSQL's in the one-replica drain;
	// CPUMicrosPerMsgBroker is RabbitMQ's in the same drain.
	CPUMicrosPerMsgRelayPlusDB float64 `json:"cpu_us_per_msg_relay_plus_db"`
	CPUMicrosPerMsgBroker      float64 `json:"cpu_us_per_msg_broker"`
}

// CPURelayPlusDBOverBroker is CPUMicrosPerMsgRelayPlusDB /
// CPUMicrosPerMsgBroker: the CPU goal's figure.
func (c CPUCost) CPURelayPlusDBOverBroker() float64 {
	return ratio(c.CPUMicrosPerMsgRelayPlusDB, c.CPUMicrosPerMsgBroker)
}

// CPURawProcessOverBroker is CPUMicrosPerMsgRawProcess /
// CPUMicrosPerMsgBroker: the part of the CPU goal's budget that
// publishing alone takes.
func (c CPUCost) CPURawProcessOverBroker() float64 {
	return ratio(c.CPUMicrosPerMsgRawProcess, c.CPUMicrosPerMsgBroker)
}

// Summary is what the command prints with --json: a run's figures, with
// the ratios between them and its limits, without the phases and runs
// behind them.
type Summary struct {
	Throughput
	LatencySummary
	CPUCost
	Limits
}

// Summary returns the figures of r, its limits derived.
func (r Result) Summary() Summary {
	return Summary{Throughput: r.Throughput, LatencySummary: r.LatencySummary, CPUCost: r.CPUCost, Limits: r.Limits()}
}

// ratios are the ratios of a run's figures as the JSON carries them, beside
// the figures: written for the readers of the JSON, and dropped when a
// Result is read, which derives them again.
type ratios struct {
	RatioToRaw               float64 `json:"ratio_to_raw"`
	Ratio2ToRaw              float64 `json:"relay2_ratio_to_raw"`
	RatioToWatermill         float64 `json:"ratio_to_watermill"`
	RawOverWatermill         float64 `json:"raw_over_watermill"`
	NotifyOverBrokerP99      float64 `json:"notify_p99_over_broker_p99"`
	NotifyOverInlineP99      float64 `json:"notify_p99_over_inline_p99"`
	InlineOverBrokerP99      float64 `json:"inline_p99_over_broker_p99"`
	ClaimCallOverBrokerP99   float64 `json:"claim_call_p99_over_broker_p99"`
	KeyedOverBrokerP99       float64 `json:"keyed_p99_over_broker_p99"`
	NotifyOverKeyedP99       float64 `json:"notify_p99_over_keyed_p99"`
	CPURelayPlusDBOverBroker float64 `json:"cpu_relay_plus_db_over_broker"`
}

// ratiosOf are the ratios of a run's figures.
func ratiosOf(t Throughput, l LatencySummary, c CPUCost) ratios {
	return ratios{
		RatioToRaw: t.RatioToRaw(), Ratio2ToRaw: t.Ratio2ToRaw(), RatioToWatermill: t.RatioToWatermill(), RawOverWatermill: t.RawOverWatermill(),
		NotifyOverBrokerP99: l.NotifyOverBrokerP99(), NotifyOverInlineP99: l.NotifyOverInlineP99(), InlineOverBrokerP99: l.InlineOverBrokerP99(),
		ClaimCallOverBrokerP99: l.ClaimCallOverBrokerP99(), KeyedOverBrokerP99: l.KeyedOverBrokerP99(), NotifyOverKeyedP99: l.NotifyOverKeyedP99(),
		CPURelayPlusDBOverBroker: c.CPURelayPlusDBOverBroker(),
	}
}

// resultFields is Result without its methods: its JSON is the fields'.
type resultFields Result

// MarshalJSON writes r as one object: its fields, its ratios and its
// limits.
func (r Result) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		resultFields
		ratios
		Limits
	}{resultFields(r), ratiosOf(r.Throughput, r.LatencySummary, r.CPUCost), r.Limits()})
}

// UnmarshalJSON reads a result as MarshalJSON writes it, as every run
// has written it: the ratios and limits it carries are dropped, since r
// derives them from its figures and phases. A key that is none of these
// is refused, so that a result of another layout is not read as zeros.
func (r *Result) UnmarshalJSON(data []byte) error {
	w := struct {
		*resultFields
		ratios
		Limits
	}{resultFields: (*resultFields)(r)}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	return dec.Decode(&w)
}

// summaryFields is Summary without its methods.
type summaryFields Summary

// MarshalJSON writes s as one object: its figures, their ratios and its
// limits.
func (s Summary) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		summaryFields
		ratios
	}{summaryFields(s), ratiosOf(s.Throughput, s.LatencySummary, s.CPUCost)})
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
	// timing (bench.Options.LatencyWarmup).
	LatencyWarmupMs float64 `json:"latency_warmup_ms"`
	Producers       int     `json:"producers"`
	WatermillConfig string  `json:"watermill_config"`
	// Layout is LayoutShared or LayoutIsolated; Addressing how the
	// contenders reached the servers: at the containers' own addresses,
	// or through ports Docker publishes on the host (and its port proxy).
	Layout     string `json:"layout,omitempty"`
	Addressing string `json:"addressing,omitempty"`
}

// Layouts of a run (RunConfig.Layout).
const (
	// LayoutShared leaves every process free to run on every core: the
	// broker shares the machine's cores with the relay, the database and
	// the harness.
	LayoutShared = "shared"
	// LayoutIsolated confines RabbitMQ to the first core and PostgreSQL and
	// this process (the relay, the raw publisher, the producers) to the
	// others, as on separate machines: the broker never waits for a core
	// that a contender holds, so a contender's rate is measured against
	// the broker's own limit rather than against its share of the cores.
	LayoutIsolated = "isolated"
)

// How the contenders reach PostgreSQL and RabbitMQ (RunConfig.Addressing).
const (
	AddressBridge    = "the containers' own addresses on their network"
	AddressPublished = "published ports"
)

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

// ratio is a / b, or 0 where b is: a figure over one not measured is not
// measured either.
func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// LatencyRateText says what the latency runs' rate was: half the
// one-replica drain rate (the default) or a rate the caller chose.
func (r Result) LatencyRateText() string {
	if r.Config.LatencyRate == r.RelayMsgsPerSec/2 {
		return "half capacity"
	}
	return "a chosen rate"
}

// Targets returns the run's figures against the goals; a figure whose
// phases did not run is not judged.
func (r Result) Targets() []goal.Target {
	return goal.Judge(r)
}
