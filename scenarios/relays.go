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

func (c containerHandle) paused(ctx context.Context) bool {
	st, err := c.State(ctx)
	return err == nil && st.Paused
}

// relaySlot is one named replica of the relay under test. Faults act on
// the slot, which forwards to the replica's current process: a slot can be
// recreated with other settings (failpoints, a clock offset) and keeps the
// logs of its earlier lifetimes. A slot satisfies chaos.Container.
type relaySlot struct {
	r    *run
	name string // relay id, container name and history process
	bc   *boundedCtx
	base map[string]string // environment of every lifetime

	mu      sync.Mutex
	h       relayHandle
	extra   map[string]string // environment of the current lifetime
	oldLogs []string
	// records are the host paths of the records files of every lifetime
	// so far, the current one last; empty when the relay records nothing.
	records []string
}

var _ chaos.Container = (*relaySlot)(nil)

// Name returns the relay's id.
func (s *relaySlot) Name() string { return s.name }

func (s *relaySlot) handle() relayHandle {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.h
}

func (s *relaySlot) Kill(ctx context.Context) error  { return s.handle().Kill(ctx) }
func (s *relaySlot) Start(ctx context.Context) error { return s.handle().Start(ctx) }
func (s *relaySlot) Pause(ctx context.Context) error { return s.handle().Pause(ctx) }
func (s *relaySlot) Unpause(ctx context.Context) error {
	return s.handle().Unpause(ctx)
}
func (s *relaySlot) Restart(ctx context.Context) error { return s.handle().Restart(ctx) }
func (s *relaySlot) Stop(ctx context.Context, timeout time.Duration) error {
	return s.handle().Stop(ctx, timeout)
}

// start starts a new lifetime of the replica with extra added to its
// environment. The handle is kept even when the start reports an error
// (the replica may have died at once, which a failpoint fault expects).
func (s *relaySlot) start(ctx context.Context, extra map[string]string) error {
	env := maps.Clone(s.base)
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
		env[RecordsEnv] = path
		if s.r.relay.Image != "" {
			env[RecordsEnv] = recordsMount + "/" + file
			binds = []string{dir + ":" + recordsMount}
		}
	}
	if s.r.relay.Image != "" {
		var c *testenv.Container
		c, err = s.r.env.StartRelay(ctx, testenv.RelaySpec{
			Name: s.name, Image: s.r.relay.Image, Env: env, StopTimeout: relayStopTimeout, Binds: binds,
		})
		if c != nil {
			h = containerHandle{c}
		}
	} else {
		env[contract.EnvDatabaseURL] = s.r.env.DatabaseURL(testenv.LinkRelayDB)
		env[contract.EnvAMQPURL] = s.r.env.AMQPURL(testenv.LinkRelayBroker)
		env[contract.EnvRelayID] = s.name
		var p *procRelay
		p, err = startProc(s.name, s.r.relay.Command, env)
		if p != nil {
			h = p
		}
	}
	s.mu.Lock()
	s.h, s.extra = h, maps.Clone(extra)
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
func (s *relaySlot) recreate(ctx context.Context, extra map[string]string) error {
	if err := s.remove(ctx); err != nil {
		return err
	}
	return s.start(ctx, extra)
}

// remove stops and removes the current lifetime, keeping its logs.
func (s *relaySlot) remove(ctx context.Context) error {
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
	if err := h.Remove(ctx); err != nil {
		return fmt.Errorf("removing relay %s: %w", s.name, err)
	}
	s.mu.Lock()
	s.oldLogs = append(s.oldLogs, logs)
	s.h = nil
	s.mu.Unlock()
	return nil
}

// logs returns the output of every lifetime of the replica so far.
func (s *relaySlot) logs(ctx context.Context) string {
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
func (s *relaySlot) ensureRunning(ctx context.Context) error {
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
	return s.recreate(ctx, map[string]string{chaos.FailpointsEnv: ""})
}

// recordsFiles returns the host paths of the records files of every
// lifetime of the replica so far, oldest first.
func (s *relaySlot) recordsFiles() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.records)
}

// currentRecords returns the records file of the current lifetime; ""
// when the relay records nothing.
func (s *relaySlot) currentRecords() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.records) == 0 {
		return ""
	}
	return s.records[len(s.records)-1]
}

// RecordsEnv is the contract's optional variable naming the records file
// a relay appends its operations to (see CapRecords).
const RecordsEnv = contract.EnvRecords

// recordsMount is where a relay container sees the run's records
// directory.
const recordsMount = "/outboxlab-records"

// relayStopTimeout is how long a relay gets to finish its batch after
// SIGTERM.
const relayStopTimeout = 10 * time.Second
