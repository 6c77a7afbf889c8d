package observe

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/outboxlab/outboxlab/outbox"
)

// Kind classifies a change of an outbox row.
type Kind string

// Kinds of change, in the order classify tries them for an update: the
// first that fits wins.
const (
	// Inserted: a row was staged.
	Inserted Kind = "inserted"
	// Marked: processed_at was set (or moved to another time).
	Marked Kind = "marked"
	// Parked: faulted_at was set; by a retry at the attempt limit when
	// attempts grew as well (Transition.AttemptsGrew).
	Parked Kind = "parked"
	// Retried: attempts grew, without faulted_at.
	Retried Kind = "retried"
	// Claimed: a lease was taken, moved to another holder or renewed
	// (locked_by, locked_at or locked_until changed, and the row keeps a
	// holder or a lease end); Transition.Claim says which.
	Claimed Kind = "claimed"
	// Released: the lease was cleared (locked_by and locked_until set to
	// NULL).
	Released Kind = "released"
	// Deleted: the row was deleted; Transition.State says what it was.
	Deleted Kind = "deleted"
	// Updated: any other update, of columns the log does not keep
	// (last_error, the payload) or of none, or one that clears
	// processed_at or faulted_at.
	Updated Kind = "updated"
)

// ClaimKind says how a claim relates to the lease the row had before it,
// on the database clock: the previous lease is live when its end
// (locked_until) is after now() of the claiming transaction, the time a
// relay's own eligibility test compares with.
type ClaimKind string

// Kinds of claim.
const (
	// ClaimNew: the row had no holder and no lease end.
	ClaimNew ClaimKind = "new"
	// ClaimAfterExpiry: the row had a lease (or a retry's backoff) that
	// had run out: a re-claim, by another replica or by the same one
	// (Transition.PrevHolder says whose it was).
	ClaimAfterExpiry ClaimKind = "after-expiry"
	// ClaimExtended: the holder moved the end of its own live lease.
	ClaimExtended ClaimKind = "extended"
	// ClaimOverLiveLease: another holder took the row while the previous
	// holder's lease was live: what a fenced relay never does, and what a
	// relay comparing leases with a skewed clock of its own does.
	ClaimOverLiveLease ClaimKind = "over-live-lease"
)

// RowState is what a row was when it was deleted.
type RowState string

// Row states.
const (
	// StateProcessed: processed_at was set (and faulted_at was not).
	StateProcessed RowState = "processed"
	// StateFaulted: faulted_at was set.
	StateFaulted RowState = "faulted"
	// StatePending: neither was set.
	StatePending RowState = "pending"
)

// Values are the contract's columns of one version of a row, as the log
// keeps them. A NULL is the zero value: a zero time, an empty LockedBy,
// zero Attempts.
type Values struct {
	ID          string
	ProcessedAt time.Time
	FaultedAt   time.Time
	Attempts    int
	LockedBy    string
	LockedAt    time.Time
	LockedUntil time.Time
}

// State returns what the row was in this version.
func (v Values) State() RowState {
	switch {
	case !v.FaultedAt.IsZero():
		return StateFaulted
	case !v.ProcessedAt.IsZero():
		return StateProcessed
	}
	return StatePending
}

// leased reports whether the version has a holder or a lease end.
func (v Values) leased() bool { return v.LockedBy != "" || !v.LockedUntil.IsZero() }

// Transition is one logged change of an outbox row, classified.
type Transition struct {
	// Seq is the log's sequence number: the order in which the changes
	// were made.
	Seq int64
	// At is clock_timestamp() when the trigger ran, and TxTime now() of
	// the transaction that made the change (the time that transaction's
	// now() wrote into the row), both on the database clock.
	At, TxTime time.Time
	// Xid is the transaction's id, and PID the server process of the
	// session that made the change.
	Xid int64
	PID int32
	// Session is session_user: the login role of the session, which
	// names the replica when each has a role of its own (see Role). App
	// is the application_name the session set, which the relay chooses.
	Session string
	App     string
	// ID is the row's id, as text.
	ID   string
	Kind Kind
	// Claim says how a Claimed change relates to the previous lease.
	Claim ClaimKind
	// State is what a Deleted row was when it was deleted.
	State RowState
	// AttemptsGrew reports that attempts grew in this change (a Retried
	// change, or a Parked one made by a retry at the attempt limit).
	AttemptsGrew bool
	// PrevHolder is the row's locked_by before the change, and LeaseLive
	// whether the lease it had was live on the database clock when the
	// change was made (locked_until after TxTime). With Session they say
	// whether a mark, retry or park was made under someone else's lease,
	// or under none.
	PrevHolder string
	LeaseLive  bool
	// Old and New are the row before and after the change: Old is nil
	// for an insert, New for a delete.
	Old, New *Values
}

// Read returns the changes of table logged after sequence number after
// (0 for all), in order, each classified. table must have been observed
// (Install). See the package comment for what a read while relays run
// may miss.
func Read(ctx context.Context, db DB, table outbox.Table, after int64) ([]Transition, error) {
	table, err := qualify(ctx, db, table)
	if err != nil {
		return nil, fmt.Errorf("reading the observations of %s: %w", table, err)
	}
	rows, err := db.Query(ctx, `SELECT seq, at, tx_time, xid, pid, session_user_name, application_name, op,
	old_id, old_processed_at, old_faulted_at, old_attempts, old_locked_by, old_locked_at, old_locked_until,
	new_id, new_processed_at, new_faulted_at, new_attempts, new_locked_by, new_locked_at, new_locked_until
FROM `+ObservedTable(table).Ident()+` WHERE seq > $1 ORDER BY seq`, after)
	if err != nil {
		return nil, fmt.Errorf("reading the observations of %s: %w", table, err)
	}
	var (
		out      []Transition
		tr       Transition
		op       string
		old, new nullableValues
		failed   *ViewError
	)
	dest := append([]any{&tr.Seq, &tr.At, &tr.TxTime, &tr.Xid, &tr.PID, &tr.Session, &tr.App, &op}, old.dest()...)
	dest = append(dest, new.dest()...)
	_, err = pgx.ForEachRow(rows, dest, func() error {
		t := tr
		switch op {
		case "INSERT":
			t.New = new.values()
		case "UPDATE":
			t.Old, t.New = old.values(), new.values()
		case "DELETE":
			t.Old = old.values()
		default:
			if msg, ok := strings.CutPrefix(op, "ERROR: "); ok {
				if failed == nil {
					failed = &ViewError{Table: table, First: msg}
				}
				failed.Changes++
				return nil
			}
			return fmt.Errorf("log row %d: unknown operation %q", t.Seq, op)
		}
		classify(&t)
		out = append(out, t)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading the observations of %s: %w", table, err)
	}
	if failed != nil {
		return out, failed
	}
	return out, nil
}

// ViewError is returned by Read, with the changes it could read, when the
// trigger could not read some changes of an outbox observed through its
// rows view (InstallView): the view failed over them. The log is then
// incomplete. The changes themselves were made: the trigger never fails
// the statement it observes.
type ViewError struct {
	Table   outbox.Table
	Changes int
	First   string // the first failure's message
}

func (e *ViewError) Error() string {
	return fmt.Sprintf("the rows view of %s failed over %d changed rows, which the observation could not read (first: %s)", e.Table, e.Changes, e.First)
}

// nullableValues scans the seven logged columns of one side of a change.
type nullableValues struct {
	id, lockedBy                                  pgtype.Text
	processedAt, faultedAt, lockedAt, lockedUntil pgtype.Timestamptz
	attempts                                      pgtype.Int4
}

func (n *nullableValues) dest() []any {
	return []any{&n.id, &n.processedAt, &n.faultedAt, &n.attempts, &n.lockedBy, &n.lockedAt, &n.lockedUntil}
}

func (n *nullableValues) values() *Values {
	ts := func(t pgtype.Timestamptz) time.Time {
		if !t.Valid {
			return time.Time{}
		}
		return t.Time
	}
	return &Values{
		ID:          n.id.String,
		ProcessedAt: ts(n.processedAt),
		FaultedAt:   ts(n.faultedAt),
		Attempts:    int(n.attempts.Int32),
		LockedBy:    n.lockedBy.String,
		LockedAt:    ts(n.lockedAt),
		LockedUntil: ts(n.lockedUntil),
	}
}

// classify sets t's ID, Kind, Claim, State, AttemptsGrew, PrevHolder and
// LeaseLive from its values.
func classify(t *Transition) {
	switch {
	case t.Old == nil:
		t.ID, t.Kind = t.New.ID, Inserted
		return
	case t.New == nil:
		t.ID, t.Kind, t.State = t.Old.ID, Deleted, t.Old.State()
	default:
		t.ID = t.New.ID
	}
	o := t.Old
	t.PrevHolder = o.LockedBy
	t.LeaseLive = !o.LockedUntil.IsZero() && o.LockedUntil.After(t.TxTime)
	if t.New == nil {
		return
	}
	n := t.New
	t.AttemptsGrew = n.Attempts > o.Attempts
	leaseChanged := n.LockedBy != o.LockedBy || !n.LockedAt.Equal(o.LockedAt) || !n.LockedUntil.Equal(o.LockedUntil)
	switch {
	case !n.ProcessedAt.IsZero() && !n.ProcessedAt.Equal(o.ProcessedAt):
		t.Kind = Marked
	case !n.FaultedAt.IsZero() && o.FaultedAt.IsZero():
		t.Kind = Parked
	case t.AttemptsGrew:
		t.Kind = Retried
	case leaseChanged && n.leased():
		t.Kind = Claimed
		switch {
		case !o.leased():
			t.Claim = ClaimNew
		case !t.LeaseLive:
			t.Claim = ClaimAfterExpiry
		case n.LockedBy == o.LockedBy:
			t.Claim = ClaimExtended
		default:
			t.Claim = ClaimOverLiveLease
		}
	case leaseChanged:
		t.Kind = Released
	default:
		t.Kind = Updated
	}
}
