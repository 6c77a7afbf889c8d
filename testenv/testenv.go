// Package testenv starts the real infrastructure of outboxlab's slower tiers:
// PostgreSQL, RabbitMQ and toxiproxy as containers on one private Docker
// network, with a toxiproxy proxy in front of the database and the broker
// for every named link (app->db, relay->db, relay->broker, consumer->broker,
// consumer->db, and any declared in Options.Links), and relay replicas as
// their own containers on the same network. It is public so that a team's
// own module can put its code under the same faults: nothing in it depends
// on this repository's tree, only on its images.
//
// The API is small:
//
//   - Start (for a command) or StartT (for a test: skipped under -short and
//     without Docker, removed when the test ends) starts the services and
//     the links; Shared starts one environment per test package.
//   - DatabaseURL and AMQPURL give a link's URL for clients in this
//     process, ContainerDatabaseURL and ContainerAMQPURL for containers on
//     the network, DirectDatabaseURL and DirectAMQPURL bypass toxiproxy.
//   - Proxy returns a link's toxiproxy proxy, to cut it (Disable) or add
//     toxics; Postgres, RabbitMQ, Toxiproxy, Container and StartRelay give
//     containers that can be killed, stopped, paused, unpaused and
//     restarted.
//   - Close removes every container and the network.
//
// A test in another module:
//
//	func TestCheckoutSurvivesABrokerCrash(t *testing.T) {
//		env := testenv.StartT(t, testenv.Options{})
//		ctx := context.Background()
//		db, err := pgxpool.New(ctx, env.DatabaseURL(testenv.LinkAppDB))
//		if err != nil {
//			t.Fatal(err)
//		}
//		defer db.Close()
//		relay, err := env.StartRelay(ctx, testenv.RelaySpec{Env: map[string]string{
//			contract.EnvTable: "orders_outbox", contract.EnvExchange: "orders", contract.EnvMigrate: "true",
//		}})
//		if err != nil {
//			t.Fatal(err)
//		}
//		// ... stage orders through db ...
//		_ = env.RabbitMQ().Kill(ctx)  // the broker crashes
//		_ = env.RabbitMQ().Start(ctx) // and comes back
//		_ = relay.Pause(ctx)          // a replica freezes past its lease
//		_ = relay.Unpause(ctx)
//		// ... check that every order was delivered ...
//	}
//
// Clients in the test process use DatabaseURL and AMQPURL: they reach a
// link's proxy through a port on the loopback interface. Containers on the
// network (relays) use ContainerDatabaseURL and ContainerAMQPURL: they reach
// the same proxy as toxiproxy:<port>. Every port is fixed when the
// environment starts, so the URLs stay valid while containers are killed,
// stopped, paused and started again.
//
// Images are built by `make images` in the outboxlab repository; nothing
// is ever pulled. Every container and network carries the label
// org.outboxlab.harness=true and the run's id, and is removed by Close
// (StartT registers it with t.Cleanup). What a crashed process left behind
// is removed by the next Start, or by `make clean-containers`.
package testenv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outboxlab/outboxlab/history"

	toxiproxy "github.com/Shopify/toxiproxy/v2/client"
	"github.com/moby/moby/client"
	tclog "github.com/testcontainers/testcontainers-go/log"
)

// Image tags, built by `make images` (the Makefile uses the same tags).
const (
	ImageBase      = "outboxlab/debian:bookworm"
	ImagePostgres  = "outboxlab/postgres:15"
	ImageRabbitMQ  = "outboxlab/rabbitmq:3.10"
	ImageToxiproxy = "outboxlab/toxiproxy:2.5.0"
	// ImageRelay is this repository's relay (./cmd/relay), and nothing
	// else: it refuses OUTBOX_MUTANT.
	ImageRelay = "outboxlab/relay:dev"
	// ImageRelayMutants is the same relay built with the mutants tag: it
	// runs the relay-side mutant that OUTBOX_MUTANT names, for the
	// harness's kill matrix. Only the harness uses it.
	ImageRelayMutants = "outboxlab/relay-mutants:dev"
	// ImageRelayPrev is this repository's relay as an earlier commit had
	// it (the Makefile's RELAY_PREV): the version the rolling-upgrade
	// scenario replaces by the relay under test, on the outbox as its
	// migrations before 004 leave it.
	ImageRelayPrev = "outboxlab/relay:prev"
	// ImageWatermillRelay is watermill's forwarder under the black-box
	// contract (./cmd/watermill-relay, package target/watermill).
	ImageWatermillRelay = "outboxlab/watermill-relay:dev"
)

// Credentials baked into the images. The PostgreSQL role is a superuser and
// owns the database; the RabbitMQ user may connect from any host and has
// every permission on the vhost "/".
const (
	DBUser       = "outbox"
	DBPassword   = "outbox"
	DBName       = "outbox"
	AMQPUser     = "outbox"
	AMQPPassword = "outbox"
)

// Network aliases of the services: the host names that containers on the
// environment's network use.
const (
	AliasPostgres  = "postgres"
	AliasRabbitMQ  = "rabbitmq"
	AliasToxiproxy = "toxiproxy"
)

// Labels on every container and network the harness makes.
const (
	// LabelHarness is "true" on everything the harness made; `make
	// clean-containers` removes whatever carries it.
	LabelHarness = "org.outboxlab.harness"
	// LabelRun is the id of the environment (Env.RunID).
	LabelRun = "org.outboxlab.run"
	// LabelRole says what a container is: postgres, rabbitmq, toxiproxy,
	// relay, or the role given in ContainerSpec.
	LabelRole = "org.outboxlab.role"
	// LabelOwner names the process that made it (host:pid:start time), so
	// that a later run removes only what a dead process left behind.
	LabelOwner = "org.outboxlab.owner"
)

// Service is what a link leads to.
type Service string

// Services behind the links.
const (
	ServiceDB     Service = "db"     // PostgreSQL
	ServiceBroker Service = "broker" // RabbitMQ
)

// FaultClass is the class of a fault on a link to the service: a cut or a
// slow link to the broker is a broker fault for whoever uses the link.
func (s Service) FaultClass() history.FaultClass {
	switch s {
	case ServiceDB:
		return history.ClassDB
	case ServiceBroker:
		return history.ClassBroker
	}
	return history.ClassOther
}

// Names of the default links. Each is also the name of its toxiproxy proxy.
const (
	LinkAppDB          = "app-db"
	LinkRelayDB        = "relay-db"
	LinkRelayBroker    = "relay-broker"
	LinkConsumerBroker = "consumer-broker"
	LinkConsumerDB     = "consumer-db"
	// LinkStandbyDB is the standby's replication connection to the
	// primary, declared only with Options.Standby: cut, the standby
	// falls behind.
	LinkStandbyDB = "standby-db"
)

// Link is a named network path from a client to a service through its own
// toxiproxy proxy, so that it can be cut or slowed alone.
type Link struct {
	// Name names the link and its proxy: lowercase letters, digits and
	// dashes, e.g. "relay-broker" or "relay-2-db".
	Name string
	// Service is what the link leads to.
	Service Service
	// Node is the broker node a link of a cluster environment leads to
	// (see Options.BrokerNodes); empty for the single broker.
	Node string
}

// DefaultLinks returns the links every environment has: app->db,
// relay->db, relay->broker, consumer->broker and consumer->db.
func DefaultLinks() []Link {
	return []Link{
		{Name: LinkAppDB, Service: ServiceDB},
		{Name: LinkRelayDB, Service: ServiceDB},
		{Name: LinkRelayBroker, Service: ServiceBroker},
		{Name: LinkConsumerBroker, Service: ServiceBroker},
		{Name: LinkConsumerDB, Service: ServiceDB},
	}
}

// RequireDockerEnv is the environment variable that turns a missing Docker
// engine from a skip into a failure in StartT and Shared.Get, as `make
// test` sets it ("1"), so that CI cannot pass by skipping.
const RequireDockerEnv = "OUTBOXLAB_REQUIRE_DOCKER"

// Sentinel errors that callers branch on.
var (
	// ErrDockerUnavailable means no Docker engine answered.
	ErrDockerUnavailable = errors.New("docker engine unavailable")
	// ErrImageNotFound means an image is not in the local engine; `make
	// images` builds it.
	ErrImageNotFound = errors.New("image not found")
)

// Options configures an environment. The zero value is the default
// environment.
type Options struct {
	// Links are declared in addition to DefaultLinks, e.g. one pair per
	// relay replica so that each replica's links can be cut alone.
	Links []Link
	// NoBroker starts no RabbitMQ and declares no broker links, for tests
	// that need only PostgreSQL: such an environment is ready several
	// seconds sooner (RabbitMQ's boot is the slowest part of a start).
	NoBroker bool
	// BrokerNodes, when 2 or more, starts a RabbitMQ cluster of that many
	// nodes (see StartCluster) instead of the single broker. Every broker
	// link is then declared once per node, named LINK-nK for node K, and
	// the link's own name stands for all of them: AMQPURL and
	// ContainerAMQPURL list every node's URL, for clients that fail over
	// (relay.SplitAMQPURLs). At most MaxBrokerNodes.
	BrokerNodes int
	// ReadyTimeout bounds the start of the environment, from creating the
	// network until every service accepts connections. Default 3 minutes.
	ReadyTimeout time.Duration
	// Logf receives progress lines. StartT uses t.Logf; Start discards
	// them when nil.
	Logf func(format string, args ...any)
	// Standby, when set, starts a streaming standby of PostgreSQL beside
	// it (see Replication), for the failover scenarios: Env.Failover
	// promotes it and moves every link to it.
	Standby Replication
	// PostgresImage, RabbitMQImage and ToxiproxyImage replace the default
	// image tags (ImagePostgres, ImageRabbitMQ, ImageToxiproxy).
	PostgresImage, RabbitMQImage, ToxiproxyImage string
}

// MaxBrokerNodes bounds Options.BrokerNodes.
const MaxBrokerNodes = 5

const (
	defaultReadyTimeout = 3 * time.Minute
	// proxyPortBase is the first port the proxies listen on inside the
	// toxiproxy container; link i listens on proxyPortBase+i.
	proxyPortBase    = 20000
	toxiproxyAPIPort = 8474
	postgresPort     = 5432
	rabbitMQPort     = 5672
)

var linkNameRe = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,62}[a-z0-9])?$`)

// Validate reports what is wrong with o: bad or repeated link names or
// services, a negative timeout.
func (o Options) Validate() error {
	var errs []error
	seen := map[string]bool{}
	for _, l := range o.links() {
		if !linkNameRe.MatchString(l.Name) {
			errs = append(errs, fmt.Errorf("link name %q: want lowercase letters, digits and dashes", l.Name))
		}
		if seen[l.Name] {
			errs = append(errs, fmt.Errorf("link %q declared twice", l.Name))
		}
		seen[l.Name] = true
		if l.Service != ServiceDB && l.Service != ServiceBroker {
			errs = append(errs, fmt.Errorf("link %q: unknown service %q (want %q or %q)", l.Name, l.Service, ServiceDB, ServiceBroker))
		}
		if l.Service == ServiceBroker && o.NoBroker {
			errs = append(errs, fmt.Errorf("link %q leads to the broker, but NoBroker is set", l.Name))
		}
	}
	if o.BrokerNodes < 0 || o.BrokerNodes > MaxBrokerNodes {
		errs = append(errs, fmt.Errorf("BrokerNodes %d: want 0 to %d", o.BrokerNodes, MaxBrokerNodes))
	}
	if o.BrokerNodes > 1 && o.NoBroker {
		errs = append(errs, errors.New("BrokerNodes and NoBroker both set"))
	}
	if o.ReadyTimeout < 0 {
		errs = append(errs, fmt.Errorf("ReadyTimeout %s is negative", o.ReadyTimeout))
	}
	if o.Standby != "" && o.Standby != ReplicationAsync && o.Standby != ReplicationSync {
		errs = append(errs, fmt.Errorf("Standby %q: want %q or %q", o.Standby, ReplicationAsync, ReplicationSync))
	}
	return errors.Join(errs...)
}

// links returns the links to declare: the default ones (without the
// broker's under NoBroker), then o.Links; in a cluster environment each
// broker link once per node.
func (o Options) links() []Link {
	var out []Link
	defaults := len(DefaultLinks())
	all := append(DefaultLinks(), o.Links...)
	if o.Standby != "" {
		all = append(all, Link{Name: LinkStandbyDB, Service: ServiceDB})
	}
	for i, l := range all {
		switch {
		case l.Service == ServiceBroker && o.NoBroker && i < defaults:
			// Validate refuses a broker link given under NoBroker.
		case l.Service == ServiceBroker && o.BrokerNodes > 1:
			for k := 1; k <= o.BrokerNodes; k++ {
				out = append(out, Link{Name: NodeLink(l.Name, k), Service: ServiceBroker, Node: ClusterNodePrefix + strconv.Itoa(k)})
			}
		default:
			out = append(out, l)
		}
	}
	return out
}

// NodeLink returns the name of broker link's proxy to node k (1-based) of
// a cluster environment, e.g. "relay-broker-n2".
func NodeLink(link string, k int) string { return link + "-n" + strconv.Itoa(k) }

func (o Options) withDefaults() Options {
	if o.ReadyTimeout == 0 {
		o.ReadyTimeout = defaultReadyTimeout
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	if o.PostgresImage == "" {
		o.PostgresImage = ImagePostgres
	}
	if o.RabbitMQImage == "" {
		o.RabbitMQImage = ImageRabbitMQ
	}
	if o.ToxiproxyImage == "" {
		o.ToxiproxyImage = ImageToxiproxy
	}
	return o
}

// link is a declared link with its ports.
type link struct {
	Link
	listenPort int // inside the toxiproxy container
	hostPort   int // on the host, mapped to listenPort
}

// Env is a running environment. Its methods are safe for concurrent use.
type Env struct {
	runID     string
	network   string
	networkID string
	host      string // where the mapped ports are reachable from this process
	ready     time.Duration
	logf      func(format string, args ...any)

	docker *client.Client
	toxi   *toxiproxy.Client

	links     []link
	linkIndex map[string]*link
	// groups maps a broker link of a cluster environment to its per-node
	// links, in node order.
	groups  map[string][]*link
	cluster *Cluster

	pgHostPort, amqpHostPort, toxiHostPort int
	// primary is the network alias of the PostgreSQL server the links
	// and DirectDatabaseURL lead to: AliasPostgres until a failover.
	primary string
	// standby is the streaming standby (Options.Standby), nil when there
	// is none; replication is its mode, standbys counts those started.
	standby     *Container
	standbyPort int
	replication Replication
	standbys    int
	// restores counts the servers Restore started.
	restores int

	postgres, rabbitmq, toxiproxy *Container

	mu         sync.Mutex
	containers []*Container
	names      map[string]bool
	closed     bool
}

// Start starts an environment: a private network, PostgreSQL, RabbitMQ and
// toxiproxy with one proxy per link, and waits until every service accepts
// connections, directly and through its proxies. The caller must Close it.
// Start removes what earlier, dead processes left behind first.
func Start(ctx context.Context, opts Options) (_ *Env, err error) {
	if err := opts.Validate(); err != nil {
		return nil, fmt.Errorf("testenv options: %w", err)
	}
	opts = opts.withDefaults()
	began := time.Now()
	ctx, cancel := context.WithTimeout(ctx, opts.ReadyTimeout)
	defer cancel()

	setupTestcontainers()

	docker, err := dockerClient(ctx)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = docker.Close()
		}
	}()
	images := []string{opts.PostgresImage, opts.ToxiproxyImage}
	if !opts.NoBroker {
		images = append(images, opts.RabbitMQImage)
	}
	for _, img := range images {
		if err := checkImage(ctx, docker, img); err != nil {
			return nil, err
		}
	}
	if swept, err := sweep(ctx, docker, opts.Logf); err != nil {
		opts.Logf("testenv: sweeping leftovers of dead runs: %v", err)
	} else if swept > 0 {
		opts.Logf("testenv: removed %d container(s) and network(s) left behind by dead runs", swept)
	}

	e := &Env{
		runID:     newRunID(),
		host:      dockerHostAddress(),
		logf:      opts.Logf,
		docker:    docker,
		linkIndex: map[string]*link{},
		names:     map[string]bool{},
		primary:   AliasPostgres,
	}
	e.network = "outboxlab-" + e.runID
	for i, l := range opts.links() {
		e.links = append(e.links, link{Link: l, listenPort: proxyPortBase + i})
	}
	for i := range e.links {
		l := &e.links[i]
		e.linkIndex[l.Name] = l
		if l.Node != "" {
			group := strings.TrimSuffix(l.Name, "-n"+strings.TrimPrefix(l.Node, ClusterNodePrefix))
			if e.groups == nil {
				e.groups = map[string][]*link{}
			}
			e.groups[group] = append(e.groups[group], l)
		}
	}
	defer func() {
		if err != nil {
			closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
			defer cancel()
			_ = e.Close(closeCtx)
		}
	}()

	res, err := docker.NetworkCreate(ctx, e.network, client.NetworkCreateOptions{
		Driver: "bridge",
		Labels: e.labels("network"),
	})
	if err != nil {
		return nil, fmt.Errorf("creating network %s: %w", e.network, err)
	}
	e.networkID = res.ID

	if err := e.startServices(ctx, opts); err != nil {
		return nil, err
	}
	e.toxi = toxiproxy.NewClient(net.JoinHostPort(e.host, strconv.Itoa(e.toxiHostPort)))
	if opts.BrokerNodes > 1 {
		if e.cluster, err = e.StartCluster(ctx, opts.RabbitMQImage, opts.BrokerNodes); err != nil {
			return nil, err
		}
	}

	started := time.Since(began)
	var wg sync.WaitGroup
	services := e.services()
	errs := make([]error, len(services))
	readyAt := make([]string, len(services))
	for i, c := range services {
		wg.Go(func() {
			errs[i] = c.WaitReady(ctx)
			readyAt[i] = c.Name() + " " + time.Since(began).Round(time.Millisecond).String()
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	e.logf("testenv: containers created and started after %s; ready after: %s",
		started.Round(time.Millisecond), strings.Join(readyAt, ", "))
	// Every link must carry traffic before a client is handed its URL.
	for _, l := range e.links {
		var err error
		switch l.Service {
		case ServiceDB:
			err = WaitUntil(ctx, 100*time.Millisecond, func(ctx context.Context) error { return pingPostgres(ctx, e.DatabaseURL(l.Name)) })
		case ServiceBroker:
			err = WaitUntil(ctx, 100*time.Millisecond, func(ctx context.Context) error { return pingRabbitMQ(ctx, e.AMQPURL(l.Name)) })
		}
		if err != nil {
			return nil, fmt.Errorf("link %s: %w", l.Name, err)
		}
	}
	if opts.Standby != "" {
		e.replication = opts.Standby
		if err := e.StartStandby(ctx); err != nil {
			return nil, err
		}
	}
	e.ready = time.Since(began)
	broker := "none"
	if e.rabbitmq != nil || e.cluster != nil {
		broker = e.DirectAMQPURL()
	}
	e.logf("testenv: environment %s ready in %s (network %s; postgres %s, rabbitmq %s, toxiproxy %s)",
		e.runID, e.ready.Round(time.Millisecond), e.network,
		e.DirectDatabaseURL(), broker, e.ToxiproxyURL())
	return e, nil
}

// setupTestcontainers configures testcontainers once per process, before
// its first use.
var setupTestcontainers = sync.OnceFunc(func() {
	// Ryuk, testcontainers' reaper, is an image that would be pulled; the
	// harness removes its own containers instead.
	_ = os.Setenv("TESTCONTAINERS_RYUK_DISABLED", "true")
	// testcontainers logs through a process-wide logger (its banner names
	// the engine and the negotiated API version); the harness reports
	// through Options.Logf instead.
	tclog.SetDefault(tclog.NewNoopLogger())
})

// StartT starts an environment for a test or benchmark and removes it when
// tb ends (t.Cleanup), also when the test fails or panics; a failed test
// logs the last lines of every container first. It skips tb under -short
// and when no Docker engine answers, unless RequireDockerEnv is set (`make
// test` sets it): then a missing engine fails the test. A missing image
// always fails it.
func StartT(tb testing.TB, opts Options) *Env {
	tb.Helper()
	if testing.Short() {
		tb.Skip("testenv: skipping a test that needs Docker under -short")
	}
	if opts.Logf == nil {
		opts.Logf = tb.Logf
	}
	ctx := context.Background()
	if d, ok := tb.(interface{ Deadline() (time.Time, bool) }); ok {
		if dl, ok := d.Deadline(); ok {
			var cancel context.CancelFunc
			ctx, cancel = context.WithDeadline(ctx, dl)
			defer cancel()
		}
	}
	e, err := Start(ctx, opts)
	if err != nil {
		if errors.Is(err, ErrDockerUnavailable) && os.Getenv(RequireDockerEnv) == "" {
			tb.Skipf("testenv: skipping: %v (set %s=1 to fail instead, or run go test -short)", err, RequireDockerEnv)
		}
		tb.Fatalf("testenv: %v", err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if tb.Failed() {
			e.LogTails(ctx, tb.Logf, 40)
		}
		if err := e.Close(ctx); err != nil {
			tb.Errorf("testenv: %v", err)
		}
	})
	return e
}

// startServices creates and starts PostgreSQL, RabbitMQ and toxiproxy at
// once, each with its ports fixed on the host.
func (e *Env) startServices(ctx context.Context, opts Options) error {
	// service is one service container to start.
	type service struct {
		dst  **Container
		spec ContainerSpec
		// ports are the container ports published on the host; set
		// records the host ports they got.
		ports []int
		set   func(host map[int]int)
	}
	proxyPorts := make([]int, len(e.links))
	for i, l := range e.links {
		proxyPorts[i] = l.listenPort
	}
	services := []service{{
		dst: &e.postgres,
		spec: ContainerSpec{Name: "postgres", Image: opts.PostgresImage, Role: "postgres", StopTimeout: 10 * time.Second,
			Ready: func(ctx context.Context) error { return pingPostgres(ctx, e.DirectDatabaseURL()) }},
		ports: []int{postgresPort},
		set:   func(h map[int]int) { e.pgHostPort = h[postgresPort] },
	}, {
		dst:   &e.toxiproxy,
		spec:  ContainerSpec{Name: "toxiproxy", Image: opts.ToxiproxyImage, Role: "toxiproxy", StopTimeout: 5 * time.Second, Ready: e.declareProxies},
		ports: append([]int{toxiproxyAPIPort}, proxyPorts...),
		set: func(h map[int]int) {
			e.toxiHostPort = h[toxiproxyAPIPort]
			for i := range e.links {
				e.links[i].hostPort = h[e.links[i].listenPort]
			}
		},
	}}
	if !opts.NoBroker && opts.BrokerNodes < 2 {
		services = append(services, service{
			dst: &e.rabbitmq,
			spec: ContainerSpec{Name: "rabbitmq", Image: opts.RabbitMQImage, Role: "rabbitmq", StopTimeout: 15 * time.Second,
				Ready: func(ctx context.Context) error { return pingRabbitMQ(ctx, e.DirectAMQPURL()) }},
			ports: []int{rabbitMQPort},
			set:   func(h map[int]int) { e.amqpHostPort = h[rabbitMQPort] },
		})
	}
	var wg sync.WaitGroup
	errs := make([]error, len(services))
	for i, s := range services {
		wg.Go(func() {
			c, host, err := e.run(ctx, s.spec, s.ports)
			if err != nil {
				errs[i] = err
				return
			}
			s.set(host)
			*s.dst = c
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// WaitReady waits until PostgreSQL, RabbitMQ and toxiproxy all accept
// connections, e.g. after faults were healed; see Container.WaitReady.
func (e *Env) WaitReady(ctx context.Context) error {
	var wg sync.WaitGroup
	services := e.services()
	errs := make([]error, len(services))
	for i, c := range services {
		wg.Go(func() { errs[i] = c.WaitReady(ctx) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// services returns the service containers: PostgreSQL, RabbitMQ (unless
// NoBroker) and toxiproxy.
func (e *Env) services() []*Container {
	out := []*Container{e.postgres}
	if e.rabbitmq != nil {
		out = append(out, e.rabbitmq)
	}
	if e.cluster != nil {
		out = append(out, e.cluster.nodes...)
	}
	return append(out, e.toxiproxy)
}

// RunID returns the environment's id, part of every container's name and
// the value of LabelRun.
func (e *Env) RunID() string { return e.runID }

// Network returns the name of the environment's Docker network.
func (e *Env) Network() string { return e.network }

// ReadyAfter returns how long Start took until every service and link
// accepted connections.
func (e *Env) ReadyAfter() time.Duration { return e.ready }

// Postgres returns the PostgreSQL container.
func (e *Env) Postgres() *Container {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.postgres
}

// RabbitMQ returns the RabbitMQ container, nil under Options.NoBroker and
// in a cluster environment (see Cluster).
func (e *Env) RabbitMQ() *Container { return e.rabbitmq }

// Cluster returns the RabbitMQ cluster of an environment started with
// Options.BrokerNodes, else nil.
func (e *Env) Cluster() *Cluster { return e.cluster }

// Toxiproxy returns the toxiproxy container. Its Start and Restart declare
// the proxies again, since toxiproxy keeps them only in memory.
func (e *Env) Toxiproxy() *Container { return e.toxiproxy }

// ToxiproxyClient returns a client of toxiproxy's API, reached from this
// process.
func (e *Env) ToxiproxyClient() *toxiproxy.Client { return e.toxi }

// ToxiproxyURL returns the address of toxiproxy's API from this process.
func (e *Env) ToxiproxyURL() string {
	return "http://" + net.JoinHostPort(e.host, strconv.Itoa(e.toxiHostPort))
}

// Proxy reads the proxy of link from toxiproxy.
func (e *Env) Proxy(link string) (*toxiproxy.Proxy, error) {
	e.mustLink(link, "")
	p, err := e.toxi.Proxy(link)
	if err != nil {
		return nil, fmt.Errorf("reading toxiproxy proxy %s: %w", link, err)
	}
	return p, nil
}

// Links returns the declared links, defaults first.
func (e *Env) Links() []Link {
	out := make([]Link, len(e.links))
	for i, l := range e.links {
		out[i] = l.Link
	}
	return out
}

func (e *Env) mustLink(name string, want Service) *link {
	l, ok := e.linkIndex[name]
	if !ok {
		if want == ServiceBroker && e.amqpHostPort == 0 && e.cluster == nil {
			panic(fmt.Sprintf("testenv: no link %q: the environment was started with NoBroker", name))
		}
		panic(fmt.Sprintf("testenv: unknown link %q (declared: %v)", name, e.Links()))
	}
	if want != "" && l.Service != want {
		panic(fmt.Sprintf("testenv: link %q leads to the %s, not the %s", name, l.Service, want))
	}
	return l
}

// DatabaseURL returns the PostgreSQL URL of link for clients in this
// process: through the link's proxy, on a port that stays the same for the
// environment's life. It panics when link is not a declared database link.
func (e *Env) DatabaseURL(link string) string {
	return postgresURL(e.host, e.mustLink(link, ServiceDB).hostPort)
}

// AMQPURL returns the RabbitMQ URL of link for clients in this process,
// through the link's proxy. It panics when link is not a declared broker
// link.
func (e *Env) AMQPURL(link string) string {
	if g, ok := e.groups[link]; ok {
		urls := make([]string, len(g))
		for i, l := range g {
			urls[i] = amqpURL(e.host, l.hostPort)
		}
		return strings.Join(urls, ",")
	}
	return amqpURL(e.host, e.mustLink(link, ServiceBroker).hostPort)
}

// ContainerDatabaseURL returns the PostgreSQL URL of link for containers on
// the environment's network (relays): toxiproxy:<port>.
func (e *Env) ContainerDatabaseURL(link string) string {
	return postgresURL(AliasToxiproxy, e.mustLink(link, ServiceDB).listenPort)
}

// ContainerAMQPURL returns the RabbitMQ URL of link for containers on the
// environment's network.
func (e *Env) ContainerAMQPURL(link string) string {
	if g, ok := e.groups[link]; ok {
		urls := make([]string, len(g))
		for i, l := range g {
			urls[i] = amqpURL(AliasToxiproxy, l.listenPort)
		}
		return strings.Join(urls, ",")
	}
	return amqpURL(AliasToxiproxy, e.mustLink(link, ServiceBroker).listenPort)
}

// DirectDatabaseURL returns the PostgreSQL URL that bypasses toxiproxy, for
// administration and for the checkers' final reads from this process.
func (e *Env) DirectDatabaseURL() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return postgresURL(e.host, e.pgHostPort)
}

// DirectAMQPURL returns the RabbitMQ URL that bypasses toxiproxy. It
// panics under Options.NoBroker.
func (e *Env) DirectAMQPURL() string {
	e.mustBroker()
	if e.cluster != nil {
		return e.cluster.AMQPURLs()
	}
	return amqpURL(e.host, e.amqpHostPort)
}

func (e *Env) mustBroker() {
	if e.amqpHostPort == 0 && e.cluster == nil {
		panic("testenv: the environment was started with NoBroker: it has no RabbitMQ")
	}
}

// ContainerDirectDatabaseURL returns the PostgreSQL URL that bypasses
// toxiproxy, for containers on the network.
func (e *Env) ContainerDirectDatabaseURL() string { return postgresURL(e.primaryAlias(), postgresPort) }

// ContainerDirectAMQPURL returns the RabbitMQ URL that bypasses toxiproxy,
// for containers on the network. It panics under Options.NoBroker.
func (e *Env) ContainerDirectAMQPURL() string {
	e.mustBroker()
	if e.cluster != nil {
		return e.cluster.ContainerAMQPURLs()
	}
	return amqpURL(AliasRabbitMQ, rabbitMQPort)
}

// BridgeURLs returns the URLs of PostgreSQL and RabbitMQ at their
// containers' addresses on the environment's network, for this process
// when the host reaches that network (a Linux bridge): they bypass
// toxiproxy as the direct URLs do, and Docker's port proxy as well, a
// process that copies every byte between the published port and the
// container. It fails where the host does not reach both within a
// second, and under Options.NoBroker or in a cluster environment.
func (e *Env) BridgeURLs(ctx context.Context) (db, amqp string, err error) {
	if e.postgres == nil || e.rabbitmq == nil {
		return "", "", errors.New("testenv: bridge URLs need the environment's PostgreSQL and single RabbitMQ")
	}
	var hosts [2]string
	for i, s := range []struct {
		c    *Container
		port int
	}{{e.postgres, postgresPort}, {e.rabbitmq, rabbitMQPort}} {
		ip, err := s.c.Address(ctx)
		if err != nil {
			return "", "", err
		}
		hosts[i] = ip.String()
		d := net.Dialer{Timeout: time.Second}
		conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort(hosts[i], strconv.Itoa(s.port)))
		if err != nil {
			return "", "", fmt.Errorf("testenv: the host does not reach %s at %s: %w", s.c.name, hosts[i], err)
		}
		_ = conn.Close()
	}
	return postgresURL(hosts[0], postgresPort), amqpURL(hosts[1], rabbitMQPort), nil
}

func postgresURL(host string, port int) string {
	return fmt.Sprintf("postgres://%s:%s@%s/%s?sslmode=disable", DBUser, DBPassword, net.JoinHostPort(host, strconv.Itoa(port)), DBName)
}

func amqpURL(host string, port int) string {
	return fmt.Sprintf("amqp://%s:%s@%s/", AMQPUser, AMQPPassword, net.JoinHostPort(host, strconv.Itoa(port)))
}

// declareProxies creates or replaces the proxy of every link, enabled and
// without toxics, once toxiproxy's API answers. It is the toxiproxy
// container's readiness probe, so a started toxiproxy always has them.
func (e *Env) declareProxies(ctx context.Context) error {
	api := e.ToxiproxyURL()
	want := make([]toxiproxy.Proxy, len(e.links))
	for i, l := range e.links {
		upstream := net.JoinHostPort(e.primaryAlias(), strconv.Itoa(postgresPort))
		if l.Service == ServiceBroker {
			node := AliasRabbitMQ
			if l.Node != "" {
				node = l.Node
			}
			upstream = net.JoinHostPort(node, strconv.Itoa(rabbitMQPort))
		}
		want[i] = toxiproxy.Proxy{Name: l.Name, Listen: net.JoinHostPort("0.0.0.0", strconv.Itoa(l.listenPort)), Upstream: upstream, Enabled: true}
	}
	if err := httpGet(ctx, api+"/version"); err != nil {
		return fmt.Errorf("toxiproxy API: %w", err)
	}
	have, err := withCtx(ctx, e.toxi.Proxies)
	if err != nil {
		return fmt.Errorf("listing toxiproxy proxies: %w", err)
	}
	if complete(have, want) {
		return nil
	}
	if _, err := withCtx(ctx, func() ([]*toxiproxy.Proxy, error) { return e.toxi.Populate(want) }); err != nil {
		return fmt.Errorf("declaring toxiproxy proxies: %w", err)
	}
	return nil
}

// complete reports whether have has every proxy of want as declared.
func complete(have map[string]*toxiproxy.Proxy, want []toxiproxy.Proxy) bool {
	for _, w := range want {
		h, ok := have[w.Name]
		if !ok || h.Listen != w.Listen || h.Upstream != w.Upstream {
			return false
		}
	}
	return true
}

// withCtx runs f, which cannot be cancelled (the toxiproxy client takes no
// context), and gives up waiting for it when ctx ends.
func withCtx[T any](ctx context.Context, f func() (T, error)) (T, error) {
	type result struct {
		v   T
		err error
	}
	ch := make(chan result, 1)
	go func() {
		v, err := f()
		ch <- result{v, err}
	}()
	select {
	case r := <-ch:
		return r.v, r.err
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	}
}

func httpGet(ctx context.Context, url string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return nil
}

// Container returns the container of the environment named name
// ("postgres", "rabbitmq", "toxiproxy", or a name given to StartContainer
// or StartRelay), to kill, stop, pause or restart it.
func (e *Env) Container(name string) (*Container, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, c := range e.containers {
		if c.name == name {
			return c, true
		}
	}
	return nil, false
}

// Containers returns every container of the environment still known to it,
// the services first, then the ones StartContainer added.
func (e *Env) Containers() []*Container {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.containers)
}

// Close removes every container and the network of the environment
// (SIGKILL, no grace: the environment's state is thrown away). It is safe
// to call more than once.
func (e *Env) Close(ctx context.Context) error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed = true
	e.mu.Unlock()
	err := removeRun(ctx, e.docker, e.runID)
	if err != nil {
		err = fmt.Errorf("removing environment %s: %w (`make clean-containers` removes what is left)", e.runID, err)
	}
	_ = e.docker.Close()
	// The toxiproxy client uses http.DefaultClient; do not leave its
	// keep-alive connections to a removed container behind.
	http.DefaultClient.CloseIdleConnections()
	return err
}

func (e *Env) labels(role string) map[string]string {
	return map[string]string{
		LabelHarness: "true",
		LabelRun:     e.runID,
		LabelRole:    role,
		LabelOwner:   ownerID(),
	}
}

// LogTails writes the last n lines of every container's log to logf, as
// StartT does for a failed test.
func (e *Env) LogTails(ctx context.Context, logf func(string, ...any), n int) {
	for _, c := range e.Containers() {
		out, err := c.Logs(ctx, n)
		if err != nil {
			logf("testenv: logs of %s: %v", c.Name(), err)
			continue
		}
		logf("testenv: last %d log lines of %s:\n%s", n, c.Name(), out)
	}
}
