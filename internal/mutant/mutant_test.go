package mutant

import (
	"context"
	"encoding/json"
	"maps"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/outboxlab/outboxlab/workload"

	"go.uber.org/goleak"

	"github.com/outboxlab/outboxlab/checker"
	"github.com/outboxlab/outboxlab/history"
	"github.com/outboxlab/outboxlab/internal/sim"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// wantNames is the catalogue the harness promises to catch.
var wantNames = []string{
	"publish-before-commit", "mark-before-publish", "no-lease", "app-clock-lease", "no-confirm",
	"ignore-return", "broker-down-consumes-attempts", "no-backoff", "sweep-pending", "unfenced-mark",
	"offset-claim", "non-persistent", "consumer-no-dedupe", "consumer-ack-before-commit", "consumer-delivery-tag-key",
	"consumer-check-then-insert", "delete-before-confirm", "drop-poison",
}

func TestCatalogue(t *testing.T) {
	if got := Names(); !slices.Equal(got, wantNames) {
		t.Fatalf("Names() = %v\nwant %v", got, wantNames)
	}
	for _, m := range All() {
		if !strings.HasSuffix(m.Description, ".") || strings.Count(m.Description, ". ") > 0 || len(m.Description) < 40 {
			t.Errorf("%s: description is not one sentence: %q", m.Name, m.Description)
		}
		got, ok := Lookup(m.Name)
		if !ok || got.Name != m.Name {
			t.Errorf("Lookup(%q) = %v, %v", m.Name, got.Name, ok)
		}
		v := m.Variant()
		if v.Name != m.Name {
			t.Errorf("%s: variant named %q", m.Name, v.Name)
		}
		switch m.Side {
		case SideRelay:
			if !m.HasRelayForm() {
				t.Errorf("%s: relay-side mutant without a relay form", m.Name)
			}
			if _, err := LookupRelay(m.Name); err != nil {
				t.Errorf("LookupRelay(%q): %v", m.Name, err)
			}
		case SideConsumer:
			if m.Inbox == nil || v.WrapInbox == nil {
				t.Errorf("%s: consumer-side mutant without an inbox form", m.Name)
			}
		case SideProducer:
			if m.Producer == workload.Outbox {
				t.Errorf("%s: producer-side mutant with the outbox producer", m.Name)
			}
		default:
			t.Errorf("%s: side %q", m.Name, m.Side)
		}
		if m.Side != SideRelay {
			if _, err := LookupRelay(m.Name); err == nil || !strings.Contains(err.Error(), "not one the relay runs") {
				t.Errorf("LookupRelay(%q) = %v, want a not-relay-side error", m.Name, err)
			}
		}
	}
	if _, ok := Lookup("no-such-bug"); ok {
		t.Error("Lookup found an unknown mutant")
	}
	if _, err := LookupRelay("no-such-bug"); err == nil || !strings.Contains(err.Error(), "unknown mutant") {
		t.Errorf("LookupRelay(unknown) = %v", err)
	}
	// All returns a copy: changing it leaves the catalogue alone.
	all := All()
	all[0].Name = "changed"
	if Names()[0] != wantNames[0] {
		t.Error("All shares its slice with the catalogue")
	}
}

func TestRowJSONKeys(t *testing.T) {
	b, err := json.Marshal([]Row{{Mutant: "m", Killed: true, Checker: "lost", Scenario: "s", Seed: 3, Seconds: 0.5, Steps: 4,
		Tier: TierSim, Tried: 3, StepsOf: "actions", Replay: "x", Detail: "d"}})
	if err != nil {
		t.Fatal(err)
	}
	var rows []map[string]any
	if err := json.Unmarshal(b, &rows); err != nil {
		t.Fatal(err)
	}
	keys := slices.Sorted(maps.Keys(rows[0]))
	want := []string{"checker", "killed", "mutant", "scenario", "seconds", "seed", "steps"}
	if !slices.Equal(keys, want) {
		t.Fatalf("row keys %v, want %v", keys, want)
	}
}

func TestParseTier(t *testing.T) {
	for _, s := range []string{"sim", "infra", "all"} {
		if tier, err := ParseTier(s); err != nil || string(tier) != s {
			t.Errorf("ParseTier(%q) = %q, %v", s, tier, err)
		}
	}
	if _, err := ParseTier("cloud"); err == nil {
		t.Error("ParseTier accepted cloud")
	}
	if _, err := RunMatrix(context.Background(), TierInfra, Options{}); err == nil {
		t.Error("RunMatrix ran the infrastructure tier with no Options.Infra")
	}
	if _, err := RunMatrix(context.Background(), TierSim, Options{Mutants: []string{"no-such-bug"}}); err == nil {
		t.Error("RunMatrix accepted an unknown mutant")
	}
}

// TestSimMatrix runs the kill matrix of the simulation tier with its
// defaults, as CI does: the reference must survive every seed, exposure
// and state-machine case, and every mutant must be killed, quickly, with
// a short counterexample.
func TestSimMatrix(t *testing.T) {
	start := time.Now()
	rows, err := RunMatrix(context.Background(), TierSim, Options{Log: func(s string) { t.Log(s) }})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("matrix in %s", time.Since(start).Round(time.Millisecond))
	if len(rows) != len(wantNames)+1 || rows[0].Mutant != Reference {
		t.Fatalf("%d rows, first %q; want the reference and %d mutants", len(rows), rows[0].Mutant, len(wantNames))
	}
	ref := rows[0]
	if ref.Err != nil || ref.Killed {
		t.Errorf("the reference was killed (or could not run): %s (%s); replay: %s\n%s",
			ref.line(), ref.Detail, ref.Replay, strings.Join(ref.Counterexample, "\n"))
	}
	if want := 2000 + 100; ref.Tried < want {
		t.Errorf("the reference ran %d seeds, want at least %d", ref.Tried, want)
	}
	var (
		seeds   []int
		seconds []float64
	)
	for _, r := range rows[1:] {
		switch {
		case r.Err != nil:
			t.Errorf("%s: %v", r.Mutant, r.Err)
			continue
		case !r.Killed:
			t.Errorf("%s survived %d seeds (%s)", r.Mutant, r.Tried, r.Scenario)
			continue
		}
		// The seed reported replays the kill.
		m, _ := Lookup(r.Mutant)
		if res := sim.Run(r.Seed, sim.Options{Variant: m.Variant(), Tune: m.Exposure.Tune}); Killer(res.Report, nil) != r.Checker {
			t.Errorf("%s: seed %d replays as %q, want killed by %s", r.Mutant, r.Seed, Killer(res.Report, nil), r.Checker)
		}
		if uint64(r.Tried) != r.Seed {
			t.Errorf("%s: killed on seed %d after %d seeds from 1", r.Mutant, r.Seed, r.Tried)
		}
		if r.StepsOf == "scheduler steps" {
			// The shortest safety phase that still kills: one step fewer
			// does not.
			at := func(steps int) string {
				return Killer(sim.Run(r.Seed, sim.Options{Steps: steps, Variant: m.Variant(), Tune: m.Exposure.Tune}).Report, nil)
			}
			if at(r.Steps) == "" || (r.Steps > 1 && at(r.Steps-1) != "") {
				t.Errorf("%s: %d scheduler steps is not the shortest safety phase that kills seed %d", r.Mutant, r.Steps, r.Seed)
			}
		}
		seeds = append(seeds, r.Tried)
		seconds = append(seconds, r.Seconds)
		if r.Steps < 1 {
			t.Errorf("%s: killed by %s on seed %d but no counterexample (%d steps)", r.Mutant, r.Checker, r.Seed, r.Steps)
		}
		if r.StepsOf == "actions" && r.Steps > 15 {
			t.Errorf("%s: counterexample of %d actions, want at most 15:\n%s", r.Mutant, r.Steps, strings.Join(r.Counterexample, "\n"))
		}
		t.Logf("%-30s %-22s seed %-4d %6.3fs %3d %s", r.Mutant, r.Checker, r.Seed, r.Seconds, r.Steps, r.StepsOf)
		for _, l := range r.Counterexample {
			t.Logf("      %s", l)
		}
	}
	if len(seeds) == 0 {
		return
	}
	sort.Ints(seeds)
	sort.Float64s(seconds)
	medSeeds, medSeconds := seeds[len(seeds)/2], seconds[len(seconds)/2]
	t.Logf("median time to kill %.3fs, median seeds to kill %d", medSeconds, medSeeds)
	// Wall-clock speed depends on the machine; the number of seeds does
	// not. 10 seeds is a small fraction of a second here.
	if medSeeds > 10 {
		t.Errorf("median seeds to kill %d, want at most 10", medSeeds)
	}
}

// TestMatrixDeterministic: the same options give the same killing seed,
// checker and counterexample.
func TestMatrixDeterministic(t *testing.T) {
	opts := Options{Mutants: []string{"offset-claim", "unfenced-mark"}, Seeds: 300, ExposureSeeds: 10, Cases: 300}
	a, err := RunMatrix(context.Background(), TierSim, opts)
	if err != nil {
		t.Fatal(err)
	}
	b, err := RunMatrix(context.Background(), TierSim, opts)
	if err != nil {
		t.Fatal(err)
	}
	for i := range a {
		x, y := a[i], b[i]
		if x.Killed != y.Killed || x.Checker != y.Checker || x.Seed != y.Seed || x.Steps != y.Steps ||
			!slices.Equal(x.Counterexample, y.Counterexample) {
			t.Errorf("%s: two runs differ:\n%+v\n%+v", x.Mutant, x, y)
		}
	}
}

// TestSwitchedOffCheckerLetsMutantSurvive shows that the matrix notices a
// missing checker: with one checker switched off (and the others that
// judge the same promise: leases also sees a mark after another relay's
// claim, on the database clock, and may be the one that reports the first
// killing seed), the mutant only they catch survives the same budget that
// kills it otherwise.
func TestSwitchedOffCheckerLetsMutantSurvive(t *testing.T) {
	cases := []struct {
		checker, mutant string
		also            []string
	}{
		{checker.NamePhantom, "publish-before-commit", nil},
		{checker.NameDuplicateEffects, "consumer-no-dedupe", nil},
		{checker.NameFencing, "unfenced-mark", []string{checker.NameLeases}},
		{checker.NameParking, "no-backoff", nil},
	}
	for _, c := range cases {
		t.Run(c.checker, func(t *testing.T) {
			opts := Options{Mutants: []string{c.mutant}, Seeds: 300, ExposureSeeds: 1, Cases: -1}
			on, err := RunMatrix(context.Background(), TierSim, opts)
			if err != nil {
				t.Fatal(err)
			}
			// The first seed that kills the mutant may show it to one of the
			// checkers of the same promise first.
			if r := on[1]; !r.Killed || r.Checker != c.checker && !slices.Contains(c.also, r.Checker) {
				t.Fatalf("with every checker on, %s: killed=%v by %q, want killed by %s (or %v)", c.mutant, r.Killed, r.Checker, c.checker, c.also)
			}
			opts.Disable = append([]string{c.checker}, c.also...)
			off, err := RunMatrix(context.Background(), TierSim, opts)
			if err != nil {
				t.Fatal(err)
			}
			if r := off[1]; r.Killed || r.Err != nil {
				t.Fatalf("with %s off, %s was still killed by %s on seed %d (%v)", c.checker, c.mutant, r.Checker, r.Seed, r.Err)
			}
			if off[0].Killed {
				t.Fatalf("with %s off, the reference was killed by %s", c.checker, off[0].Checker)
			}
			t.Logf("with %s off, %s survived %d seeds", c.checker, c.mutant, off[1].Tried)
		})
	}
}

// TestExposureTune: an exposure adds its faults to the drawn swarm,
// raises the workload's shares, removes what it excludes, and is named in
// the matrix's scenario column.
func TestExposureTune(t *testing.T) {
	e := Exposure{Faults: []sim.Fault{sim.FaultUnbind, sim.FaultKill}, Rate: 0.5, MaxSteps: 7,
		Without: []sim.Fault{sim.FaultBrokerDown}, Poison: 0.4, ShortLease: true}
	sw := sim.Swarm{Faults: []sim.FaultRate{{Fault: sim.FaultKill, Rate: 0.01, MaxSteps: 60}, {Fault: sim.FaultBrokerDown, Rate: 0.1, MaxSteps: 5}},
		Lease: 5 * time.Hour, Poison: 0.05}
	e.Tune(&sw)
	got := map[sim.Fault]sim.FaultRate{}
	for _, f := range sw.Faults {
		got[f.Fault] = f
	}
	if len(got) != 2 || got[sim.FaultKill] != (sim.FaultRate{Fault: sim.FaultKill, Rate: 0.5, MaxSteps: 60}) ||
		got[sim.FaultUnbind] != (sim.FaultRate{Fault: sim.FaultUnbind, Rate: 0.5, MaxSteps: 7}) {
		t.Errorf("faults after Tune: %+v", sw.Faults)
	}
	if sw.Poison != 0.4 || sw.Lease != 2*sim.RealTimeout+time.Minute {
		t.Errorf("poison %g, lease %s", sw.Poison, sw.Lease)
	}
	if s := e.String(); s != "sim swarm +unbind +kill -broker-down poison>=0.4 short-lease" {
		t.Errorf("String() = %q", s)
	}
}

// TestCheckersCatchInjectedDefects mutates the history of a run that
// passes: a loss, a phantom, a duplicate effect and an unexplained
// duplicate delivery injected into it must each fail the checker that
// owns the defect.
func TestCheckersCatchInjectedDefects(t *testing.T) {
	opts := sim.Options{Tune: func(sw *sim.Swarm) { sw.Faults = nil; sw.Poison = 0; sw.Rollback = 0.2 }}
	var res sim.Result
	for seed := uint64(1); seed < 50; seed++ {
		res = sim.Run(seed, opts)
		if res.Valid && res.Report.Counts.Delivered >= 3 {
			break
		}
	}
	if !res.Valid {
		t.Fatalf("no passing run to mutate:\n%s", res.Report.Summary())
	}
	applied := firstOK(res.History, history.Apply)
	if applied == "" {
		t.Fatal("no applied event in the history")
	}
	renumber := func(h []history.Op) []history.Op {
		for i := range h {
			h[i].Index = int64(i)
		}
		return h
	}
	cloneState := func() checker.State {
		s := res.State
		s.Effects = maps.Clone(res.State.Effects)
		s.Outbox = maps.Clone(res.State.Outbox)
		s.Queued = slices.Clone(res.State.Queued)
		return s
	}
	cases := []struct {
		name    string
		checker string
		mutate  func() ([]history.Op, checker.State)
	}{
		{"loss", checker.NameLost, func() ([]history.Op, checker.State) {
			// The event never reached a consumer: no delivery, no apply, no
			// effect.
			h := slices.DeleteFunc(slices.Clone(res.History), func(op history.Op) bool {
				return (op.F == history.Apply || op.F == history.Deliver) && slices.Contains(op.Events, applied)
			})
			s := cloneState()
			delete(s.Effects, applied)
			return renumber(h), s
		}},
		{"phantom", checker.NamePhantom, func() ([]history.Op, checker.State) {
			// Its transaction rolled back, yet the event was delivered.
			h := slices.Clone(res.History)
			for i, op := range h {
				if op.F == history.Commit && op.Type == history.OK && slices.Contains(op.Events, applied) {
					h[i].Type, h[i].Error = history.Fail, "rolled back"
				}
			}
			return h, cloneState()
		}},
		{"duplicate effect", checker.NameDuplicateEffects, func() ([]history.Op, checker.State) {
			s := cloneState()
			s.Effects[applied]++
			return res.History, s
		}},
		{"unexplained duplicate delivery", checker.NameDuplicateDeliveries, func() ([]history.Op, checker.State) {
			// The broker delivers the event twice with no fault around.
			h := slices.Clone(res.History)
			for i, op := range h {
				if op.F == history.Deliver && slices.Contains(op.Events, applied) {
					h = slices.Insert(h, i+1, op)
					break
				}
			}
			return renumber(h), cloneState()
		}},
	}
	if r := checker.Check(res.History, res.State, res.Config); !r.Valid {
		t.Fatalf("the unmutated run fails:\n%s", r.Summary())
	}
	for _, c := range cases {
		h, s := c.mutate()
		rep := checker.Check(h, s, res.Config)
		r, ok := rep.Result(c.checker)
		if !ok || r.Valid {
			t.Errorf("%s: %s did not fail:\n%s", c.name, c.checker, rep.Summary())
			continue
		}
		if !slices.Contains(r.Offending, applied) {
			t.Errorf("%s: %s fails but does not name %s: %v", c.name, c.checker, applied, r.Offending)
		}
		if Killer(rep, nil) == "" {
			t.Errorf("%s: Killer sees no failure", c.name)
		}
		if Killer(rep, failedNames(rep)) != "" {
			t.Errorf("%s: Killer sees a failure with every failing checker disabled", c.name)
		}
	}
}

func firstOK(h []history.Op, f history.Func) string {
	for _, op := range h {
		if op.F == f && op.Type == history.OK && len(op.Events) == 1 && op.Meta.String() == "" {
			return op.Events[0]
		}
	}
	return ""
}

func failedNames(rep checker.Report) []string {
	var out []string
	for _, r := range rep.Failed() {
		out = append(out, r.Checker)
	}
	return out
}

// TestShrinkKeepsFailing: shrinking a failing case of a mutant gives a
// case no longer than the original that still fails, and replaying it
// gives the same actions.
func TestShrinkKeepsFailing(t *testing.T) {
	m, _ := Lookup("mark-before-publish")
	mc := &machine{v: m.Variant(), tune: m.Exposure.Tune, killedBy: killedBy(nil)}
	ce := mc.search(7, 300, 30, 400, time.Time{})
	if !ce.found {
		t.Fatalf("no failing case in %d cases", ce.cases)
	}
	if ce.steps() < 1 || ce.steps() > 10 {
		t.Errorf("counterexample of %d actions:\n%s", ce.steps(), strings.Join(ce.trace, "\n"))
	}
	again := mc.search(7, 300, 30, 400, time.Time{})
	if !slices.Equal(ce.trace, again.trace) || ce.checker != again.checker {
		t.Errorf("two searches differ:\n%s\n--\n%s", strings.Join(ce.trace, "\n"), strings.Join(again.trace, "\n"))
	}
	t.Logf("killed by %s after %d case(s):\n%s", ce.checker, ce.cases, strings.Join(ce.trace, "\n"))

	// The reference passes the same cases.
	ref := &machine{tune: m.Exposure.Tune, killedBy: killedBy(nil)}
	if rce := ref.search(7, ce.cases, 30, 400, time.Time{}); rce.found {
		t.Errorf("the reference fails a case:\n%s", strings.Join(rce.trace, "\n"))
	}
}
