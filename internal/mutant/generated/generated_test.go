package generated

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/outboxlab/outboxlab/testenv/pgserver"
)

// TestSQLOperators checks that each operator yields the mutant it names on
// a statement of the store, and that ids are stable and distinct.
func TestSQLOperators(t *testing.T) {
	ms := SQLMutants("../../..")
	want := map[string]string{
		OpCmpFlip:        "locked_until > now()",
		OpSignFlip:       "now() - least(",
		OpUnit:           "interval '1 second'",
		OpAppClock:       "locked_until < app_now()",
		OpDropForUpdate:  "LIMIT $1))",
		OpDropSkipLocked: "FOR UPDATE))",
		OpDropOrderBy:    "FROM claimed",
	}
	ids := map[string]bool{}
	found := map[string]bool{}
	for _, m := range ms {
		if ids[m.ID] {
			t.Errorf("id %s twice", m.ID)
		}
		ids[m.ID] = true
		if m.Line == 0 && m.File == StoreFile && !strings.Contains(m.Diff, "locked_by = $2") && !strings.Contains(m.Diff, "processed_at IS NULL") {
			t.Logf("%s: no source line", m.ID)
		}
		if w, ok := want[m.Operator]; ok && strings.Contains(m.SQL, w) {
			found[m.Operator] = true
		}
	}
	for op := range want {
		if !found[op] {
			t.Errorf("no %s mutant with %q", op, want[op])
		}
	}
	again := SQLMutants("../../..")
	if len(again) != len(ms) || again[0].ID != ms[0].ID || again[len(ms)-1].ID != ms[len(ms)-1].ID {
		t.Error("a second generation differs")
	}
}

// TestDropConjunct checks that each conjunct of a WHERE goes once, with
// its AND, and the only conjunct of a FILTER takes the FILTER with it.
func TestDropConjunct(t *testing.T) {
	got := map[string]bool{}
	sql := `SELECT count(*) FILTER (WHERE a IS NULL) FROM t WHERE x = $1 AND (y OR z) AND w < now() ORDER BY x`
	for _, e := range sqlEdits(sql) {
		if e.op == OpDropConjunct {
			got[sql[:e.from]+e.repl+sql[e.to:]] = true
		}
	}
	for _, w := range []string{
		`SELECT count(*)  FROM t WHERE x = $1 AND (y OR z) AND w < now() ORDER BY x`,
		`SELECT count(*) FILTER (WHERE a IS NULL) FROM t WHERE (y OR z) AND w < now() ORDER BY x`,
		`SELECT count(*) FILTER (WHERE a IS NULL) FROM t WHERE x = $1 AND w < now() ORDER BY x`,
		`SELECT count(*) FILTER (WHERE a IS NULL) FROM t WHERE x = $1 AND (y OR z) ORDER BY x`,
	} {
		if !got[w] {
			t.Errorf("missing %q in %v", w, got)
		}
	}
	if len(got) != 4 {
		t.Errorf("%d drops, want 4: %v", len(got), got)
	}
}

// TestAssignmentsAreNotFlipped checks that = in a SET list is left alone.
func TestAssignmentsAreNotFlipped(t *testing.T) {
	for _, e := range sqlEdits(`UPDATE t SET a = 1, b = now() WHERE c = $1`) {
		if e.op == OpCmpFlip && e.from < 30 {
			t.Errorf("flipped an assignment at %d", e.from)
		}
	}
}

// TestGoMutants checks the Go generator on a file of the module: ids are
// distinct, each mutant changes its file, and a mutant of a + between
// strings is not generated.
func TestGoMutants(t *testing.T) {
	ms, err := GoMutants("../../..")
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) < 50 {
		t.Fatalf("%d Go mutants, want many more", len(ms))
	}
	ids := map[string]bool{}
	for _, m := range ms {
		if ids[m.ID] {
			t.Errorf("id %s twice", m.ID)
		}
		ids[m.ID] = true
		src, err := os.ReadFile("../../../" + m.File)
		if err != nil {
			t.Fatal(err)
		}
		if string(src) == string(m.Source) {
			t.Errorf("%s changes nothing", m.ID)
		}
		if strings.Contains(m.Diff, "` - `") || strings.Contains(m.Diff, `" - "`) {
			t.Errorf("%s subtracts strings: %s", m.ID, m.Diff)
		}
	}
}

// TestSample checks that a sample depends on its seed alone.
func TestSample(t *testing.T) {
	ms := SQLMutants("../../..")
	a, b, c := Sample(ms, 10, 7), Sample(ms, 10, 7), Sample(ms, 10, 8)
	if len(a) != 10 {
		t.Fatalf("sample of %d", len(a))
	}
	same := true
	for i := range a {
		if a[i].ID != b[i].ID {
			t.Fatal("same seed, different samples")
		}
		same = same && a[i].ID == c[i].ID
	}
	if same {
		t.Error("seeds 7 and 8 sample the same mutants")
	}
}

// TestEquivalentFile checks the checked-in judgements parse and name
// mutants that exist, and that a malformed line is refused.
func TestEquivalentFile(t *testing.T) {
	eq, err := Equivalent()
	if err != nil {
		t.Fatal(err)
	}
	all, err := Generate("../../..")
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	for _, m := range all {
		ids[m.ID] = true
	}
	for id := range eq {
		if !ids[id] {
			t.Errorf("equivalent.txt judges %s, which is not generated any more", id)
		}
	}
	ex, err := Excluded()
	if err != nil {
		t.Fatal(err)
	}
	for id := range ex {
		if !ids[id] {
			t.Errorf("excluded.txt judges %s, which is not generated any more", id)
		}
		if _, both := eq[id]; both {
			t.Errorf("%s is judged both equivalent and excluded", id)
		}
	}
	if _, err := parseEquivalent([]byte("an id without a reason\n")); err == nil {
		t.Error("a line without a tab parsed")
	}
}

// TestGeneratedSample runs a fixed sample of generated mutants through the
// fast tier, as make test does: five whose verdict is known (a flipped
// lease comparison in the claim, killed by the SQL tier; a negated
// predicate of the backlog statistics, killed by the store's suite; a
// publisher default's boundary, killed by a unit test; the claim's outer
// ORDER BY dropped, survived and judged equivalent since Claim sorts
// again; a RETURNING column dropped, invalid as the statement no longer
// prepares) and a seeded draw of SQL and Go mutants. Each must get a
// verdict. The mutation score of the draw is logged; the full sweep
// (make mutants-generated) reports it against its goals.
func TestGeneratedSample(t *testing.T) {
	if testing.Short() {
		t.Skip("the sample builds and runs mutants for minutes; make test runs it")
	}
	pgserver.StartT(t).Close() // PostgreSQL's binaries or the container, as the SQL tier needs
	all, err := Generate("../../..")
	if err != nil {
		t.Fatal(err)
	}
	known := map[string]string{
		"relay/postgres.go:claim:cmp-flip@284":       StatusKilled,
		"relay/postgres.go:claim:drop-order-by@570":  StatusSurvived,
		"relay/postgres.go:claim:drop-returning@385": StatusInvalid,
		// Killed by the store's suite, which the SQL tier does not reach
		// (the backlog statistics), and by a unit test.
		"relay/postgres.go:stats:negate@31":                             StatusKilled,
		"relay/amqp.go:NewAMQPPublisher:CONDITIONALS_BOUNDARY:+11:21:<": StatusKilled,
	}
	knownTier := map[string]string{
		"relay/postgres.go:claim:cmp-flip@284":                          TierSQL,
		"relay/postgres.go:stats:negate@31":                             TierStore,
		"relay/amqp.go:NewAMQPPublisher:CONDITIONALS_BOUNDARY:+11:21:<": TierUnit,
	}
	var sqlMs, goMs, ms []Mutant
	for _, m := range all {
		switch {
		case known[m.ID] != "":
			ms = append(ms, m)
		case m.Kind == KindSQL:
			sqlMs = append(sqlMs, m)
		default:
			goMs = append(goMs, m)
		}
	}
	if len(ms) != len(known) {
		t.Fatalf("found %d of the %d known mutants: their ids changed with the code; pick new ones", len(ms), len(known))
	}
	ms = append(ms, append(Sample(sqlMs, 2, 1), Sample(goMs, 1, 1)...)...)
	start := time.Now()
	out, err := Run(context.Background(), ms, Options{Root: "../../..", SimSeeds: 200, SQLSeeds: 20, Workers: 2,
		Log: func(o Outcome) {
			t.Logf("%s %s tier=%s checker=%s seed=%d %.1fs", o.Status, o.ID, o.Tier, o.Checker, o.Seed, o.Seconds)
		}})
	if err != nil {
		t.Fatal(err)
	}
	killed, judged := 0, 0
	for _, o := range out {
		if want, ok := known[o.ID]; ok && o.Status != want {
			t.Errorf("%s: %s, want %s", o.ID, o.Status, want)
		}
		if want, ok := knownTier[o.ID]; ok && o.Tier != want {
			t.Errorf("%s: killed by tier %q, want %q", o.ID, o.Tier, want)
		}
		switch o.Status {
		case StatusKilled:
			killed++
			judged++
		case StatusSurvived:
			if !strings.HasPrefix(o.Judgement, "equivalent") {
				judged++
				t.Logf("gap: %s\n%s", o.ID, o.Diff)
			}
		case StatusInvalid:
		default:
			t.Errorf("%s: no verdict", o.ID)
		}
	}
	if len(out) != len(ms) {
		t.Errorf("%d outcomes for %d mutants", len(out), len(ms))
	}
	t.Logf("sample of %d: %d killed of %d neither invalid nor equivalent, in %s", len(ms), killed, judged, time.Since(start).Round(time.Second))
}
