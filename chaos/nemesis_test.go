package chaos

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outboxlab/outboxlab/history"
)

// countingFault is a FuncFault whose inject and heal count their calls and
// fail on demand.
type countingFault struct {
	*FuncFault
	injects, heals atomic.Int64
	failInject     atomic.Bool
	failHeal       atomic.Int64 // heals left to fail
}

func newCountingFault(name string) *countingFault {
	c := &countingFault{}
	c.FuncFault = NewFuncFault(name, history.ClassBroker, KindDown,
		func(context.Context) error {
			c.injects.Add(1)
			if c.failInject.Load() {
				return errors.New("docker said no")
			}
			return nil
		},
		func(context.Context) error {
			c.heals.Add(1)
			if c.failHeal.Load() > 0 {
				c.failHeal.Add(-1)
				return errors.New("still down")
			}
			return nil
		})
	return c
}

// render renders the nemesis ops as "type f value [error]" lines.
func render(ops []history.Op) string {
	var b strings.Builder
	for _, op := range ops {
		if op.Process != NemesisProcess && op.Process != RunnerProcess {
			continue
		}
		value := op.Phase
		if op.Fault != nil {
			value = op.Fault.Name
		}
		fmt.Fprintf(&b, "%s %s %s", op.Type, op.F, value)
		if op.Error != "" {
			b.WriteString(" !")
		}
		b.WriteString("\n")
	}
	return b.String()
}

func TestNemesisRecordsWindows(t *testing.T) {
	rec := &history.Recorder{}
	a, b := newCountingFault("a down"), newCountingFault("b down")
	n, err := NewNemesis(rec, a, b)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := n.Start(ctx, "a down"); err != nil {
		t.Fatal(err)
	}
	if got := n.Open(); len(got) != 1 || got[0] != "a down" {
		t.Fatalf("Open() = %v", got)
	}
	if err := n.Stop(ctx, "a down"); err != nil {
		t.Fatal(err)
	}
	b.failInject.Store(true)
	if err := n.Start(ctx, "b down"); err == nil {
		t.Fatal("failed injection returned nil")
	}
	if b.Hits() != 0 || a.Hits() != 1 {
		t.Fatalf("hits a=%d b=%d", a.Hits(), b.Hits())
	}
	// The failed injection may have half-applied: HealAll heals it, and a
	// second HealAll does nothing.
	if err := n.HealAll(ctx); err != nil {
		t.Fatal(err)
	}
	if err := n.HealAll(ctx); err != nil {
		t.Fatal(err)
	}
	if a.heals.Load() != 1 || b.heals.Load() != 1 {
		t.Fatalf("heals a=%d b=%d, want 1 each", a.heals.Load(), b.heals.Load())
	}
	want := `invoke fault-start a down
ok fault-start a down
invoke fault-stop a down
ok fault-stop a down
invoke fault-start b down
info fault-start b down !
invoke fault-stop b down
ok fault-stop b down
`
	if got := render(rec.Ops()); got != want {
		t.Fatalf("history:\n%s\nwant:\n%s", got, want)
	}
	if err := n.RequireFired(); !errors.Is(err, ErrNotFired) || !strings.Contains(err.Error(), `"b down"`) || strings.Contains(err.Error(), `"a down"`) {
		t.Fatalf("RequireFired() = %v", err)
	}
	if err := n.RequireFired("a down"); err != nil {
		t.Fatalf("RequireFired(a) = %v", err)
	}
	if ref, ok := n.Ref("a down"); !ok || ref.Class != history.ClassBroker || ref.Name != "a down" || ref.Kind != KindDown {
		t.Fatalf("Ref(a down) = %+v, %v", ref, ok)
	}
	if _, ok := n.Ref("zzz"); ok {
		t.Fatal("Ref of an unregistered fault")
	}
	if h := n.Hits(); h["a down"] != 1 || h["b down"] != 0 {
		t.Fatalf("Hits() = %v", h)
	}
	if got := n.Summary(); !strings.Contains(got, "a down") || !strings.Contains(got, "hits=1\n") || !strings.Contains(got, "hits=0\n") {
		t.Fatalf("Summary():\n%s", got)
	}
}

func TestNemesisRejectsDuplicatesAndUnknown(t *testing.T) {
	if _, err := NewNemesis(nil, newCountingFault("x"), newCountingFault("x")); err == nil {
		t.Fatal("duplicate names accepted")
	}
	if _, err := NewNemesis(nil, newCountingFault("")); !errors.Is(err, ErrEmptyName) {
		t.Fatalf("empty name: %v", err)
	}
	n, _ := NewNemesis(nil)
	if err := n.Start(context.Background(), "ghost"); err == nil {
		t.Fatal("unknown fault started")
	}
	if err := n.Run(context.Background(), []Step{{Fault: "ghost", Duration: time.Millisecond}}, RunOptions{}); err == nil {
		t.Fatal("schedule with an unknown fault ran")
	}
}

func TestNemesisHealAllRetriesFailedHeal(t *testing.T) {
	rec := &history.Recorder{}
	a := newCountingFault("a down")
	a.failHeal.Store(1)
	n, _ := NewNemesis(rec, a)
	ctx := context.Background()
	if err := n.Start(ctx, "a down"); err != nil {
		t.Fatal(err)
	}
	if err := n.HealAll(ctx); err == nil {
		t.Fatal("failed heal reported success")
	}
	if !a.Active() || len(n.Open()) != 1 {
		t.Fatal("a fault whose heal failed is no longer open")
	}
	if err := n.HealAll(ctx); err != nil {
		t.Fatal(err)
	}
	if a.Active() || len(n.Open()) != 0 || a.heals.Load() != 2 {
		t.Fatalf("active=%v open=%v heals=%d", a.Active(), n.Open(), a.heals.Load())
	}
}

func TestNemesisRunFollowsSchedule(t *testing.T) {
	rec := &history.Recorder{}
	a, b := newCountingFault("a down"), newCountingFault("b down")
	n, _ := NewNemesis(rec, a, b)
	steps := []Step{
		{At: 0, Fault: "a down", Duration: 20 * time.Millisecond},
		{At: 10 * time.Millisecond, Fault: "b down", Duration: 30 * time.Millisecond},
		{At: 20 * time.Millisecond, Fault: "a down", Duration: 5 * time.Millisecond},
	}
	start := time.Now()
	if err := n.Run(context.Background(), steps, RunOptions{}); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el < 40*time.Millisecond {
		t.Fatalf("Run took %s, the schedule lasts 40ms", el)
	}
	want := `invoke fault-start a down
ok fault-start a down
invoke fault-start b down
ok fault-start b down
invoke fault-stop a down
ok fault-stop a down
invoke fault-start a down
ok fault-start a down
invoke fault-stop a down
ok fault-stop a down
invoke fault-stop b down
ok fault-stop b down
`
	if got := render(rec.Ops()); got != want {
		t.Fatalf("history:\n%s\nwant:\n%s", got, want)
	}
	if a.Hits() != 2 || b.Hits() != 1 {
		t.Fatalf("hits a=%d b=%d", a.Hits(), b.Hits())
	}
}

func TestNemesisRunHealsWhenCancelled(t *testing.T) {
	rec := &history.Recorder{}
	a := newCountingFault("a down")
	n, _ := NewNemesis(rec, a)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	err := n.Run(ctx, []Step{{At: 0, Fault: "a down", Duration: time.Hour}}, RunOptions{})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Run = %v, want the deadline", err)
	}
	if a.Active() || a.heals.Load() != 1 || len(n.Open()) != 0 {
		t.Fatalf("cancelled Run left the fault active=%v heals=%d", a.Active(), a.heals.Load())
	}
}

func TestPhases(t *testing.T) {
	rec := &history.Recorder{}
	a := newCountingFault("a down")
	n, _ := NewNemesis(rec, a)
	p := &Phases{
		Recorder: rec, Nemesis: n, Safety: 60 * time.Millisecond,
		Steps:       []Step{{At: 10 * time.Millisecond, Fault: "a down", Duration: 20 * time.Millisecond}},
		DrainWithin: 5 * time.Second, PollEvery: time.Millisecond,
	}
	var ticks atomic.Int64
	err := p.RunSafety(context.Background(), func(ctx context.Context) error {
		for {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Millisecond):
				ticks.Add(1)
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if ticks.Load() == 0 || a.Hits() != 1 || a.Active() {
		t.Fatalf("ticks=%d hits=%d active=%v", ticks.Load(), a.Hits(), a.Active())
	}
	polls := 0
	took, err := p.RunLiveness(context.Background(), func(context.Context) (bool, error) {
		polls++
		return polls == 3, nil
	})
	if err != nil || polls != 3 || took <= 0 {
		t.Fatalf("liveness: took=%s polls=%d err=%v", took, polls, err)
	}
	p.StartCheck()
	want := `ok phase safety
invoke fault-start a down
ok fault-start a down
invoke fault-stop a down
ok fault-stop a down
ok phase liveness
ok phase check
`
	if got := render(rec.Ops()); got != want {
		t.Fatalf("history:\n%s\nwant:\n%s", got, want)
	}

	p.DrainWithin = 20 * time.Millisecond
	_, err = p.RunLiveness(context.Background(), func(context.Context) (bool, error) {
		return false, errors.New("12 rows pending")
	})
	if !errors.Is(err, ErrNotDrained) || !strings.Contains(err.Error(), "12 rows pending") {
		t.Fatalf("undrained liveness: %v", err)
	}
}

func TestPhasesSafetyReportsWorkloadAndFaultErrors(t *testing.T) {
	a := newCountingFault("a down")
	a.failInject.Store(true)
	n, _ := NewNemesis(nil, a)
	p := &Phases{Nemesis: n, Safety: 30 * time.Millisecond, Steps: []Step{{Fault: "a down", Duration: time.Millisecond}}}
	err := p.RunSafety(context.Background(), func(context.Context) error { return errors.New("producer crashed") })
	if err == nil || !strings.Contains(err.Error(), "producer crashed") || !strings.Contains(err.Error(), "docker said no") {
		t.Fatalf("RunSafety = %v", err)
	}
}

func TestNemesisRunPlaysALaneInOrder(t *testing.T) {
	rec := &history.Recorder{}
	a, b := newCountingFault("a down"), newCountingFault("b down")
	n, _ := NewNemesis(rec, a, b)
	steps := []Step{
		{At: 0, Fault: "b down", Duration: 10 * time.Millisecond},
		{At: 0, Fault: "a down", Duration: 10 * time.Millisecond},
	}
	// One lane: b waits for a (stable order of At), though both are due
	// at once.
	steps[0].At = time.Millisecond
	if err := n.Run(context.Background(), steps, RunOptions{Lanes: map[string]string{"a down": "x", "b down": "x"}}); err != nil {
		t.Fatal(err)
	}
	want := `invoke fault-start a down
ok fault-start a down
invoke fault-stop a down
ok fault-stop a down
invoke fault-start b down
ok fault-start b down
invoke fault-stop b down
ok fault-stop b down
`
	if got := render(rec.Ops()); got != want {
		t.Fatalf("history:\n%s\nwant:\n%s", got, want)
	}
}

func TestPhasesHoldTheScheduleUntilReady(t *testing.T) {
	rec := &history.Recorder{}
	a := newCountingFault("a down")
	n, _ := NewNemesis(rec, a)
	var ready atomic.Bool
	var readyAt atomic.Int64
	go func() {
		time.Sleep(30 * time.Millisecond)
		readyAt.Store(time.Now().UnixNano())
		ready.Store(true)
	}()
	p := &Phases{
		Recorder: rec, Nemesis: n, Safety: 50 * time.Millisecond,
		Steps: []Step{{At: 0, Fault: "a down", Duration: time.Millisecond}},
		Ready: ready.Load, ReadyWithin: 5 * time.Second,
	}
	if err := p.RunSafety(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	var started time.Time
	for _, op := range rec.Ops() {
		if op.F == history.FaultStart && op.Type == history.Invoke {
			started = op.Time
		}
	}
	if started.IsZero() || started.UnixNano() < readyAt.Load() {
		t.Fatalf("the fault started at %s, before the run was ready at %s", started, time.Unix(0, readyAt.Load()))
	}
}

func TestSplitNoBite(t *testing.T) {
	a := &NoBite{Fault: "relay-a pause", Why: "it held no claims"}
	other := errors.New("docker said no")
	err := errors.Join(fmt.Errorf("lane x: %w", a), other, errors.Join(fmt.Errorf("safety: %w", &NoBite{Fault: "b", Why: "c"})))
	nb, rest := SplitNoBite(err)
	if len(nb) != 2 || nb[0] != a || nb[1].Fault != "b" {
		t.Fatalf("no-bite = %v", nb)
	}
	if len(rest) != 1 || rest[0] != other {
		t.Fatalf("others = %v", rest)
	}
	if !errors.Is(fmt.Errorf("x: %w", a), ErrCouldNotBite) {
		t.Fatal("a wrapped NoBite is not ErrCouldNotBite")
	}
	if nb, rest := SplitNoBite(nil); nb != nil || rest != nil {
		t.Fatal("nil splits into nothing")
	}
}
