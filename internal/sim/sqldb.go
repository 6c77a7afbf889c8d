package sim

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxlab/outboxlab/checker"
	"github.com/outboxlab/outboxlab/consumer"
	"github.com/outboxlab/outboxlab/outbox"
	"github.com/outboxlab/outboxlab/relay"
	"github.com/outboxlab/outboxlab/workload"
)

// This file is the SQL-faithful backend of the simulation (Options.SQL):
// the same worlds, processes, scheduler, faults and recording as on the
// fakes, but each process's store, inbox and business transactions are
// the production code's own PostgreSQL implementations (relay.PGStore,
// with PGRaw for the statements only mutants issue; consumer.PGInbox;
// workload.PG, which stages with outbox.Stage and NOTIFY) on a
// connection of its own to a fresh database, and each relay's wake-ups
// come through a LISTEN connection of its own.
//
// The database clock is the simulation's. Every connection's search_path
// is SQLSearchPath, which puts the schema simclock, holding now() (and
// transaction_timestamp(), statement_timestamp(), clock_timestamp()) as
// STABLE functions reading the setting simclock.now, ahead of pg_catalog:
// an unqualified now() in a statement resolves to simclock.now(), so the
// production SQL runs unchanged on simulated time. Before each call of a
// process the harness sets simclock.now on its connection to the
// simulation's clock; a producer sets it once, before BEGIN, so that
// now() stays the transaction's start as PostgreSQL's own does. The
// schema is migrated under the same search_path, so column defaults
// (DEFAULT now()) bind to simclock.now() too. current_timestamp,
// localtimestamp and their kind are SQL keywords that a search_path
// cannot shadow: the production statements use none of them, and a test
// keeps it so.
//
// What the tier cannot control, and how determinism is kept anyway:
//   - Row order without ORDER BY (heap order, plans): every read of the
//     harness orders by (occurred_at, id) or sorts; the claim orders
//     itself; a mark's RETURNING rows are put back in the order of the
//     ids the relay passed, as the fake returns them.
//   - Concurrency inside the server: statements are serialised. Exactly
//     one process runs at a time, every relay call is one statement or
//     one transaction that ends within the call, a producer keeps a
//     transaction open across steps, with rows no one else can see or
//     touch, and a consumer's apply is one step per statement
//     (sqlsteps.go): a consumer's statement that meets another's lock
//     fails at once instead of waiting. No relay statement waits on a
//     lock, so SKIP
//     LOCKED never skips and nothing depends on timing; a lock wait would
//     end at statement_timeout as an error in the history, not a hang.
//   - NOTIFY delivery is asynchronous. After a staging transaction
//     commits, the harness makes one round trip on the LISTEN connection
//     of every relay that listens: the committing backend signalled the
//     listening one before its COMMIT returned, and a listening backend
//     sends the notifications it has before it answers the next query,
//     so they are all in the connection's buffer by then. A relay that
//     does not listen at that moment (crashed, stopped, its link cut)
//     drops what piled up when its listener connects again, as
//     relay.Listen loses notifications sent while it is disconnected.
//     The listener's own loop (reconnects, backoff, health pings) stays
//     simulated; the NOTIFY from outbox.Stage to the wake channel is
//     PostgreSQL's.
//   - Rows that tie in an ORDER BY: the sweep orders by processed_at
//     alone, and the rows one mark stamped tie, so which of them a sweep
//     with a small limit deletes is the physical order of the index. That
//     layout is the same for the same statements on a server that runs
//     nothing else, but a transaction in another database holds back the
//     pruning horizon of all of them and moves rows: a server runs one
//     run at a time (SQL), and parallel runs get servers of their own.
//   - Autovacuum, OIDs, xids, business row ids (uuid.New in workload.PG)
//     and the physical layout: autovacuum is off on a throwaway server
//     (see testenv/pgserver), and nothing the history records or the
//     checkers read depends on the others.
//   - Link cuts and crashes happen at the port, as on the fakes: the
//     connection itself is never cut. A call over a cut link that loses
//     its reply runs its statement and then fails; a crash after a call
//     runs it; a crash before does not. A crashed producer's open
//     transaction is rolled back, as the server does when its process's
//     connection closes.
// Each seed gets a fresh database, CREATE DATABASE from a template that
// holds the migrated schema, dropped at the end of the seed.

// SQLSearchPath is the search_path of every connection of the SQL tier:
// the tables in public, then the simulation's clock ahead of pg_catalog.
const SQLSearchPath = "public, simclock, pg_catalog"

// SQLTable is the outbox table of the SQL tier's databases.
var SQLTable = outbox.MustParseTable("outbox")

// sqlBusiness is the business table producers write to.
const sqlBusiness = "business"

// sqlConsumer is the consumer name of every simulated consumer: they are
// replicas of one consumer, sharing its inbox, as on the fakes.
const sqlConsumer = "sim"

// simclockSQL creates the schema of the simulated clock.
const simclockSQL = `CREATE SCHEMA simclock;
CREATE FUNCTION simclock.now() RETURNS timestamptz LANGUAGE sql STABLE PARALLEL SAFE
	AS $$ SELECT current_setting('simclock.now')::timestamptz $$;
CREATE FUNCTION simclock.transaction_timestamp() RETURNS timestamptz LANGUAGE sql STABLE PARALLEL SAFE
	AS $$ SELECT current_setting('simclock.now')::timestamptz $$;
CREATE FUNCTION simclock.statement_timestamp() RETURNS timestamptz LANGUAGE sql STABLE PARALLEL SAFE
	AS $$ SELECT current_setting('simclock.now')::timestamptz $$;
CREATE FUNCTION simclock.clock_timestamp() RETURNS timestamptz LANGUAGE sql VOLATILE PARALLEL SAFE
	AS $$ SELECT current_setting('simclock.now')::timestamptz $$;
CREATE FUNCTION simclock.app_now() RETURNS timestamptz LANGUAGE sql STABLE PARALLEL SAFE
	AS $$ SELECT coalesce(nullif(current_setting('simclock.app', true), ''), current_setting('simclock.now'))::timestamptz $$;`

// AppNowSQL is the SQL tier's expression for the calling process's own
// clock, the database clock plus the process's skew: simclock.app_now()
// reads the setting simclock.app, which the harness sets with
// simclock.now before each call. No production statement reads it; a
// generated mutant swaps now() for it to play a relay that sends its
// application clock to the database as a parameter.
const AppNowSQL = "app_now()"

// SQL is the SQL-faithful backend: PostgreSQL servers on which each run
// gets a fresh database. A server runs one run at a time: the physical
// layout of a table, and with it the order of rows that tie in an ORDER
// BY (the sweep's processed_at), depends on what else runs on the server
// (a transaction open in another database holds back every database's
// pruning horizon), so parallel runs need servers of their own. It is
// safe for concurrent use by the runs of RunMany, which runs as many at
// once as there are servers.
type SQL struct {
	servers []*sqlServer
	free    chan *sqlServer

	// EditStore, when set, is called on every relay.PGStore the backend
	// builds before a relay uses it: a test's way to run the relay on a
	// changed statement (see relay's tests) without touching the fakes.
	EditStore func(*relay.PGStore)
	// EditInbox, when set, is called on every consumer.PGInbox the
	// backend builds before a consumer uses it, as EditStore is on the
	// stores.
	EditInbox func(*consumer.PGInbox)
}

// sqlServer is one server of the backend.
type sqlServer struct {
	admin    *pgxpool.Pool
	base     *url.URL
	template string
	prefix   string
	next     atomic.Uint64
}

// NewSQL prepares the backend on the servers whose maintenance databases
// adminURLs name (a superuser's, or a role that may create databases): on
// each, a template database with the simulated clock, the outbox table,
// the inbox and effects tables and the business table, all migrated under
// SQLSearchPath. Close drops them. Nothing else may run on the servers
// while the backend runs, for the reason SQL gives.
func NewSQL(ctx context.Context, adminURLs ...string) (_ *SQL, err error) {
	if len(adminURLs) == 0 {
		return nil, errors.New("sql tier: no server")
	}
	s := &SQL{free: make(chan *sqlServer, len(adminURLs))}
	for _, u := range adminURLs {
		srv, err := newSQLServer(ctx, u)
		if err != nil {
			return nil, errors.Join(err, s.Close())
		}
		s.servers = append(s.servers, srv)
		s.free <- srv
	}
	return s, nil
}

// Servers returns how many runs the backend runs at once.
func (s *SQL) Servers() int { return len(s.servers) }

// Close drops the template databases and disconnects.
func (s *SQL) Close() error {
	var errs []error
	for _, srv := range s.servers {
		errs = append(errs, srv.close())
	}
	s.servers = nil
	return errors.Join(errs...)
}

func newSQLServer(ctx context.Context, adminURL string) (_ *sqlServer, err error) {
	base, err := url.Parse(adminURL)
	if err != nil {
		return nil, fmt.Errorf("sql tier: parsing the server's URL: %w", err)
	}
	admin, err := pgxpool.New(ctx, adminURL)
	if err != nil {
		return nil, fmt.Errorf("sql tier: connecting to the server: %w", err)
	}
	var tag [4]byte
	_, _ = rand.Read(tag[:])
	s := &sqlServer{admin: admin, base: base, prefix: "outboxlab_sim_" + hex.EncodeToString(tag[:])}
	s.template = s.prefix + "_template"
	defer func() {
		if err != nil {
			err = errors.Join(err, s.close())
		}
	}()
	if _, err := admin.Exec(ctx, `CREATE DATABASE `+pgx.Identifier{s.template}.Sanitize()); err != nil {
		return nil, fmt.Errorf("sql tier: creating the template database: %w", err)
	}
	conn, err := pgx.ConnectConfig(ctx, s.connConfig(s.template))
	if err != nil {
		return nil, fmt.Errorf("sql tier: connecting to the template database: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, simclockSQL); err != nil {
		return nil, fmt.Errorf("sql tier: creating the simulated clock: %w", err)
	}
	if _, err := conn.Exec(ctx, `SELECT set_config('simclock.now', $1, false)`, clockText(Epoch)); err != nil {
		return nil, fmt.Errorf("sql tier: setting the simulated clock: %w", err)
	}
	if err := outbox.Migrate(ctx, conn, SQLTable); err != nil {
		return nil, fmt.Errorf("sql tier: %w", err)
	}
	if err := consumer.MigrateInbox(ctx, conn); err != nil {
		return nil, fmt.Errorf("sql tier: %w", err)
	}
	if _, err := conn.Exec(ctx, `CREATE TABLE `+sqlBusiness+` (id uuid PRIMARY KEY, event_id uuid NOT NULL, note text)`); err != nil {
		return nil, fmt.Errorf("sql tier: creating the business table: %w", err)
	}
	return s, nil
}

// close drops the template database and disconnects.
func (s *sqlServer) close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := s.admin.Exec(ctx, `DROP DATABASE IF EXISTS `+pgx.Identifier{s.template}.Sanitize()+` WITH (FORCE)`)
	s.admin.Close()
	if err != nil {
		return fmt.Errorf("sql tier: dropping the template database: %w", err)
	}
	return nil
}

// connConfig is the configuration of a connection to database db.
func (s *sqlServer) connConfig(db string) *pgx.ConnConfig {
	u := *s.base
	u.Path = "/" + db
	cfg, err := pgx.ParseConfig(u.String())
	if err != nil {
		panic(fmt.Sprintf("sim: the server's URL no longer parses: %v", err))
	}
	cfg.RuntimeParams["search_path"] = SQLSearchPath
	// A statement that waited on a lock would be a harness bug: it ends
	// as an error instead of a hung simulation.
	cfg.RuntimeParams["statement_timeout"] = "30s"
	cfg.RuntimeParams["lock_timeout"] = "10s"
	return cfg
}

// clockText renders t as simclock.now holds it.
func clockText(t time.Time) string {
	return t.UTC().Format("2006-01-02 15:04:05.000000+00")
}

// seedDB is one run's database.
type seedDB struct {
	s       *SQL
	srv     *sqlServer
	name    string
	harness *pgx.Conn // the harness's own reads
	procs   []*procDB
}

// procDB is one process's connections: a pool of one connection for the
// production code, and a relay's LISTEN connection.
type procDB struct {
	db     *seedDB
	pool   *pgxpool.Pool
	raw    *PGRaw
	inbox  *consumer.PGInbox
	listen *pgx.Conn
	// clock and app are what simclock.now and simclock.app hold on the
	// connection (zero: unset).
	clock, app time.Time
	// tx is a producer's open transaction.
	tx workload.Tx
	// steps makes a consumer's statements scheduler steps (sqlsteps.go);
	// nil for the other processes.
	steps *stmtStepper
}

// open creates the run's database on a free server, waiting for one.
func (s *SQL) open(ctx context.Context) (_ *seedDB, err error) {
	var srv *sqlServer
	select {
	case srv = <-s.free:
	case <-ctx.Done():
		return nil, fmt.Errorf("sql tier: waiting for a free server: %w", ctx.Err())
	}
	d := &seedDB{s: s, srv: srv, name: fmt.Sprintf("%s_%d", srv.prefix, srv.next.Add(1))}
	if _, err := srv.admin.Exec(ctx, `CREATE DATABASE `+pgx.Identifier{d.name}.Sanitize()+` TEMPLATE `+pgx.Identifier{srv.template}.Sanitize()); err != nil {
		s.free <- srv
		return nil, fmt.Errorf("sql tier: creating the run's database: %w", err)
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, d.close())
		}
	}()
	if d.harness, err = pgx.ConnectConfig(ctx, srv.connConfig(d.name)); err != nil {
		return nil, fmt.Errorf("sql tier: connecting: %w", err)
	}
	return d, nil
}

// proc builds the connections of process p.
func (d *seedDB) proc(ctx context.Context, k kind) (*procDB, error) {
	pd := &procDB{db: d}
	cfg, err := pgxpool.ParseConfig("")
	if err != nil {
		return nil, err
	}
	cfg.ConnConfig = d.srv.connConfig(d.name)
	cfg.MaxConns, cfg.MinConns = 1, 0
	cfg.HealthCheckPeriod = time.Hour
	cfg.MaxConnLifetime, cfg.MaxConnIdleTime = 24*time.Hour, 24*time.Hour
	if k == kindConsumer {
		pd.steps = &stmtStepper{}
		cfg.ConnConfig.Tracer = pd.steps
		cfg.ConnConfig.RuntimeParams["lock_timeout"] = consumerLockTimeout
	}
	// A new connection holds no clock yet.
	cfg.AfterConnect = func(context.Context, *pgx.Conn) error { pd.clock, pd.app = time.Time{}, time.Time{}; return nil }
	if pd.pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		return nil, fmt.Errorf("sql tier: %w", err)
	}
	d.procs = append(d.procs, pd)
	switch k {
	case kindRelay:
		st := relay.NewPGStore(pd.pool, SQLTable)
		if d.s.EditStore != nil {
			d.s.EditStore(st)
		}
		pd.raw = newPGRawOn(st, pd.pool, SQLTable)
		if pd.listen, err = pgx.ConnectConfig(ctx, d.srv.connConfig(d.name)); err != nil {
			return nil, fmt.Errorf("sql tier: connecting a listener: %w", err)
		}
		if _, err := pd.listen.Exec(ctx, `LISTEN `+pgx.Identifier{SQLTable.Channel()}.Sanitize()); err != nil {
			return nil, fmt.Errorf("sql tier: LISTEN: %w", err)
		}
	case kindConsumer:
		if pd.inbox, err = consumer.NewPGInbox(pd.pool, sqlConsumer, consumer.RecordEffect(sqlConsumer)); err != nil {
			return nil, fmt.Errorf("sql tier: %w", err)
		}
		if d.s.EditInbox != nil {
			d.s.EditInbox(pd.inbox)
		}
	}
	return pd, nil
}

// close disconnects everything and drops the database.
func (d *seedDB) close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, pd := range d.procs {
		if pd.tx != nil {
			_ = pd.tx.Rollback(ctx)
			pd.tx = nil
		}
		if pd.listen != nil {
			_ = pd.listen.Close(ctx)
		}
		pd.pool.Close()
	}
	if d.harness != nil {
		_ = d.harness.Close(ctx)
	}
	_, err := d.srv.admin.Exec(ctx, `DROP DATABASE IF EXISTS `+pgx.Identifier{d.name}.Sanitize()+` WITH (FORCE)`)
	d.s.free <- d.srv
	if err != nil {
		return fmt.Errorf("sql tier: dropping the run's database: %w", err)
	}
	return nil
}

// sync sets simclock.now on the process's connection to now, and
// simclock.app (AppNowSQL) to app, the process's own clock, in the same
// statement.
func (pd *procDB) sync(ctx context.Context, now, app time.Time) error {
	if now.Equal(pd.clock) && app.Equal(pd.app) {
		return nil
	}
	if _, err := pd.pool.Exec(ctx, `SELECT set_config('simclock.now', $1, false), set_config('simclock.app', $2, false)`,
		clockText(now), clockText(app)); err != nil {
		return fmt.Errorf("setting the database clock: %w", err)
	}
	pd.clock, pd.app = now, app
	return nil
}

// Check prepares each statement of stmts on a fresh database of the
// backend, migrated as every run's is, and returns the first error the
// server reports: a statement that does not parse or names what does not
// exist fails here, as a Go mutant that does not compile fails its build.
func (s *SQL) Check(ctx context.Context, stmts ...string) (err error) {
	d, err := s.open(ctx)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, d.close()) }()
	for i, q := range stmts {
		if _, err := d.harness.Prepare(ctx, fmt.Sprintf("check_%d", i), q); err != nil {
			return fmt.Errorf("preparing statement %d: %w", i+1, err)
		}
	}
	return nil
}

// notified makes one round trip on the relay's LISTEN connection and
// reports whether a notification had arrived; it consumes them all.
func (pd *procDB) notified(ctx context.Context) (bool, error) {
	if _, err := pd.listen.Exec(ctx, `SELECT 1`); err != nil {
		return false, fmt.Errorf("sql tier: listener round trip: %w", err)
	}
	done, cancel := context.WithCancel(ctx)
	cancel()
	got := false
	for {
		n, _ := pd.listen.WaitForNotification(done)
		if n == nil {
			return got, nil
		}
		got = true
	}
}

// harnessCtx bounds one read of the harness.
func harnessCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 30*time.Second)
}

// pending reports whether the table holds a pending row.
func (d *seedDB) pending() (bool, error) {
	ctx, cancel := harnessCtx()
	defer cancel()
	var any bool
	err := d.harness.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM outbox WHERE processed_at IS NULL AND faulted_at IS NULL)`).Scan(&any)
	if err != nil {
		return false, fmt.Errorf("sql tier: reading the backlog: %w", err)
	}
	return any, nil
}

// nextEligible is Store.NextEligible on the table, at the database time
// now.
func (d *seedDB) nextEligible(now time.Time) (time.Time, bool, error) {
	ctx, cancel := harnessCtx()
	defer cancel()
	var (
		eligible *bool
		next     *time.Time
	)
	err := d.harness.QueryRow(ctx, `SELECT bool_or(locked_until IS NULL OR locked_until < $1), min(locked_until)
FROM outbox WHERE processed_at IS NULL AND faulted_at IS NULL`, now).Scan(&eligible, &next)
	if err != nil {
		return time.Time{}, false, fmt.Errorf("sql tier: reading the next lease expiry: %w", err)
	}
	switch {
	case eligible == nil:
		return time.Time{}, false, nil
	case *eligible:
		return now, true, nil
	}
	return next.Add(time.Microsecond), true, nil
}

// existing returns the ids of ids still in the table, in the order of ids.
func (d *seedDB) existing(ids []uuid.UUID) ([]uuid.UUID, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	ctx, cancel := harnessCtx()
	defer cancel()
	rows, err := d.harness.Query(ctx, `SELECT id FROM outbox WHERE id = ANY($1)`, pgUUIDs(ids))
	if err != nil {
		return nil, fmt.Errorf("sql tier: reading rows: %w", err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		return nil, fmt.Errorf("sql tier: reading rows: %w", err)
	}
	return inOrderOf(ids, got), nil
}

// processed returns the ids of the processed rows, oldest processed_at
// first: what a sweep may delete.
func (d *seedDB) processed() ([]uuid.UUID, error) {
	ctx, cancel := harnessCtx()
	defer cancel()
	rows, err := d.harness.Query(ctx, `SELECT id FROM outbox WHERE processed_at IS NOT NULL ORDER BY processed_at, id`)
	if err != nil {
		return nil, fmt.Errorf("sql tier: reading processed rows: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		return nil, fmt.Errorf("sql tier: reading processed rows: %w", err)
	}
	return ids, nil
}

// state reads the final outbox rows and effects.
func (d *seedDB) state(st *checker.State, outboxRows bool) error {
	ctx, cancel := harnessCtx()
	defer cancel()
	effects, err := consumer.EffectCounts(ctx, d.harness, sqlConsumer)
	if err != nil {
		return fmt.Errorf("sql tier: %w", err)
	}
	st.Effects = effects
	if !outboxRows {
		return nil
	}
	rows, err := d.harness.Query(ctx, `SELECT id, message_type, attempts, occurred_at, processed_at, faulted_at
FROM outbox ORDER BY occurred_at, id`)
	if err != nil {
		return fmt.Errorf("sql tier: reading the outbox: %w", err)
	}
	st.Outbox = map[string]checker.RowState{}
	var (
		id       uuid.UUID
		r        checker.RowState
		occurred time.Time
	)
	_, err = pgx.ForEachRow(rows, []any{&id, &r.Type, &r.Attempts, &occurred, &r.ProcessedAt, &r.FaultedAt}, func() error {
		r.ID, r.OccurredAt = id.String(), occurred.UTC()
		if r.ProcessedAt != nil {
			t := r.ProcessedAt.UTC()
			r.ProcessedAt = &t
		}
		if r.FaultedAt != nil {
			t := r.FaultedAt.UTC()
			r.FaultedAt = &t
		}
		st.Outbox[r.ID] = r
		r = checker.RowState{}
		return nil
	})
	if err != nil {
		return fmt.Errorf("sql tier: reading the outbox: %w", err)
	}
	return nil
}

func pgUUIDs(ids []uuid.UUID) []pgtype.UUID {
	out := make([]pgtype.UUID, len(ids))
	for i, id := range ids {
		out[i] = pgtype.UUID{Bytes: id, Valid: true}
	}
	return out
}

// inOrderOf returns the ids of got in the order they have in ids.
func inOrderOf(ids, got []uuid.UUID) []uuid.UUID {
	if len(got) == 0 {
		return nil
	}
	out := make([]uuid.UUID, 0, len(got))
	for _, id := range ids {
		if slices.Contains(got, id) && !slices.Contains(out, id) {
			out = append(out, id)
		}
	}
	return out
}

// without returns the ids of all not in some, in their order.
func without(all, some []uuid.UUID) []uuid.UUID {
	drop := make(map[uuid.UUID]bool, len(some))
	for _, id := range some {
		drop[id] = true
	}
	var out []uuid.UUID
	for _, id := range all {
		if !drop[id] {
			out = append(out, id)
		}
	}
	return out
}
