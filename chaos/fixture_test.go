package chaos_test

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2/client"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxlab/outboxlab/chaos"
	"github.com/outboxlab/outboxlab/relay"
)

// fixture is one test's own infrastructure: PostgreSQL and RabbitMQ
// containers, reached through the toxiproxy links app->db and
// relay->broker. The tests kill and pause these containers, so they are
// never shared.
type fixture struct {
	toxi                     *toxiproxy.Client
	appDB, relayBroker       *chaos.Link
	dbURL, dbDirectURL       string // through app->db, and straight to the container
	amqpURL, amqpDirectURL   string // through relay->broker, and straight
	postgres, rabbitmq       chaos.Container
	network, prefix          string
	containers               []string
	toxiAPI, pgAddr, rmqAddr string
}

// dockerContainer is a chaos.Container driven by the docker command.
type dockerContainer struct{ name string }

func (c dockerContainer) Name() string { return c.name }

func (c dockerContainer) run(ctx context.Context, args ...string) error {
	out, err := exec.CommandContext(ctx, "docker", append(args, c.name)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("docker %s %s: %w: %s", args[0], c.name, err, strings.TrimSpace(string(out)))
	}
	return nil
}

func (c dockerContainer) Kill(ctx context.Context) error {
	return c.run(ctx, "kill", "--signal", "KILL")
}
func (c dockerContainer) Stop(ctx context.Context, timeout time.Duration) error {
	return c.run(ctx, "stop", "--time", fmt.Sprint(int(timeout.Seconds())))
}
func (c dockerContainer) Start(ctx context.Context) error   { return c.run(ctx, "start") }
func (c dockerContainer) Pause(ctx context.Context) error   { return c.run(ctx, "pause") }
func (c dockerContainer) Unpause(ctx context.Context) error { return c.run(ctx, "unpause") }
func (c dockerContainer) Restart(ctx context.Context) error { return c.run(ctx, "restart") }

var _ chaos.Container = dockerContainer{}

func docker(ctx context.Context, args ...string) (string, error) {
	out, err := exec.CommandContext(ctx, "docker", args...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("docker %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return strings.TrimSpace(string(out)), nil
}

const (
	imagePostgres  = "outboxlab/postgres:15"
	imageRabbitMQ  = "outboxlab/rabbitmq:3.10"
	imageToxiproxy = "outboxlab/toxiproxy:2.5.0"
)

// newFixture starts the test's containers and proxies, or skips under
// -short or without Docker; everything is removed when the test ends.
func newFixture(t *testing.T) *fixture {
	t.Helper()
	if testing.Short() {
		t.Skip("chaos on real containers (skipped with -short)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if _, err := docker(ctx, "info", "--format", "{{.ServerVersion}}"); err != nil {
		t.Skipf("no Docker: %v", err)
	}
	for _, img := range []string{imagePostgres, imageRabbitMQ, imageToxiproxy} {
		if _, err := docker(ctx, "image", "inspect", "--format", "{{.Id}}", img); err != nil {
			t.Fatalf("image %s is missing: run `make images`", img)
		}
	}
	f := &fixture{prefix: fmt.Sprintf("chaos-%d", time.Now().UnixNano())}
	t.Cleanup(f.remove)
	f.network = f.prefix + "-net"
	if _, err := docker(ctx, "network", "create", "--label", "org.outboxlab.harness=true", f.network); err != nil {
		t.Fatal(err)
	}
	run := func(name, image string, ports ...string) {
		args := []string{"run", "-d", "--name", name, "--network", f.network, "--network-alias", strings.TrimPrefix(name, f.prefix+"-"),
			"--label", "org.outboxlab.harness=true"}
		for _, p := range ports {
			args = append(args, "-p", "127.0.0.1::"+p)
		}
		args = append(args, image)
		if _, err := docker(ctx, args...); err != nil {
			t.Fatal(err)
		}
		f.containers = append(f.containers, name)
	}
	port := func(name, p string) string {
		out, err := docker(ctx, "port", name, p+"/tcp")
		if err != nil {
			t.Fatal(err)
		}
		return strings.Split(out, "\n")[0]
	}
	run(f.prefix+"-postgres", imagePostgres, "5432")
	run(f.prefix+"-rabbitmq", imageRabbitMQ, "5672")
	run(f.prefix+"-toxiproxy", imageToxiproxy, "8474", "15432", "15672")
	f.postgres = dockerContainer{f.prefix + "-postgres"}
	f.rabbitmq = dockerContainer{f.prefix + "-rabbitmq"}
	f.pgAddr = port(f.prefix+"-postgres", "5432")
	f.rmqAddr = port(f.prefix+"-rabbitmq", "5672")
	f.toxiAPI = port(f.prefix+"-toxiproxy", "8474")
	f.toxi = toxiproxy.NewClient(f.toxiAPI)
	if err := chaos.WaitFor(ctx, 100*time.Millisecond, func(context.Context) (bool, error) {
		_, err := f.toxi.Proxies()
		return err == nil, nil
	}); err != nil {
		t.Fatalf("toxiproxy API at %s: %v", f.toxiAPI, err)
	}
	mk := func(name, listen, upstream string) *chaos.Link {
		if _, err := f.toxi.CreateProxy(name, listen, upstream); err != nil {
			t.Fatalf("creating proxy %s: %v", name, err)
		}
		l, err := chaos.LinkByName(ctx, f.toxi, name, "")
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	f.appDB = mk("app->db", "0.0.0.0:15432", "postgres:5432")
	f.relayBroker = mk("relay->broker", "0.0.0.0:15672", "rabbitmq:5672")
	pgProxy := port(f.prefix+"-toxiproxy", "15432")
	rmqProxy := port(f.prefix+"-toxiproxy", "15672")
	f.dbURL = "postgres://outbox:outbox@" + pgProxy + "/outbox?sslmode=disable&connect_timeout=10"
	f.dbDirectURL = "postgres://outbox:outbox@" + f.pgAddr + "/outbox?sslmode=disable&connect_timeout=10"
	f.amqpURL = "amqp://outbox:outbox@" + rmqProxy + "/"
	f.amqpDirectURL = "amqp://outbox:outbox@" + f.rmqAddr + "/"
	// Wait for both servers to answer through their proxies.
	waitPG(t, ctx, f.dbURL, 2*time.Minute)
	if err := chaos.WaitFor(ctx, 250*time.Millisecond, func(ctx context.Context) (bool, error) {
		c, err := net.DialTimeout("tcp", f.rmqAddr, time.Second)
		if err != nil {
			return false, nil
		}
		c.Close()
		return relay.WithChannel(ctx, f.amqpURL, func(*amqp.Channel) error { return nil }) == nil, nil
	}); err != nil {
		t.Fatalf("RabbitMQ did not come up: %v", err)
	}
	return f
}

func (f *fixture) remove() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, c := range f.containers {
		_, _ = docker(ctx, "rm", "-f", "-v", c)
	}
	if f.network != "" {
		_, _ = docker(ctx, "network", "rm", f.network)
	}
}
