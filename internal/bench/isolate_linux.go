//go:build linux

package bench

import (
	"fmt"
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// dockerCallTimeout bounds the calls that lift a layout.
const dockerCallTimeout = 30 * time.Second

// setProcessCPUs confines every thread of this process to CPUs
// [from, to): the threads the Go runtime starts later inherit the mask of
// the thread that starts them.
func setProcessCPUs(from, to int) error {
	var set unix.CPUSet
	for c := from; c < to; c++ {
		set.Set(c)
	}
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return fmt.Errorf("listing this process's threads: %w", err)
	}
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		if err := unix.SchedSetaffinity(tid, &set); err != nil && err != unix.ESRCH {
			return fmt.Errorf("confining thread %d to CPUs %d-%d: %w", tid, from, to-1, err)
		}
	}
	return nil
}
