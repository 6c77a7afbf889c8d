package relaycmd

import (
	"strings"
	"testing"
	"time"
)

// TestDuration sets a positive duration, leaves an unset variable alone
// and reports every other value, naming the variable.
func TestDuration(t *testing.T) {
	env := map[string]string{"A": "150ms", "B": "0s", "C": "soon", "D": "-1s"}
	get := func(k string) string { return env[k] }
	var problems []string
	bad := func(name string, err error) { problems = append(problems, name+": "+err.Error()) }
	got := map[string]time.Duration{}
	for _, name := range []string{"A", "B", "C", "D", "unset"} {
		Duration(get, bad, name, func(d time.Duration) { got[name] = d })
	}
	if len(got) != 1 || got["A"] != 150*time.Millisecond {
		t.Errorf("set %v, want only A = 150ms", got)
	}
	if len(problems) != 3 || !strings.HasPrefix(problems[0], `B: want a positive duration, got "0s"`) ||
		!strings.HasPrefix(problems[1], "C: ") || !strings.HasPrefix(problems[2], "D: ") {
		t.Errorf("problems %q, want B, C and D reported", problems)
	}
}
