package scenarios

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/outboxlab/outboxlab/chaos"
	"github.com/outboxlab/outboxlab/contract"
	"github.com/outboxlab/outboxlab/internal/observe"
	"github.com/outboxlab/outboxlab/testenv"
)

// relayHandle is one running relay replica: a container on the
// environment's network or a process on the host. Its lifecycle methods
// are those of chaos.Container.
type relayHandle interface {
	Kill(ctx context.Context) error
	Stop(ctx context.Context, timeout time.Duration) error
	Start(ctx context.Context) error
	Pause(ctx context.Context) error
	Unpause(ctx context.Context) error
	Restart(ctx context.Context) error
	// Logs returns the replica's output so far.
	Logs(ctx context.Context, tail int) (string, error)
	// WaitExit waits until the replica's process exits and returns its
	// exit status (137 for SIGKILL).
	WaitExit(ctx context.Context) (int, error)
	// Running reports whether the replica's process runs (paused counts).
	Running(ctx context.Context) (bool, error)
	Remove(ctx context.Context) error
	// Pid is the host's process id of the replica's process, 0 when it
	// does not run.
	Pid(ctx context.Context) (int, error)
	// LineTimes returns when each line of the replica's output came.
	LineTimes(ctx context.Context) ([]time.Time, error)
}

// containerHandle adapts a testenv container.
type containerHandle struct{ *testenv.Container }

func (c containerHandle) Running(ctx context.Context) (bool, error) {
	st, err := c.State(ctx)
	if err != nil {
		return false, err
	}
	return st.Running, nil
}

func (c containerHandle) Pid(ctx context.Context) (int, error) {
	st, err := c.State(ctx)
	if err != nil {
		return 0, err
	}
	return st.Pid, nil
}

func (c containerHandle) paused(ctx context.Context) bool {
	st, err := c.State(ctx)
	return err == nil && st.Paused
}

// Replica is one named replica of the relay under test, as a scenario's
// hooks see it (Stage.Replica). Faults act on the replica, which forwards
// to its current process, a container or a process on the host: it
// satisfies chaos.Container, so chaos.KillContainer, PauseContainer,
// StopContainer and RestartContainer take it. A replica can be recreated
// with other settings (failpoints, a clock offset) and keeps the logs of
// its earlier lifetimes. In Scenario.Prepare it has not started yet: its
// lifecycle methods return an error there, and Setenv sets what it
// starts with.
type Replica struct {
	r    *run
	name string // relay id, container name and history process
	bc   *boundedCtx

	mu      sync.Mutex
	base    map[string]string // environment of every lifetime
	h       relayHandle
	extra   map[string]string // environment of the current lifetime
	oldLogs []string
	// oldLines are the times of the output lines of the earlier
	// lifetimes; linesLost says some could not be read.
	oldLines  []time.Time
	linesLost bool
	// pid is the process id of the current process as last read, 0 when
	// it must be read again (every action on the process clears it).
	pid int
	// records are the host paths of the records files of every lifetime
	// so far, the current one last; empty when the relay records nothing.
	records []string
	// role is the login role the replica's database URL logs in as, so
	// that the observation of its outbox names it; nil when the run does
	// not observe.
	role *observe.Role
	// ports are the TCP ports of the services the current lifetime
	// connects to (servicePorts), for counting its connection attempts.
	ports map[string]int
	// settings are the database settings of every session the replica
	// opens (SetSessionSetting).
	settings map[string]string
	// version is the version of the relay the next lifetimes run in a
	// rolling upgrade (setVersion); nil is the relay under test. pre is
	// base before the relay under test's Env went over it, and set what
	// Setenv set, for the environment of another version (program).
	version *Version
	pre     map[string]string
	set     map[string]string
}

var _ chaos.Container = (*Replica)(nil)

// Name returns the relay's id (OUTBOX_RELAY_ID), which is also its
// process in the history: "relay-a", "relay-b"...
func (s *Replica) Name() string { return s.name }

// Env returns a copy of the environment every lifetime of the replica
// starts with: the OUTBOX_* settings of the contract (TimingEnv, the
// scenario's RelayEnv, the relay under test's Env) and what Setenv set.
func (s *Replica) Env() map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.base)
}

// Setenv sets a variable of the environment of every lifetime of the
// replica that starts after the call, over the relay under test's Env:
// called from Scenario.Prepare, of the replica's first lifetime on.
func (s *Replica) Setenv(key, value string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.base == nil {
		s.base = map[string]string{}
	}
	s.base[key] = value
	if s.set == nil {
		s.set = map[string]string{}
	}
	s.set[key] = value
}

// SetSessionSetting sets a PostgreSQL configuration parameter of every
// database session the replica opens, on the server's side (ALTER ROLE
// ... SET on the replica's own login role), whatever the relay does:
// idle_in_transaction_session_timeout, say, so that the server ends a
// session the replica leaves idle in an open transaction. Called from
// Scenario.Prepare; it takes effect only in a run that observes the
// outbox (every run with a relay, unless Options.Unobserved), where each
// replica logs in as a role of its own, and is ignored otherwise.
func (s *Replica) SetSessionSetting(name, value string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.settings == nil {
		s.settings = map[string]string{}
	}
	s.settings[name] = value
}

// tap returns the run's broker tap, nil when the broker is not observed.
func (s *Replica) tap() *observe.Tap {
	if s.r == nil {
		return nil
	}
	return s.r.tap
}

func (s *Replica) handle() relayHandle {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.h
}

// act calls f on the replica's current process, or fails when it has
// none (before its first start, or between two lifetimes).
func (s *Replica) act(f func(h relayHandle) error) error {
	h := s.handle()
	if h == nil {
		return fmt.Errorf("relay %s has no process running", s.name)
	}
	defer s.forgetPid()
	return f(h)
}

// forgetPid makes the next reading of the replica's process id ask its
// handle again: the process may have changed.
func (s *Replica) forgetPid() {
	s.mu.Lock()
	s.pid = 0
	s.mu.Unlock()
}

// processID returns the host's process id of the replica's current
// process, 0 when it has none running.
func (s *Replica) processID(ctx context.Context) int {
	s.mu.Lock()
	pid, h := s.pid, s.h
	s.mu.Unlock()
	if pid != 0 || h == nil {
		return pid
	}
	pid, err := h.Pid(ctx)
	if err != nil {
		return 0
	}
	s.mu.Lock()
	if s.h == h {
		s.pid = pid
	}
	s.mu.Unlock()
	return pid
}

// lineTimes returns when each line of the replica's output came, over
// every lifetime so far; ok is false when some could not be read.
func (s *Replica) lineTimes(ctx context.Context) (times []time.Time, ok bool) {
	s.mu.Lock()
	times, ok = slices.Clone(s.oldLines), !s.linesLost
	h := s.h
	s.mu.Unlock()
	if h != nil {
		cur, err := h.LineTimes(ctx)
		times, ok = append(times, cur...), ok && err == nil
	}
	return times, ok
}

// Kill sends the replica's process SIGKILL.
func (s *Replica) Kill(ctx context.Context) error {
	return s.act(func(h relayHandle) error { return h.Kill(ctx) })
}

// Start starts the replica's stopped or killed process again, with the
// environment of its lifetime.
func (s *Replica) Start(ctx context.Context) error {
	return s.act(func(h relayHandle) error { return h.Start(ctx) })
}

// Pause freezes the replica's process (docker pause, or SIGSTOP on the
// host); it holds its connections and claims while frozen.
func (s *Replica) Pause(ctx context.Context) error {
	return s.act(func(h relayHandle) error { return h.Pause(ctx) })
}

// Unpause thaws the replica's process.
func (s *Replica) Unpause(ctx context.Context) error {
	return s.act(func(h relayHandle) error { return h.Unpause(ctx) })
}

// Restart stops the replica's process (SIGTERM, then SIGKILL) and starts
// it again.
func (s *Replica) Restart(ctx context.Context) error {
	return s.act(func(h relayHandle) error { return h.Restart(ctx) })
}

// Stop sends the replica's process SIGTERM, and SIGKILL after timeout.
func (s *Replica) Stop(ctx context.Context, timeout time.Duration) error {
	return s.act(func(h relayHandle) error { return h.Stop(ctx, timeout) })
}

// start starts a new lifetime of the replica with extra added to its
// environment. The handle is kept even when the start reports an error
// (the replica may have died at once, which a failpoint fault expects).
func (s *Replica) start(ctx context.Context, extra map[string]string) error {
	image, command, env := s.program()
	maps.Copy(env, extra)
	var (
		h     relayHandle
		err   error
		binds []string
		path  string
	)
	if dir := s.r.recordsDir; dir != "" {
		s.mu.Lock()
		file := fmt.Sprintf("%s.%d.jsonl", s.name, len(s.records)+1)
		s.mu.Unlock()
		path = filepath.Join(dir, file)
		env[contract.EnvRecords] = path
		if image != "" {
			env[contract.EnvRecords] = recordsMount + "/" + file
			binds = []string{dir + ":" + recordsMount}
		}
	}
	dbURL := s.r.env.DatabaseURL(testenv.LinkRelayDB)
	if image != "" {
		dbURL = s.r.env.ContainerDatabaseURL(testenv.LinkRelayDB)
	}
	if s.role != nil {
		if dbURL, err = observe.RoleURL(dbURL, *s.role); err != nil {
			return fmt.Errorf("starting relay %s: %w", s.name, err)
		}
	}
	env[contract.EnvDatabaseURL] = dbURL
	amqpURL := s.r.env.AMQPURL(testenv.LinkRelayBroker)
	if image != "" {
		amqpURL = s.r.env.ContainerAMQPURL(testenv.LinkRelayBroker)
	}
	if s.role != nil && s.r.tap != nil {
		if amqpURL, err = observe.BrokerURL(amqpURL, *s.role); err != nil {
			return fmt.Errorf("starting relay %s: %w", s.name, err)
		}
		env[contract.EnvAMQPURL] = amqpURL
	}
	if image != "" {
		var c *testenv.Container
		c, err = s.r.env.StartRelay(ctx, testenv.RelaySpec{
			Name: s.name, Image: image, Env: env, StopTimeout: relayStopTimeout, Binds: binds,
		})
		if c != nil {
			h = containerHandle{c}
		}
	} else {
		env[contract.EnvAMQPURL] = amqpURL
		env[contract.EnvRelayID] = s.name
		var p *procRelay
		p, err = startProc(s.name, command, env)
		if p != nil {
			h = p
		}
	}
	s.mu.Lock()
	s.h, s.extra, s.pid = h, maps.Clone(extra), 0
	s.ports = servicePorts(env[contract.EnvDatabaseURL], amqpURL)
	if path != "" {
		s.records = append(s.records, path)
	}
	s.mu.Unlock()
	if err != nil {
		return fmt.Errorf("starting relay %s: %w", s.name, err)
	}
	return nil
}

// recreate ends the current lifetime (SIGTERM, then SIGKILL), keeps its
// logs, and starts a new one with extra in the environment.
func (s *Replica) recreate(ctx context.Context, extra map[string]string) error {
	if err := s.remove(ctx); err != nil {
		return err
	}
	return s.start(ctx, extra)
}

// remove stops and removes the current lifetime, keeping its logs.
func (s *Replica) remove(ctx context.Context) error {
	h := s.handle()
	if h == nil {
		return nil
	}
	if c, ok := h.(containerHandle); ok && c.paused(ctx) {
		_ = c.Unpause(ctx)
	}
	if ok, err := h.Running(ctx); err == nil && ok {
		_ = h.Stop(ctx, relayStopTimeout)
	}
	logs, _ := h.Logs(ctx, 0)
	lines, linesErr := h.LineTimes(ctx)
	if err := h.Remove(ctx); err != nil {
		return fmt.Errorf("removing relay %s: %w", s.name, err)
	}
	s.mu.Lock()
	s.oldLogs = append(s.oldLogs, logs)
	s.oldLines = append(s.oldLines, lines...)
	s.linesLost = s.linesLost || linesErr != nil
	s.h, s.pid = nil, 0
	s.mu.Unlock()
	return nil
}

// logs returns the output of every lifetime of the replica so far.
func (s *Replica) logs(ctx context.Context) string {
	s.mu.Lock()
	all := strings.Join(s.oldLogs, "\n")
	h := s.h
	s.mu.Unlock()
	if h != nil {
		cur, _ := h.Logs(ctx, 0)
		all += "\n" + cur
	}
	return all
}

// ensureRunning thaws and starts the replica when a fault left it paused
// or dead.
func (s *Replica) ensureRunning(ctx context.Context) error {
	h := s.handle()
	if h == nil {
		return s.start(ctx, nil)
	}
	if c, ok := h.(containerHandle); ok && c.paused(ctx) {
		if err := c.Unpause(ctx); err != nil {
			return err
		}
	}
	if p, ok := h.(*procRelay); ok && p.isStopped() {
		if err := p.Unpause(ctx); err != nil {
			return err
		}
	}
	running, err := h.Running(ctx)
	if err != nil {
		return err
	}
	if running {
		return nil
	}
	// A replica that died (a failpoint kill) runs again without
	// failpoints.
	return s.recreate(ctx, map[string]string{contract.EnvFailpoints: ""})
}

// recordsFiles returns the host paths of the records files of every
// lifetime of the replica so far, oldest first.
func (s *Replica) recordsFiles() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.records)
}

// currentRecords returns the records file of the current lifetime; ""
// when the relay records nothing.
func (s *Replica) currentRecords() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.records) == 0 {
		return ""
	}
	return s.records[len(s.records)-1]
}

// recordsMount is where a relay container sees the run's records
// directory.
const recordsMount = "/outboxlab-records"

// relayStopTimeout is how long a relay gets to finish its batch after
// SIGTERM.
const relayStopTimeout = 10 * time.Second
