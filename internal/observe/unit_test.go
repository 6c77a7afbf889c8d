package observe

import (
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/outboxlab/outboxlab/outbox"
)

// TestClassify classifies updates at the edges: a lease that ends at the
// very time of the claiming transaction has run out (the relay's claim
// takes rows whose locked_until is before now(), the checkers call a
// claim at the lease end no overlap), one microsecond later it is live;
// the holder's own re-claim after expiry is a re-claim, not an
// extension; clearing the lease is a release; an update of no logged
// column, or one that clears faulted_at, is an update; a retry that
// parks is a park whose attempts grew.
func TestClassify(t *testing.T) {
	now := time.Date(2030, 1, 2, 3, 4, 5, 6000, time.UTC)
	lease := func(by string, until time.Time) Values {
		return Values{ID: "r", LockedBy: by, LockedAt: until.Add(-time.Minute), LockedUntil: until}
	}
	claim := func(by string) Values { return lease(by, now.Add(time.Minute)) }
	for _, c := range []struct {
		name     string
		old, new Values
		kind     Kind
		claim    ClaimKind
		live     bool
	}{
		{"first claim", Values{ID: "r"}, claim("b"), Claimed, ClaimNew, false},
		{"lease ends at the claim", lease("a", now), claim("b"), Claimed, ClaimAfterExpiry, false},
		{"lease ends a microsecond after", lease("a", now.Add(time.Microsecond)), claim("b"), Claimed, ClaimOverLiveLease, true},
		{"own re-claim after expiry", lease("a", now.Add(-time.Second)), claim("a"), Claimed, ClaimAfterExpiry, false},
		{"extension", lease("a", now.Add(time.Second)), lease("a", now.Add(time.Hour)), Claimed, ClaimExtended, true},
		{"release", lease("a", now.Add(time.Second)), Values{ID: "r"}, Released, "", true},
		{"no logged column", claim("a"), claim("a"), Updated, "", true},
		{"un-park", Values{ID: "r", FaultedAt: now}, Values{ID: "r"}, Updated, "", false},
		{"mark", claim("a"), func() Values { v := claim("a"); v.ProcessedAt = now; return v }(), Marked, "", true},
		{"retry", claim("a"), func() Values { v := lease("a", now.Add(time.Hour)); v.Attempts = 1; return v }(), Retried, "", true},
	} {
		old, new := c.old, c.new
		tr := Transition{TxTime: now, Old: &old, New: &new}
		classify(&tr)
		if tr.Kind != c.kind || tr.Claim != c.claim || tr.LeaseLive != c.live {
			t.Errorf("%s: %s/%s live %v, want %s/%s live %v", c.name, tr.Kind, tr.Claim, tr.LeaseLive, c.kind, c.claim, c.live)
		}
	}

	park := Transition{TxTime: now, Old: &Values{ID: "r", Attempts: 2}, New: &Values{ID: "r", Attempts: 3, FaultedAt: now}}
	classify(&park)
	if park.Kind != Parked || !park.AttemptsGrew {
		t.Errorf("retry at the limit: %s, attempts grew %v; want parked with attempts grown", park.Kind, park.AttemptsGrew)
	}
	ops := Ops([]Transition{park}, nil)
	if len(ops) != 1 || ops[0].F != "retry" || !ops[0].Parked || ops[0].Attempts != 3 {
		t.Errorf("op of a retry at the limit: %+v, want a parking retry at 3 attempts", ops)
	}
	for _, c := range []struct {
		old  Values
		want RowState
	}{
		{Values{ProcessedAt: now}, StateProcessed},
		{Values{ProcessedAt: now, FaultedAt: now}, StateFaulted},
		{Values{}, StatePending},
	} {
		old := c.old
		tr := Transition{Old: &old}
		classify(&tr)
		if tr.Kind != Deleted || tr.State != c.want {
			t.Errorf("deleting %+v: %s/%s, want deleted/%s", c.old, tr.Kind, tr.State, c.want)
		}
	}
}

// TestOpsGroupsOneTransactionsChangesOfOneKind puts the claims of one
// transaction in one op, and keeps apart what another transaction,
// another session or another lease end did.
func TestOpsGroupsOneTransactionsChangesOfOneKind(t *testing.T) {
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	claim := func(seq, xid int64, session, id string, until time.Time) Transition {
		tr := Transition{Seq: seq, Xid: xid, Session: session, At: now, TxTime: now,
			Old: &Values{ID: id}, New: &Values{ID: id, LockedBy: session, LockedAt: now, LockedUntil: until}}
		classify(&tr)
		return tr
	}
	later := now.Add(time.Minute)
	ops := Ops([]Transition{
		claim(1, 10, "ra", "x", later),
		claim(2, 11, "rb", "y", later),
		claim(3, 10, "ra", "z", later),
		claim(4, 10, "ra", "w", now.Add(time.Hour)),
		claim(5, 12, "ra", "v", later),
	}, map[string]string{"ra": "relay-a"})
	var got []string
	for _, op := range ops {
		got = append(got, op.Process+":"+strings.Join(op.Events, ","))
	}
	if want := "relay-a:x,z rb:y relay-a:w relay-a:v"; strings.Join(got, " ") != want {
		t.Errorf("ops %q, want %q", strings.Join(got, " "), want)
	}
	for i, op := range ops {
		if op.Index != int64(i) || op.Until.IsZero() || !op.DBTime.Equal(now) {
			t.Errorf("op %d: index %d, until %s, db time %s", i, op.Index, op.Until, op.DBTime)
		}
	}
	// A server restored from a dump gives transaction ids again: a later
	// transaction with an old one's id and session is another op.
	again := claim(6, 10, "ra", "u", later)
	again.TxTime = now.Add(time.Second)
	ops = Ops([]Transition{claim(1, 10, "ra", "x", later), claim(2, 11, "rb", "y", later), again}, nil)
	if len(ops) != 3 || ops[2].Events[0] != "u" {
		t.Errorf("a transaction id given again: ops %+v, want three", ops)
	}
}

// TestRoleNames refuses names that are not plain lower-case identifiers
// (quotes and statements included), derives names that are, and keeps
// long ones distinct.
func TestRoleNames(t *testing.T) {
	for _, bad := range []string{`relay"; DROP ROLE outboxlab; --`, "pg_relay", "Relay_a", "relay-a", "", "1relay", strings.Repeat("a", 64)} {
		if err := ValidRoleName(bad); !errors.Is(err, ErrInvalidRole) {
			t.Errorf("ValidRoleName(%q) = %v, want ErrInvalidRole", bad, err)
		}
	}
	if err := ValidRoleName(strings.Repeat("a", 63)); err != nil {
		t.Errorf("a 63-byte name: %v", err)
	}
	for _, c := range []struct{ table, process, want string }{
		{"run_1a2b.outbox", "relay-a", "run_1a2b_relay_a"},
		{"outbox", "relay-B", "outbox_relay_b"},
		{"pg_x.outbox", "relay-a", "r_pg_x_relay_a"},
		{"chat.outbox", `a"b`, "chat_a_b"},
	} {
		if got := RoleName(outbox.MustParseTable(c.table), c.process); got != c.want {
			t.Errorf("RoleName(%s, %s) = %q, want %q", c.table, c.process, got, c.want)
		}
	}
	long := outbox.MustParseTable(strings.Repeat("s", 60) + ".outbox")
	a, b := RoleName(long, "relay-a"), RoleName(long, "relay-b")
	if a == b || len(a) != outbox.MaxIdentifierLen || ValidRoleName(a) != nil || ValidRoleName(b) != nil {
		t.Errorf("long names %q and %q: want distinct valid names of %d bytes", a, b, outbox.MaxIdentifierLen)
	}
	if _, err := NewRole(long, ""); err == nil {
		t.Error("NewRole with no process: no error")
	}
}

// TestRoleURL replaces the user and password of a URL, in its user
// information and in query parameters, and keeps everything else; a
// key=value string is refused without repeating it.
func TestRoleURL(t *testing.T) {
	r := Role{Name: "run_relay_a", Password: "p'w@d/x", Process: "relay-a"}
	got, err := RoleURL("postgres://outboxlab:secret@/postgres?host=%2Ftmp%2Fpg&sslmode=disable&application_name=relay&user=outboxlab", r)
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(got)
	if err != nil {
		t.Fatal(err)
	}
	pw, _ := u.User.Password()
	q := u.Query()
	if u.User.Username() != r.Name || pw != r.Password || q.Get("user") != r.Name || q.Get("host") != "/tmp/pg" ||
		q.Get("sslmode") != "disable" || q.Get("application_name") != "relay" || u.Path != "/postgres" || q.Has("password") {
		t.Errorf("RoleURL = %s", got)
	}
	if strings.Contains(got, "secret") {
		t.Errorf("RoleURL kept the base's password: %s", got)
	}
	_, err = RoleURL("host=/tmp user=outboxlab password=secret", r)
	if err == nil || strings.Contains(err.Error(), "secret") {
		t.Errorf("RoleURL of a key=value string: %v", err)
	}
	if _, err := RoleURL("postgres://x@/db", Role{Name: "pg_x", Password: "p"}); !errors.Is(err, ErrInvalidRole) {
		t.Errorf("RoleURL of a reserved role name: %v", err)
	}
}
