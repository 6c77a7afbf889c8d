//go:build !unix

package scenarios

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
)

// ownGroup does nothing where process groups are not available.
func ownGroup(cmd *exec.Cmd) {}

// signalGroup kills p; the other signals need a Unix host.
func signalGroup(p *os.Process, sig procSignal) error {
	if sig == sigKill || sig == sigTerm {
		return p.Kill()
	}
	return fmt.Errorf("%s is not available on %s", sig, runtime.GOOS)
}

// exitStatus is the process's exit code.
func exitStatus(exit *exec.ExitError) int { return exit.ExitCode() }
