//go:build linux

package bench

import (
	"context"
	"fmt"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/outboxlab/outboxlab/testenv"
)

// TestIsolateBroker puts an environment in the isolated layout and lifts
// it: RabbitMQ on the first core, PostgreSQL and this process's threads on
// the others, then every process free again.
func TestIsolateBroker(t *testing.T) {
	env := sharedEnv(t)
	n := runtime.NumCPU()
	if n < 2 {
		t.Skipf("the isolated layout needs 2 cores, this machine has %d", n)
	}
	ctx := context.Background()
	cpuset := func(c *testenv.Container) string {
		out, err := exec.CommandContext(ctx, "docker", "inspect", "--format", "{{.HostConfig.CpusetCpus}}", c.ID()).Output()
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(out))
	}
	onCPU0 := func() bool {
		var set unix.CPUSet
		if err := unix.SchedGetaffinity(0, &set); err != nil {
			t.Fatal(err)
		}
		return set.IsSet(0)
	}
	others := "1"
	if n > 2 {
		others = fmt.Sprintf("1-%d", n-1)
	}
	lift, err := isolateBroker(ctx, env)
	if err != nil {
		t.Fatal(err)
	}
	if got := cpuset(env.RabbitMQ()); got != "0" {
		t.Errorf("RabbitMQ on CPUs %q, want 0", got)
	}
	if got := cpuset(env.Postgres()); got != others {
		t.Errorf("PostgreSQL on CPUs %q, want %s", got, others)
	}
	if onCPU0() {
		t.Error("this thread may still run on CPU 0")
	}
	lift()
	all := fmt.Sprintf("0-%d", n-1)
	if a, b := cpuset(env.RabbitMQ()), cpuset(env.Postgres()); a != all || b != all {
		t.Errorf("after lifting: RabbitMQ on %q, PostgreSQL on %q, want every CPU (%s)", a, b, all)
	}
	if !onCPU0() {
		t.Error("after lifting, this thread may not run on CPU 0")
	}
}
