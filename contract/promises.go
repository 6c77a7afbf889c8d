package contract

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Promises is what a relay declares that the harness may assume of it
// beyond the core guarantee, which is never optional. The zero value
// declares nothing: the relay is judged by the core guarantee alone, and
// the scenarios that need a promise are not applicable to it.
type Promises struct {
	// Locking is how the relay keeps two replicas from publishing one
	// row at once: its Style, and the Lease length of a lease style.
	Locking
	// Parks: poison rows (unknown type, undecodable payload, refused by
	// the broker) are parked, within the attempt limit if one is
	// declared, and never published; healthy rows are never parked.
	Parks bool
	// Fenced: the relay marks, retries and parks a row only under its own
	// unexpired lease. It needs a lease locking style.
	Fenced bool
	// Sweeps: the relay deletes processed rows after a retention;
	// without it, no row may leave the outbox during a run.
	Sweeps bool
	// Deletes: the relay deletes a row once it has published it, and
	// marks none (an outbox without mark-then-sweep). Its delete of a
	// row is then its mark: no processed row is kept, so retention is
	// not judged, and a row deleted without a delivery is lost.
	Deletes bool
	// Failpoints: the relay honours EnvFailpoints (docs/contract.md §3.6),
	// so the scenarios that kill or slow it at a point of its loop can
	// run.
	Failpoints bool
	// Records: the relay appends records of its own operations to the
	// file EnvRecords names (docs/contract.md §3.5).
	Records bool
	// Attempts is the attempt limit: the relay parks a failing row once
	// its attempts reach it, never later. 0: none declared, and no
	// attempt count is judged.
	Attempts int
	// Backoff is the retry backoff; the zero value declares none, and the
	// spacing of retries is not judged.
	Backoff Backoff
	// Retention is how long the relay keeps a processed row before it may
	// sweep it, on the database clock; only with Sweeps. 0: the
	// retention the harness gave it (EnvRetention) is judged.
	Retention time.Duration
	// Budgets are what the relay may cost the producers and do during
	// an outage; the zero value declares none.
	Budgets Budgets
}

// LockingStyle is how a relay keeps two replicas from publishing one row
// at once.
type LockingStyle uint8

// Locking styles.
const (
	// LockingUndeclared: the relay says nothing of its locking; nothing
	// that needs a style runs against it.
	LockingUndeclared LockingStyle = iota
	// LockingLease: it leases the rows it claims (locked_by, locked_at,
	// locked_until on the database clock), and a lease that runs out
	// frees the row for another replica.
	LockingLease
	// LockingRowLock: it holds row locks (SELECT ... FOR UPDATE) while it
	// publishes, and keeps no lease in the rows.
	LockingRowLock
	// LockingNone: it takes no lock of a row.
	LockingNone
)

var styleNames = [...]string{LockingUndeclared: "undeclared", LockingLease: "lease", LockingRowLock: "rowlock", LockingNone: "none"}

// String is the style's name, as locking=NAME writes it ("undeclared"
// for the zero value, which has no text form).
func (s LockingStyle) String() string {
	if int(s) < len(styleNames) {
		return styleNames[s]
	}
	return fmt.Sprintf("LockingStyle(%d)", s)
}

// Locking is a relay's locking style, with the length of its lease for
// LockingLease (0: leases of a length it does not declare).
type Locking struct {
	Style LockingStyle
	Lease time.Duration
}

// Lease is the lease locking style with leases of length d; 0 declares
// leases without their length.
func Lease(d time.Duration) Locking { return Locking{Style: LockingLease, Lease: d} }

// RowLocks and NoLocks are the row-lock and no-lock styles.
var (
	RowLocks = Locking{Style: LockingRowLock}
	NoLocks  = Locking{Style: LockingNone}
)

// String is the capability that declares l: lease=DURATION, or
// locking=lease|rowlock|none; "" when it declares nothing.
func (l Locking) String() string {
	switch {
	case l.Style == LockingUndeclared:
		return ""
	case l.Style == LockingLease && l.Lease > 0:
		return CapLease + "=" + l.Lease.String()
	}
	return CapLocking + "=" + l.Style.String()
}

// Describe says what l declares, with its capability, for a reason: "row
// locks held while publishing (locking=rowlock)".
func (l Locking) Describe() string {
	var what string
	switch l.Style {
	case LockingUndeclared:
		return "no locking style"
	case LockingLease:
		what = "leases of a length it does not declare"
		if l.Lease > 0 {
			what = "a lease of " + l.Lease.String()
		}
	case LockingRowLock:
		what = "row locks held while publishing"
	case LockingNone:
		what = "no lock of a row"
	default:
		return l.Style.String()
	}
	return what + " (" + l.String() + ")"
}

// Backoff is a declared exponential retry backoff: after a failure that
// leaves a row at n attempts, the row waits Wait(n) on the database clock
// before it is eligible again.
type Backoff struct {
	Base, Max time.Duration
}

// Declared reports whether b declares a backoff.
func (b Backoff) Declared() bool { return b.Base > 0 }

// Wait is how long a row waits after a failure that left it at n
// attempts: min(Base × 2^(n-1), Max), Base for n of 1 or less.
func (b Backoff) Wait(n int) time.Duration {
	d := b.Base
	for i := 1; i < n && d < b.Max; i++ {
		if d > b.Max/2 {
			return b.Max
		}
		d *= 2
	}
	return min(d, b.Max)
}

// ParseBackoff reads BASE/MAX, two positive Go durations with BASE at
// most MAX, as backoff=BASE/MAX and the relays' backoff variables write
// a backoff.
func ParseBackoff(value string) (Backoff, error) {
	base, max, ok := strings.Cut(value, "/")
	b, errB := time.ParseDuration(base)
	m, errM := time.ParseDuration(max)
	if !ok || errB != nil || errM != nil || b <= 0 || m < b {
		return Backoff{}, fmt.Errorf("%s is not BASE/MAX, two positive durations with BASE at most MAX, such as 100ms/2s", value)
	}
	return Backoff{Base: b, Max: m}, nil
}

// String is BASE/MAX, as backoff=BASE/MAX writes it.
func (b Backoff) String() string { return b.Base.String() + "/" + b.Max.String() }

// The names of the capabilities, as the text form of Promises writes
// them.
const (
	CapParks      = "parks"
	CapFenced     = "fenced"
	CapSweeps     = "sweeps"
	CapDeletes    = "deletes"
	CapFailpoints = "failpoints"
	CapRecords    = "records"
	// CapLease, as lease=DURATION, declares LockingLease with leases of
	// that length.
	CapLease = "lease"
	// CapLocking, as locking=lease|rowlock|none, declares a locking style
	// without a lease length.
	CapLocking   = "locking"
	CapAttempts  = "attempts"
	CapBackoff   = "backoff"
	CapRetention = "retention"
	// None declares nothing, and stands alone.
	None = "none"
)

// Capabilities lists the capabilities in the order Promises.String writes
// them, with the form of their values.
var Capabilities = append([]string{CapParks, CapFenced, CapSweeps, CapDeletes, CapFailpoints, CapRecords,
	CapLease + "=DURATION", CapLocking + "=lease|rowlock|none", CapAttempts + "=N", CapBackoff + "=BASE/MAX", CapRetention + "=DURATION",
	CapBudgets}, budgetForms()...)

// budgetForms are the budget capabilities with the forms of their
// values.
func budgetForms() []string {
	out := make([]string, len(budgets))
	for i, b := range budgets {
		out[i] = b.name + "=" + b.form
	}
	return out
}

// flag is a capability without a value.
type flag struct {
	name string
	on   func(p *Promises) *bool
	// what a relay that declares it does, for a reason.
	does string
}

var flags = []flag{
	{CapParks, func(p *Promises) *bool { return &p.Parks }, "parks poison rows"},
	{CapFenced, func(p *Promises) *bool { return &p.Fenced }, "writes a row only under its own unexpired lease"},
	{CapSweeps, func(p *Promises) *bool { return &p.Sweeps }, "deletes processed rows after a retention"},
	{CapDeletes, func(p *Promises) *bool { return &p.Deletes }, "deletes a row once it has published it"},
	{CapFailpoints, func(p *Promises) *bool { return &p.Failpoints }, "honours " + EnvFailpoints},
	{CapRecords, func(p *Promises) *bool { return &p.Records }, "writes records to " + EnvRecords},
}

// Parse reads the text form of Promises: a comma-separated list of
// Capabilities, each at most once (lease= and locking= both declare the
// locking style, so only one of them may be given), or "none". It refuses
// an unknown capability, a bad value, and promises that contradict each
// other (Validate).
func Parse(list string) (Promises, error) {
	var p Promises
	if strings.TrimSpace(list) == None {
		return p, nil
	}
	fail := func(format string, args ...any) (Promises, error) {
		return Promises{}, fmt.Errorf("capabilities %q: %s", list, fmt.Sprintf(format, args...))
	}
	want := "want a comma-separated list of " + strings.Join(Capabilities, ", ") + ", or " + None
	seen := map[string]string{}
	defaults := false
	for _, entry := range strings.Split(list, ",") {
		entry = strings.TrimSpace(entry)
		name, value, valued := strings.Cut(entry, "=")
		name, value = strings.TrimSpace(name), strings.TrimSpace(value)
		key := name
		if name == CapLease {
			key = CapLocking
		}
		if prev, ok := seen[key]; ok {
			if key == CapLocking {
				return fail("the locking style is given twice (%s and %s): give it once", prev, entry)
			}
			return fail("%s is given twice (%s and %s): give each capability once", name, prev, entry)
		}
		seen[key] = entry
		if i := flagIndex(name); i >= 0 {
			if valued {
				return fail("%s takes no value (got %s)", name, entry)
			}
			*flags[i].on(&p) = true
			continue
		}
		if name == CapBudgets {
			if valued {
				return fail("%s takes no value (got %s): it declares the default budgets; give one budget as %s=VALUE", name, entry, CapResume)
			}
			defaults = true
			continue
		}
		if i := budgetIndex(name); i >= 0 {
			if !valued {
				return fail("%s needs a value (%s=%s)", name, name, budgets[i].form)
			}
			if err := p.Budgets.set(i, value); err != nil {
				return fail("%v", err)
			}
			continue
		}
		var err error
		switch name {
		case "":
			return fail("an empty name (%s)", want)
		case None:
			return fail("%s declares nothing and stands alone", None)
		case CapLease, CapLocking, CapAttempts, CapBackoff, CapRetention:
			if !valued {
				return fail("%s needs a value (%s)", name, want)
			}
			err = p.set(name, value)
		default:
			return fail("unknown capability %q (%s)", name, want)
		}
		if err != nil {
			return fail("%v", err)
		}
	}
	if defaults {
		p.Budgets.fillDefaults()
	}
	if err := p.Validate(); err != nil {
		return fail("%v", err)
	}
	return p, nil
}

func flagIndex(name string) int {
	for i, f := range flags {
		if f.name == name {
			return i
		}
	}
	return -1
}

// set reads the value of a capability that has one.
func (p *Promises) set(name, value string) error {
	positive := func(what string) (time.Duration, error) {
		d, err := time.ParseDuration(value)
		if err != nil || d <= 0 {
			return 0, fmt.Errorf("%s=%s is not a positive duration such as 20s", what, value)
		}
		return d, nil
	}
	var err error
	switch name {
	case CapLease:
		var d time.Duration
		d, err = positive(CapLease)
		p.Locking = Lease(d)
	case CapLocking:
		switch value {
		case LockingLease.String():
			p.Locking = Lease(0)
		case LockingRowLock.String():
			p.Locking = RowLocks
		case LockingNone.String():
			p.Locking = NoLocks
		default:
			err = fmt.Errorf("locking=%s is not lease, rowlock or none (a lease with its length is lease=DURATION)", value)
		}
	case CapAttempts:
		n, aerr := strconv.Atoi(value)
		if aerr != nil || n < 1 {
			err = fmt.Errorf("attempts=%s is not a whole number of at least 1", value)
		}
		p.Attempts = n
	case CapBackoff:
		if p.Backoff, err = ParseBackoff(value); err != nil {
			err = fmt.Errorf("backoff=%w", err)
		}
	case CapRetention:
		p.Retention, err = positive(CapRetention)
	}
	return err
}

// String is the text form of p, which Parse reads back as p: its flags,
// then its locking style, attempt limit, backoff and retention; "none"
// when it declares nothing.
func (p Promises) String() string {
	var out []string
	for _, f := range flags {
		if *f.on(&p) {
			out = append(out, f.name)
		}
	}
	if l := p.Locking.String(); l != "" {
		out = append(out, l)
	}
	if p.Attempts != 0 {
		out = append(out, CapAttempts+"="+strconv.Itoa(p.Attempts))
	}
	if p.Backoff != (Backoff{}) {
		out = append(out, CapBackoff+"="+p.Backoff.String())
	}
	if p.Retention != 0 {
		out = append(out, CapRetention+"="+p.Retention.String())
	}
	out = append(out, p.Budgets.strings()...)
	if len(out) == 0 {
		return None
	}
	return strings.Join(out, ",")
}

// Validate returns every problem of p: a value out of range, and promises
// that contradict each other (fenced without a lease locking style, a
// lease length with another style, a retention without sweeps, deletes
// with sweeps). A
// Promises in Go code is checked by it as Parse checks the text.
func (p Promises) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	switch l := p.Locking; {
	case l.Style > LockingNone:
		bad("unknown locking style %d", l.Style)
	case l.Lease < 0:
		bad("lease=%s is not a positive duration", l.Lease)
	case l.Lease > 0 && l.Style != LockingLease:
		bad("a lease of %s with locking=%s: a lease length goes with the lease style only", l.Lease, l.Style)
	}
	if p.Fenced && p.Locking.Style != LockingLease {
		bad("%s promises writes only under the relay's own unexpired lease, and it declares %s: declare its lease (lease=DURATION, or locking=lease)",
			CapFenced, p.Locking.Describe())
	}
	if p.Attempts < 0 {
		bad("attempts=%d is not a whole number of at least 1", p.Attempts)
	}
	if b := p.Backoff; b != (Backoff{}) && (b.Base <= 0 || b.Max < b.Base) {
		bad("backoff=%s is not two positive durations with BASE at most MAX", b)
	}
	if p.Deletes && p.Sweeps {
		bad("%s and %s: a relay that deletes a row once published keeps no processed row to sweep; declare one of them", CapDeletes, CapSweeps)
	}
	errs = append(errs, p.Budgets.validate()...)
	switch {
	case p.Retention < 0:
		bad("retention=%s is not a positive duration", p.Retention)
	case p.Retention > 0 && !p.Sweeps:
		bad("retention=%s without %s: a retention says when processed rows are swept; declare %s too, or no retention", p.Retention, CapSweeps, CapSweeps)
	}
	return errors.Join(errs...)
}

// Unmet says, one clause each, what need asks of a relay that p does not
// promise, naming the relay: "a relay that takes leases of rows
// (lease=DURATION or locking=lease), and watermill declares row locks
// held while publishing (locking=rowlock)". nil when p promises all of
// need. Of need only what it declares counts, not its values: a locking
// style is met by the same style (a lease of any length meets
// LockingLease), an attempt limit, a backoff or a retention by any.
func (p Promises) Unmet(need Promises, relay string) []string {
	var out []string
	for _, f := range flags {
		if *f.on(&need) && !*f.on(&p) {
			out = append(out, fmt.Sprintf("a relay that %s (%s), and %s does not declare it", f.does, f.name, relay))
		}
	}
	if s := need.Locking.Style; s != LockingUndeclared && p.Locking.Style != s {
		out = append(out, fmt.Sprintf("a relay that %s, and %s declares %s", styleNeeds[s], relay, p.Locking.Describe()))
	}
	for _, v := range []struct {
		need, has bool
		what      string
	}{
		{need.Attempts > 0, p.Attempts > 0, "its attempt limit (attempts=N)"},
		{need.Backoff.Declared(), p.Backoff.Declared(), "its retry backoff (backoff=BASE/MAX)"},
		{need.Retention > 0, p.Retention > 0, "its retention (retention=DURATION)"},
	} {
		if v.need && !v.has {
			out = append(out, fmt.Sprintf("a relay that declares %s, and %s does not", v.what, relay))
		}
	}
	return out
}

// styleNeeds says what a relay of a style does, for a need of it.
var styleNeeds = map[LockingStyle]string{
	LockingLease:   "takes leases of rows (lease=DURATION or locking=lease)",
	LockingRowLock: "holds row locks while publishing (locking=rowlock)",
	LockingNone:    "takes no lock of a row (locking=none)",
}
