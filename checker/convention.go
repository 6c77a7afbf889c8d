package checker

import (
	"strconv"
	"strings"
	"time"
)

// Value keys and flags that recorders write in history.Op.Value and the
// checkers read. A Value is a space-separated list of tokens: "key=value"
// fields and bare flags, e.g. "attempts=5 parked db_time=2026-01-02T03:04:05.000000006Z".
const (
	// KeyCausedBy, on a Commit invoke, names the events whose consumption
	// caused the events of this commit (comma-separated ids).
	KeyCausedBy = "caused-by"
	// KeyAttempts, on a Retry ok, is the row's attempts after the retry.
	KeyAttempts = "attempts"
	// KeyDBTime is the database clock (RFC 3339 with nanoseconds) at the
	// statement a relay record is about: a Mark ok (processed_at), a Retry
	// ok, a Sweep ok.
	KeyDBTime = "db_time"
	// KeyQueue, on a Deliver ok, names the queue that delivered it.
	KeyQueue = "queue"
	// FlagParked, on a Retry ok, says the retry reached the attempt limit
	// and faulted the row.
	FlagParked = "parked"
	// FlagRedelivered, on a Deliver ok, is the broker's redelivery flag.
	FlagRedelivered = "redelivered"
	// FlagDuplicate, on an Apply ok, says the inbox absorbed the delivery
	// with no second effect.
	FlagDuplicate = "duplicate"
)

// Phase names carried in the Value of a history.Phase record.
const (
	PhaseSafety   = "safety"
	PhaseLiveness = "liveness"
	PhaseCheck    = "check"
)

// Field returns the value of key in a Value string.
func Field(value, key string) (string, bool) {
	for _, tok := range strings.Fields(value) {
		if k, v, ok := strings.Cut(tok, "="); ok && k == key {
			return v, true
		}
	}
	return "", false
}

// HasFlag reports whether a Value string carries the bare flag.
func HasFlag(value, flag string) bool {
	for _, tok := range strings.Fields(value) {
		if tok == flag {
			return true
		}
	}
	return false
}

// CausedBy returns the causes named by a Commit invoke's Value.
func CausedBy(value string) []string {
	v, ok := Field(value, KeyCausedBy)
	if !ok || v == "" {
		return nil
	}
	var out []string
	for _, id := range strings.Split(v, ",") {
		if id != "" {
			out = append(out, id)
		}
	}
	return out
}

// Attempts returns the attempts a Retry ok's Value reports.
func Attempts(value string) (int, bool) {
	v, ok := Field(value, KeyAttempts)
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, false
	}
	return n, true
}

// DBTime returns the database time a relay record's Value reports.
func DBTime(value string) (time.Time, bool) {
	v, ok := Field(value, KeyDBTime)
	if !ok {
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}, false
	}
	return t, true
}

// RetryValue formats the Value of a Retry ok.
func RetryValue(attempts int, parked bool, dbTime time.Time) string {
	v := KeyAttempts + "=" + strconv.Itoa(attempts)
	if parked {
		v += " " + FlagParked
	}
	return WithDBTime(v, dbTime)
}

// WithDBTime appends a db_time field to value; a zero t leaves it as is.
func WithDBTime(value string, t time.Time) string {
	if t.IsZero() {
		return value
	}
	f := KeyDBTime + "=" + t.UTC().Format(time.RFC3339Nano)
	if value == "" {
		return f
	}
	return value + " " + f
}

// CausedByValue formats the Value of a Commit invoke whose events were
// caused by the given events.
func CausedByValue(causes ...string) string {
	return KeyCausedBy + "=" + strings.Join(causes, ",")
}

// FaultClass groups fault names by the part of the system they hit.
type FaultClass string

// Fault classes.
const (
	// FaultBroker: the broker is down, unreachable, slow or drops confirms
	// ("broker-down", "broker-killed", "relay-broker-timeout").
	FaultBroker FaultClass = "broker"
	// FaultDB: the database is down, unreachable or slow ("db-down",
	// "relay-db-latency", "postgres-killed").
	FaultDB FaultClass = "db"
	// FaultProcess: a relay, producer or consumer is killed, paused or
	// restarted ("kill relay-a", "pause relay-b", "crash-after-mark").
	FaultProcess FaultClass = "process"
	// FaultClock: a process clock is skewed ("clock-skew relay-a").
	FaultClock FaultClass = "clock"
	// FaultOther is every other fault.
	FaultOther FaultClass = "other"
)

// ClassOf classifies a fault by its name: a name that mentions the broker
// ("broker", "rabbit", "amqp") is a broker fault even when it also says
// "kill" or "pause"; then the database ("db", "postgres", "pg"), then
// processes ("kill", "crash", "pause", "restart", "stop"), then clocks
// ("skew", "clock"). Words are the name's parts split at anything that is
// not a letter or digit, so "relay->broker" and "relay-broker-timeout" are
// both broker faults.
func ClassOf(name string) FaultClass {
	words := strings.FieldsFunc(strings.ToLower(name), func(r rune) bool {
		return (r < 'a' || r > 'z') && (r < '0' || r > '9')
	})
	has := func(set ...string) bool {
		for _, w := range words {
			for _, s := range set {
				if w == s {
					return true
				}
			}
		}
		return false
	}
	switch {
	case has("broker", "rabbit", "rabbitmq", "amqp"):
		return FaultBroker
	case has("db", "database", "postgres", "postgresql", "pg"):
		return FaultDB
	case has("kill", "killed", "crash", "crashed", "pause", "paused", "restart", "stop", "stopped", "sigkill"):
		return FaultProcess
	case has("skew", "clock"):
		return FaultClock
	}
	return FaultOther
}
