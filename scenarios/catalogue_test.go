package scenarios

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxlab/outboxlab/contract"
	"github.com/outboxlab/outboxlab/outbox"
	"github.com/outboxlab/outboxlab/workload"
)

func TestCatalogueNamesAndLookup(t *testing.T) {
	names := Names()
	if len(names) != 15 {
		t.Fatalf("catalogue has %d scenarios, want 15: %v", len(names), names)
	}
	seen := map[string]bool{}
	for _, sc := range Catalogue() {
		if seen[sc.Name] {
			t.Errorf("scenario %s listed twice", sc.Name)
		}
		seen[sc.Name] = true
		got, ok := Lookup(sc.Name)
		if !ok || got.Name != sc.Name {
			t.Errorf("Lookup(%q) = %q, %v", sc.Name, got.Name, ok)
		}
		if sc.Summary == "" || sc.Safety <= 0 || sc.Workload.Events <= 0 {
			t.Errorf("%s: summary, safety phase and workload are required", sc.Name)
		}
		if sc.Name != Baseline && sc.Faults == nil && len(sc.WorkloadFaults) == 0 {
			t.Errorf("%s injects no fault at all", sc.Name)
		}
	}
	if _, ok := Lookup("no-such-scenario"); ok {
		t.Error("Lookup found a scenario that does not exist")
	}
	for _, v := range workload.Modes[1:] {
		if !slices.ContainsFunc(Catalogue(), func(s Scenario) bool { return slices.Contains(s.Exposes, v) }) {
			t.Errorf("no scenario exposes %s", v)
		}
	}
	for _, sc := range Catalogue() {
		if len(sc.Exposes) > 0 && sc.NeedsRelay {
			t.Errorf("%s exposes unsafe variants but needs a relay they do not have", sc.Name)
		}
	}
}

func TestWorkloadDrawIsSeeded(t *testing.T) {
	w := producerCrash().Workload
	w.PoisonRate, w.HoldRate, w.Hold = 0.2, 0.1, time.Second
	a := w.Draw(rand.New(rand.NewPCG(7, 1)))
	b := w.Draw(rand.New(rand.NewPCG(7, 1)))
	c := w.Draw(rand.New(rand.NewPCG(8, 1)))
	ids := func(p workload.Plan) []string {
		var out []string
		for _, txns := range p.Txns {
			for _, t := range txns {
				for _, e := range t.Events {
					out = append(out, e.ID.String())
				}
			}
		}
		return out
	}
	if !slices.Equal(ids(a), ids(b)) || a.Total != w.Events {
		t.Fatalf("the same seed drew different plans, or the wrong size (%d events)", a.Total)
	}
	if slices.Equal(ids(a), ids(c)) {
		t.Fatal("different seeds drew the same plan")
	}
	crashes := 0
	for _, txns := range a.Txns {
		for _, t := range txns {
			if t.CrashAtCommit {
				crashes++
			}
		}
	}
	if crashes == 0 {
		t.Error("a producer-crash workload drew no crash at commit")
	}
}

func TestRunNotApplicable(t *testing.T) {
	sc, _ := Lookup(LeaseExpiry)
	res, err := Run(context.Background(), nil, sc, Options{Seed: 3, Mode: workload.CommitThenPublish})
	if !errors.Is(err, ErrNotApplicable) {
		t.Fatalf("lease-expiry with an unsafe variant: err = %v, want ErrNotApplicable", err)
	}
	if res.Valid || res.Verdict() != VerdictNotApplicable || !strings.Contains(res.NotApplicable, "runs without a relay") {
		t.Fatalf("a run that could not run: verdict %s, not applicable %q; want N/A with the reason", res.Verdict(), res.NotApplicable)
	}
	sc, _ = Lookup(CrashBeforeMark)
	_, err = Run(context.Background(), nil, sc, Options{Seed: 3, Relay: RelayUnderTest{Image: "example/relay:1"}})
	if !errors.Is(err, ErrNotApplicable) {
		t.Fatalf("crash-between-publish-and-mark with a relay without failpoints: err = %v, want ErrNotApplicable", err)
	}
	if !strings.Contains(err.Error(), "crash-between-publish-and-mark needs a relay that honours OUTBOX_FAILPOINTS (failpoints), and example/relay:1 does not declare it") {
		t.Errorf("not applicable for %v, want the reason to name the capability", err)
	}
	// The scenarios that act on the rows a replica holds do not apply to
	// a relay that holds none (by lease or by row lock), and say which
	// style it declares; the others do.
	for _, tc := range []struct {
		locking contract.Locking
		// reason is in the reason of a scenario that needs leases; ""
		// when they all apply.
		reason string
	}{
		{contract.Lease(4 * time.Second), ""},
		{contract.Lease(0), ""},
		{contract.RowLocks, ""},
		{contract.NoLocks, "and example/relay:1 declares no lock of a row (locking=none)"},
		{contract.Locking{}, "and example/relay:1 declares no locking style"},
	} {
		u := RelayUnderTest{Image: "example/relay:1", Promises: contract.Promises{Failpoints: true, Locking: tc.locking}}
		for _, name := range Names() {
			sc, _ := Lookup(name)
			err := newRun(nil, sc, Options{Seed: 3, Relay: u}).applicable()
			want := tc.reason != "" && (name == LeaseExpiry || name == StallUnderLoad || name == ClockSkew)
			if got := errors.Is(err, ErrNotApplicable); got != want {
				t.Errorf("%s with %s: err = %v, want not applicable %v", name, tc.locking.Describe(), err, want)
			}
			if want && (!strings.Contains(fmt.Sprint(err), name+" needs a relay that takes leases of rows (lease=DURATION or locking=lease), "+tc.reason) ||
				!strings.Contains(fmt.Sprint(err), "; or a relay that holds row locks while publishing (locking=rowlock), "+tc.reason)) {
				t.Errorf("%s with %s: %v does not say what it needs and what the relay declares", name, tc.locking.Describe(), err)
			}
		}
	}
	// A relay that locks nothing is killed at its publish of a row still
	// pending, without failpoints; one with no locking style is not.
	sc, _ = Lookup(CrashBeforeMark)
	if err := newRun(nil, sc, Options{Seed: 3, Relay: RelayUnderTest{Image: "example/relay:1", Promises: contract.Promises{Locking: contract.NoLocks}}}).applicable(); err != nil {
		t.Errorf("crash-between-publish-and-mark with locking=none: %v, want applicable", err)
	}
	// An outbox with one table per schema runs no scenario of several
	// bounded contexts.
	fixed := RelayUnderTest{Name: "fixed", Image: "example/relay:1", Promises: contract.Promises{Failpoints: true, Locking: contract.Lease(0)}, Outbox: outbox.Schema{Name: "fixed", Table: "jobs",
		Migrate: func(context.Context, *pgxpool.Pool, outbox.Table) error { return nil },
		Stage:   func(context.Context, pgx.Tx, outbox.Table, outbox.Event) (string, error) { return "", nil },
		Rows:    func(outbox.Table) string { return "" }}}
	for _, name := range Names() {
		sc, _ := Lookup(name)
		err := newRun(nil, sc, Options{Seed: 3, Relay: fixed}).applicable()
		if want := len(sc.Contexts) > 1; errors.Is(err, ErrNotApplicable) != want ||
			want && !strings.Contains(err.Error(), "and fixed keeps one table per schema (jobs)") {
			t.Errorf("%s (%d contexts) against an outbox of one table per schema: %v", name, len(sc.Contexts), err)
		}
	}
	// An outbox whose writer commits runs every scenario but those whose
	// transactions stage in several contexts' outboxes.
	committing := fixed
	committing.Name, committing.Outbox.Name, committing.Outbox.Table = "committing", "committing", ""
	committing.Outbox.Commit = func(context.Context, outbox.Commit) error { return nil }
	for _, name := range append(Names(), CrossContext) {
		sc, _ := Lookup(name)
		err := newRun(nil, sc, Options{Seed: 3, Relay: committing}).applicable()
		if want := sc.Independent && len(sc.Contexts) > 1; errors.Is(err, ErrNotApplicable) != want ||
			want && !strings.Contains(err.Error(), "the writer of committing commits one outbox table per transaction") {
			t.Errorf("%s against an outbox whose writer commits: %v", name, err)
		}
	}
	// Promises that contradict each other are refused before anything
	// runs, as an error of the run rather than a scenario not applicable.
	sc, _ = Lookup(Baseline)
	_, err = Run(context.Background(), nil, sc, Options{Seed: 3, Relay: RelayUnderTest{Image: "example/relay:1", Promises: contract.Promises{Fenced: true}}})
	if err == nil || errors.Is(err, ErrNotApplicable) || !strings.Contains(err.Error(), "declare its lease") {
		t.Errorf("a relay fenced without a lease: err = %v, want the run refused", err)
	}
}

func TestReplayCommands(t *testing.T) {
	sc, _ := Lookup(BrokerDown)
	r := newRun(nil, sc, Options{Seed: 42})
	cmd, test := r.replay()
	if cmd != "go run ./cmd/outboxlab run --scenario broker-down --seed 42" {
		t.Errorf("replay = %q", cmd)
	}
	if test != "go test ./scenarios -run 'TestCatalogue/broker-down$' -args -seed=42" {
		t.Errorf("test replay = %q", test)
	}
	r = newRun(nil, sc, Options{Seed: 9, Mode: workload.Optimistic})
	if _, test := r.replay(); !strings.Contains(test, "TestUnsafeVariants/optimistic/broker-down$") || !strings.Contains(test, "-seed=9") {
		t.Errorf("unsafe replay = %q", test)
	}
	r = newRun(nil, sc, Options{Seed: 9, Relay: RelayUnderTest{Image: "example/relay:1"}})
	if cmd, _ := r.replay(); !strings.HasSuffix(cmd, "--relay image:example/relay:1") {
		t.Errorf("black-box replay = %q", cmd)
	}
}

func TestDualWriteIsTheDemosScenario(t *testing.T) {
	sc, ok := Lookup(DualWrite)
	if !ok {
		t.Fatalf("Lookup(%q) found nothing", DualWrite)
	}
	if slices.Contains(Names(), DualWrite) {
		t.Errorf("%s is in the catalogue that run runs by default", DualWrite)
	}
	if sc.Faults == nil || sc.Workload.RollbackRate == 0 || sc.Workload.CrashAfterCommitRate == 0 {
		t.Errorf("%s must cut the broker and roll back and crash producers: %+v", DualWrite, sc.Workload)
	}
	for _, m := range []workload.Mode{workload.PublishThenCommit, workload.CommitThenPublish} {
		if !slices.Contains(sc.Exposes, m) {
			t.Errorf("%s does not expose %s", DualWrite, m)
		}
	}
	if !slices.Contains(sc.WorkloadFaults, WorkloadProducerCrash) {
		t.Errorf("%s does not require its producer crashes to fire", DualWrite)
	}
}

func TestVerdictOfAFaultThatCouldNotBite(t *testing.T) {
	for _, c := range []struct {
		res  Result
		want string
	}{
		{Result{Valid: true}, VerdictPass},
		{Result{Inconclusive: []string{"relay-a pause holding claims could not bite: no claim held"}}, VerdictInconclusive},
		{Result{Inconclusive: []string{"x"}, Problems: []string{"lost: 3 offending"}}, VerdictFail},
		{Result{Problems: []string{"fault f never fired"}}, VerdictFail},
	} {
		if got := c.res.Verdict(); got != c.want {
			t.Errorf("Verdict(%+v) = %s, want %s", c.res, got, c.want)
		}
	}
}
