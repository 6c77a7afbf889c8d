//go:build !unix

package inproc

import (
	"os"
)

// killProcess ends the own process at once, without running deferred
// functions. It does not return.
func killProcess() {
	if p, err := os.FindProcess(os.Getpid()); err == nil {
		_ = p.Kill()
	}
	os.Exit(137)
}
