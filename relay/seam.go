package relay

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/outboxlab/outboxlab/outbox"
)

// Row is a claimed outbox row.
type Row struct {
	ID            uuid.UUID
	Type          string
	Payload       []byte
	CorrelationID *uuid.UUID
	OccurredAt    time.Time
	Attempts      int
	// LockedAt and LockedUntil are the lease the claim took, on the
	// store's clock (the database's): zero when the store does not tell.
	LockedAt, LockedUntil time.Time
}

// RetryPolicy says how a row-level failure is retried: the row's attempts
// grow by one, it becomes eligible again after
// min(2^attempts x BackoffBase, BackoffMax) by the database clock, and it is
// parked once attempts reach MaxAttempts.
type RetryPolicy struct {
	MaxAttempts int
	BackoffBase time.Duration
	BackoffMax  time.Duration
}

// Backoff returns the delay after the given number of attempts.
func (p RetryPolicy) Backoff(attempts int) time.Duration {
	d := p.BackoffBase
	for i := 0; i < attempts && d < p.BackoffMax; i++ {
		d *= 2
	}
	if d > p.BackoffMax {
		d = p.BackoffMax
	}
	return d
}

// RetryResult is the outcome of Store.Retry.
type RetryResult struct {
	// Applied is false when the lease was lost: the row was left untouched.
	Applied bool
	// Attempts is the row's attempts after the update.
	Attempts int
	// Parked reports that the row reached the attempt limit and was faulted.
	Parked bool
	// At is the store's clock at the update, and Until the row's next
	// eligible time after its backoff (locked_until); zero when the store
	// does not tell.
	At, Until time.Time
}

// Stats describes the backlog of one outbox table.
type Stats struct {
	Pending           int64
	Eligible          int64
	Faulted           int64
	Processed         int64
	OldestEligibleAge time.Duration
}

// Store is the relay's seam to the outbox table. Every time it compares or
// computes (leases, eligibility, backoff, retention) comes from the store's
// own clock: for PostgreSQL, now() of the database.
type Store interface {
	// Claim leases up to limit eligible rows to owner, oldest occurred_at
	// first: pending rows whose lease is absent or expired. Rows another
	// owner is claiming at the same moment are skipped, not waited for.
	Claim(ctx context.Context, owner string, limit int, lease time.Duration) ([]Row, error)
	// Mark sets processed_at on the rows of ids that owner still holds under
	// an unexpired lease and returns those it marked; the others lost their
	// lease and are unchanged.
	Mark(ctx context.Context, owner string, ids []uuid.UUID) ([]uuid.UUID, error)
	// Retry records a row-level failure of a row owner still holds.
	Retry(ctx context.Context, owner string, id uuid.UUID, policy RetryPolicy, cause string) (RetryResult, error)
	// Park faults a row owner still holds at once; it reports false when the
	// lease was lost.
	Park(ctx context.Context, owner string, id uuid.UUID, cause string) (bool, error)
	// Sweep deletes up to limit processed rows older than retention and
	// returns how many it deleted. Pending and faulted rows are never
	// deleted.
	Sweep(ctx context.Context, retention time.Duration, limit int) (int, error)
	// Stats reports the backlog.
	Stats(ctx context.Context) (Stats, error)
}

// TimedStore is implemented by a Store that can tell the database time
// of its marks and which rows a sweep deleted. A relay with Records uses
// it so that its records carry those times; PGStore implements it.
type TimedStore interface {
	// MarkAt is Store.Mark, also returning the database time the rows were
	// marked at (their processed_at); zero when nothing was marked.
	MarkAt(ctx context.Context, owner string, ids []uuid.UUID) ([]uuid.UUID, time.Time, error)
	// SweepIDs is Store.Sweep, returning the ids it deleted and the
	// database time of the statement; zero when nothing was deleted.
	SweepIDs(ctx context.Context, retention time.Duration, limit int) ([]uuid.UUID, time.Time, error)
}

// Message is what the relay hands the broker for one row.
type Message struct {
	ID            string
	Type          string
	CorrelationID string
	Payload       []byte
}

// MessageOf builds the message for a row.
func MessageOf(r Row) Message {
	m := Message{ID: r.ID.String(), Type: r.Type, Payload: r.Payload}
	if r.CorrelationID != nil {
		m.CorrelationID = r.CorrelationID.String()
	}
	return m
}

// Publisher is the relay's seam to the broker.
type Publisher interface {
	// Publish sends m and returns a handle on its confirmation. An error
	// here means the message was not sent.
	Publish(ctx context.Context, m Message) (Confirmation, error)
}

// Confirmation is the broker's answer to one publish, awaited later so that
// many publishes can be in flight at once.
type Confirmation interface {
	// Wait blocks until the broker confirmed (nil), nacked (ErrNacked),
	// returned the message as unroutable (ErrReturned), the connection failed
	// (ErrBrokerUnavailable) or ctx ended.
	Wait(ctx context.Context) error
}

// DoneConfirmation is implemented by a Confirmation that tells when its
// outcome is in: Done returns a channel that is closed once Wait would
// return without blocking. With it, a relay draining a trickle publishes a
// new batch as soon as its claim is back instead of after the confirms of
// the batch before; without it, the relay waits for them first.
// AMQPPublisher's confirmations implement it.
type DoneConfirmation interface {
	Confirmation
	Done() <-chan struct{}
}

// Decoder resolves a message type and decodes its payload;
// *outbox.Registry is one. Decode wraps outbox.ErrUnknownType for a type it
// does not know.
type Decoder interface {
	Decode(messageType string, payload []byte) (any, error)
}

// Validator is implemented by a Decoder that can tell whether a payload
// decodes without building its value: Validate returns the error Decode
// would return, and nil where Decode would succeed. The relay only needs
// that verdict, so it calls Validate instead of Decode when its Decoder
// has it; *outbox.Registry does, at a fraction of Decode's cost for the
// payloads of plain struct types.
type Validator interface {
	Validate(messageType string, payload []byte) error
}

// Failpoints lets a harness act at named points of a tick. Inject may return
// an error (the tick fails there), sleep, panic or end the process. A nil
// Failpoints costs one comparison.
type Failpoints interface {
	Inject(ctx context.Context, name string) error
}

// Failpoint names, in the order a tick passes them.
const (
	FailAfterClaim                = "after-claim"
	FailAfterPublishBeforeConfirm = "after-publish-before-confirm"
	FailAfterConfirmBeforeMark    = "after-confirm-before-mark"
	FailAfterMark                 = "after-mark"
)

// FailpointNames lists every failpoint of the relay.
var FailpointNames = []string{FailAfterClaim, FailAfterPublishBeforeConfirm, FailAfterConfirmBeforeMark, FailAfterMark}

// Sentinel errors callers branch on.
var (
	// ErrBrokerUnavailable marks a broker-level failure: the connection or
	// channel is down, or a publish or confirm timed out. The batch stops and
	// no attempt is consumed.
	ErrBrokerUnavailable = errors.New("broker unavailable")
	// ErrNacked means the broker refused the message with a negative
	// confirm: it could not take it (RabbitMQ nacks on an internal error,
	// and a quorum queue whose leader is being elected during a node's
	// failover nacks what it cannot store). That is the broker's state,
	// not the row's: broker-level, like ErrBrokerUnavailable.
	ErrNacked = errors.New("publish nacked by broker")
	// ErrReturned means the broker returned a mandatory message as
	// unroutable.
	ErrReturned = errors.New("publish returned unroutable")
	// ErrLeaseLost means a mark, retry or park found the row no longer held
	// by this relay.
	ErrLeaseLost = errors.New("lease lost")
)

// Class is how the relay reacts to a failure.
type Class int

const (
	// ClassBroker stops the batch and consumes no attempt.
	ClassBroker Class = iota + 1
	// ClassRow consumes one attempt and backs the row off.
	ClassRow
	// ClassPoison parks the row at once.
	ClassPoison
)

func (c Class) String() string {
	switch c {
	case ClassBroker:
		return "broker"
	case ClassRow:
		return "row"
	case ClassPoison:
		return "poison"
	}
	return fmt.Sprintf("Class(%d)", int(c))
}

// Classify says whether err is a broker-level failure (stop the batch,
// consume nothing), a row-level one (one attempt, back off) or poison (park
// at once). Timeouts and nacks count as broker-level: a broker that does
// not answer in time, or cannot take a message, is not this row's fault;
// a return (no queue binds the row's type) is the row's.
func Classify(err error) Class {
	switch {
	case errors.Is(err, outbox.ErrUnknownType):
		return ClassPoison
	case errors.Is(err, ErrBrokerUnavailable),
		errors.Is(err, ErrNacked),
		errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, context.Canceled):
		return ClassBroker
	default:
		return ClassRow
	}
}
