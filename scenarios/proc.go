package scenarios

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// procRelay is a relay replica run as a process on the host, for a relay
// under test given as a command. Its lifecycle methods mirror a
// container's: Kill is SIGKILL, Stop is SIGTERM then SIGKILL, Pause and
// Unpause are SIGSTOP and SIGCONT, Start runs the command again.
type procRelay struct {
	name string
	argv []string
	env  []string

	mu      sync.Mutex
	cmd     *exec.Cmd
	done    chan struct{} // closed when cmd exited
	status  int
	stopped bool // SIGSTOPped
	out     *syncBuffer
}

// procSignal is what the harness does to a relay process.
type procSignal int

// Signals of a relay process: SIGTERM, SIGKILL, SIGSTOP and SIGCONT on a
// Unix host.
const (
	sigTerm procSignal = iota
	sigKill
	sigStop
	sigCont
)

func (s procSignal) String() string {
	return [...]string{"SIGTERM", "SIGKILL", "SIGSTOP", "SIGCONT"}[s]
}

// syncBuffer is a bytes.Buffer safe for the concurrent writes of a
// process's stdout and stderr, which keeps the time each line came.
type syncBuffer struct {
	mu    sync.Mutex
	b     bytes.Buffer
	lines []time.Time
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	now := time.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	for range bytes.Count(p, []byte{'\n'}) {
		b.lines = append(b.lines, now)
	}
	return b.b.Write(p)
}

// lineTimes returns when each line came.
func (b *syncBuffer) lineTimes() []time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.lines)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// startProc starts argv with env added to the harness's own environment.
func startProc(name string, argv []string, env map[string]string) (*procRelay, error) {
	if len(argv) == 0 {
		return nil, errors.New("relay command is empty")
	}
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	p := &procRelay{name: name, argv: argv, out: &syncBuffer{}}
	for _, k := range keys {
		p.env = append(p.env, k+"="+env[k])
	}
	if err := p.Start(context.Background()); err != nil {
		return nil, err
	}
	return p, nil
}

// Start runs the command again when it is not running.
func (p *procRelay) Start(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		select {
		case <-p.done:
		default:
			return nil // running
		}
	}
	cmd := exec.Command(p.argv[0], p.argv[1:]...)
	cmd.Env = append(os.Environ(), p.env...)
	cmd.Stdout, cmd.Stderr = p.out, p.out
	ownGroup(cmd)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s (%s): %w", p.name, strings.Join(p.argv, " "), err)
	}
	done := make(chan struct{})
	p.cmd, p.done, p.stopped = cmd, done, false
	go func() {
		err := cmd.Wait()
		status := 0
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			status = exitStatus(exit)
		}
		p.mu.Lock()
		p.status = status
		p.mu.Unlock()
		close(done)
	}()
	return nil
}

func (p *procRelay) current() (*exec.Cmd, chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd, p.done
}

// signal sends sig to the process group of the running command.
func (p *procRelay) signal(sig procSignal) error {
	cmd, done := p.current()
	if cmd == nil {
		return fmt.Errorf("%s: not started", p.name)
	}
	select {
	case <-done:
		return nil // exited already
	default:
	}
	if err := signalGroup(cmd.Process, sig); err != nil {
		return fmt.Errorf("sending %s to %s: %w", sig, p.name, err)
	}
	return nil
}

func (p *procRelay) wait(ctx context.Context) error {
	_, done := p.current()
	if done == nil {
		return nil
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("waiting for %s to exit: %w", p.name, ctx.Err())
	}
}

// Kill sends SIGKILL and waits for the exit.
func (p *procRelay) Kill(ctx context.Context) error {
	if err := p.signal(sigKill); err != nil {
		return err
	}
	return p.wait(ctx)
}

// Stop sends SIGTERM (thawing a stopped process first) and SIGKILL after
// timeout.
func (p *procRelay) Stop(ctx context.Context, timeout time.Duration) error {
	if timeout <= 0 {
		timeout = relayStopTimeout
	}
	_ = p.Unpause(ctx)
	if err := p.signal(sigTerm); err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if p.wait(wctx) == nil {
		return nil
	}
	return p.Kill(ctx)
}

// Restart stops and starts the command.
func (p *procRelay) Restart(ctx context.Context) error {
	if err := p.Stop(ctx, 0); err != nil {
		return err
	}
	return p.Start(ctx)
}

// Pause freezes the process group with SIGSTOP.
func (p *procRelay) Pause(ctx context.Context) error {
	if err := p.signal(sigStop); err != nil {
		return err
	}
	p.mu.Lock()
	p.stopped = true
	p.mu.Unlock()
	return nil
}

// Unpause thaws the process group with SIGCONT.
func (p *procRelay) Unpause(ctx context.Context) error {
	if err := p.signal(sigCont); err != nil {
		return err
	}
	p.mu.Lock()
	p.stopped = false
	p.mu.Unlock()
	return nil
}

func (p *procRelay) isStopped() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stopped
}

// Logs returns the process's output; tail > 0 keeps the last lines.
func (p *procRelay) Logs(ctx context.Context, tail int) (string, error) {
	s := p.out.String()
	if tail > 0 {
		lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
		if len(lines) > tail {
			lines = lines[len(lines)-tail:]
		}
		s = strings.Join(lines, "\n")
	}
	return s, nil
}

// LineTimes returns when each line of the process's output came, over
// every run of the command.
func (p *procRelay) LineTimes(ctx context.Context) ([]time.Time, error) {
	return p.out.lineTimes(), nil
}

// Pid returns the process id of the running command, 0 when it does
// not run.
func (p *procRelay) Pid(ctx context.Context) (int, error) {
	cmd, done := p.current()
	if cmd == nil || cmd.Process == nil {
		return 0, nil
	}
	select {
	case <-done:
		return 0, nil
	default:
		return cmd.Process.Pid, nil
	}
}

// WaitExit waits for the exit and returns the status, 128+signal for a
// process ended by a signal.
func (p *procRelay) WaitExit(ctx context.Context) (int, error) {
	if err := p.wait(ctx); err != nil {
		return 0, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.status, nil
}

// Running reports whether the process has not exited.
func (p *procRelay) Running(ctx context.Context) (bool, error) {
	_, done := p.current()
	if done == nil {
		return false, nil
	}
	select {
	case <-done:
		return false, nil
	default:
		return true, nil
	}
}

// Remove kills the process.
func (p *procRelay) Remove(ctx context.Context) error {
	running, _ := p.Running(ctx)
	if !running {
		return nil
	}
	_ = p.Unpause(ctx)
	return p.Kill(ctx)
}
