//go:build !linux

package bench

import (
	"errors"
	"time"
)

// dockerCallTimeout bounds the calls that lift a layout.
const dockerCallTimeout = 30 * time.Second

// setProcessCPUs is Linux's alone.
func setProcessCPUs(from, to int) error {
	return errors.New("confining this process to CPUs needs Linux")
}
