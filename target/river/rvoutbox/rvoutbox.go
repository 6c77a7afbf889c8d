// Package rvoutbox is River's job table (github.com/riverqueue/river
// v0.51.2, with its pgx v5 driver riverpgxv5) as an outbox.Schema: the
// business transaction inserts a River job that carries the event, and
// River's workers (cmd/river-relay) publish it. The harness creates
// River's tables with River's own migrations, stages events through
// River's own client, and reads the jobs back in outboxlab's columns.
//
// Migrate runs River's migrations (package rivermigrate over
// riverpgxv5, line main, every version up) with Config.Schema = the
// table's schema, so that River's tables (river_job, river_leader,
// river_queue, river_migration and the rest), its enum type
// river_job_state and its functions land in that schema and nowhere
// else. River names its job table river_job whatever the harness would
// call it: Schema sets outbox.Schema.Table to TableName, and Migrate and
// Stage refuse another name.
//
// Stage inserts one job inside the caller's transaction with River's own
// client, Client.InsertTx: a client with no queues and no workers (an
// insert-only client), over riverpgxv5.New(nil), which River documents
// for exactly this (a driver without a pool cannot start a client, and
// InsertTx and InsertManyTx still work: riverpgxv5's New). Its Config
// sets only Schema = the table's schema, MaxAttempts = Options.MaxAttempts
// (0: River's default, 25) and a logger that discards; everything else is
// River's default: queue "default", priority 1, no unique options, no
// tags, no scheduled time (the job is available at once). The job's kind
// is Kind, its args are Args: the event id, its type (the routing key),
// its payload and its correlation id. InsertTx also sends River's insert
// notification (pg_notify on "<schema>.river_insert") in the transaction,
// so that a listening relay fetches the job once it commits. The driver
// and the client are made anew for every call, so nothing is kept between
// calls or shared between schemas; the cost is the query by which River's
// driver reads the server's version, once per driver, in every staging
// transaction. The id of the row is River's bigint, which the harness
// does not need: the event's own id is in the args, and the rows view
// shows it (ReturnsID is false).
//
// River takes created_at (occurred_at here) and scheduled_at from the
// clock of the process that inserts (riverpgxv5's JobInsertFastMany
// stamps time.Now()), not from the database and not from its caller: it
// has no insert option for it. Stage cannot give River the event's
// OccurredAt, so the rows show when the job was inserted. River keeps the
// args as jsonb, so the payload a worker reads back, and publishes, is
// the staged JSON as PostgreSQL normalises it (keys ordered, whitespace
// its own): equal as JSON, not byte for byte.
//
// Rows reads the jobs of kind Kind back, each row as the harness's
// columns (see Rows). River keeps a running job's holder in the row, and
// the rows view shows it as a lease that ends RescueAfter after the
// attempt began: see Options.RescueAfter for what River's rescuer does
// and why that end is the earliest moment, not the moment, another
// replica can take the job.
package rvoutbox

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/outboxlab/outboxlab/outbox"
)

// Name names the schema in reports and errors.
const Name = "river"

// TableName is the name River gives its job table, in whatever schema
// it is configured with.
const TableName = "river_job"

// Kind is the kind of the jobs Stage inserts and cmd/river-relay works.
const Kind = "outbox_publish"

// RescueAfter is the rescue-after (River's Config.RescueStuckJobsAfter)
// that Schema's rows view assumes: the harness's lease (scenarios.Lease),
// with which rvtarget runs the relay (RIVER_RESCUE_AFTER). River's own
// default is an hour.
const RescueAfter = 4 * time.Second

// Args are the args of a job Stage inserts: the event as the relay
// publishes it. River keeps them in river_job.args as JSON.
type Args struct {
	// EventID is the event's id, the message_id of its publish.
	EventID uuid.UUID `json:"event_id"`
	// Type is the event's message type, the routing key of its publish.
	Type string `json:"type"`
	// Payload is the event's JSON payload, the body of its publish.
	Payload json.RawMessage `json:"payload"`
	// CorrelationID is the event's correlation id, empty when it has
	// none.
	CorrelationID string `json:"correlation_id,omitempty"`
}

// Kind is the job's kind, River's name for what works it.
func (Args) Kind() string { return Kind }

var _ river.JobArgs = Args{}

// Options are what the jobs Stage inserts and the rows view depend on
// beyond River's defaults. The zero value is River's defaults with no
// lease end shown.
type Options struct {
	// MaxAttempts is the attempt limit of each job Stage inserts (the
	// inserting client's Config.MaxAttempts); 0 is River's default, 25
	// (river.MaxAttemptsDefault). River keeps the limit in the job's row
	// (max_attempts) when it is inserted, and both the worker that fails
	// a job and the rescuer discard it by that column (River's
	// internal/jobexecutor and internal/maintenance/job_rescuer.go): the
	// relay's own configuration does not change it.
	MaxAttempts int
	// RescueAfter is the relay's RescueStuckJobsAfter, which the rows
	// view adds to a running job's attempted_at as its lease end
	// (locked_until); 0 shows no lease end (NULL).
	//
	// River holds a job it works by setting state = 'running',
	// attempted_at = the database's now() and appending its client id to
	// attempted_by, in the statement that fetches it (JobGetAvailable in
	// riverpgxv5's river_job.sql); no other client fetches a running job.
	// Nothing renews the hold, and nothing ends it at a set time: the
	// rescuer (internal/maintenance/job_rescuer.go), which runs on the
	// elected leader only, every 30 s (JobRescuerIntervalDefault, not
	// configurable through river.Config), selects the running jobs whose
	// attempted_at is before its own clock's now minus RescueAfter
	// (JobGetStuck), and makes each retryable at the retry policy's next
	// time, or discards it at its attempt limit (JobRescueMany, which
	// appends an error "Stuck job rescued by JobRescuer"). Another client
	// fetches a rescued job only once it is available again: the leader's
	// scheduler (internal/maintenance/job_scheduler.go, every 5 s) makes
	// it available once its retry time has come. So attempted_at +
	// RescueAfter is the earliest time another replica can take the job,
	// on the database clock as long as the leader's clock agrees with the
	// database's; it takes it up to the rescuer's 30 s later, plus the
	// retry wait and up to the scheduler's 5 s, and later still while no
	// leader runs (a leader's term lasts 15 s after its last
	// re-election). The holder is not stopped at that end either: its
	// job context ends at its JobTimeout, and a worker that comes back
	// later still completes the job (see rvtarget on fencing).
	RescueAfter time.Duration
}

// Schema is River's job table as an outbox.Schema with River's default
// attempt limit and a lease end RescueAfter after each attempt began:
// the relay must be run with RIVER_RESCUE_AFTER = RescueAfter, as
// rvtarget runs it.
func Schema() outbox.Schema { return Options{RescueAfter: RescueAfter}.Schema() }

// Schema is River's job table as an outbox.Schema under o: Migrate runs
// River's migrations, Stage inserts a job with River's client inside the
// caller's transaction, Rows reads the jobs back.
func (o Options) Schema() outbox.Schema {
	return outbox.Schema{Name: Name, Table: TableName, Migrate: Migrate, Stage: o.Stage, Rows: o.Rows}
}

// Migrate runs River's migrations, every version up, into table's schema.
// It is idempotent: River records the versions it applied in that
// schema's river_migration and applies only the others.
func Migrate(ctx context.Context, db *pgxpool.Pool, table outbox.Table) error {
	if err := checkTable(table); err != nil {
		return err
	}
	m, err := rivermigrate.New(riverpgxv5.New(db), &rivermigrate.Config{Schema: table.Schema(), Logger: discard()})
	if err != nil {
		return fmt.Errorf("migrating River into schema %s: %w", table.Schema(), err)
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("migrating River into schema %s: %w", table.Schema(), err)
	}
	return nil
}

// Stage inserts one job of kind Kind for e with River's client
// (Client.InsertTx) inside tx, in table's schema, with o's attempt limit.
// It returns "": the rows are shown under the event's id.
func (o Options) Stage(ctx context.Context, tx pgx.Tx, table outbox.Table, e outbox.Event) (string, error) {
	if err := checkTable(table); err != nil {
		return "", fmt.Errorf("staging event %s: %w", e.ID, err)
	}
	if e.Type == "" {
		return "", fmt.Errorf("staging event %s: empty message type", e.ID)
	}
	client, err := river.NewClient(riverpgxv5.New(nil), &river.Config{
		Schema:      table.Schema(),
		MaxAttempts: o.MaxAttempts,
		Logger:      discard(),
	})
	if err != nil {
		return "", fmt.Errorf("staging event %s: River's client: %w", e.ID, err)
	}
	args := Args{EventID: e.ID, Type: e.Type, Payload: e.Payload}
	if e.CorrelationID != nil {
		args.CorrelationID = e.CorrelationID.String()
	}
	if _, err := client.InsertTx(ctx, tx, args, nil); err != nil {
		return "", fmt.Errorf("staging event %s: %w", e.ID, err)
	}
	return "", nil
}

// Rows reads the jobs of kind Kind in table in outboxlab's columns:
//
//   - id: the event id of the args, message_type: their type;
//   - processed_at: finalized_at of a completed job (the completing
//     worker's clock, River's JobSetStateCompleted); faulted_at:
//     finalized_at of a discarded or cancelled one, which River keeps in
//     the table and never works again;
//   - attempts: the attempts the job has used up, the errors River
//     recorded (one per failed attempt and per rescue). River's own
//     attempt column counts fetches: it grows when a job is fetched, not
//     when it fails, and drops back when a stopping client hands a job
//     back;
//   - occurred_at: created_at;
//   - locked_by: the last element of attempted_by (River's client id,
//     which the relay sets to its replica's name) while the job runs,
//     locked_at: attempted_at while it runs (the database's now() when
//     it was fetched), locked_until: attempted_at + o.RescueAfter while
//     it runs (NULL without a RescueAfter); all three NULL otherwise.
//
// It reads only table, through its name, so that it also runs over a
// relation holding one changed row named in its place.
func (o Options) Rows(table outbox.Table) string {
	until := "NULL::timestamptz"
	if o.RescueAfter > 0 {
		until = fmt.Sprintf("attempted_at + interval '%d microseconds'", o.RescueAfter.Microseconds())
	}
	return `SELECT (args->>'event_id')::uuid AS id, (args->>'type')::text AS message_type,
       CASE WHEN state = 'completed' THEN finalized_at END AS processed_at,
       CASE WHEN state IN ('discarded', 'cancelled') THEN finalized_at END AS faulted_at,
       coalesce(cardinality(errors), 0)::integer AS attempts, created_at AS occurred_at,
       CASE WHEN state = 'running' THEN attempted_by[cardinality(attempted_by)] END::text AS locked_by,
       CASE WHEN state = 'running' THEN attempted_at END AS locked_at,
       CASE WHEN state = 'running' THEN ` + until + ` END AS locked_until
FROM ` + table.Ident() + `
WHERE kind = '` + Kind + `'`
}

// checkTable refuses a table River would not use: River's job table is
// always TableName.
func checkTable(table outbox.Table) error {
	if table.Name() != TableName {
		return fmt.Errorf("table %s: River's job table is %s, in the schema River is configured with", table, TableName)
	}
	return nil
}

// discard is a logger that drops everything: what River would log while
// migrating or inserting is in the errors it returns.
func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }
