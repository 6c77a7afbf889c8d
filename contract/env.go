// Package contract is the black-box contract between outboxlab's harness
// and a relay under test (docs/contract.md §3), as data: the names of the
// OUTBOX_* environment variables by which the harness configures a relay,
// and Promises, what a relay declares that the harness may assume of it.
// Promises has one text form, the capabilities of `outboxlab run
// --capabilities` and of a target file: Parse reads it, Promises.String
// writes it, Promises.Validate refuses what contradicts itself, and
// Promises.Unmet says what a scenario needs that a relay does not
// promise.
//
// The core guarantee (no lost event, no phantom event, every duplicate
// delivery explained, no duplicate effect) is not among the promises: it
// is never optional, and every relay is judged by it whatever it
// declares. Promises turns on the checks of what else a relay says, and
// only those; nothing of this repository's relay is assumed of another.
//
// The package imports nothing of this module, so that every package of
// it, the checkers included, may depend on it.
package contract

// What the harness sets of every replica (docs/contract.md §3.2).
const (
	// EnvDatabaseURL is PostgreSQL's URL, through the harness's link to
	// the database.
	EnvDatabaseURL = "OUTBOX_DATABASE_URL"
	// EnvAMQPURL is RabbitMQ's URL, through the harness's link to the
	// broker; on a broker cluster the comma-separated URLs of every node.
	EnvAMQPURL = "OUTBOX_AMQP_URL"
	// EnvTable is the outbox table, schema-qualified.
	EnvTable = "OUTBOX_TABLE"
	// EnvExchange is the durable topic exchange a relay publishes to.
	EnvExchange = "OUTBOX_EXCHANGE"
	// EnvRelayID is the replica's name, also its process in the history.
	EnvRelayID = "OUTBOX_RELAY_ID"
	// EnvClockOffset is a Go duration the replica's own clock is off by.
	EnvClockOffset = "OUTBOX_CLOCK_OFFSET"
	// EnvRecords names the records file of a relay that declares
	// records (docs/contract.md §3.5).
	EnvRecords = "OUTBOX_RECORDS"
	// EnvFailpoints is the failpoint spec of a relay that declares
	// failpoints (docs/contract.md §3.6).
	EnvFailpoints = "OUTBOX_FAILPOINTS"
)

// The settings the harness passes every replica (docs/contract.md §3.2).
// A relay that follows the contract but not these needs its own
// equivalents; none of them is assumed of a relay that does not declare
// the matching promise.
const (
	EnvPollInterval   = "OUTBOX_POLL_INTERVAL"
	EnvLease          = "OUTBOX_LEASE"
	EnvPublishTimeout = "OUTBOX_PUBLISH_TIMEOUT"
	EnvStoreTimeout   = "OUTBOX_STORE_TIMEOUT"
	EnvBackoffBase    = "OUTBOX_BACKOFF_BASE"
	EnvBackoffMax     = "OUTBOX_BACKOFF_MAX"
	EnvMaxAttempts    = "OUTBOX_MAX_ATTEMPTS"
	EnvBatchSize      = "OUTBOX_BATCH_SIZE"
	// EnvTypes lists the workload's message types and their payload
	// fields.
	EnvTypes    = "OUTBOX_TYPES"
	EnvLogLevel = "OUTBOX_LOG_LEVEL"
	// EnvRetention and EnvSweepInterval are set by the scenarios that
	// need a sweep to run during a run.
	EnvRetention     = "OUTBOX_RETENTION"
	EnvSweepInterval = "OUTBOX_SWEEP_INTERVAL"
)

// Settings that only this repository's relay reads (docs/contract.md
// §3.4; docs/relay.md gives their defaults). A relay under test needs
// none of them.
const (
	EnvNotify          = "OUTBOX_NOTIFY"
	EnvMetricsAddr     = "OUTBOX_METRICS_ADDR"
	EnvMigrate         = "OUTBOX_MIGRATE"
	EnvDeclareExchange = "OUTBOX_DECLARE_EXCHANGE"
	EnvPublishWindow   = "OUTBOX_PUBLISH_WINDOW"
	EnvSweepBatch      = "OUTBOX_SWEEP_BATCH"
	// EnvMutant names the mutant a relay built with the mutants tag
	// runs as.
	EnvMutant = "OUTBOX_MUTANT"
)
