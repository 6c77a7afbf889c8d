package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/outboxlab/outboxlab/fixture"
	"github.com/outboxlab/outboxlab/internal/bench/result"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxlab/outboxlab/outbox"
	"github.com/outboxlab/outboxlab/relay"
	"github.com/outboxlab/outboxlab/testenv"
)

// Env is where the benchmark runs: the URLs of PostgreSQL and RabbitMQ
// that bypass every proxy. *testenv.Env satisfies it; so does URLs.
type Env = fixture.Env

// URLs is an Env of two plain URLs, for servers the harness did not
// start.
type URLs = fixture.URLs

// containerEnv is what an Env offers when its services are containers of
// this machine: their CPU time is then read from their cgroups, they can
// be confined to CPUs (Options.IsolateBroker), and the host may reach them
// at their own addresses.
type containerEnv interface {
	Postgres() *testenv.Container
	RabbitMQ() *testenv.Container
	BridgeURLs(ctx context.Context) (db, amqp string, err error)
}

// infra holds the connections the harness itself uses (never the ones
// under measurement).
type infra struct {
	dbURL, amqpURL string
	admin          *pgxpool.Pool
	amqpConn       *amqp.Connection
	ch             *amqp.Channel
	exchange       string
	queue          string
	schema         string
	fx             *fixture.Fixture
	containers     map[string]string // role -> container id
	// addressing says how the contenders reach the servers.
	addressing string
}

// dialAMQP connects within ctx (amqp091's own dial ignores contexts).
func dialAMQP(ctx context.Context, url, name string) (*amqp.Connection, error) {
	deadline, ok := ctx.Deadline()
	if !ok || time.Until(deadline) > 30*time.Second {
		deadline = time.Now().Add(30 * time.Second)
	}
	props := amqp.NewConnectionProperties()
	props.SetClientConnectionName(name)
	cfg := amqp.Config{
		Heartbeat:  10 * time.Second,
		Locale:     "en_US",
		Properties: props,
		Dial: func(network, addr string) (net.Conn, error) {
			var d net.Dialer
			c, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			if err := c.SetDeadline(deadline); err != nil {
				_ = c.Close()
				return nil, err
			}
			return c, nil
		},
	}
	conn, err := amqp.DialConfig(url, cfg)
	if err != nil {
		return nil, fmt.Errorf("dialing broker %s: %w", relay.RedactURL(url), relay.RedactError(err, url))
	}
	return conn, nil
}

// newInfra connects, removes what an earlier run left in schema and on the
// broker, and makes the run's fixture: the schema and the exchange and
// queue every contender publishes to.
func newInfra(ctx context.Context, env Env, schema, exchange, queue string) (*infra, error) {
	in := &infra{
		dbURL: env.DirectDatabaseURL(), amqpURL: env.DirectAMQPURL(),
		exchange: exchange, queue: queue,
		containers: map[string]string{},
		addressing: result.AddressPublished,
	}
	if ce, ok := env.(containerEnv); ok {
		if c := ce.Postgres(); c != nil {
			in.containers["postgres"] = c.ID()
		}
		if c := ce.RabbitMQ(); c != nil {
			in.containers["rabbitmq"] = c.ID()
		}
		// Every contender talks to the containers at their own addresses
		// where the host reaches them: Docker's port proxy would copy
		// every byte in a process of its own, on the same cores.
		if db, amqp, err := ce.BridgeURLs(ctx); err == nil {
			in.dbURL, in.amqpURL, in.addressing = db, amqp, result.AddressBridge
		}
	}
	fx, err := fixture.New(ctx, fixture.URLs{Database: in.dbURL, AMQP: in.amqpURL}, fixture.Options{
		Schema: schema, Contexts: []string{"bench"}, NoInbox: true, Exchange: exchange, Queue: queue,
		// The benchmark's one type is not the workload's.
		BindingKey: "#",
	})
	if err != nil {
		return nil, fmt.Errorf("bench fixture: %w", err)
	}
	in.fx, in.admin, in.schema = fx, fx.Admin, fx.Schema
	conn, err := dialAMQP(ctx, in.amqpURL, "outboxlab-bench-admin")
	if err != nil {
		in.close()
		return nil, err
	}
	in.amqpConn = conn
	if in.ch, err = conn.Channel(); err != nil {
		in.close()
		return nil, fmt.Errorf("opening admin channel: %w", err)
	}
	if err := in.purge(ctx); err != nil {
		in.close()
		return nil, err
	}
	return in, nil
}

func (in *infra) close() {
	if in.amqpConn != nil {
		_ = in.amqpConn.Close()
	}
	if in.fx != nil {
		_ = in.fx.Close(context.Background())
	}
}

// cleanup removes the schema, the migrations of its tables and the
// topology the run made.
func (in *infra) cleanup(ctx context.Context) error {
	return in.fx.Close(ctx)
}

// queueDepth returns the number of ready messages in the queue.
func (in *infra) queueDepth(ctx context.Context) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	q, err := in.ch.QueueDeclarePassive(in.queue, true, false, false, false, nil)
	if err != nil {
		return 0, fmt.Errorf("reading depth of queue %s: %w", in.queue, err)
	}
	return q.Messages, nil
}

// purge empties the queue.
func (in *infra) purge(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if _, err := in.ch.QueuePurge(in.queue, false); err != nil {
		return fmt.Errorf("purging queue %s: %w", in.queue, err)
	}
	return nil
}

// waitQueueDepth waits until the queue holds want messages, or fails at
// the deadline of ctx with the depth it last saw.
func (in *infra) waitQueueDepth(ctx context.Context, want int) error {
	last := -1
	err := testenv.WaitUntil(ctx, 50*time.Millisecond, func(ctx context.Context) error {
		n, err := in.queueDepth(ctx)
		if err != nil {
			return err
		}
		last = n
		if n < want {
			return fmt.Errorf("queue %s holds %d of %d messages", in.queue, n, want)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("waiting for %d messages in %s (last depth %d): %w", want, in.queue, last, err)
	}
	return nil
}

// newOutbox migrates a fresh outbox table named name in the run's schema.
func (in *infra) newOutbox(ctx context.Context, name string) (outbox.Table, error) {
	return in.fx.NewOutbox(ctx, name)
}

// stageCopy stages every event of w in table with one COPY, then runs
// VACUUM ANALYZE as autovacuum would after such a load (its insert
// threshold would otherwise start one in the middle of the drain).
func (in *infra) stageCopy(ctx context.Context, table outbox.Table, w *workload) error {
	return stageCopy(ctx, in.admin, table, w)
}

// stageCopy stages every event of w in table with one COPY on pool, then
// runs VACUUM ANALYZE.
func stageCopy(ctx context.Context, pool *pgxpool.Pool, table outbox.Table, w *workload) error {
	if err := copyEvents(ctx, pool, table, w); err != nil {
		return err
	}
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE `+table.Ident()); err != nil {
		return fmt.Errorf("vacuuming %s: %w", table, err)
	}
	return nil
}

// copyEvents stages every event of w in table with COPY.
func copyEvents(ctx context.Context, pool *pgxpool.Pool, table outbox.Table, w *workload) error {
	rows := make([][]any, w.len())
	for i := range rows {
		rows[i] = []any{w.ids[i], MessageType, w.payloads[i], w.occurredAt(i)}
	}
	ident := pgx.Identifier{table.Name()}
	if table.Schema() != "" {
		ident = pgx.Identifier{table.Schema(), table.Name()}
	}
	n, err := pool.CopyFrom(ctx, ident,
		[]string{"id", "message_type", "payload", "occurred_at"}, pgx.CopyFromRows(rows))
	if err != nil {
		return fmt.Errorf("staging %d events in %s: %w", w.len(), table, err)
	}
	if int(n) != w.len() {
		return fmt.Errorf("staging %d events in %s: copied %d", w.len(), table, n)
	}
	return nil
}

// isUndefinedTable reports whether err is PostgreSQL's undefined_table.
func isUndefinedTable(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "42P01"
}

// outboxCounts returns the pending, processed and faulted rows of table.
func (in *infra) outboxCounts(ctx context.Context, table outbox.Table) (pending, processed, faulted int64, err error) {
	err = in.admin.QueryRow(ctx, `SELECT
		count(*) FILTER (WHERE processed_at IS NULL AND faulted_at IS NULL),
		count(*) FILTER (WHERE processed_at IS NOT NULL),
		count(*) FILTER (WHERE faulted_at IS NOT NULL)
		FROM `+table.Ident()).Scan(&pending, &processed, &faulted)
	if err != nil {
		err = fmt.Errorf("counting rows of %s: %w", table, err)
	}
	return
}

// cpuClock reads the CPU time this process and the service containers have
// used so far.
type cpuClock struct {
	in *infra
}

// cpuSample is the CPU time used up to one moment.
type cpuSample struct {
	wall     time.Time
	process  time.Duration
	services map[string]time.Duration
	// machine is the CPU time every process of the machine used, when
	// /proc/stat is readable.
	machine time.Duration
	// disk is what the machine's disks did so far, when /proc/diskstats
	// is readable.
	disk diskSample
	// sched is the scheduler's times of this process's and the
	// services' threads, where they are readable.
	sched schedSample
}

// diskSample is the I/O of the machine's disks up to one moment: how long
// the busiest had I/O in flight, and how many flushes (fsync and the like)
// they all served.
type diskSample struct {
	busy    map[string]time.Duration
	flushes int64
}

func (c cpuClock) sample() cpuSample {
	s := cpuSample{wall: time.Now(), process: processCPU(), services: map[string]time.Duration{}, machine: machineCPU(), disk: machineDisk(),
		sched: c.in.sampleSched(false)}
	for role, id := range c.in.containers {
		if d, ok := containerCPU(id); ok {
			s.services[role] = d
		}
	}
	return s
}

func cpuBetween(a, b cpuSample) result.CPU {
	c := result.CPU{ProcessSeconds: (b.process - a.process).Seconds()}
	if a.machine > 0 && b.machine > a.machine {
		c.MachineSeconds = (b.machine - a.machine).Seconds()
	}
	for dev, t := range b.disk.busy {
		if t0, ok := a.disk.busy[dev]; ok {
			c.DiskBusySeconds = max(c.DiskBusySeconds, (t - t0).Seconds())
		}
	}
	if b.disk.flushes > a.disk.flushes {
		c.DiskFlushes = b.disk.flushes - a.disk.flushes
	}
	c.ProcessWaitSeconds = b.sched.self.since(a.sched.self, "", nil).RunQueueMs / 1e3
	c.PostgresWaitSeconds = b.sched.postgres.since(a.sched.postgres, "", nil).RunQueueMs / 1e3
	c.RabbitMQWaitSeconds = b.sched.rabbitmq.since(a.sched.rabbitmq, "", nil).RunQueueMs / 1e3
	if x, ok := a.services["postgres"]; ok {
		if y, ok := b.services["postgres"]; ok {
			c.PostgresSeconds = (y - x).Seconds()
		}
	}
	if x, ok := a.services["rabbitmq"]; ok {
		if y, ok := b.services["rabbitmq"]; ok {
			c.RabbitMQSeconds = (y - x).Seconds()
		}
	}
	return c
}

// loadAverage returns the one-minute load average, or 0 where it cannot be
// read.
func loadAverage() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return 0
	}
	return v
}

// machineCPU returns the CPU time the machine's processors spent busy
// (every state of /proc/stat's cpu line but idle and iowait), or 0 where it
// cannot be read.
func machineCPU() time.Duration {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 8 || f[0] != "cpu" {
		return 0
	}
	var busy int64
	for i, v := range f[1:] {
		if i == 3 || i == 4 || i >= 8 { // idle, iowait; guest time is in user already
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0
		}
		busy += n
	}
	// /proc/stat counts in USER_HZ, 100 per second on Linux.
	return time.Duration(busy) * (time.Second / 100)
}

// machineDisk reads the I/O time and flushes of the machine's whole disks
// (not their partitions, loop or RAM devices) from /proc/diskstats.
func machineDisk() diskSample {
	d := diskSample{busy: map[string]time.Duration{}}
	b, err := os.ReadFile("/proc/diskstats")
	if err != nil {
		return d
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 14 {
			continue
		}
		name := f[2]
		if strings.HasPrefix(name, "loop") || strings.HasPrefix(name, "ram") || strings.HasPrefix(name, "zram") {
			continue
		}
		if _, err := os.Stat(filepath.Join("/sys/block", name)); err != nil {
			continue // a partition
		}
		if ms, err := strconv.ParseInt(f[12], 10, 64); err == nil {
			d.busy[name] = time.Duration(ms) * time.Millisecond
		}
		if len(f) >= 19 {
			if n, err := strconv.ParseInt(f[18], 10, 64); err == nil {
				d.flushes += n
			}
		}
	}
	return d
}

func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// cgroupDirs returns where a container's cgroup may be, where the engine
// runs on this machine: the v1 directories of its cpuacct controller (on
// its own or mounted with cpu), then the v2 directories (systemd's scope,
// or the engine's own tree).
func cgroupDirs(id string) (v1, v2 []string) {
	return []string{
			filepath.Join("/sys/fs/cgroup/cpuacct/docker", id),
			filepath.Join("/sys/fs/cgroup/cpu,cpuacct/docker", id),
		}, []string{
			filepath.Join("/sys/fs/cgroup/system.slice", "docker-"+id+".scope"),
			filepath.Join("/sys/fs/cgroup/docker", id),
		}
}

// containerCPU reads a container's CPU time from its cgroup (v1 cpuacct or
// v2 cpu.stat), where the engine runs on this machine.
func containerCPU(id string) (time.Duration, bool) {
	v1, v2 := cgroupDirs(id)
	for _, dir := range v1 {
		if b, err := os.ReadFile(filepath.Join(dir, "cpuacct.usage")); err == nil {
			if ns, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil {
				return time.Duration(ns), true
			}
		}
	}
	for _, dir := range v2 {
		b, err := os.ReadFile(filepath.Join(dir, "cpu.stat"))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "usage_usec "); ok {
				if us, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil {
					return time.Duration(us) * time.Microsecond, true
				}
			}
		}
	}
	return 0, false
}
