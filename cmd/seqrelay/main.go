// Command seqrelay is a second, independent outbox relay, kept as a test
// fixture for the harness: it follows only the black-box contract of
// docs/contract.md §3 and shares no code with this repository's relay (it
// imports pgx, amqp091-go and the standard library, nothing of relay,
// outbox, chaos or the harness). It is written in another style on
// purpose: one sequential loop, one PostgreSQL connection, one AMQP
// channel, one message in flight at a time, and settings of its own.
//
// # What it does
//
// Every poll (200ms; at once again after a full batch) it claims up to 10
// pending rows whose lease is free, oldest occurred_at first, with FOR
// UPDATE SKIP LOCKED, and leases them for 10s on the database clock
// (locked_until = now() + 10s). Then, one row at a time, it checks the
// row's type and payload, publishes it (confirm mode, mandatory,
// persistent, content type application/json, message_id = id, type =
// message_type, correlation_id, routing key = message_type, body =
// payload), waits at most 2s for that message's publisher confirm, and
// marks the row processed only under its own unexpired lease
// (WHERE id = $1 AND locked_by = $me AND locked_until > now()); a mark
// that finds no row means the lease was lost and is logged. It stops a
// batch once half of the lease has gone by, measured on its own monotonic
// clock from before the claim: it never compares its clock with the
// database's, and OUTBOX_CLOCK_OFFSET only moves the time its log lines
// show.
//
// A broker outage (dial error, publish error, no confirm within 2s, a
// closed channel) stops the batch, consumes no attempt and releases
// nothing: the leases expire. A nack or a return (unroutable) is a failure
// of the row: attempts += 1 and locked_until = now() + min(2^attempts ×
// 200ms, 5s); at OUTBOX_MAX_ATTEMPTS (default 5) faulted_at = now(). A
// row whose type OUTBOX_TYPES does not list, or whose payload is not JSON
// or lacks a required field of the right kind, is parked at once
// (faulted_at = now()) and never published. A failed tick (database or
// broker trouble) is logged and the loop goes on after a pause that grows
// to 1s.
//
// No sweep, no failpoints, no records, no metrics, no LISTEN/NOTIFY. Logs
// are plain text lines on stderr; URLs and credentials never appear in
// them.
//
// # Configuration
//
// OUTBOX_DATABASE_URL, OUTBOX_AMQP_URL, OUTBOX_TABLE (table or
// schema.table, each part quoted as given, so case is kept) and
// OUTBOX_EXCHANGE are required. OUTBOX_RELAY_ID (the lease owner) defaults
// to seqrelay-HOST-PID. OUTBOX_CLOCK_OFFSET is a Go duration ("-5m").
// OUTBOX_MAX_ATTEMPTS (1 to 100) and OUTBOX_TYPES are read when set: the
// harness passes them to every relay. OUTBOX_TYPES is
// "type[:field=kind;field=kind],type2,...", kinds string, number, integer,
// bool, object, array or any; the fields listed are required, other keys
// are allowed; unset, every type and any JSON payload is accepted. Every
// other OUTBOX_* variable is ignored: the lease, poll interval, batch
// size, timeouts and backoff are seqrelay's own.
//
// A configuration it cannot use prints every problem, naming the
// variable, and exits 2. An unreachable database or broker is not a
// configuration error: it logs and tries again.
//
// SIGTERM or SIGINT: the message in flight is finished (its publish and
// mark are bounded by their timeouts, the whole stop by 8s), the rest of
// the batch is left to its lease, and the process exits 0. A second signal
// exits 1 at once.
//
// Run under the harness's catalogue (see README.md):
//
//	go build -o bin/seqrelay ./cmd/seqrelay
//	go run ./cmd/outboxlab run --relay cmd:./bin/seqrelay --capabilities parks,fenced,lease=10s,attempts=3 --seed 1
//	go run ./cmd/outboxlab run --relay 'cmd:env SEQRELAY_BUG=mark-first ./bin/seqrelay' --capabilities parks,fenced,lease=10s,attempts=3 --seed 1
//
// # Bug modes
//
// SEQRELAY_BUG selects a bug, each breaking a different promise of
// docs/contract.md §2 (numbered there §2.1 to §2.4); empty is the correct
// relay, an unknown name exits 2. The scenario and checker named are those
// of scenarios/catalogue.go expected to catch it, when the run declares
// what the correct seqrelay promises (outboxlab run --capabilities
// parks,fenced,lease=10s,attempts=3; it has no sweep and no failpoints).
// These are expectations read from the scenarios, to be confirmed on
// containers:
//
//   - mark-first: marks each row processed before publishing it. Breaks
//     "mark processed only after the broker confirmed" (§2.3). Since
//     it claims before it connects, a broker outage leaves the first row
//     of every batch it claims marked and never published: broker-down,
//     checker lost.
//   - no-fence: marks, retries and parks by id alone (UPDATE ... WHERE
//     id = $1, no lease, no processed_at check), and does not stop a batch
//     whose lease ran out. Breaks "mark only while this relay still holds
//     the lease" (§2.3). A replica paused past its lease resumes and
//     marks again the rows another replica took over: lease-expiry, its
//     fencing judgement of the held rows ("marked again after ... resumed
//     past its lease").
//   - own-clock-lease: computes a lease's end (locked_until = its clock +
//     10s), eligibility and fences from its own (offset) clock, passed as a
//     parameter, instead of now(); locked_at stays now(). Breaks "the
//     database clock is the only clock for leases" (§2.1). A replica
//     whose clock runs minutes ahead takes rows another replica still
//     holds and both publish them: clock-skew, checker
//     duplicate-deliveries (clock faults explain no duplicate); the rows it
//     leased show leases of minutes in locked_until - locked_at: checker
//     fencing with lease=10s declared.
//   - eat-attempts: takes a broker outage for a failure of the row: attempts
//     += 1 with backoff, parked at the limit. Breaks "broker down: consume
//     no attempt" (§2.4): broker-down, checker parking (healthy rows
//     parked, or left with attempts nothing refused).
//   - skip-late: claims only rows whose id is above the highest id it has
//     claimed so far (a high-water mark) instead of every pending row.
//     Breaks "claim the eligible rows, oldest first" (§2.1): a
//     transaction that commits after later ones has rows below the mark
//     that nobody publishes: commit-order-inversion, checker lost (and the
//     backlog never drains: liveness).
//   - xid-mark: claims only rows written by a transaction no older than
//     the oldest one running when it last drained the backlog, as a
//     relay that keeps its place in the outbox by transaction id does
//     (watermill's forwarder keeps the last one it consumed). Correct on
//     one server, whose transaction ids only grow; breaks "a row is
//     eligible by its columns alone" (§2.1) when they start again, after
//     a dump and restore: restore, checker lost (and liveness).
//   - xid-high-water: xid-mark, keeping the highest mark it ever reached
//     (transaction ids only grow, it assumes) across reconnections. A
//     standby promoted after an asynchronous failover never received the
//     last transaction ids the old primary gave, and gives them again:
//     rows committed by them after the failover are below the mark, and
//     skipped for good. Breaks "the relay's place comes from the new
//     primary" (§2.1): failover-async, checker lost (and liveness).
//   - since-start: claims only rows staged (occurred_at) at or after the
//     moment it first connected to the database, on the database clock,
//     as a new version that reads only what it staged itself would.
//     Correct for a relay that was always there; breaks "claim every
//     eligible pending row" (§2.1) for one that replaces another: the rows
//     the old version left are never published: rolling-upgrade, checker
//     lost (and liveness).
//   - transient: publishes with transient delivery mode. Breaks "persistent
//     delivery" (§2.2): messages confirmed and marked that sit in the
//     queue when RabbitMQ is killed are gone after its restart:
//     broker-killed, checker lost.
//   - poison-blocks: takes an unknown type or an undecodable payload for
//     trouble of the tick: it stops the batch without an attempt, so the
//     poison row comes back after every lease and is never parked. Breaks
//     "unknown type: fault at once" (§2.2): poison, its check that
//     rows end parked and checker parking ("poison row not parked"), and
//     the backlog never drains (liveness).
//
// No mode drops the publisher confirm: the harness's own catalogue notes
// (mutant no-confirm) that no chaos scenario makes the broker refuse or
// lose a message that reached it, so such a bug would survive.
package main

import (
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// Exit codes.
const (
	exitOK     = 0
	exitFailed = 1
	exitConfig = 2
)

func main() {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	os.Exit(run(os.Getenv, os.Stderr, sigs))
}

// run is the process but for os.Exit: it reads the configuration (exit 2
// on a problem), then relays until the first signal on sigs and returns
// 0. A second signal, or a stop that takes longer than stopBound, ends the
// process at once with exit code 1.
func run(getenv func(string) string, stderr io.Writer, sigs <-chan os.Signal) int {
	cfg, err := parseConfig(getenv, os.Hostname, os.Getpid())
	if err != nil {
		fmt.Fprintf(stderr, "seqrelay: cannot start:\n%s\n", indent(err))
		return exitConfig
	}
	lg := newLogger(stderr, cfg.relayID, cfg.clockOffset)
	stop := make(chan struct{})
	go func() {
		sig, ok := <-sigs
		if !ok {
			return
		}
		lg.printf("got %s: finishing the message in flight, then stopping", sig)
		close(stop)
		time.AfterFunc(stopBound, func() {
			lg.printf("still not stopped %s after %s: exiting at once", stopBound, sig)
			os.Exit(exitFailed)
		})
		if sig, ok := <-sigs; ok {
			lg.printf("second signal (%s): exiting at once", sig)
			os.Exit(exitFailed)
		}
	}()
	r := newRelay(cfg, lg, stop)
	r.loop()
	return exitOK
}
