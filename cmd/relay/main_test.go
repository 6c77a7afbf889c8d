package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/outboxlab/outboxlab/contract"
	"github.com/outboxlab/outboxlab/history"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
	buildDir  string
)

// TestMain removes the built binary and the shared environment after the
// tests.
func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		_ = os.RemoveAll(buildDir)
	}
	if err := shared.Close(); err != nil {
		fmt.Fprintf(os.Stderr, "removing the test environment: %v\n", err)
		code = 1
	}
	os.Exit(code)
}

// relayBinary builds the command once for all tests of the package.
func relayBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "outbox-relay-bin-")
		if buildErr != nil {
			return
		}
		binPath = filepath.Join(buildDir, "relay")
		out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// process is a running relay binary with its stderr captured.
type process struct {
	cmd    *exec.Cmd
	mu     sync.Mutex
	stderr bytes.Buffer
	done   chan struct{}
	err    error
}

func (p *process) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.Write(b)
}

func (p *process) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.String()
}

// start runs the binary with exactly env (plus PATH and HOME).
func start(t *testing.T, env map[string]string) *process {
	t.Helper()
	cmd := exec.Command(relayBinary(t))
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	p := &process{cmd: cmd, done: make(chan struct{})}
	cmd.Stdout = io.Discard
	cmd.Stderr = p
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("relay stderr:\n%s", p.output())
		}
	})
	return p
}

// wait returns the exit code, failing the test after within.
func (p *process) wait(t *testing.T, within time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(within):
		t.Fatalf("relay still running after %s", within)
	}
	var ee *exec.ExitError
	if errors.As(p.err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return -int(ws.Signal())
		}
		return ee.ExitCode()
	}
	if p.err != nil {
		t.Fatalf("waiting for relay: %v", p.err)
	}
	return 0
}

// waitLog waits until a JSON log line has msg.
func (p *process) waitLog(t *testing.T, within time.Duration, msg string) map[string]any {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		for _, l := range p.logLines(t) {
			if l["msg"] == msg {
				return l
			}
		}
		select {
		case <-p.done:
			t.Fatalf("relay exited before logging %q", msg)
		case <-time.After(20 * time.Millisecond):
		}
	}
	t.Fatalf("no log line %q within %s", msg, within)
	return nil
}

// logLines parses stderr as JSON lines; a line that is not JSON fails.
func (p *process) logLines(t *testing.T) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(p.output()))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal(line, &m); err != nil {
			// The last line may be half written.
			continue
		}
		out = append(out, m)
	}
	return out
}

func goodEnv() map[string]string {
	return map[string]string{
		contract.EnvDatabaseURL: "postgres://relay:s3cret@127.0.0.1:1/app?connect_timeout=1",
		contract.EnvAMQPURL:     "amqp://relay:s3cret@127.0.0.1:1/",
		contract.EnvTable:       "outbox",
		contract.EnvExchange:    "events",
		contract.EnvRelayID:     "relay-test",
	}
}

func TestBadConfigurationExitsTwo(t *testing.T) {
	for _, tc := range []struct {
		name, key, value, want string
	}{
		{"malformed database URL", contract.EnvDatabaseURL, "postgres://relay:s3cret@db:port/app", contract.EnvDatabaseURL},
		{"malformed broker URL", contract.EnvAMQPURL, "amqp://relay:s3cret@broker:port/", contract.EnvAMQPURL},
		{"non-AMQP broker URL", contract.EnvAMQPURL, "http://relay:s3cret@broker/", contract.EnvAMQPURL},
		{"bad table name", contract.EnvTable, "outbox;drop", contract.EnvTable},
		{"missing table", contract.EnvTable, "", "OUTBOX_TABLE: is required"},
		{"bad duration", contract.EnvLease, "forever", contract.EnvLease},
		{"bad clock offset", contract.EnvClockOffset, "-5 minutes", contract.EnvClockOffset},
		{"bad metrics address", contract.EnvMetricsAddr, "localhost", contract.EnvMetricsAddr},
		{"batch too large", contract.EnvBatchSize, "20000", "OUTBOX_BATCH_SIZE: must be from 1 to 10000"},
		{"publish timeout too long", contract.EnvPublishTimeout, "1h", "OUTBOX_PUBLISH_TIMEOUT: must be from 100ms to 10m0s"},
		{"lease shorter than the publishes", contract.EnvPublishTimeout, "2m", "OUTBOX_LEASE and OUTBOX_PUBLISH_TIMEOUT"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := goodEnv()
			env[tc.key] = tc.value
			p := start(t, env)
			if code := p.wait(t, 30*time.Second); code != exitConfig {
				t.Fatalf("exit code %d, want %d", code, exitConfig)
			}
			out := p.output()
			if !strings.Contains(out, tc.want) {
				t.Errorf("stderr does not name %q:\n%s", tc.want, out)
			}
			if strings.Contains(out, "s3cret") {
				t.Errorf("stderr leaks the password:\n%s", out)
			}
		})
	}
}

// TestUnreachableDatabaseIsRetried starts the relay against a database
// nothing listens for: it must keep retrying, not exit, and stop cleanly on
// SIGTERM.
// TestUnreachableDatabaseIsRetried also records: the lifetime, stopped
// before the database ever answered, has a records file that ends with
// its clean stop.
func TestUnreachableDatabaseIsRetried(t *testing.T) {
	env := goodEnv()
	env[contract.EnvMigrate] = "true"
	records := filepath.Join(t.TempDir(), "records.jsonl")
	env[recordsEnv] = records
	p := start(t, env)
	first := p.waitLog(t, 30*time.Second, "migrating outbox table failed, retrying")
	if strings.Contains(p.output(), "s3cret") {
		t.Errorf("logs leak the password:\n%s", p.output())
	}
	if first["level"] != "WARN" {
		t.Errorf("retry logged at %v, want WARN", first["level"])
	}
	// A second retry proves the loop goes on.
	deadline := time.Now().Add(30 * time.Second)
	for n := 0; n < 2; {
		n = 0
		for _, l := range p.logLines(t) {
			if l["msg"] == "migrating outbox table failed, retrying" {
				n++
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("no second retry within 30s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, 30*time.Second); code != exitOK {
		t.Fatalf("exit code %d after SIGTERM, want 0", code)
	}
	f, err := os.Open(records)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	lives, err := history.ReadRecords(f)
	if err != nil {
		t.Fatal(err)
	}
	if len(lives) != 1 || !lives[0].Stopped() {
		t.Fatalf("records %+v, want one lifetime that ends with a stop", lives)
	}
}

// TestUnusableRecordsFileExitsTwo: a records file the relay cannot open
// is a configuration error, found before the database is reached.
func TestUnusableRecordsFileExitsTwo(t *testing.T) {
	env := goodEnv()
	env[recordsEnv] = filepath.Join(t.TempDir(), "no", "such", "dir", "records.jsonl")
	p := start(t, env)
	if code := p.wait(t, 30*time.Second); code != exitConfig {
		t.Fatalf("exit code %d, want %d\n%s", code, exitConfig, p.output())
	}
	if !strings.Contains(p.output(), recordsEnv) {
		t.Errorf("stderr does not name %s:\n%s", recordsEnv, p.output())
	}
}

// freePort returns a loopback address nothing listens on yet.
func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

func httpGet(ctx context.Context, url string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}
