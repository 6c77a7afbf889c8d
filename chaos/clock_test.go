package chaos

import (
	"github.com/outboxlab/outboxlab/contract"
	"github.com/outboxlab/outboxlab/history"

	"context"
	"strings"
	"testing"
	"time"
)

func TestClockOffset(t *testing.T) {
	var nilClock *Clock
	if d := time.Since(nilClock.Now()); d < 0 || d > time.Minute || nilClock.Offset() != 0 {
		t.Fatalf("nil clock is off by %s", d)
	}
	c := NewClock(-5 * time.Minute)
	if d := time.Since(c.Now()); d < 5*time.Minute || d > 6*time.Minute {
		t.Fatalf("clock with -5m offset is %s behind", d)
	}
	if prev := c.SetOffset(time.Hour); prev != -5*time.Minute {
		t.Fatalf("SetOffset returned %s", prev)
	}
	if d := time.Until(c.Now()); d < 59*time.Minute || d > time.Hour {
		t.Fatalf("clock with +1h offset is %s ahead", d)
	}
}

func TestClockSkewFault(t *testing.T) {
	c := NewClock(time.Second)
	f := NewClockSkew("producer-1", c, -90*time.Second)
	if f.Name() != "producer-1 clock -1m30s" || f.Class() != history.ClassClock || f.Kind() != KindClockSkew {
		t.Fatalf("fault = %q %q %q", f.Name(), f.Class(), f.Kind())
	}
	ctx := context.Background()
	if err := f.Heal(ctx); err != nil || c.Offset() != time.Second {
		t.Fatalf("heal before inject changed the clock to %s (%v)", c.Offset(), err)
	}
	for range 2 {
		if err := f.Inject(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if c.Offset() != -90*time.Second || f.Hits() != 2 {
		t.Fatalf("offset %s hits %d", c.Offset(), f.Hits())
	}
	for range 2 {
		if err := f.Heal(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if c.Offset() != time.Second {
		t.Fatalf("healed offset %s, want the original 1s", c.Offset())
	}
}

func TestClockOffsetEnv(t *testing.T) {
	for _, d := range []time.Duration{0, -5 * time.Minute, 1500 * time.Millisecond, 36*time.Hour + time.Nanosecond} {
		v := ClockOffsetEnvVar(d)
		name, val, ok := strings.Cut(v, "=")
		if !ok || name != contract.EnvClockOffset {
			t.Fatalf("ClockOffsetEnvVar(%s) = %q", d, v)
		}
		back, err := ParseClockOffset(val)
		if err != nil || back != d {
			t.Fatalf("round trip of %s through %q gave %s, %v", d, val, back, err)
		}
		t.Setenv(contract.EnvClockOffset, val)
		c, err := ClockFromEnv()
		if err != nil || c.Offset() != d {
			t.Fatalf("ClockFromEnv with %q: %v, %v", val, c.Offset(), err)
		}
	}
	for _, s := range []string{"", "  ", "+30s", "-5m"} {
		if _, err := ParseClockOffset(s); err != nil {
			t.Fatalf("ParseClockOffset(%q): %v", s, err)
		}
	}
	t.Setenv(contract.EnvClockOffset, "five minutes")
	if _, err := ClockFromEnv(); err == nil {
		t.Fatal("bad offset accepted")
	}
}
