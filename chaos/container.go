package chaos

import (
	"github.com/outboxlab/outboxlab/history"

	"context"
	"fmt"
	"sync"
	"time"
)

// Container is what the container faults need of a container handle;
// testenv's containers satisfy it.
type Container interface {
	// Name names the container in fault names: "rabbitmq", "relay-a".
	Name() string
	// Kill sends SIGKILL: the process dies with no chance to clean up.
	Kill(ctx context.Context) error
	// Stop sends SIGTERM and, after timeout, SIGKILL.
	Stop(ctx context.Context, timeout time.Duration) error
	// Start starts a stopped or killed container.
	Start(ctx context.Context) error
	// Pause freezes every process of the container (cgroup freezer).
	Pause(ctx context.Context) error
	// Unpause thaws a paused container.
	Unpause(ctx context.Context) error
	// Restart stops and starts the container.
	Restart(ctx context.Context) error
}

// ContainerFault kills, stops, pauses or restarts a container while
// injected, and starts or unpauses it when healed.
type ContainerFault struct {
	marks
	c           Container
	name        string
	class       history.FaultClass
	kind        string
	stopTimeout time.Duration
	mu          sync.Mutex
	failed      bool // the last injection failed: heal must bring it back
}

// newContainerFault returns the fault; one of class ClassProcess targets
// the process that is the container (its name), any other every process.
func newContainerFault(c Container, class history.FaultClass, kind string) *ContainerFault {
	f := &ContainerFault{c: c, name: c.Name() + " " + kind, class: class, kind: kind}
	if class == history.ClassProcess {
		f.targets = []string{c.Name()}
	}
	return f
}

// KillContainer returns the fault that SIGKILLs c and starts it again when
// healed, named "<container> kill". class is the container's role
// (history.ClassBroker, history.ClassDB, ClassProcess, ...); a process container
// is its own target.
func KillContainer(c Container, class history.FaultClass) *ContainerFault {
	return newContainerFault(c, class, KindKill)
}

// StopContainer returns the fault that stops c (SIGTERM, then SIGKILL
// after timeout) and starts it when healed, named "<container> stop".
func StopContainer(c Container, class history.FaultClass, timeout time.Duration) *ContainerFault {
	f := newContainerFault(c, class, KindStop)
	f.stopTimeout = timeout
	return f
}

// PauseContainer returns the fault that freezes c and thaws it when
// healed, named "<container> pause". A relay paused past its lease loses
// its claims to another replica.
func PauseContainer(c Container, class history.FaultClass) *ContainerFault {
	return newContainerFault(c, class, KindPause)
}

// RestartContainer returns the one-shot fault that restarts c, named
// "<container> restart". Its heal only starts the container when the
// restart failed half-way.
func RestartContainer(c Container, class history.FaultClass) *ContainerFault {
	return newContainerFault(c, class, KindRestart)
}

// WithName renames the fault and returns it.
func (f *ContainerFault) WithName(name string) *ContainerFault { f.name = name; return f }

// WithTargets sets the processes the fault affects and returns f.
func (f *ContainerFault) WithTargets(processes ...string) *ContainerFault {
	f.targets = processes
	return f
}

// Name returns the fault's name.
func (f *ContainerFault) Name() string { return f.name }

// Class returns the container's role.
func (f *ContainerFault) Class() history.FaultClass { return f.class }

// Kind returns KindKill, KindStop, KindPause or KindRestart.
func (f *ContainerFault) Kind() string { return f.kind }

// Container returns the container the fault acts on.
func (f *ContainerFault) Container() Container { return f.c }

// Inject kills, stops, pauses or restarts the container.
func (f *ContainerFault) Inject(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.active.Store(true)
	var err error
	switch f.kind {
	case KindKill:
		err = f.c.Kill(ctx)
	case KindStop:
		err = f.c.Stop(ctx, f.stopTimeout)
	case KindPause:
		err = f.c.Pause(ctx)
	case KindRestart:
		err = f.c.Restart(ctx)
	default:
		err = fmt.Errorf("unknown container fault kind %q", f.kind)
	}
	f.failed = err != nil
	if err != nil {
		return fmt.Errorf("injecting %s: %w", f.name, err)
	}
	f.hits.Add(1)
	return nil
}

// Heal starts a killed or stopped container, unpauses a paused one, and
// starts a container whose restart failed.
func (f *ContainerFault) Heal(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.active.Load() {
		return nil
	}
	var err error
	switch f.kind {
	case KindKill, KindStop:
		err = f.c.Start(ctx)
	case KindPause:
		err = f.c.Unpause(ctx)
		if f.failed {
			// The pause may never have happened: a container that is not
			// paused refuses to unpause, and that is healed too.
			err = nil
		}
	case KindRestart:
		if f.failed {
			err = f.c.Start(ctx)
		}
	}
	if err != nil {
		return fmt.Errorf("healing %s: %w", f.name, err)
	}
	f.active.Store(false)
	f.failed = false
	return nil
}
