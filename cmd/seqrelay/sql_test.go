package main

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestBackoffSchedule(t *testing.T) {
	want := []time.Duration{
		400 * time.Millisecond, // after the 1st failed attempt: 2^1 × 200ms
		800 * time.Millisecond,
		1600 * time.Millisecond,
		3200 * time.Millisecond,
		5 * time.Second, // 6.4s, capped
		5 * time.Second,
	}
	for i, w := range want {
		if got := backoff(i + 1); got != w {
			t.Errorf("backoff(%d) = %s, want %s", i+1, got, w)
		}
	}
	for _, n := range []int{0, -1} {
		if got := backoff(n); got != backoff(1) {
			t.Errorf("backoff(%d) = %s, want backoff(1)", n, got)
		}
	}
	for _, n := range []int{62, 63, 64, 1000, 1 << 30} {
		if got := backoff(n); got != backoffCap {
			t.Errorf("backoff(%d) = %s, want the cap %s", n, got, backoffCap)
		}
	}
	// The backoffs of a row up to the harness's attempt limit (3) all fit in
	// its lease-sized windows: a poison row is parked within seconds.
	total := time.Duration(0)
	for n := 1; n < 3; n++ {
		total += backoff(n)
	}
	if total > 2*time.Second {
		t.Errorf("backoffs before the third attempt sum to %s", total)
	}
}

var placeholder = regexp.MustCompile(`\$(\d+)`)

// checkPlaceholders fails unless sql uses exactly $1..$len(args).
func checkPlaceholders(t *testing.T, what, sql string, args []any) {
	t.Helper()
	used := map[int]bool{}
	for _, m := range placeholder.FindAllStringSubmatch(sql, -1) {
		n, _ := strconv.Atoi(m[1])
		used[n] = true
	}
	if len(used) != len(args) {
		t.Errorf("%s: %d placeholders for %d arguments:\n%s", what, len(used), len(args), sql)
	}
	for i := 1; i <= len(args); i++ {
		if !used[i] {
			t.Errorf("%s: $%d unused:\n%s", what, i, sql)
		}
	}
}

func testQueries(b bug) queries {
	fixed := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	return queries{table: `"s"."outbox"`, me: "relay-a", bug: b, clock: func() time.Time { return fixed }}
}

// statements returns every statement of a mode.
func statements(q queries) map[string]struct {
	sql  string
	args []any
} {
	out := map[string]struct {
		sql  string
		args []any
	}{}
	add := func(name, sql string, args []any) {
		out[name] = struct {
			sql  string
			args []any
		}{sql, args}
	}
	s, a := q.claim(batchSize, zeroUUID, 0, time.Time{})
	add("claim", s, a)
	s, a = q.mark("0190a000-0000-7000-8000-000000000001")
	add("mark", s, a)
	s, a = q.fail("0190a000-0000-7000-8000-000000000001", backoff(1), 3)
	add("fail", s, a)
	s, a = q.park("0190a000-0000-7000-8000-000000000001")
	add("park", s, a)
	return out
}

func TestStatementsOfEveryModeNumberTheirArguments(t *testing.T) {
	for _, m := range append([]bugMode{{name: bugNone}}, bugModes...) {
		for name, st := range statements(testQueries(m.name)) {
			checkPlaceholders(t, m.name.String()+" "+name, st.sql, st.args)
			if !strings.Contains(st.sql, `"s"."outbox"`) {
				t.Errorf("%s %s: not on the quoted table:\n%s", m.name, name, st.sql)
			}
		}
	}
}

func TestCorrectStatementsFollowTheContract(t *testing.T) {
	st := statements(testQueries(bugNone))
	claim := st["claim"].sql
	for _, want := range []string{
		"processed_at IS NULL AND faulted_at IS NULL AND (locked_until IS NULL OR locked_until <= now())",
		"ORDER BY occurred_at, id",
		"FOR UPDATE SKIP LOCKED",
		"locked_at = now()",
		"locked_until = now() + make_interval(secs => $3::float8)",
	} {
		if !strings.Contains(claim, want) {
			t.Errorf("claim lacks %q:\n%s", want, claim)
		}
	}
	if got := st["claim"].args; got[0] != int64(batchSize) || got[1] != "relay-a" || got[2] != lease.Seconds() {
		t.Errorf("claim arguments %v", got)
	}
	const fence = "locked_by = $2 AND locked_until > now() AND processed_at IS NULL AND faulted_at IS NULL"
	for _, name := range []string{"mark", "fail", "park"} {
		if !strings.Contains(st[name].sql, "id = $1::uuid AND "+fence) {
			t.Errorf("%s is not fenced by the lease on the database clock:\n%s", name, st[name].sql)
		}
	}
	fail := st["fail"]
	for _, want := range []string{"attempts = attempts + 1", "locked_until = now() + make_interval(secs => $3::float8)", "CASE WHEN attempts + 1 >= $4 THEN now() END"} {
		if !strings.Contains(fail.sql, want) {
			t.Errorf("fail lacks %q:\n%s", want, fail.sql)
		}
	}
	if fail.args[2] != 0.4 || fail.args[3] != int64(3) {
		t.Errorf("fail arguments %v, want backoff 0.4s and limit 3", fail.args)
	}
	if strings.Contains(st["park"].sql, "attempts") {
		t.Errorf("park consumes an attempt:\n%s", st["park"].sql)
	}
}

func TestBugModesChangeTheirStatements(t *testing.T) {
	t.Run("no-fence", func(t *testing.T) {
		st := statements(testQueries(bugNoFence))
		for _, name := range []string{"mark", "fail", "park"} {
			s := st[name].sql
			where := strings.SplitN(s[strings.LastIndex(s, "WHERE ")+len("WHERE "):], "\n", 2)[0]
			if where != "id = $1::uuid" || strings.Contains(s, "locked_by") {
				t.Errorf("no-fence %s is still fenced (WHERE %s):\n%s", name, where, s)
			}
		}
	})
	t.Run("own-clock-lease", func(t *testing.T) {
		q := testQueries(bugOwnClock)
		st := statements(q)
		claim := st["claim"]
		if strings.Count(claim.sql, "now()") != 1 || !strings.Contains(claim.sql, "locked_at = now()") {
			t.Errorf("own-clock-lease claim uses the database clock for more than locked_at:\n%s", claim.sql)
		}
		if !strings.Contains(claim.sql, "locked_until = $1::timestamptz + make_interval") {
			t.Errorf("own-clock-lease lease end is not on its own clock:\n%s", claim.sql)
		}
		if !strings.Contains(claim.sql, "locked_until <= $1::timestamptz") || claim.args[0] != q.clock() {
			t.Errorf("own-clock-lease claim does not compare with its own clock: %v\n%s", claim.args, claim.sql)
		}
		for _, name := range []string{"mark", "fail", "park"} {
			if !strings.Contains(st[name].sql, "locked_until > $2::timestamptz") {
				t.Errorf("own-clock-lease %s fence is not on its own clock:\n%s", name, st[name].sql)
			}
		}
		if !strings.Contains(st["fail"].sql, "locked_until = $2::timestamptz + make_interval") {
			t.Errorf("own-clock-lease backoff is not on its own clock:\n%s", st["fail"].sql)
		}
	})
	t.Run("skip-late", func(t *testing.T) {
		q := testQueries(bugSkipLate)
		s, args := q.claim(batchSize, "0190a000-0000-7000-8000-000000000009", 0, time.Time{})
		if !strings.Contains(s, "AND id > $1::uuid") || !strings.Contains(s, "ORDER BY id\n") || args[0] != "0190a000-0000-7000-8000-000000000009" {
			t.Errorf("skip-late claim has no high-water mark: %v\n%s", args, s)
		}
	})
	for _, b := range []bug{bugXidMark, bugXidHighWater} {
		t.Run(string(b), func(t *testing.T) {
			q := testQueries(b)
			s, args := q.claim(batchSize, zeroUUID, 742, time.Time{})
			if !strings.Contains(s, "AND xmin::text::bigint >= $") || args[0] != int64(742) {
				t.Errorf("%s claim has no transaction id mark: %v\n%s", b, args, s)
			}
		})
	}
	t.Run("since-start", func(t *testing.T) {
		q := testQueries(bugSinceStart)
		since := time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)
		s, args := q.claim(batchSize, zeroUUID, 0, since)
		if !strings.Contains(s, "AND occurred_at >= $") || args[0] != since {
			t.Errorf("since-start claim has no start: %v\n%s", args, s)
		}
	})
	// The other modes change what the loop does, not the SQL.
	want := statements(testQueries(bugNone))
	for _, b := range []bug{bugMarkFirst, bugEatAttempts, bugTransient, bugPoisonBlocks} {
		for name, st := range statements(testQueries(b)) {
			if st.sql != want[name].sql {
				t.Errorf("%s changes %s:\n%s", b, name, st.sql)
			}
		}
	}
}

func TestParamsNumberInOrder(t *testing.T) {
	p := &params{}
	if a, b, c := p.add("x"), p.add(2), p.add(nil); a != "$1" || b != "$2" || c != "$3" || len(p.args) != 3 {
		t.Errorf("placeholders %s %s %s, args %v", a, b, c, p.args)
	}
}
