package contract

import (
	"strings"
	"testing"
	"time"
)

func TestParseAndString(t *testing.T) {
	for _, tc := range []struct {
		text string
		want Promises
		// canon is String's form when it is not text.
		canon string
	}{
		{text: "none", want: Promises{}},
		{text: " none ", want: Promises{}, canon: "none"},
		{text: "parks", want: Promises{Parks: true}},
		{text: "failpoints,records", want: Promises{Failpoints: true, Records: true}},
		{text: "fenced,lease=20s", want: Promises{Fenced: true, Locking: Lease(20 * time.Second)}},
		{text: "lease=20s,fenced", want: Promises{Fenced: true, Locking: Lease(20 * time.Second)}, canon: "fenced,lease=20s"},
		{text: "fenced,locking=lease", want: Promises{Fenced: true, Locking: Lease(0)}},
		{text: "failpoints,locking=rowlock", want: Promises{Failpoints: true, Locking: RowLocks}},
		{text: "locking=none", want: Promises{Locking: NoLocks}},
		{text: "parks,attempts=5", want: Promises{Parks: true, Attempts: 5}},
		{text: "sweeps", want: Promises{Sweeps: true}},
		{text: "sweeps,retention=1s", want: Promises{Sweeps: true, Retention: time.Second}},
		{text: "deletes,locking=none", want: Promises{Deletes: true, Locking: NoLocks}},
		{text: " parks , failpoints ", want: Promises{Parks: true, Failpoints: true}, canon: "parks,failpoints"},
		{text: "parks,fenced,lease=4s,attempts=3,backoff=100ms/2s", want: Promises{Parks: true, Fenced: true, Locking: Lease(4 * time.Second), Attempts: 3,
			Backoff: Backoff{Base: 100 * time.Millisecond, Max: 2 * time.Second}}},
		{text: "parks,fenced,sweeps,failpoints,records,lease=1m0s,attempts=3,backoff=100ms/2s,retention=168h0m0s", want: Promises{
			Parks: true, Fenced: true, Sweeps: true, Failpoints: true, Records: true, Locking: Lease(time.Minute), Attempts: 3,
			Backoff: Backoff{Base: 100 * time.Millisecond, Max: 2 * time.Second}, Retention: 7 * 24 * time.Hour}},
	} {
		got, err := Parse(tc.text)
		if err != nil {
			t.Errorf("Parse(%q): %v", tc.text, err)
			continue
		}
		if got != tc.want {
			t.Errorf("Parse(%q) = %+v, want %+v", tc.text, got, tc.want)
		}
		canon := tc.canon
		if canon == "" {
			canon = tc.text
		}
		if s := got.String(); s != canon {
			t.Errorf("Parse(%q).String() = %q, want %q", tc.text, s, canon)
		}
		if back, err := Parse(got.String()); err != nil || back != got {
			t.Errorf("Parse(%q) = %+v, %v; want %+v back", got.String(), back, err, got)
		}
	}
}

func TestParseRefuses(t *testing.T) {
	for _, tc := range []struct {
		text string
		// want is in the error.
		want string
	}{
		{"", "an empty name"},
		{"parks,", "an empty name"},
		{"teleports", `unknown capability "teleports"`},
		{"parks,teleports", "parks, fenced, sweeps, deletes, failpoints, records, lease=DURATION"},
		{"none,parks", "stands alone"},
		{"parks,fenced,parks", "parks is given twice"},
		{"lease=1ns,lease=2s", "locking style is given twice"},
		{"fenced,lease=2s,locking=rowlock", "locking style is given twice (lease=2s and locking=rowlock)"},
		{"locking=none,locking=none", "locking style is given twice"},
		{"attempts=3,attempts=3", "attempts is given twice"},
		{"parks=yes", "parks takes no value"},
		{"lease", "lease needs a value"},
		{"attempts", "attempts needs a value"},
		{"fenced,lease=soon", "not a positive duration"},
		{"fenced,lease=0s", "not a positive duration"},
		{"fenced,lease=-1s", "not a positive duration"},
		{"locking=optimistic", "not lease, rowlock or none"},
		{"locking=4s", "not lease, rowlock or none"},
		{"attempts=0", "at least 1"},
		{"attempts=three", "at least 1"},
		{"backoff=2s", "not BASE/MAX"},
		{"backoff=2s/1s", "BASE at most MAX"},
		{"backoff=0s/1s", "not BASE/MAX"},
		{"backoff=x/1s", "not BASE/MAX"},
		{"sweeps,retention=never", "not a positive duration"},
		// Contradictions.
		{"fenced", "fenced promises writes only under the relay's own unexpired lease, and it declares no locking style"},
		{"fenced,locking=rowlock", "it declares row locks held while publishing (locking=rowlock)"},
		{"fenced,locking=none", "it declares no lock of a row (locking=none)"},
		{"retention=1s", "retention=1s without sweeps"},
		{"sweeps,deletes", "deletes and sweeps: a relay that deletes a row once published keeps no processed row to sweep"},
	} {
		_, err := Parse(tc.text)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%q) = %v, want an error with %q", tc.text, err, tc.want)
			continue
		}
		if !strings.HasPrefix(err.Error(), "capabilities "+`"`) {
			t.Errorf("Parse(%q) = %v, want it to name the capabilities", tc.text, err)
		}
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		p    Promises
		want string // "" for valid
	}{
		{Promises{}, ""},
		{Promises{Fenced: true, Locking: Lease(0)}, ""},
		{Promises{Locking: RowLocks, Failpoints: true}, ""},
		{Promises{Sweeps: true}, ""},
		{Promises{Fenced: true}, "declare its lease"},
		{Promises{Fenced: true, Locking: NoLocks}, "declare its lease"},
		{Promises{Locking: Locking{Style: LockingRowLock, Lease: time.Second}}, "a lease of 1s with locking=rowlock"},
		{Promises{Locking: Locking{Style: LockingUndeclared, Lease: time.Second}}, "with locking=undeclared"},
		{Promises{Locking: Lease(-time.Second)}, "not a positive duration"},
		{Promises{Locking: Locking{Style: 9}}, "unknown locking style 9"},
		{Promises{Attempts: -1}, "attempts=-1"},
		{Promises{Backoff: Backoff{Max: time.Second}}, "backoff=0s/1s"},
		{Promises{Backoff: Backoff{Base: 2 * time.Second, Max: time.Second}}, "BASE at most MAX"},
		{Promises{Retention: time.Hour}, "without sweeps"},
		{Promises{Sweeps: true, Retention: -time.Hour}, "not a positive duration"},
	} {
		err := tc.p.Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%+v: %v", tc.p, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%+v: %v, want an error with %q", tc.p, err, tc.want)
		}
	}
	// Every problem is reported, not the first alone.
	err := Promises{Fenced: true, Attempts: -2, Retention: time.Hour}.Validate()
	for _, want := range []string{"fenced", "attempts=-2", "without sweeps"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %v, want %q among the problems", err, want)
		}
	}
}

func TestUnmet(t *testing.T) {
	lease := Promises{Locking: Lease(0)}
	for _, tc := range []struct {
		name       string
		has, needs Promises
		want       []string
	}{
		{"nothing needed", Promises{}, Promises{}, nil},
		{"failpoints declared", Promises{Failpoints: true}, Promises{Failpoints: true}, nil},
		{"failpoints missing", Promises{Parks: true}, Promises{Failpoints: true},
			[]string{"a relay that honours OUTBOX_FAILPOINTS (failpoints), and r does not declare it"}},
		{"a lease of any length meets a lease", Promises{Locking: Lease(4 * time.Second)}, lease, nil},
		{"a lease without its length meets a lease", Promises{Locking: Lease(0)}, lease, nil},
		{"row locks", Promises{Locking: RowLocks}, lease,
			[]string{"a relay that takes leases of rows (lease=DURATION or locking=lease), and r declares row locks held while publishing (locking=rowlock)"}},
		{"no locks", Promises{Locking: NoLocks}, lease,
			[]string{"and r declares no lock of a row (locking=none)"}},
		{"undeclared", Promises{}, lease, []string{"and r declares no locking style"}},
		{"row locks needed", Promises{Locking: Lease(time.Second)}, Promises{Locking: RowLocks},
			[]string{"a relay that holds row locks while publishing (locking=rowlock), and r declares a lease of 1s (lease=1s)"}},
		{"two unmet", Promises{}, Promises{Records: true, Attempts: 1},
			[]string{"writes records to OUTBOX_RECORDS (records)", "declares its attempt limit (attempts=N), and r does not"}},
		{"values are not compared", Promises{Attempts: 2, Backoff: Backoff{time.Second, time.Second}, Sweeps: true, Retention: time.Second},
			Promises{Attempts: 9, Backoff: Backoff{time.Hour, time.Hour}, Retention: time.Hour}, nil},
	} {
		got := tc.has.Unmet(tc.needs, "r")
		if len(got) != len(tc.want) {
			t.Errorf("%s: Unmet = %q, want %d clauses like %q", tc.name, got, len(tc.want), tc.want)
			continue
		}
		for i := range got {
			if !strings.Contains(got[i], tc.want[i]) {
				t.Errorf("%s: clause %d = %q, want it to hold %q", tc.name, i, got[i], tc.want[i])
			}
		}
	}
}

func TestLocking(t *testing.T) {
	for _, tc := range []struct {
		l                Locking
		text, describing string
	}{
		{Locking{}, "", "no locking style"},
		{Lease(4 * time.Second), "lease=4s", "a lease of 4s (lease=4s)"},
		{Lease(0), "locking=lease", "leases of a length it does not declare (locking=lease)"},
		{RowLocks, "locking=rowlock", "row locks held while publishing (locking=rowlock)"},
		{NoLocks, "locking=none", "no lock of a row (locking=none)"},
	} {
		if got := tc.l.String(); got != tc.text {
			t.Errorf("%+v.String() = %q, want %q", tc.l, got, tc.text)
		}
		if got := tc.l.Describe(); got != tc.describing {
			t.Errorf("%+v.Describe() = %q, want %q", tc.l, got, tc.describing)
		}
	}
}

func TestBackoffWait(t *testing.T) {
	b := Backoff{Base: 100 * time.Millisecond, Max: time.Second}
	for n, want := range map[int]time.Duration{0: 100 * time.Millisecond, 1: 100 * time.Millisecond, 2: 200 * time.Millisecond,
		3: 400 * time.Millisecond, 4: 800 * time.Millisecond, 5: time.Second, 60: time.Second} {
		if got := b.Wait(n); got != want {
			t.Errorf("Wait(%d) = %s, want %s", n, got, want)
		}
	}
	if huge := (Backoff{Base: time.Second, Max: 1 << 62}).Wait(1000); huge != 1<<62 {
		t.Errorf("a long doubling = %s, want the maximum", huge)
	}
	if (Backoff{}).Declared() || !b.Declared() {
		t.Error("Declared: want the zero value to declare nothing")
	}
}

// TestBudgets: "budgets" declares the defaults of every budget not given
// on its own; each budget parses, renders and reads back; bad values and
// forms are refused.
func TestBudgets(t *testing.T) {
	p, err := Parse("parks,budgets")
	if err != nil {
		t.Fatal(err)
	}
	if p.Budgets != DefaultBudgets {
		t.Errorf("budgets = %+v, want the defaults %+v", p.Budgets, DefaultBudgets)
	}
	p, err = Parse("budgets,resume=5s,producer-p99=2x")
	if err != nil {
		t.Fatal(err)
	}
	want := DefaultBudgets
	want.Resume, want.ProducerP99 = 5*time.Second, 2
	if p.Budgets != want {
		t.Errorf("budgets = %+v, want %+v", p.Budgets, want)
	}
	s := p.String()
	if !strings.Contains(s, "producer-p99=2x") || !strings.Contains(s, "resume=5s") || strings.Contains(s, CapBudgets+",") {
		t.Errorf("String() = %s: want every budget spelled out", s)
	}
	back, err := Parse(s)
	if err != nil || back != p {
		t.Errorf("Parse(%q) = %+v, %v; want %+v", s, back, err, p)
	}
	if !p.Budgets.Declared() || !p.Budgets.Outage() || (Budgets{ProducerP99: 2}).Outage() || (Budgets{}).Declared() {
		t.Error("Declared or Outage disagree with the budgets")
	}
	for _, bad := range []string{"resume", "budgets=1", "producer-p99=0.5x", "producer-p99=x", "outage-cpu=-1",
		"outage-logs=abc", "outage-statements=0", "resume=0s", "resume=fast", "outage-cpu=1,outage-cpu=2"} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) accepted", bad)
		}
	}
	if err := (Promises{Budgets: Budgets{ProducerP99: 0.5}}).Validate(); err == nil {
		t.Error("a producer factor below 1 validated")
	}
}
