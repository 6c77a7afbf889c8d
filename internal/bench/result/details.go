package result

// Latency is the steady-state latency of one mode of waking the relay,
// measured on every event of a run at a fixed rate.
type Latency struct {
	// Mode is "broker" (no relay and no database: the messages published
	// from memory at the rate, Confirm and Delivery counted from the
	// publish), "poll" (the relay only polls), "notify" (the staging
	// transaction sends NOTIFY, outbox.StageOptions.Notify, and the relay
	// LISTENs) or "notify-after-commit" (the producer sends the NOTIFY in
	// a transaction of its own after its COMMIT, with synchronous_commit
	// off: a variant this benchmark measures for comparison).
	Mode string `json:"mode"`
	// Events is how many events the producers committed after the
	// warm-up: all that were scheduled, or those committed within twice
	// the run's duration when the producers fell behind. Every figure of
	// the run is over these.
	Events int `json:"events"`
	// WarmupEvents is how many events were scheduled first, at the same
	// rate, to warm the parties up (connections opened, statements
	// prepared, caches filled): each was delivered like the rest, but none
	// is in the figures.
	WarmupEvents int `json:"warmup_events,omitempty"`
	// TargetRate is the producers' schedule in events per second; Rate is
	// what they achieved, from the first COMMIT to the last.
	TargetRate float64 `json:"target_rate"`
	Rate       float64 `json:"rate"`
	// Confirm is COMMIT returned -> the broker's confirm reached the relay.
	Confirm Percentiles `json:"commit_to_confirm"`
	// Delivery is COMMIT returned -> the consumer received the message.
	Delivery Percentiles `json:"commit_to_delivery"`
	// Duplicates counts deliveries of an event delivered before.
	Duplicates int `json:"duplicates"`
	// PollInterval is the relay's poll interval during the run.
	PollIntervalMs float64 `json:"poll_interval_ms"`
	// Stages split Confirm where the relay took part (not for the broker
	// alone): COMMIT returned -> the claim that leased the row came back,
	// that claim -> the row's publish went out, and that publish -> its
	// confirm reached the relay. Each is a distribution of its own, so
	// their p99s need not add up to Confirm's.
	Stages *LatencyStages `json:"stages,omitempty"`
	// BusyCores is how many of the machine's cores were busy on average
	// from the end of the warm-up to the last confirm and delivery, where
	// /proc/stat is readable.
	BusyCores float64 `json:"busy_cores,omitempty"`
	// Sched is how long each group of threads ran on a CPU over the same
	// span and how long it waited for one, where the threads' schedstat
	// is readable (Linux, the services as containers of this machine).
	Sched []SchedGroup `json:"sched,omitempty"`
	// RelayStatements is how many claims and marks the relay issued over
	// the span, and RelayStatementMeanMs their mean duration as the relay
	// timed them. RelayStatementCPUWaitMs is the run-queue wait of the
	// relay's sessions (Sched's "relay sessions") per statement: how much
	// of a statement's time its PostgreSQL process spent runnable, waiting
	// for a core (the sessions' few backlog reports are counted in the
	// wait but not in the statements).
	RelayStatements         int64   `json:"relay_statements,omitempty"`
	RelayStatementMeanMs    float64 `json:"relay_statement_mean_ms,omitempty"`
	RelayStatementCPUWaitMs float64 `json:"relay_statement_cpu_wait_ms,omitempty"`
}

// LatencyStages are the parts of commit -> confirm.
type LatencyStages struct {
	CommitToClaim    Percentiles `json:"commit_to_claim"`
	ClaimToPublish   Percentiles `json:"claim_to_publish"`
	PublishToConfirm Percentiles `json:"publish_to_confirm"`
	// ClaimCall is, per event, how long the claim statement that leased
	// its row took, from its start to its rows coming back: a part of
	// CommitToClaim (that claim started after the COMMIT, since it saw
	// the row). A relay that leases a row before it publishes it (the
	// design's claim) spends at least its claim's duration between an
	// event's COMMIT and its confirm.
	ClaimCall Percentiles `json:"claim_call"`
}

// Percentiles of a latency distribution, in milliseconds.
type Percentiles struct {
	P50 float64 `json:"p50_ms"`
	P99 float64 `json:"p99_ms"`
	Max float64 `json:"max_ms"`
}

// CPU is the CPU time spent during a phase, in seconds, by this process
// (the contender and the harness) and by the service containers when their
// cgroups are readable.
type CPU struct {
	ProcessSeconds  float64 `json:"process_seconds"`
	PostgresSeconds float64 `json:"postgres_seconds,omitempty"`
	RabbitMQSeconds float64 `json:"rabbitmq_seconds,omitempty"`
	// MachineSeconds is the CPU time of the whole machine, every process
	// of it, when /proc/stat is readable.
	MachineSeconds float64 `json:"machine_seconds,omitempty"`
	// DiskBusySeconds is how long the busiest disk had I/O in flight, and
	// DiskFlushes how many flushes the disks served, when /proc/diskstats
	// is readable.
	DiskBusySeconds float64 `json:"disk_busy_seconds,omitempty"`
	DiskFlushes     int64   `json:"disk_flushes,omitempty"`
	// ProcessWaitSeconds, PostgresWaitSeconds and RabbitMQWaitSeconds are
	// how long the threads of each waited, runnable, for a core (Linux's
	// schedstat, summed over the threads alive at the phase's end), where
	// they are readable.
	ProcessWaitSeconds  float64 `json:"process_wait_seconds,omitempty"`
	PostgresWaitSeconds float64 `json:"postgres_wait_seconds,omitempty"`
	RabbitMQWaitSeconds float64 `json:"rabbitmq_wait_seconds,omitempty"`
}

// Breakdown says where the relay replicas spent a drain, added up over the
// replicas: time inside each call of the store, the publisher and the
// decoder, and its share of the replicas' wall time. Publishing, waiting
// for confirms and decoding happen on the relay's own goroutine (what they
// leave is its bookkeeping); claims and marks run on goroutines of their
// own while it publishes, so their shares overlap the others, and a
// replica may have two marks on their way at once, so the marks' share
// can pass 1.
type Breakdown struct {
	Claim       CallTime `json:"claim"`
	Mark        CallTime `json:"mark"`
	Publish     CallTime `json:"publish"`
	ConfirmWait CallTime `json:"confirm_wait"`
	Decode      CallTime `json:"decode"`
	// ClaimFirstTenthMs and ClaimLastTenthMs are the mean durations of
	// the first and the last tenth of the claims that returned rows: a
	// claim that slows down as the drain goes is scanning dead index
	// entries of rows already published.
	ClaimFirstTenthMs float64 `json:"claim_first_tenth_ms"`
	ClaimLastTenthMs  float64 `json:"claim_last_tenth_ms"`
	LostLeases        int64   `json:"lost_leases"`
	// WindowFill is the mean number of publishes awaiting their confirm
	// (published, not yet settled by the relay) over the drain, as a share
	// of the replicas' publish windows: near 1, the relay kept the broker
	// as busy as the window allows, and the broker (or the machine under
	// it) set the rate; well below 1, the relay did.
	WindowFill float64 `json:"window_fill"`
	// LoopOther is the share of the replicas' wall time their loops spent
	// outside publish, confirm wait and decode: waiting for a claim or a
	// mark to come back, and their own bookkeeping.
	LoopOther float64 `json:"loop_other"`
}

// CallTime is the time spent in one kind of call.
type CallTime struct {
	Calls       int64   `json:"calls"`
	Rows        int64   `json:"rows"`
	Seconds     float64 `json:"seconds"`
	MeanMs      float64 `json:"mean_ms"`
	ShareOfWall float64 `json:"share_of_wall"`
}

// Profile summarises a CPU profile of the process during a drain.
type Profile struct {
	// Path is the pprof file: go tool pprof -top PATH.
	Path string `json:"path"`
	// SampledSeconds is the CPU time the profile sampled.
	SampledSeconds float64 `json:"sampled_seconds"`
	// TopFlat and TopCum are the functions with the most flat and
	// cumulative time.
	TopFlat []ProfileEntry `json:"top_flat"`
	TopCum  []ProfileEntry `json:"top_cum"`
}

// ProfileEntry is one function of a CPU profile.
type ProfileEntry struct {
	Func string `json:"func"`
	// Flat is the CPU time spent in the function itself, Cum in it and
	// what it called, in seconds and as a share of every sample.
	FlatSeconds float64 `json:"flat_seconds"`
	FlatShare   float64 `json:"flat_share"`
	CumSeconds  float64 `json:"cum_seconds"`
	CumShare    float64 `json:"cum_share"`
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

// SchedGroup is how long a group of threads ran on a CPU during a latency
// run and how long they waited, runnable, in a run queue for one (Linux's
// schedstat). A thread that waits long for a CPU is slowed by the other
// work on the cores, not by its own: where a statement's server process
// waits for a CPU most of the statement's time, the cores are what limit
// it.
type SchedGroup struct {
	// Name says whose threads these are: "relay sessions" (the PostgreSQL
	// processes serving the relay's pool: its claims, marks and backlog
	// reports), "relay listener" (the one serving its LISTEN), "producer
	// sessions", "PostgreSQL" (every process of its container, these
	// included), "RabbitMQ" (every thread of its container) and "this
	// process" (the relay, the producers' and the consumer's client
	// side: every goroutine of the benchmark).
	Name string `json:"name"`
	// Threads is how many threads were counted: those alive at the end of
	// the run (one that ended during it is not counted).
	Threads int `json:"threads"`
	// OnCPUMs and RunQueueMs are the group's time on a CPU and its time
	// runnable but waiting for one, summed over its threads.
	OnCPUMs    float64 `json:"on_cpu_ms"`
	RunQueueMs float64 `json:"run_queue_ms"`
}
