package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/outboxlab/outboxlab/history"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestOptionsValidate(t *testing.T) {
	cases := []struct {
		name string
		opts Options
		want string // substring of the error; "" for valid
	}{
		{"zero", Options{}, ""},
		{"extra links", Options{Links: []Link{{Name: "relay-2-db", Service: ServiceDB}, {Name: "relay-2-broker", Service: ServiceBroker}}}, ""},
		{"bad name", Options{Links: []Link{{Name: "Relay_2", Service: ServiceDB}}}, "lowercase"},
		{"duplicate of a default", Options{Links: []Link{{Name: LinkAppDB, Service: ServiceDB}}}, "declared twice"},
		{"unknown service", Options{Links: []Link{{Name: "x", Service: "cache"}}}, "unknown service"},
		{"negative timeout", Options{ReadyTimeout: -time.Second}, "negative"},
		{"no broker", Options{NoBroker: true, Links: []Link{{Name: "relay-2-db", Service: ServiceDB}}}, ""},
		{"broker link without a broker", Options{NoBroker: true, Links: []Link{{Name: "relay-2-broker", Service: ServiceBroker}}}, "NoBroker"},
		{"a cluster", Options{BrokerNodes: 3}, ""},
		{"too big a cluster", Options{BrokerNodes: MaxBrokerNodes + 1}, "BrokerNodes"},
		{"a cluster and no broker", Options{BrokerNodes: 3, NoBroker: true}, "both set"},
		{"a synchronous standby", Options{Standby: ReplicationSync}, ""},
		{"an unknown replication", Options{Standby: "semi"}, "Standby"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.opts.Validate()
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate() = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// fakeEnv is an environment whose ports are set by hand, for the URL
// helpers.
func fakeEnv() *Env {
	e := &Env{host: "127.0.0.1", linkIndex: map[string]*link{}, pgHostPort: 15432, amqpHostPort: 15672, toxiHostPort: 18474}
	for i, l := range DefaultLinks() {
		e.links = append(e.links, link{Link: l, listenPort: proxyPortBase + i, hostPort: 30000 + i})
	}
	for i := range e.links {
		e.linkIndex[e.links[i].Name] = &e.links[i]
	}
	return e
}

func TestURLs(t *testing.T) {
	e := fakeEnv()
	checks := []struct{ got, want string }{
		{e.DatabaseURL(LinkAppDB), "postgres://outbox:outbox@127.0.0.1:30000/outbox?sslmode=disable"},
		{e.DatabaseURL(LinkConsumerDB), "postgres://outbox:outbox@127.0.0.1:30004/outbox?sslmode=disable"},
		{e.AMQPURL(LinkRelayBroker), "amqp://outbox:outbox@127.0.0.1:30002/"},
		{e.ContainerDatabaseURL(LinkRelayDB), "postgres://outbox:outbox@toxiproxy:20001/outbox?sslmode=disable"},
		{e.ContainerAMQPURL(LinkConsumerBroker), "amqp://outbox:outbox@toxiproxy:20003/"},
		{e.DirectDatabaseURL(), "postgres://outbox:outbox@127.0.0.1:15432/outbox?sslmode=disable"},
		{e.DirectAMQPURL(), "amqp://outbox:outbox@127.0.0.1:15672/"},
		{e.ContainerDirectDatabaseURL(), "postgres://outbox:outbox@postgres:5432/outbox?sslmode=disable"},
		{e.ContainerDirectAMQPURL(), "amqp://outbox:outbox@rabbitmq:5672/"},
		{e.ToxiproxyURL(), "http://127.0.0.1:18474"},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("got %s, want %s", c.got, c.want)
		}
	}
}

func TestURLOfWrongLinkPanics(t *testing.T) {
	e := fakeEnv()
	for name, f := range map[string]func(){
		"unknown link":          func() { e.DatabaseURL("nope") },
		"broker link as db":     func() { e.DatabaseURL(LinkRelayBroker) },
		"db link as broker":     func() { e.ContainerAMQPURL(LinkAppDB) },
		"unknown link in proxy": func() { _, _ = e.Proxy("nope") },
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Fatal("no panic")
				}
			}()
			f()
		})
	}
}

// TestMakefileAgrees keeps the image tags of the Makefile and of this
// package the same.
func TestMakefileAgrees(t *testing.T) {
	b, err := os.ReadFile("../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	for name, tag := range map[string]string{
		"debian": ImageBase, "postgres": ImagePostgres, "rabbitmq": ImageRabbitMQ,
		"toxiproxy": ImageToxiproxy, "relay": ImageRelay, "relay-mutants": ImageRelayMutants, "relay-prev": ImageRelayPrev,
		"watermill-relay": ImageWatermillRelay,
	} {
		re := regexp.MustCompile(`(?m)^IMAGE_` + name + `\s*:=\s*(\S+)\s*$`)
		m := re.FindSubmatch(b)
		if m == nil {
			t.Errorf("Makefile sets no IMAGE_%s", name)
			continue
		}
		if string(m[1]) != tag {
			t.Errorf("Makefile IMAGE_%s = %s, testenv uses %s", name, m[1], tag)
		}
	}
}

func TestWaitUntil(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	n := 0
	err := WaitUntil(ctx, time.Millisecond, func(context.Context) error {
		if n++; n < 3 {
			return errors.New("not yet")
		}
		return nil
	})
	if err != nil || n != 3 {
		t.Fatalf("WaitUntil = %v after %d calls, want nil after 3", err, n)
	}

	short, cancel2 := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel2()
	err = WaitUntil(short, time.Millisecond, func(context.Context) error { return errors.New("never") })
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "never") {
		t.Fatalf("WaitUntil = %v, want the deadline and the last error", err)
	}
}

func TestOwnerDead(t *testing.T) {
	if procStart(os.Getpid()) == "" {
		t.Skip("no /proc here")
	}
	host, _ := os.Hostname()
	now := time.Now()
	if ownerDead(ownerID(), now) {
		t.Error("this process is reported dead")
	}
	if !ownerDead(host+":999999999:1", now) {
		t.Error("a pid that cannot exist is reported alive")
	}
	if !ownerDead(host+":1:1", now) && procStart(1) != "1" {
		t.Error("pid 1 with another start time is reported alive")
	}
	if ownerDead("elsewhere:1:1", now) {
		t.Error("a fresh leftover of another host is reported dead")
	}
	if !ownerDead("elsewhere:1:1", now.Add(-2*staleAfter)) {
		t.Error("an old leftover of another host is reported alive")
	}
}

// TestNoDocker needs no Docker: an engine that does not answer gives
// ErrDockerUnavailable, which StartT turns into a skip.
func TestNoDocker(t *testing.T) {
	t.Setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := Start(ctx, Options{})
	if !errors.Is(err, ErrDockerUnavailable) {
		t.Fatalf("Start = %v, want ErrDockerUnavailable", err)
	}
	t.Logf("as expected: %v", err)
}

func TestServiceFaultClass(t *testing.T) {
	for s, want := range map[Service]history.FaultClass{ServiceDB: history.ClassDB, ServiceBroker: history.ClassBroker, "other": history.ClassOther} {
		if got := s.FaultClass(); got != want {
			t.Errorf("%s.FaultClass() = %s, want %s", s, got, want)
		}
	}
	for _, l := range DefaultLinks() {
		if l.Service.FaultClass() == history.ClassOther {
			t.Errorf("link %s leads to %q, which has no fault class", l.Name, l.Service)
		}
	}
}

// TestClusterLinks: in a cluster environment every broker link is one
// proxy per node, named LINK-nK and leading to node K; database links
// stay single.
func TestClusterLinks(t *testing.T) {
	ls := Options{BrokerNodes: 3, Links: []Link{{Name: "relay-2-broker", Service: ServiceBroker}}}.links()
	var broker []string
	for _, l := range ls {
		if l.Service == ServiceBroker {
			broker = append(broker, l.Name+"->"+l.Node)
		}
		if l.Service == ServiceDB && l.Node != "" {
			t.Errorf("database link %s leads to node %s", l.Name, l.Node)
		}
	}
	want := "[relay-broker-n1->rabbitmq-1 relay-broker-n2->rabbitmq-2 relay-broker-n3->rabbitmq-3 " +
		"consumer-broker-n1->rabbitmq-1 consumer-broker-n2->rabbitmq-2 consumer-broker-n3->rabbitmq-3 " +
		"relay-2-broker-n1->rabbitmq-1 relay-2-broker-n2->rabbitmq-2 relay-2-broker-n3->rabbitmq-3]"
	if got := fmt.Sprint(broker); got != want {
		t.Errorf("broker links\n got %s\nwant %s", got, want)
	}
}
