package main

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outboxlab/outboxlab/contract"
)

// TestLogsRedactEveryBrokerURL starts the relay with a list of brokers,
// a cluster's nodes, each with its password: its starting line names
// them all, and no password is anywhere in its logs.
func TestLogsRedactEveryBrokerURL(t *testing.T) {
	env := goodEnv()
	env[contract.EnvAMQPURL] = "amqp://relay:s3cret@127.0.0.1:1/,amqp://relay:s3cond@127.0.0.1:2/, amqp://relay:th1rd@127.0.0.1:3/"
	p := start(t, env)
	line := p.waitLog(t, 30*time.Second, "relay starting")
	if got, want := line["broker"], "amqp://relay:xxxxx@127.0.0.1:1/,amqp://relay:xxxxx@127.0.0.1:2/, amqp://relay:xxxxx@127.0.0.1:3/"; got != want {
		t.Errorf("broker = %v, want %s", got, want)
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, 30*time.Second); code != exitOK {
		t.Errorf("exit code %d after SIGTERM, want %d", code, exitOK)
	}
	for _, secret := range []string{"s3cret", "s3cond", "th1rd"} {
		if strings.Contains(p.output(), secret) {
			t.Errorf("the logs leak %s:\n%s", secret, p.output())
		}
	}
}
