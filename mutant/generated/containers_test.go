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
// and stay a gap; a mutant judged equivalent never meets the tier.
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
	for _, m := range SQLMutants("../..") {
		byID[m.ID] = m
	}
	u := scenarios.Ours()
	u.Lease = scenarios.Lease
	opts := Options{Root: "../..", FirstSeed: 1, Containers: Containers{Run: true, Seed: 1, Scenarios: []string{"lease-expiry"},
		Tests: "^TestExpiredLeaseFencesLateMark$", Capabilities: u.CapabilitiesString()}}
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
			switch {
			case tc.killedBy != "" && (o.Status != StatusKilled || o.Tier != TierContainers || !strings.Contains(o.Checker, tc.killedBy) || o.Seeds != 7):
				t.Errorf("%s by tier %q checker %q (%d seeds), want killed on containers by %s", o.Status, o.Tier, o.Checker, o.Seeds, tc.killedBy)
			case tc.killedBy == "" && (o.Status != StatusSurvived || o.Judgement != tc.judgement):
				t.Errorf("%s, judged %q; want a survivor judged %q", o.Status, o.Judgement, tc.judgement)
			case tc.judgement == "gap" && !strings.Contains(o.Detail, "1 scenarios passed"):
				t.Errorf("detail %q, want the container tests and the scenario passed", o.Detail)
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
	for _, m := range SQLMutants("../..") {
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
		orig, wrapper, err := sqlOverlay("../..", *tc.m)
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
	w := &worker{opts: Options{Root: "../.."}.withDefaults(), dir: t.TempDir()}
	ov, err := w.overlayOf(*store, w.dir)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := w.goCmd(context.Background(), "build", "-overlay", ov, "-o", filepath.Join(w.dir, "relay"), "./cmd/relay"); err != nil {
		t.Fatalf("building the relay with the overlay: %v\n%s", err, out)
	}
}
