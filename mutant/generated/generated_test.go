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
	ms := SQLMutants("../..")
	want := map[string]string{
		OpCmpFlip:        "locked_until > now()",
		OpSignFlip:       "now() - least(",
		OpUnit:           "interval '1 second'",
		OpAppClock:       "locked_until < app_now()",
		OpDropForUpdate:  "LIMIT $1\n), claimed",
		OpDropSkipLocked: "FOR UPDATE\n), claimed",
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
	again := SQLMutants("../..")
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
	ms, err := GoMutants("../..")
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
		src, err := os.ReadFile("../../" + m.File)
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
	ms := SQLMutants("../..")
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
	all, err := Generate("../..")
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
	if _, err := parseEquivalent([]byte("an id without a reason\n")); err == nil {
		t.Error("a line without a tab parsed")
	}
}

// TestGeneratedSample is the CI sample: a fixed, deterministic subset of
// the generated mutants, SQL and Go, run against the fast tier. Each
// mutant must reach a verdict, and the sample's mutation score must reach
// 80%, the fast tier's bar.
func TestGeneratedSample(t *testing.T) {
	if testing.Short() {
		t.Skip("the sample builds and runs mutants for minutes; make test runs it")
	}
	pgserver.StartT(t).Close() // PostgreSQL's binaries or the container, as the SQL tier needs
	all, err := Generate("../..")
	if err != nil {
		t.Fatal(err)
	}
	var sqlMs, goMs []Mutant
	for _, m := range all {
		if m.Kind == KindSQL {
			sqlMs = append(sqlMs, m)
		} else {
			goMs = append(goMs, m)
		}
	}
	ms := append(Sample(sqlMs, 10, 1), Sample(goMs, 4, 1)...)
	start := time.Now()
	out, err := Run(context.Background(), ms, Options{Root: "../..", SimSeeds: 200, SQLSeeds: 20, Workers: 2,
		Log: func(o Outcome) {
			t.Logf("%s %s tier=%s checker=%s seed=%d %.1fs", o.Status, o.ID, o.Tier, o.Checker, o.Seed, o.Seconds)
		}})
	if err != nil {
		t.Fatal(err)
	}
	killed, judged := 0, 0
	for _, o := range out {
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
	t.Logf("sample of %d: %d killed of %d not invalid nor equivalent in %s", len(ms), killed, judged, time.Since(start).Round(time.Second))
	if judged > 0 && float64(killed) < 0.8*float64(judged) {
		t.Errorf("the fast tier killed %d of %d sampled mutants, under 80%%", killed, judged)
	}
}
