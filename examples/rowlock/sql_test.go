package main

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

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

type statement struct {
	sql  string
	args []any
}

// statements returns every statement of a mode.
func statements(b bug) map[string]statement {
	q := queries{table: `"s"."outbox"`, bug: b}
	out := map[string]statement{}
	add := func(name, sql string, args []any) { out[name] = statement{sql, args} }
	s, a := q.claim(20, 41)
	add("claim", s, a)
	s, a = q.mark([]int64{41, 42})
	add("mark", s, a)
	s, a = q.fail(42, 200*time.Millisecond, 3)
	add("fail", s, a)
	s, a = q.park(43)
	add("park", s, a)
	return out
}

func TestStatementsOfEveryModeNumberTheirArguments(t *testing.T) {
	for _, m := range append([]bugMode{{name: bugNone}}, bugModes...) {
		for name, st := range statements(m.name) {
			checkPlaceholders(t, m.name.String()+" "+name, st.sql, st.args)
			if !strings.Contains(st.sql, `"s"."outbox"`) {
				t.Errorf("%s %s: not on the quoted table:\n%s", m.name, name, st.sql)
			}
		}
	}
}

// TestCorrectStatementsFollowTheContract: the claim takes the eligible
// rows, oldest first, under row locks that skip the rows another batch
// holds; every time is the database's; the writes touch only pending
// rows.
func TestCorrectStatementsFollowTheContract(t *testing.T) {
	st := statements(bugNone)
	claim := oneLine(st["claim"].sql)
	for _, want := range []string{
		"WHERE published_at IS NULL AND dead_at IS NULL AND (retry_after IS NULL OR retry_after <= now())",
		"ORDER BY created_at, seq LIMIT $1 FOR UPDATE SKIP LOCKED",
		"SELECT seq, topic, body::text, correlation::text, failures",
	} {
		if !strings.Contains(claim, want) {
			t.Errorf("claim lacks %q:\n%s", want, claim)
		}
	}
	if strings.Contains(claim, "seq >") || len(st["claim"].args) != 1 {
		t.Errorf("the correct claim has a high-water mark: %s %v", claim, st["claim"].args)
	}
	for name, s := range st {
		if name != "claim" && !strings.Contains(s.sql, "published_at IS NULL AND dead_at IS NULL") {
			t.Errorf("%s writes rows that are no longer pending:\n%s", name, s.sql)
		}
		for _, clock := range []string{"clock_timestamp", "current_timestamp", "localtimestamp", "'now'"} {
			if strings.Contains(strings.ToLower(s.sql), clock) {
				t.Errorf("%s reads %s: the batch's time is now()", name, clock)
			}
		}
	}
	fail := oneLine(st["fail"].sql)
	for _, want := range []string{
		"SET failures = failures + 1",
		"retry_after = now() + $2::bigint * interval '1 microsecond'",
		"dead_at = CASE WHEN failures + 1 >= $3 THEN now() END",
		"RETURNING failures, dead_at IS NOT NULL",
	} {
		if !strings.Contains(fail, want) {
			t.Errorf("fail lacks %q:\n%s", want, fail)
		}
	}
	if got := st["fail"].args; got[1] != int64(200000) || got[2] != int64(3) {
		t.Errorf("fail's backoff and limit %v, want 200000µs and 3", got)
	}
	if !strings.Contains(st["mark"].sql, "SET published_at = now()") || !strings.Contains(st["park"].sql, "SET dead_at = now()") {
		t.Errorf("mark or park:\n%s\n%s", st["mark"].sql, st["park"].sql)
	}
}

// TestBugModesChangeTheirStatements: the modes that act through SQL do;
// the others' statements are the correct relay's.
func TestBugModesChangeTheirStatements(t *testing.T) {
	good := statements(bugNone)
	changed := map[bug]string{bugSkipLate: "claim", bugNoLock: "claim", bugDropPoison: "park"}
	for _, m := range bugModes {
		for name, st := range statements(m.name) {
			same := st.sql == good[name].sql
			if want := changed[m.name] == name; same == want {
				t.Errorf("%s: its %s statement changed: %t, want %t:\n%s", m.name, name, !same, want, st.sql)
			}
		}
	}
	if s := statements(bugSkipLate)["claim"]; !strings.Contains(s.sql, "AND seq > $2") || !strings.Contains(s.sql, "ORDER BY seq") || s.args[1] != int64(41) {
		t.Errorf("skip-late's claim:\n%s %v", s.sql, s.args)
	}
	if s := statements(bugNoLock)["claim"].sql; strings.Contains(s, "FOR UPDATE") {
		t.Errorf("no-lock's claim locks:\n%s", s)
	}
	if s := statements(bugDropPoison)["park"].sql; !strings.HasPrefix(s, "DELETE FROM") {
		t.Errorf("drop-poison's park:\n%s", s)
	}
}

func TestMessageID(t *testing.T) {
	for seq, want := range map[int64]string{1: "1", 42: "42", 9007199254740993: "9007199254740993"} {
		if got := messageID(seq); got != want {
			t.Errorf("messageID(%d) = %q", seq, got)
		}
	}
}
