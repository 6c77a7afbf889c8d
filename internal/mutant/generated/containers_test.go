package generated

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/outboxlab/outboxlab/scenarios"
	"github.com/outboxlab/outboxlab/testenv"
)

// TestContainerTier judges two SQL mutants as survivors of the fast tier
// would be: each gap meets the container tier, here the package's fencing
// test on containers and the lease-expiry scenario with the relay and the
// harness built from the mutated code. The mark without its locked_by
// fence must be killed there; the claim without its outer ORDER BY (an
// equivalent mutant: Claim sorts again, here unjudged) must survive both
// and stay a gap, whether lease-expiry passes it or finds no rows held to
// pause (inconclusive, which kills nothing); a mutant judged equivalent
// never meets the tier.
func TestContainerTier(t *testing.T) {
	if testing.Short() {
		t.Skip("the container tier builds binaries and runs containers; make test runs it")
	}
	if err := testenv.DockerAvailable(context.Background()); err != nil {
		if os.Getenv(testenv.RequireDockerEnv) != "" {
			t.Fatalf("Docker is required: %v", err)
		}
		t.Skipf("no Docker: %v", err)
	}
	byID := map[string]Mutant{}
	for _, m := range SQLMutants("../../..") {
		byID[m.ID] = m
	}
	u := scenarios.Ours()
	u.Lease = scenarios.Lease
	opts := Options{Root: "../../..", FirstSeed: 1, Containers: Containers{Run: true, Seed: 1, Scenarios: []string{"lease-expiry"},
		Tests: "^TestExpiredLeaseFencesLateMark$", Capabilities: u.Promises.String()}}
	w := &worker{opts: opts.withDefaults(), dir: t.TempDir()}
	defer w.close()
	const (
		fence   = "relay/postgres.go:mark:drop-conjunct@59"
		orderBy = "relay/postgres.go:claim:drop-order-by@570"
	)
	for _, tc := range []struct {
		id        string
		eq        map[string]string
		killedBy  string // "" for a survivor
		judgement string
	}{
		{id: fence, killedBy: "TestExpiredLeaseFencesLateMark"},
		{id: orderBy, judgement: "gap"},
		// Judged equivalent, it never meets the container tier.
		{id: fence, eq: map[string]string{fence: "a reason"}, judgement: "equivalent: a reason"},
	} {
		t.Run(tc.id, func(t *testing.T) {
			m, ok := byID[tc.id]
			if !ok {
				t.Fatalf("no mutant %s: its id changed with the statement; pick another", tc.id)
			}
			// As the fast tier left it: a survivor.
			o, err := w.judge(context.Background(), m, Outcome{Mutant: m, Status: StatusSurvived, Kill: Kill{Seeds: 7}}, tc.eq, nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s tier=%q checker=%q %.0fs: %s", o.Status, o.Tier, o.Checker, o.Timing.Containers, o.Detail)
			if o.Replay != "" {
				t.Logf("replay: %s", o.Replay)
			}
			switch {
			case tc.killedBy != "" && (o.Status != StatusKilled || o.Tier != TierContainers || !strings.Contains(o.Checker, tc.killedBy) || o.Seeds != 7):
				t.Errorf("%s by tier %q checker %q (%d seeds), want killed on containers by %s", o.Status, o.Tier, o.Checker, o.Seeds, tc.killedBy)
			case tc.killedBy == "" && (o.Status != StatusSurvived || o.Judgement != tc.judgement):
				t.Errorf("%s, judged %q; want a survivor judged %q", o.Status, o.Judgement, tc.judgement)
			// The scenario may pass, or be inconclusive where the load
			// kept its pause from finding rows held: either judges
			// nothing against the mutant.
			case tc.judgement == "gap" && !strings.Contains(o.Detail, "1 scenarios passed") && !strings.Contains(o.Detail, "0 scenarios passed; 1 inconclusive or not applicable"):
				t.Errorf("detail %q, want the container tests and the scenario passed or inconclusive", o.Detail)
			case tc.eq != nil && o.Timing.Containers != 0:
				t.Errorf("an equivalent mutant ran %.0fs on the container tier", o.Timing.Containers)
			}
		})
	}
}

// TestSQLOverlay checks the overlay of a SQL mutant: the constructor of
// its file renamed, and an added file that defines it with the mutated
// statement for the store's own table, the SQL tier's app_now() read as
// the relay's skewed clock.
func TestSQLOverlay(t *testing.T) {
	var store, inbox *Mutant
	for _, m := range SQLMutants("../../..") {
		switch {
		case store == nil && m.Operator == OpAppClock && m.Stmt == "mark":
			store = &m
		case inbox == nil && m.File == InboxFile:
			inbox = &m
		}
	}
	if store == nil || inbox == nil {
		t.Fatal("no app-clock mutant of the mark, or no mutant of the inbox")
	}
	for _, tc := range []struct {
		m          *Mutant
		renamed    string
		wrapperHas []string
	}{
		{store, "func newPGStoreUnmutated(", []string{"func NewPGStore(", "q.Mark = ", `OUTBOX_CLOCK_OFFSET`, `"app_now()"`, `"\"outbox\""`}},
		{inbox, "func newPGInboxUnmutated(", []string{"func NewPGInbox(", "UseStatements(InboxStatements{Record: "}},
	} {
		orig, wrapper, err := sqlOverlay("../../..", *tc.m)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(orig), tc.renamed) {
			t.Errorf("%s: the file's constructor is not renamed to %s", tc.m.ID, tc.renamed)
		}
		for _, s := range tc.wrapperHas {
			if !strings.Contains(string(wrapper), s) {
				t.Errorf("%s: the added file lacks %s:\n%s", tc.m.ID, s, wrapper)
			}
		}
	}
	// The overlay builds: the renamed file and the added one make the
	// package whole again.
	w := &worker{opts: Options{Root: "../../.."}.withDefaults(), dir: t.TempDir()}
	ov, err := w.overlayOf(*store, w.dir)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := w.goCmd(context.Background(), "build", "-overlay", ov, "-o", filepath.Join(w.dir, "relay"), "./cmd/relay"); err != nil {
		t.Fatalf("building the relay with the overlay: %v\n%s", err, out)
	}
}

// TestCatalogueKillByVerdict checks that the container tier judges the
// catalogue by each run's verdict: an inconclusive run kills nothing and
// is not counted as passed, a failed run kills with its broken promises
// and replay as the evidence, and an exit code that disagrees with the
// verdicts is an error, never a verdict.
func TestCatalogueKillByVerdict(t *testing.T) {
	pass := scenarios.Result{Scenario: "baseline", Seed: 1, Valid: true}
	inconclusive := scenarios.Result{Scenario: "lease-expiry", Seed: 1, Inconclusive: []string{"pause-relay: no replica held rows while paused"}}
	failed := scenarios.Result{Scenario: "poison", Seed: 1, Problems: []string{"lost: 3 events (e1, e2, e3)"}, Replay: "outboxlab run --scenario poison --seed 1"}

	k, err := catalogueKill([]scenarios.Result{pass, inconclusive}, 3, 1, "")
	if err != nil {
		t.Fatal(err)
	}
	if k.Tier != "" || !strings.Contains(k.Detail, "1 scenarios passed; 1 inconclusive") || !strings.Contains(k.Detail, "no replica held rows") {
		t.Errorf("an inconclusive run: %+v, want no kill and the run named inconclusive with its reason", k)
	}
	k, err = catalogueKill([]scenarios.Result{inconclusive}, 3, 1, "")
	if err != nil || k.Tier != "" || !strings.Contains(k.Detail, "0 scenarios passed; 1 inconclusive or not applicable") {
		t.Errorf("only an inconclusive run: %+v, %v; want no kill, 0 passed", k, err)
	}
	na := scenarios.Result{Scenario: "crash-between-publish-and-mark", Seed: 1, NotApplicable: "needs failpoints"}
	k, err = catalogueKill([]scenarios.Result{pass, na}, 0, 1, "")
	if err != nil || k.Tier != "" || !strings.Contains(k.Detail, "1 scenarios passed; 1 inconclusive or not applicable") || !strings.Contains(k.Detail, "needs failpoints") {
		t.Errorf("a not-applicable run: %+v, %v; want no kill and the run named with its reason", k, err)
	}
	k, err = catalogueKill([]scenarios.Result{pass, inconclusive, failed}, 1, 1, "")
	if err != nil {
		t.Fatal(err)
	}
	if k.Tier != TierContainers || k.Checker != "run poison" || !strings.Contains(k.Detail, "lost: 3 events") || !strings.Contains(k.Detail, failed.Replay) {
		t.Errorf("a failed run: %+v, want a kill by run poison with its problems and replay", k)
	}
	if _, err := catalogueKill([]scenarios.Result{pass, inconclusive}, 1, 1, "boom"); err == nil {
		t.Error("exit 1 with no failed run: no error")
	}
	if _, err := catalogueKill([]scenarios.Result{failed}, 0, 1, ""); err == nil {
		t.Error("exit 0 with a failed run: no error")
	}
}
