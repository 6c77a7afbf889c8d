//go:build unix

package inproc

import (
	"os"
	"syscall"
	"time"
)

// killProcess ends the own process with SIGKILL: no deferred function, no
// signal handler, no flush runs. It does not return.
//
// A process that is PID 1 of its PID namespace, such as a container's main
// process started without an init, is immune to the signals it sends
// itself, SIGKILL included. It exits at once with status 137 instead, the
// status a SIGKILLed container reports, running nothing on the way out.
func killProcess() {
	if os.Getpid() != 1 {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		// The signal is delivered before kill returns; the wait only
		// covers a kernel that is slow to act.
		time.Sleep(time.Second)
	}
	os.Exit(137)
}
