package inproc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/outboxlab/outboxlab/contract"
	"github.com/outboxlab/outboxlab/relay"
)

const (
	confirmMark = relay.FailAfterConfirmBeforeMark
	afterClaim  = relay.FailAfterClaim
)

func TestParseFailpointsRoundTrip(t *testing.T) {
	fp, err := ParseFailpoints(" after-confirm-before-mark = 3*off -> kill ; after-claim=error;; after-mark=1*sleep(2s)->2*pause->off ")
	if err != nil {
		t.Fatal(err)
	}
	want := "after-claim=error;after-confirm-before-mark=3*off->kill;after-mark=1*sleep(2s)->2*pause->off"
	if got := fp.String(); got != want {
		t.Fatalf("String() = %q, want %q", got, want)
	}
	again, err := ParseFailpoints(fp.String())
	if err != nil {
		t.Fatal(err)
	}
	if again.String() != want {
		t.Fatalf("reparsed String() = %q, want %q", again.String(), want)
	}
	empty, err := ParseFailpoints("  ;  ")
	if err != nil {
		t.Fatal(err)
	}
	if empty.String() != "" || empty.armed.Load() != 0 {
		t.Fatalf("blank spec programmed %q", empty.String())
	}
}

func TestParseFailpointsErrors(t *testing.T) {
	cases := []struct {
		spec string
		want []string // substrings the error must contain
	}{
		{"after-claim=kil", []string{`term "kil"`, `unknown action "kil"`, "after-claim"}},
		{"nope=kill", []string{`unknown failpoint "nope"`, "after-confirm-before-mark"}},
		{"after-claim", []string{`"after-claim"`, "want name=terms"}},
		{"after-claim=0*off->kill", []string{`term "0*off"`, "count"}},
		{"after-claim=x*off", []string{`term "x*off"`, "count"}},
		{"after-claim=kill->off", []string{`term "kill" has no count`}},
		{"after-claim=sleep(abc)", []string{`term "sleep(abc)"`, "sleep duration"}},
		{"after-claim=sleep(-1s)", []string{"must be positive"}},
		{"after-claim=sleep 1s", []string{`unknown action "sleep 1s"`}},
		{"after-claim=error;after-claim=kill", []string{"programmed twice"}},
		{"after-claim=", []string{"after-claim", "no terms"}},
		{"after-claim=3*off->", []string{"empty term"}},
		{"after-claim=Kill", []string{`unknown action "Kill"`}},
	}
	for _, c := range cases {
		fp, err := ParseFailpoints(c.spec)
		if err == nil {
			t.Errorf("ParseFailpoints(%q) = %q, want an error", c.spec, fp.String())
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("ParseFailpoints(%q) error %q does not mention %q", c.spec, err, w)
			}
		}
	}
}

func TestSetSpecIsAllOrNothing(t *testing.T) {
	fp := NewFailpoints()
	if err := fp.SetSpec("after-claim=error;after-mark=bogus"); err == nil {
		t.Fatal("want an error")
	}
	if fp.String() != "" {
		t.Fatalf("a bad spec programmed %q", fp.String())
	}
}

func TestFailpointSequenceOffThenKill(t *testing.T) {
	fp, err := ParseFailpoints("after-confirm-before-mark=3*off->kill")
	if err != nil {
		t.Fatal(err)
	}
	var kills atomic.Int64
	fp.SetKill(func() { kills.Add(1) })
	ctx := context.Background()
	for i := 1; i <= 3; i++ {
		if err := fp.Inject(ctx, confirmMark); err != nil {
			t.Fatalf("pass %d: %v", i, err)
		}
	}
	if kills.Load() != 0 || fp.Hits(confirmMark) != 0 {
		t.Fatalf("off passes fired: kills=%d hits=%d", kills.Load(), fp.Hits(confirmMark))
	}
	err = fp.Inject(ctx, confirmMark)
	if !errors.Is(err, ErrKilled) {
		t.Fatalf("pass 4: got %v, want ErrKilled", err)
	}
	if kills.Load() != 1 {
		t.Fatalf("kills = %d, want 1", kills.Load())
	}
	// A last term without a count applies forever.
	if err := fp.Inject(ctx, confirmMark); !errors.Is(err, ErrKilled) {
		t.Fatalf("pass 5: got %v, want ErrKilled", err)
	}
	if got, want := fp.Hits(confirmMark), int64(2); got != want {
		t.Fatalf("Hits = %d, want %d", got, want)
	}
	if got, want := fp.Passes(confirmMark), int64(5); got != want {
		t.Fatalf("Passes = %d, want %d", got, want)
	}
	// Other failpoints are untouched.
	if err := fp.Inject(ctx, afterClaim); err != nil || fp.Passes(afterClaim) != 0 {
		t.Fatalf("after-claim: err=%v passes=%d", err, fp.Passes(afterClaim))
	}
}

func TestFailpointSequenceErrorsThenOff(t *testing.T) {
	fp, err := ParseFailpoints("after-claim=2*error->1*off->1*error")
	if err != nil {
		t.Fatal(err)
	}
	var got []bool
	for range 6 {
		err := fp.Inject(context.Background(), afterClaim)
		if err != nil && !errors.Is(err, ErrInjected) {
			t.Fatalf("unexpected error %v", err)
		}
		got = append(got, err != nil)
	}
	want := []bool{true, true, false, true, false, false}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("errors per pass = %v, want %v", got, want)
	}
	if fp.Hits(afterClaim) != 3 || fp.Passes(afterClaim) != 6 || fp.TotalHits() != 3 || fp.TotalPasses() != 6 {
		t.Fatalf("hits=%d passes=%d total=%d/%d", fp.Hits(afterClaim), fp.Passes(afterClaim), fp.TotalHits(), fp.TotalPasses())
	}
}

func TestFailpointSleep(t *testing.T) {
	fp, err := ParseFailpoints("after-mark=1*sleep(50ms)->off")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := fp.Inject(context.Background(), relay.FailAfterMark); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 50*time.Millisecond {
		t.Fatalf("sleep lasted %s, want at least 50ms", d)
	}
	if fp.Hits(relay.FailAfterMark) != 1 {
		t.Fatalf("hits = %d", fp.Hits(relay.FailAfterMark))
	}

	// A sleep is cut short by its context.
	if err := fp.Set(relay.FailAfterMark, "sleep(1h)"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := fp.Inject(ctx, relay.FailAfterMark); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want a deadline error", err)
	}
}

func TestFailpointPanic(t *testing.T) {
	fp, err := ParseFailpoints("after-claim=panic")
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		v := recover()
		err, ok := v.(error)
		if !ok || !errors.Is(err, ErrInjectedPanic) || !strings.Contains(err.Error(), afterClaim) {
			t.Fatalf("recovered %v, want an error wrapping ErrInjectedPanic naming the failpoint", v)
		}
		if fp.Hits(afterClaim) != 1 {
			t.Fatalf("hits = %d", fp.Hits(afterClaim))
		}
	}()
	_ = fp.Inject(context.Background(), afterClaim)
	t.Fatal("Inject returned instead of panicking")
}

func TestFailpointPauseAndRelease(t *testing.T) {
	fp, err := ParseFailpoints("after-claim=1*pause->off")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- fp.Inject(ctx, afterClaim) }()
	for fp.Passes(afterClaim) != 1 {
		if ctx.Err() != nil {
			t.Fatalf("the pause was never reached: %v", ctx.Err())
		}
		time.Sleep(time.Millisecond)
	}
	select {
	case err := <-done:
		t.Fatalf("pause returned %v before Release", err)
	default:
	}
	fp.Release(afterClaim)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-ctx.Done():
		t.Fatal("pause did not return after Release")
	}
	if err := fp.Inject(ctx, afterClaim); err != nil {
		t.Fatalf("second pass: %v", err)
	}
}

func TestFailpointsNilAndUnprogrammed(t *testing.T) {
	var fp *Failpoints
	if err := fp.Inject(context.Background(), afterClaim); err != nil {
		t.Fatal(err)
	}
	if fp.Hits(afterClaim) != 0 || fp.TotalHits() != 0 || fp.String() != "" {
		t.Fatal("nil failpoints report activity")
	}
	var asInterface relay.Failpoints = fp
	if err := asInterface.Inject(context.Background(), afterClaim); err != nil {
		t.Fatal(err)
	}
	fp = NewFailpoints()
	if err := fp.Inject(context.Background(), "not-a-failpoint"); err != nil {
		t.Fatal(err)
	}
	if err := fp.Set("not-a-failpoint", "kill"); err == nil {
		t.Fatal("Set accepted an unknown failpoint")
	}
	if err := fp.Set(afterClaim, "error"); err != nil {
		t.Fatal(err)
	}
	if err := fp.Inject(context.Background(), confirmMark); err != nil || fp.Passes(confirmMark) != 0 {
		t.Fatalf("unprogrammed failpoint: err=%v passes=%d", err, fp.Passes(confirmMark))
	}
	fp.Clear(afterClaim)
	if err := fp.Inject(context.Background(), afterClaim); err != nil {
		t.Fatalf("cleared failpoint fired: %v", err)
	}
	if fp.armed.Load() != 0 {
		t.Fatalf("armed = %d after Clear", fp.armed.Load())
	}
}

func TestFailpointOffPathAllocatesNothing(t *testing.T) {
	ctx := context.Background()
	var nilFP *Failpoints
	armedElsewhere, err := ParseFailpoints("after-claim=error")
	if err != nil {
		t.Fatal(err)
	}
	for name, fp := range map[string]*Failpoints{"nil": nilFP, "empty": NewFailpoints(), "other point armed": armedElsewhere} {
		if n := testing.AllocsPerRun(1000, func() { _ = fp.Inject(ctx, confirmMark) }); n != 0 {
			t.Errorf("%s: Inject allocates %.1f times per call when off", name, n)
		}
	}
}

func BenchmarkFailpointOff(b *testing.B) {
	ctx := context.Background()
	fp := NewFailpoints()
	for b.Loop() {
		_ = fp.Inject(ctx, confirmMark)
	}
}

func TestFailpointConcurrentCounts(t *testing.T) {
	fp, err := ParseFailpoints("after-claim=100*error->off")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var errs atomic.Int64
	for range 8 {
		wg.Go(func() {
			for range 50 {
				if fp.Inject(context.Background(), afterClaim) != nil {
					errs.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if errs.Load() != 100 || fp.Hits(afterClaim) != 100 || fp.Passes(afterClaim) != 400 {
		t.Fatalf("errors=%d hits=%d passes=%d, want 100/100/400", errs.Load(), fp.Hits(afterClaim), fp.Passes(afterClaim))
	}
}

func TestFailpointsFromEnv(t *testing.T) {
	t.Setenv(contract.EnvFailpoints, "")
	fp, err := FailpointsFromEnv()
	if err != nil || fp != nil {
		t.Fatalf("empty env: %v %v", fp, err)
	}
	t.Setenv(contract.EnvFailpoints, "after-mark=2*off->error")
	fp, err = FailpointsFromEnv()
	if err != nil || fp.String() != "after-mark=2*off->error" {
		t.Fatalf("got %v %v", fp, err)
	}
	t.Setenv(contract.EnvFailpoints, "after-mark=explode")
	if _, err := FailpointsFromEnv(); err == nil || !strings.Contains(err.Error(), contract.EnvFailpoints) {
		t.Fatalf("bad env: %v", err)
	}
}

// childSpecEnv makes the test binary run failpointChild instead of the
// tests (see TestMain).
const childSpecEnv = "INPROC_TEST_FAILPOINT_CHILD"

// failpointChild passes after-confirm-before-mark ten times under spec,
// printing each pass, and exits 0 if it survives. A deferred print shows
// whether deferred functions ran.
func failpointChild(spec string) int {
	defer fmt.Println("deferred cleanup ran")
	fp, err := ParseFailpoints(spec)
	if err != nil {
		fmt.Println("parse:", err)
		return 2
	}
	for i := 1; i <= 10; i++ {
		fmt.Printf("pass %d\n", i)
		if err := fp.Inject(context.Background(), confirmMark); err != nil {
			fmt.Println("inject:", err)
			return 3
		}
	}
	fmt.Println("survived")
	return 0
}

func TestFailpointKillsProcess(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childSpecEnv+"=after-confirm-before-mark=3*off->kill")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		t.Fatalf("child: %v, want it killed; output:\n%s", err, out.String())
	}
	ws, ok := exit.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("child ended with %v, want death by SIGKILL; output:\n%s", exit, out.String())
	}
	got := out.String()
	if !strings.HasSuffix(got, "pass 4\n") {
		t.Fatalf("child output should end at pass 4 (three passes off, then kill):\n%s", got)
	}
	if strings.Contains(got, "deferred") || strings.Contains(got, "survived") {
		t.Fatalf("child ran code after the kill:\n%s", got)
	}

	// The control: with the failpoint off the same child survives, so the
	// death above is the failpoint's doing.
	ctl := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	ctl.Env = append(os.Environ(), childSpecEnv+"=after-confirm-before-mark=10*off")
	if b, err := ctl.CombinedOutput(); err != nil || !strings.Contains(string(b), "survived") {
		t.Fatalf("control child: %v\n%s", err, b)
	}
}
