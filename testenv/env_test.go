package testenv

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/moby/moby/client"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxlab/outboxlab/contract"
)

// TestEnvironment starts an environment and checks what the harness relies
// on: writes and persistent messages through the proxies, a cut link that
// fails publishes until healed, a lost confirm, a broker killed and started
// again that still has its persistent messages, a paused database that
// times clients out until unpaused, a database killed and started again
// that still has its committed rows, a restarted toxiproxy that still
// proxies, containers on the network reaching the proxies, and nothing of
// the environment left after Close.
func TestEnvironment(t *testing.T) {
	env := StartT(t, Options{})
	t.Logf("environment ready in %s", env.ReadyAfter().Round(time.Millisecond))
	// Connections that outlive a subtest are closed when the test ends.
	top := t
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	// PostgreSQL through app->db; read back directly.
	db := connectPG(ctx, t, env.DatabaseURL(LinkAppDB))
	mustExec(ctx, t, db, `CREATE TABLE testenv_rows (id int PRIMARY KEY, note text NOT NULL)`)
	mustExec(ctx, t, db, `INSERT INTO testenv_rows VALUES (1, 'committed before the crash')`)
	if n := countRows(ctx, t, env.DirectDatabaseURL()); n != 1 {
		t.Fatalf("direct read sees %d rows, want 1", n)
	}

	// A persistent message round trip: published through relay->broker with
	// a confirm, fetched through consumer->broker.
	pub := newPublisher(ctx, t, env.AMQPURL(LinkRelayBroker))
	const queue = "testenv.durable"
	pub.declare(ctx, t, queue)
	if err := pub.publish(ctx, queue, "round-trip"); err != nil {
		t.Fatalf("publishing through relay->broker: %v", err)
	}
	if got := getOne(ctx, t, env.AMQPURL(LinkConsumerBroker), queue); got != "round-trip" {
		t.Fatalf("consumer->broker got %q, want round-trip", got)
	}

	t.Run("cut link fails publishes until healed", func(t *testing.T) {
		p, err := env.Proxy(LinkRelayBroker)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Disable(); err != nil {
			t.Fatalf("disabling relay->broker: %v", err)
		}
		if err := pub.publish(ctx, queue, "during-cut"); err == nil {
			t.Fatal("a publish through the cut link was confirmed")
		} else {
			t.Logf("publish through the cut link failed as expected: %v", err)
		}
		if _, err := newPublisherErr(ctx, env.AMQPURL(LinkRelayBroker)); err == nil {
			t.Fatal("a new connection through the cut link succeeded")
		}
		if err := p.Enable(); err != nil {
			t.Fatalf("enabling relay->broker: %v", err)
		}
		healed := newPublisher(ctx, top, env.AMQPURL(LinkRelayBroker))
		if err := healed.publish(ctx, queue, "after-heal"); err != nil {
			t.Fatalf("publishing after the heal: %v", err)
		}
		if got := getOne(ctx, t, env.AMQPURL(LinkConsumerBroker), queue); got != "after-heal" {
			t.Fatalf("got %q after the heal, want after-heal", got)
		}
		pub = healed
	})

	t.Run("lost confirm times out", func(t *testing.T) {
		const q = "testenv.confirm-lost"
		pub.declare(ctx, t, q)
		p, err := env.Proxy(LinkRelayBroker)
		if err != nil {
			t.Fatal(err)
		}
		// timeout 0 holds the broker's answers until the toxic is removed.
		if _, err := p.AddToxic("hold", "timeout", "downstream", 1, map[string]any{"timeout": 0}); err != nil {
			t.Fatalf("adding a timeout toxic: %v", err)
		}
		err = pub.publish(ctx, q, "confirm-held")
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("publish with the confirm held = %v, want a deadline", err)
		}
		if err := p.RemoveToxic("hold"); err != nil {
			t.Fatalf("removing the toxic: %v", err)
		}
		// The message did reach the broker: a lost confirm is not a lost
		// message, which is why relays deliver at least once.
		if got := getOne(ctx, t, env.DirectAMQPURL(), q); got != "confirm-held" {
			t.Fatalf("got %q, want confirm-held", got)
		}
		pub = newPublisher(ctx, top, env.AMQPURL(LinkRelayBroker))
	})

	t.Run("persistent message survives a broker kill", func(t *testing.T) {
		if err := pub.publish(ctx, queue, "survivor"); err != nil {
			t.Fatalf("publishing: %v", err)
		}
		if err := env.RabbitMQ().Kill(ctx); err != nil {
			t.Fatal(err)
		}
		if st, err := env.RabbitMQ().State(ctx); err != nil || st.Running {
			t.Fatalf("after Kill: state %+v, %v; want stopped", st, err)
		}
		began := time.Now()
		if err := env.RabbitMQ().Start(ctx); err != nil {
			t.Fatal(err)
		}
		if err := env.RabbitMQ().WaitReady(ctx); err != nil {
			t.Fatal(err)
		}
		t.Logf("rabbitmq accepted connections %s after its start", time.Since(began).Round(time.Millisecond))
		if got := getOne(ctx, t, env.AMQPURL(LinkConsumerBroker), queue); got != "survivor" {
			t.Fatalf("after the kill the queue gave %q, want survivor", got)
		}
		pub = newPublisher(ctx, top, env.AMQPURL(LinkRelayBroker))
	})

	t.Run("paused database times clients out", func(t *testing.T) {
		conn := connectPG(ctx, t, env.DatabaseURL(LinkAppDB))
		if err := env.Postgres().Pause(ctx); err != nil {
			t.Fatal(err)
		}
		paused := true
		defer func() {
			if paused {
				_ = env.Postgres().Unpause(context.WithoutCancel(ctx))
			}
		}()
		qctx, qcancel := context.WithTimeout(ctx, time.Second)
		var one int
		err := conn.QueryRow(qctx, "SELECT 1").Scan(&one)
		qcancel()
		if err == nil {
			t.Fatal("a query to the paused database answered")
		}
		t.Logf("query to the paused database failed as expected: %v", err)
		if err := env.Postgres().Unpause(ctx); err != nil {
			t.Fatal(err)
		}
		paused = false
		wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
		defer wcancel()
		err = WaitUntil(wctx, 100*time.Millisecond, func(ctx context.Context) error {
			return pingPostgres(ctx, env.DatabaseURL(LinkAppDB))
		})
		if err != nil {
			t.Fatalf("database after unpause: %v", err)
		}
	})

	t.Run("committed rows survive a database kill", func(t *testing.T) {
		if err := env.Postgres().Kill(ctx); err != nil {
			t.Fatal(err)
		}
		began := time.Now()
		if err := env.Postgres().Start(ctx); err != nil {
			t.Fatal(err)
		}
		if err := env.Postgres().WaitReady(ctx); err != nil {
			t.Fatal(err)
		}
		t.Logf("postgres accepted connections %s after its start", time.Since(began).Round(time.Millisecond))
		if n := countRows(ctx, t, env.DatabaseURL(LinkConsumerDB)); n != 1 {
			t.Fatalf("after the kill %d rows, want 1", n)
		}
	})

	t.Run("restarted toxiproxy proxies again", func(t *testing.T) {
		if err := env.Toxiproxy().Restart(ctx); err != nil {
			t.Fatal(err)
		}
		if n := countRows(ctx, t, env.DatabaseURL(LinkRelayDB)); n != 1 {
			t.Fatalf("through relay->db after the restart: %d rows, want 1", n)
		}
		if err := newPublisher(ctx, t, env.AMQPURL(LinkRelayBroker)).publish(ctx, queue, "after-proxy-restart"); err != nil {
			t.Fatalf("publishing after the toxiproxy restart: %v", err)
		}
	})

	t.Run("containers on the network reach the proxies", func(t *testing.T) {
		// The base image stands in for a relay: StartRelay's plumbing is
		// the same for any image.
		// sleep, as PID 1, ignores SIGTERM: Stop and Restart end it with
		// SIGKILL after StopTimeout.
		c, err := env.StartRelay(ctx, RelaySpec{Image: ImageBase, Cmd: []string{"sleep", "infinity"}, StopTimeout: time.Second,
			Env: map[string]string{contract.EnvTable: "outbox", contract.EnvExchange: "outbox"}})
		if err != nil {
			t.Fatal(err)
		}
		if c.Name() != "relay-1" {
			t.Errorf("first relay named %q, want relay-1", c.Name())
		}
		for name, want := range map[string]*Container{"relay-1": c, "postgres": env.Postgres(), "rabbitmq": env.RabbitMQ(), "toxiproxy": env.Toxiproxy()} {
			if got, ok := env.Container(name); !ok || got != want {
				t.Errorf("Container(%q) = %v, %v; want %v", name, got, ok, want)
			}
		}
		if got, ok := env.Container("relay-2"); ok {
			t.Errorf("Container(relay-2) = %v, want none", got)
		}
		code, out, err := c.Exec(ctx, "printenv", contract.EnvDatabaseURL, contract.EnvAMQPURL, contract.EnvRelayID)
		if err != nil || code != 0 {
			t.Fatalf("printenv: %d %q %v", code, out, err)
		}
		want := env.ContainerDatabaseURL(LinkRelayDB) + "\n" + env.ContainerAMQPURL(LinkRelayBroker) + "\nrelay-1\n"
		if out != want {
			t.Fatalf("relay environment:\n%s\nwant:\n%s", out, want)
		}
		// bash's /dev/tcp opens a TCP connection: each proxy port and the
		// services answer by their aliases.
		for _, target := range []string{"toxiproxy/20000", "toxiproxy/20002", "postgres/5432", "rabbitmq/5672"} {
			code, out, err := c.Exec(ctx, "bash", "-c", "exec 3<>/dev/tcp/"+target)
			if err != nil || code != 0 {
				t.Errorf("connecting to %s from a container: exit %d %q %v", target, code, out, err)
			}
		}
		if err := c.Kill(ctx); err != nil {
			t.Fatal(err)
		}
		if err := c.Start(ctx); err != nil {
			t.Fatal(err)
		}
		if err := c.Restart(ctx); err != nil {
			t.Fatal(err)
		}
		if err := c.Remove(ctx); err != nil {
			t.Fatal(err)
		}
		if _, ok := env.Container("relay-1"); ok {
			t.Error("a removed container is still found by name")
		}
		if _, err := env.StartContainer(ctx, ContainerSpec{Name: "relay-1", Image: ImageBase, Cmd: []string{"sleep", "infinity"}}); err != nil {
			t.Fatalf("a removed container's name is free again: %v", err)
		}
	})

	if t.Failed() {
		return // StartT's cleanup shows the containers' logs, then removes them.
	}
	if err := env.Close(ctx); err != nil {
		t.Fatal(err)
	}
	assertGone(ctx, t, env.RunID())
}

// TestEnvironmentWithoutBroker starts PostgreSQL and toxiproxy alone.
func TestEnvironmentWithoutBroker(t *testing.T) {
	env := StartT(t, Options{NoBroker: true, Links: []Link{{Name: "relay-2-db", Service: ServiceDB}}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if env.RabbitMQ() != nil {
		t.Fatal("RabbitMQ() is not nil under NoBroker")
	}
	for _, l := range env.Links() {
		if l.Service == ServiceBroker {
			t.Errorf("broker link %s declared under NoBroker", l.Name)
		}
	}
	db := connectPG(ctx, t, env.DatabaseURL("relay-2-db"))
	mustExec(ctx, t, db, `CREATE TABLE testenv_rows (id int PRIMARY KEY, note text NOT NULL)`)
	if n := countRows(ctx, t, env.DatabaseURL(LinkConsumerDB)); n != 0 {
		t.Fatalf("%d rows in a new table", n)
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("AMQPURL did not panic under NoBroker")
			}
		}()
		env.AMQPURL(LinkRelayBroker)
	}()
	if err := env.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestMissingImage checks that an image that was never built is reported
// with the command that builds it, before anything is created.
func TestMissingImage(t *testing.T) {
	if testing.Short() {
		t.Skip("needs Docker")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := DockerAvailable(ctx); err != nil {
		t.Skip(err)
	}
	_, err := Start(ctx, Options{PostgresImage: "outboxlab/postgres:missing"})
	if !errors.Is(err, ErrImageNotFound) || !strings.Contains(err.Error(), "make images") || !strings.Contains(err.Error(), "outboxlab/postgres:missing") {
		t.Fatalf("Start with a missing image = %v, want ErrImageNotFound naming the image and `make images`", err)
	}
	t.Logf("as expected: %v", err)
}

// TestImageExists checks the look-up the outboxlab command makes before
// it starts containers (a container test: it needs a Docker engine and
// `make images`).
func TestImageExists(t *testing.T) {
	if testing.Short() {
		t.Skip("needs Docker")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := DockerAvailable(ctx); err != nil {
		t.Skip(err)
	}
	if ok, err := ImageExists(ctx, ImagePostgres); err != nil || !ok {
		t.Errorf("ImageExists(%s) = %v, %v; want true (built by `make images`)", ImagePostgres, ok, err)
	}
	if ok, err := ImageExists(ctx, "outboxlab/never-built:missing"); err != nil || ok {
		t.Errorf("ImageExists of an image never built = %v, %v; want false, no error", ok, err)
	}
}

// assertGone fails t when anything labelled with run is left.
func assertGone(ctx context.Context, t *testing.T, run string) {
	t.Helper()
	c, err := client.New(client.FromEnv)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	filter := make(client.Filters).Add("label", LabelRun+"="+run)
	cs, err := c.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: filter})
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range cs.Items {
		t.Errorf("container %v left after Close", x.Names)
	}
	ns, err := c.NetworkList(ctx, client.NetworkListOptions{Filters: filter})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range ns.Items {
		t.Errorf("network %s left after Close", n.Name)
	}
}

func connectPG(ctx context.Context, t *testing.T, url string) *pgx.Conn {
	t.Helper()
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(cctx, url)
	if err != nil {
		t.Fatalf("connecting to %s: %v", url, err)
	}
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = conn.Close(cctx)
	})
	return conn
}

func mustExec(ctx context.Context, t *testing.T, conn *pgx.Conn, sql string) {
	t.Helper()
	if _, err := conn.Exec(ctx, sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func countRows(ctx context.Context, t *testing.T, url string) int {
	t.Helper()
	conn := connectPG(ctx, t, url)
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM testenv_rows`).Scan(&n); err != nil {
		t.Fatalf("counting rows: %v", err)
	}
	return n
}

// publisher publishes persistent, mandatory messages on a channel in
// confirm mode and waits for each confirm.
type publisher struct {
	conn *amqp.Connection
	ch   *amqp.Channel
}

func newPublisherErr(ctx context.Context, url string) (*publisher, error) {
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := DialAMQP(dctx, url)
	if err != nil {
		return nil, err
	}
	ch, err := conn.Channel()
	if err == nil {
		err = ch.Confirm(false)
	}
	if err != nil {
		_ = conn.Close()
		return nil, err
	}
	return &publisher{conn: conn, ch: ch}, nil
}

func newPublisher(ctx context.Context, t *testing.T, url string) *publisher {
	t.Helper()
	p, err := newPublisherErr(ctx, url)
	if err != nil {
		t.Fatalf("connecting to %s: %v", url, err)
	}
	t.Cleanup(func() { _ = p.conn.Close() })
	return p
}

func (p *publisher) declare(ctx context.Context, t *testing.T, queue string) {
	t.Helper()
	if _, err := p.ch.QueueDeclare(queue, true, false, false, false, nil); err != nil {
		t.Fatalf("declaring %s: %v", queue, err)
	}
}

// publish sends body to queue and waits at most 3 s for the confirm.
func (p *publisher) publish(ctx context.Context, queue, body string) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	dc, err := p.ch.PublishWithDeferredConfirmWithContext(ctx, "", queue, true, false, amqp.Publishing{
		DeliveryMode: amqp.Persistent, ContentType: "text/plain", Body: []byte(body),
	})
	if err != nil {
		return err
	}
	ok, err := dc.WaitContext(ctx)
	if err != nil {
		return err
	}
	if !ok {
		return errors.New("nacked")
	}
	return nil
}

// getOne fetches and acks one message from queue, waiting for it at most
// 10 s.
func getOne(ctx context.Context, t *testing.T, url, queue string) string {
	t.Helper()
	gctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := DialAMQP(gctx, url)
	if err != nil {
		t.Fatalf("connecting to %s: %v", url, err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	var body string
	err = WaitUntil(gctx, 50*time.Millisecond, func(context.Context) error {
		m, ok, err := ch.Get(queue, false)
		if err != nil {
			return err
		}
		if !ok {
			return errors.New("queue empty")
		}
		body = string(m.Body)
		return m.Ack(false)
	})
	if err != nil {
		t.Fatalf("getting a message from %s: %v", queue, err)
	}
	return body
}
