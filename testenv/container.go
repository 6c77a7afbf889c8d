package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
	tclog "github.com/testcontainers/testcontainers-go/log"
	tcnetwork "github.com/testcontainers/testcontainers-go/network"

	"github.com/outboxlab/outboxlab/contract"
)

// ContainerSpec describes an extra container on the environment's network,
// such as a relay replica.
type ContainerSpec struct {
	// Name is unique within the environment and is the container's host
	// name on the network: lowercase letters, digits and dashes.
	Name string
	// Image is a local image; it is never pulled.
	Image string
	// Env is the container's environment.
	Env map[string]string
	// Cmd replaces the image's CMD (the arguments of its entrypoint).
	Cmd []string
	// Role is the value of LabelRole; default "extra".
	Role string
	// StopTimeout is how long Stop and Restart wait after SIGTERM before
	// SIGKILL when they are given no timeout; default 10 s.
	StopTimeout time.Duration
	// Ready, when set, is the probe WaitReady polls until it returns nil;
	// without it WaitReady waits until the container runs.
	Ready func(ctx context.Context) error
	// Binds bind-mounts host directories into the container, each as
	// "host-path:container-path" (the engine must run on this host).
	Binds []string
}

// Container is a handle on one container of the environment. Its
// lifecycle methods act on the same container (same file system, same
// ports): a killed container started again finds its data, as after a
// crash. They satisfy chaos.Container.
type Container struct {
	env         *Env
	name        string
	id          string
	dockerName  string
	image       string
	stopTimeout time.Duration
	ready       func(ctx context.Context) error
	// readyOnStart makes Start and Restart wait for the probe: toxiproxy
	// must declare its proxies again after every start.
	readyOnStart bool
}

// Name returns the container's name within the environment ("postgres",
// "relay-a"), which is also its host name on the network.
func (c *Container) Name() string { return c.name }

// ID returns the Docker container id.
func (c *Container) ID() string { return c.id }

// DockerName returns the Docker container name: outboxlab-<run>-<name>.
func (c *Container) DockerName() string { return c.dockerName }

// Image returns the container's image.
func (c *Container) Image() string { return c.image }

// Kill sends SIGKILL, the process's crash, and returns once the container
// has stopped.
func (c *Container) Kill(ctx context.Context) error {
	if _, err := c.env.docker.ContainerKill(ctx, c.id, client.ContainerKillOptions{Signal: "KILL"}); err != nil {
		return fmt.Errorf("killing %s: %w", c.name, err)
	}
	return c.waitStopped(ctx)
}

// Signal sends sig ("SIGTERM", "SIGHUP", ...) to the container's main
// process and returns without waiting.
func (c *Container) Signal(ctx context.Context, sig string) error {
	if _, err := c.env.docker.ContainerKill(ctx, c.id, client.ContainerKillOptions{Signal: sig}); err != nil {
		return fmt.Errorf("sending %s to %s: %w", sig, c.name, err)
	}
	return nil
}

// Stop sends the image's stop signal (SIGTERM unless the image says
// otherwise) and SIGKILL after timeout; timeout 0 means the container's
// StopTimeout. It returns once the container has stopped.
func (c *Container) Stop(ctx context.Context, timeout time.Duration) error {
	if timeout <= 0 {
		timeout = c.stopTimeout
	}
	secs := int(math.Ceil(timeout.Seconds()))
	if _, err := c.env.docker.ContainerStop(ctx, c.id, client.ContainerStopOptions{Timeout: &secs}); err != nil {
		return fmt.Errorf("stopping %s: %w", c.name, err)
	}
	return c.waitStopped(ctx)
}

// Start starts a stopped or killed container. For PostgreSQL and RabbitMQ
// it returns once the process runs; WaitReady waits until the service
// accepts connections again. For toxiproxy it also declares the proxies
// again, as they were when the environment started (enabled, no toxics).
func (c *Container) Start(ctx context.Context) error {
	if _, err := c.env.docker.ContainerStart(ctx, c.id, client.ContainerStartOptions{}); err != nil {
		return fmt.Errorf("starting %s: %w", c.name, err)
	}
	if c.readyOnStart {
		return c.WaitReady(ctx)
	}
	return nil
}

// Restart stops the container (SIGTERM, SIGKILL after its StopTimeout) and
// starts it again, like Stop followed by Start.
func (c *Container) Restart(ctx context.Context) error {
	if err := c.Stop(ctx, 0); err != nil {
		return err
	}
	return c.Start(ctx)
}

// Pause freezes every process of the container (cgroup freezer): its
// connections stay open but nothing answers.
func (c *Container) Pause(ctx context.Context) error {
	if _, err := c.env.docker.ContainerPause(ctx, c.id, client.ContainerPauseOptions{}); err != nil {
		return fmt.Errorf("pausing %s: %w", c.name, err)
	}
	return nil
}

// Unpause thaws a paused container.
func (c *Container) Unpause(ctx context.Context) error {
	if _, err := c.env.docker.ContainerUnpause(ctx, c.id, client.ContainerUnpauseOptions{}); err != nil {
		return fmt.Errorf("unpausing %s: %w", c.name, err)
	}
	return nil
}

// WaitReady waits until the container's service accepts connections
// (PostgreSQL: a query; RabbitMQ: a channel; toxiproxy: its API, with every
// proxy declared; other containers: running), polling until ctx ends or, if
// ctx has no deadline, for at most 2 minutes.
func (c *Container) WaitReady(ctx context.Context) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
	}
	probe := c.ready
	if probe == nil {
		probe = func(ctx context.Context) error {
			st, err := c.State(ctx)
			if err != nil {
				return err
			}
			if !st.Running {
				return fmt.Errorf("not running (%s)", st.Status)
			}
			return nil
		}
	}
	if err := WaitUntil(ctx, 100*time.Millisecond, probe); err != nil {
		if st, serr := c.State(context.WithoutCancel(ctx)); serr == nil && !st.Running {
			return fmt.Errorf("%s is not ready: %w (container %s, exit code %d)", c.name, err, st.Status, st.ExitCode)
		}
		return fmt.Errorf("%s is not ready: %w", c.name, err)
	}
	return nil
}

// ContainerState is what Docker says of a container.
type ContainerState struct {
	// Status is "created", "running", "paused", "restarting", "exited" or
	// "dead".
	Status   string
	Running  bool // true also while paused
	Paused   bool
	ExitCode int
	// Pid is the host's process id of the container's main process, 0
	// when it does not run.
	Pid int
}

// State inspects the container.
func (c *Container) State(ctx context.Context) (ContainerState, error) {
	res, err := c.env.docker.ContainerInspect(ctx, c.id, client.ContainerInspectOptions{})
	if err != nil {
		return ContainerState{}, fmt.Errorf("inspecting %s: %w", c.name, err)
	}
	st := res.Container.State
	if st == nil {
		return ContainerState{}, fmt.Errorf("inspecting %s: no state", c.name)
	}
	return ContainerState{Status: string(st.Status), Running: st.Running, Paused: st.Paused, ExitCode: st.ExitCode, Pid: st.Pid}, nil
}

// Address returns the container's IP address on the environment's
// network. A process on the host reaches it where the host has an address
// on that network (a Linux bridge), without Docker's port proxy.
func (c *Container) Address(ctx context.Context) (netip.Addr, error) {
	res, err := c.env.docker.ContainerInspect(ctx, c.id, client.ContainerInspectOptions{})
	if err != nil {
		return netip.Addr{}, fmt.Errorf("inspecting %s: %w", c.name, err)
	}
	if ns := res.Container.NetworkSettings; ns != nil {
		if ep := ns.Networks[c.env.network]; ep != nil && ep.IPAddress.IsValid() {
			return ep.IPAddress, nil
		}
	}
	return netip.Addr{}, fmt.Errorf("%s has no address on network %s", c.name, c.env.network)
}

// SetCPUs confines the running container to the CPUs of cpuset ("0",
// "1-3", "0,2"). The engine takes "" for "unchanged": to lift a
// confinement, name every CPU of the machine.
func (c *Container) SetCPUs(ctx context.Context, cpuset string) error {
	if _, err := c.env.docker.ContainerUpdate(ctx, c.id, client.ContainerUpdateOptions{Resources: &container.Resources{CpusetCpus: cpuset}}); err != nil {
		return fmt.Errorf("confining %s to CPUs %q: %w", c.name, cpuset, err)
	}
	return nil
}

// WaitExit waits until the container's main process has exited and returns
// its exit code.
func (c *Container) WaitExit(ctx context.Context) (int, error) {
	res := c.env.docker.ContainerWait(ctx, c.id, client.ContainerWaitOptions{Condition: container.WaitConditionNotRunning})
	select {
	case r := <-res.Result:
		if r.Error != nil && r.Error.Message != "" {
			return int(r.StatusCode), fmt.Errorf("waiting for %s: %s", c.name, r.Error.Message)
		}
		return int(r.StatusCode), nil
	case err := <-res.Error:
		return 0, fmt.Errorf("waiting for %s: %w", c.name, err)
	case <-ctx.Done():
		return 0, fmt.Errorf("waiting for %s to exit: %w", c.name, ctx.Err())
	}
}

func (c *Container) waitStopped(ctx context.Context) error {
	return WaitUntil(ctx, 50*time.Millisecond, func(ctx context.Context) error {
		st, err := c.State(ctx)
		if err != nil {
			return err
		}
		if st.Running {
			return fmt.Errorf("%s still running", c.name)
		}
		return nil
	})
}

// Logs returns the last tail lines of the container's output (stdout and
// stderr interleaved); tail <= 0 returns all of it.
func (c *Container) Logs(ctx context.Context, tail int) (string, error) {
	opts := client.ContainerLogsOptions{ShowStdout: true, ShowStderr: true}
	if tail > 0 {
		opts.Tail = strconv.Itoa(tail)
	}
	rc, err := c.env.docker.ContainerLogs(ctx, c.id, opts)
	if err != nil {
		return "", fmt.Errorf("logs of %s: %w", c.name, err)
	}
	defer rc.Close()
	var buf bytes.Buffer
	if _, err := stdcopy.StdCopy(&buf, &buf, rc); err != nil && !errors.Is(err, io.EOF) {
		return buf.String(), fmt.Errorf("logs of %s: %w", c.name, err)
	}
	return buf.String(), nil
}

// LineTimes returns the time the engine received each line of the
// container's output (stdout and stderr), in order.
func (c *Container) LineTimes(ctx context.Context) ([]time.Time, error) {
	rc, err := c.env.docker.ContainerLogs(ctx, c.id, client.ContainerLogsOptions{ShowStdout: true, ShowStderr: true, Timestamps: true})
	if err != nil {
		return nil, fmt.Errorf("logs of %s: %w", c.name, err)
	}
	defer rc.Close()
	var buf bytes.Buffer
	if _, err := stdcopy.StdCopy(&buf, &buf, rc); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("logs of %s: %w", c.name, err)
	}
	var out []time.Time
	for line := range strings.Lines(buf.String()) {
		stamp, _, _ := strings.Cut(line, " ")
		t, err := time.Parse(time.RFC3339Nano, stamp)
		if err != nil {
			return out, fmt.Errorf("logs of %s: a line without the engine's time: %q", c.name, strings.TrimSpace(line))
		}
		out = append(out, t)
	}
	return out, nil
}

// Exec runs cmd in the running container and returns its exit code and
// combined output.
func (c *Container) Exec(ctx context.Context, cmd ...string) (int, string, error) {
	res, err := c.env.docker.ExecCreate(ctx, c.id, client.ExecCreateOptions{Cmd: cmd, AttachStdout: true, AttachStderr: true})
	if err != nil {
		return 0, "", fmt.Errorf("exec in %s: %w", c.name, err)
	}
	att, err := c.env.docker.ExecAttach(ctx, res.ID, client.ExecAttachOptions{})
	if err != nil {
		return 0, "", fmt.Errorf("exec in %s: %w", c.name, err)
	}
	defer att.Close()
	var buf bytes.Buffer
	done := make(chan error, 1)
	go func() {
		_, err := stdcopy.StdCopy(&buf, &buf, att.Reader)
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil && !errors.Is(err, io.EOF) {
			return 0, buf.String(), fmt.Errorf("exec in %s: %w", c.name, err)
		}
	case <-ctx.Done():
		att.Close()
		return 0, buf.String(), fmt.Errorf("exec in %s: %w", c.name, ctx.Err())
	}
	ins, err := c.env.docker.ExecInspect(ctx, res.ID, client.ExecInspectOptions{})
	if err != nil {
		return 0, buf.String(), fmt.Errorf("exec in %s: %w", c.name, err)
	}
	return ins.ExitCode, buf.String(), nil
}

// Remove removes the container (SIGKILL first if it runs). The environment
// forgets it; its name may be used again.
func (c *Container) Remove(ctx context.Context) error {
	_, err := c.env.docker.ContainerRemove(ctx, c.id, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
	if err != nil && !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("removing %s: %w", c.name, err)
	}
	c.env.forget(c)
	return nil
}

func (e *Env) forget(c *Container) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for i, x := range e.containers {
		if x == c {
			e.containers = append(e.containers[:i], e.containers[i+1:]...)
			break
		}
	}
	delete(e.names, c.name)
}

// StartContainer starts an extra container on the environment's network,
// reachable there as spec.Name, and waits until WaitReady says it is ready.
// It is removed by Close.
func (e *Env) StartContainer(ctx context.Context, spec ContainerSpec) (*Container, error) {
	if !linkNameRe.MatchString(spec.Name) {
		return nil, fmt.Errorf("container name %q: want lowercase letters, digits and dashes", spec.Name)
	}
	if spec.Image == "" {
		return nil, fmt.Errorf("container %s: no image", spec.Name)
	}
	if err := checkImage(ctx, e.docker, spec.Image); err != nil {
		return nil, err
	}
	c, _, err := e.run(ctx, spec, nil)
	if err != nil {
		return nil, err
	}
	if err := c.WaitReady(ctx); err != nil {
		return c, err
	}
	return c, nil
}

// RelaySpec describes a relay replica container.
type RelaySpec struct {
	// Name is the replica's name and OUTBOX_RELAY_ID; default relay-<n>.
	Name string
	// Image defaults to ImageRelay; any image that follows the black-box
	// relay contract will do.
	Image string
	// DBLink and BrokerLink are the links the replica uses; default
	// LinkRelayDB and LinkRelayBroker.
	DBLink, BrokerLink string
	// Env is added to the replica's environment and wins over the
	// variables set from the links (OUTBOX_DATABASE_URL, OUTBOX_AMQP_URL,
	// OUTBOX_RELAY_ID). OUTBOX_TABLE and OUTBOX_EXCHANGE belong here.
	Env map[string]string
	// Cmd replaces the image's CMD.
	Cmd []string
	// StopTimeout is how long Stop and Restart wait after SIGTERM before
	// SIGKILL when they are given no timeout; default 10 s.
	StopTimeout time.Duration
	// Binds bind-mounts host directories into the replica, as
	// ContainerSpec.Binds: where it writes its records (OUTBOX_RECORDS).
	Binds []string
}

// StartRelay starts a relay replica on the network with
// OUTBOX_DATABASE_URL and OUTBOX_AMQP_URL through its links' proxies and
// OUTBOX_RELAY_ID set to its name, and waits until it runs.
func (e *Env) StartRelay(ctx context.Context, spec RelaySpec) (*Container, error) {
	if spec.Image == "" {
		spec.Image = ImageRelay
	}
	if spec.DBLink == "" {
		spec.DBLink = LinkRelayDB
	}
	if spec.BrokerLink == "" {
		spec.BrokerLink = LinkRelayBroker
	}
	if spec.Name == "" {
		e.mu.Lock()
		for n := 1; ; n++ {
			if name := "relay-" + strconv.Itoa(n); !e.names[name] {
				spec.Name = name
				break
			}
		}
		e.mu.Unlock()
	}
	for _, l := range []struct {
		name string
		want Service
	}{{spec.DBLink, ServiceDB}, {spec.BrokerLink, ServiceBroker}} {
		if _, group := e.groups[l.name]; group && l.want == ServiceBroker {
			continue // a broker link of a cluster: one proxy per node
		}
		got, ok := e.linkIndex[l.name]
		if !ok || got.Service != l.want {
			return nil, fmt.Errorf("relay %s: %q is not a declared %s link", spec.Name, l.name, l.want)
		}
	}
	env := map[string]string{
		contract.EnvDatabaseURL: e.ContainerDatabaseURL(spec.DBLink),
		contract.EnvAMQPURL:     e.ContainerAMQPURL(spec.BrokerLink),
		contract.EnvRelayID:     spec.Name,
	}
	maps.Copy(env, spec.Env)
	return e.StartContainer(ctx, ContainerSpec{Name: spec.Name, Image: spec.Image, Env: env, Cmd: spec.Cmd, Role: "relay", StopTimeout: spec.StopTimeout, Binds: spec.Binds})
}

// run creates and starts a container on the network through
// testcontainers, with each of ports published on a fixed host port, and
// returns the host ports. A host port taken in the meantime by another
// process is chosen again.
func (e *Env) run(ctx context.Context, spec ContainerSpec, ports []int) (*Container, map[int]int, error) {
	if spec.Role == "" {
		spec.Role = "extra"
	}
	if spec.StopTimeout <= 0 {
		spec.StopTimeout = 10 * time.Second
	}
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil, nil, errors.New("environment is closed")
	}
	if e.names[spec.Name] {
		e.mu.Unlock()
		return nil, nil, fmt.Errorf("container %s exists already", spec.Name)
	}
	e.names[spec.Name] = true
	e.mu.Unlock()

	dockerName := "outboxlab-" + e.runID + "-" + spec.Name
	var lastErr error
	for attempt := 0; attempt < 4; attempt++ {
		host, err := freePorts(e.host, len(ports))
		if err != nil {
			lastErr = err
			break
		}
		hostPorts := map[int]int{}
		bindings := network.PortMap{}
		exposed := make([]string, 0, len(ports))
		for i, p := range ports {
			hostPorts[p] = host[i]
			cp := network.MustParsePort(strconv.Itoa(p) + "/tcp")
			bindings[cp] = []network.PortBinding{{HostIP: bindAddress(e.host), HostPort: strconv.Itoa(host[i])}}
			exposed = append(exposed, cp.String())
		}
		opts := []testcontainers.ContainerCustomizer{
			testcontainers.WithName(dockerName),
			testcontainers.WithLabels(e.labels(spec.Role)),
			tcnetwork.WithNetworkName([]string{spec.Name}, e.network),
			testcontainers.WithLogger(tclog.NewNoopLogger()),
			testcontainers.WithHostConfigModifier(func(hc *container.HostConfig) {
				hc.PortBindings = bindings
				hc.Binds = append(hc.Binds, spec.Binds...)
			}),
		}
		if len(exposed) > 0 {
			opts = append(opts, testcontainers.WithExposedPorts(exposed...))
		}
		if len(spec.Env) > 0 {
			opts = append(opts, testcontainers.WithEnv(spec.Env))
		}
		if len(spec.Cmd) > 0 {
			opts = append(opts, testcontainers.WithCmd(spec.Cmd...))
		}
		tc, err := testcontainers.Run(ctx, spec.Image, opts...)
		if err == nil {
			c := &Container{
				env: e, name: spec.Name, id: tc.GetContainerID(), dockerName: dockerName, image: spec.Image,
				stopTimeout: spec.StopTimeout, ready: spec.Ready, readyOnStart: spec.Role == "toxiproxy",
			}
			e.mu.Lock()
			e.containers = append(e.containers, c)
			e.mu.Unlock()
			return c, hostPorts, nil
		}
		lastErr = err
		// Remove what was created before trying again or giving up.
		rmCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		_, _ = e.docker.ContainerRemove(rmCtx, dockerName, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
		cancel()
		if !portTaken(err) || ctx.Err() != nil {
			break
		}
	}
	e.mu.Lock()
	delete(e.names, spec.Name)
	e.mu.Unlock()
	return nil, nil, fmt.Errorf("starting container %s (%s): %w", spec.Name, spec.Image, lastErr)
}

func portTaken(err error) bool {
	s := err.Error()
	return strings.Contains(s, "port is already allocated") || strings.Contains(s, "address already in use")
}

// freePorts returns n ports that are free on host right now.
func freePorts(host string, n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", net.JoinHostPort(listenAddress(host), "0"))
		if err != nil {
			return nil, fmt.Errorf("finding a free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// listenAddress is where freePorts probes: the loopback interface when the
// engine is local, every interface otherwise.
func listenAddress(host string) string {
	if isLoopback(host) {
		return host
	}
	return "0.0.0.0"
}

// bindAddress is the host address the ports are published on: loopback only
// when the engine is local.
func bindAddress(host string) netip.Addr {
	if isLoopback(host) {
		if a, err := netip.ParseAddr(host); err == nil {
			return a
		}
		return netip.MustParseAddr("127.0.0.1")
	}
	return netip.IPv4Unspecified()
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.IsLoopback()
}
