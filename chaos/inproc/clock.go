package inproc

import (
	"fmt"
	"strings"
	"time"
)

// FormatClockOffset renders d as contract.EnvClockOffset expects it: a Go duration
// that time.ParseDuration reads back exactly ("-5m0s", "1.5s", "0s").
func FormatClockOffset(d time.Duration) string { return d.String() }

// ParseClockOffset reads an offset written by FormatClockOffset or by hand
// ("-5m", "+30s"); the empty string is no offset.
func ParseClockOffset(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("clock offset %q: %w", s, err)
	}
	return d, nil
}
