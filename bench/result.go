package bench

import "github.com/outboxlab/outboxlab/bench/goal"

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

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
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
