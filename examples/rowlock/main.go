// Command rowlock-relay is an example outbox relay of the other common
// design: it holds row locks while it publishes, and keeps no lease in
// its rows. It drains an outbox table of its own, keyed by a bigint
// identity the database assigns, with column names of its own, which
// target.yaml beside this file describes to the harness
// (docs/targets.md). It follows only the black-box contract of
// docs/contract.md §3 and imports pgx, amqp091-go and the standard
// library, nothing of this repository (a test of the package checks it).
//
// # Its table
//
//	seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, topic text,
//	body jsonb, correlation uuid, created_at timestamptz,
//	published_at timestamptz, failures integer, dead_at timestamptz,
//	retry_after timestamptz
//
// The target's stage inserts a row with RETURNING seq, so the database
// gives the event its id; the relay publishes that id, as decimal text,
// as the message's message_id (the target's delivery.id: message_id),
// which is how the harness's stage reads it (seq::text).
//
// # What it does
//
// One batch at a time, each in one transaction:
//
//  1. claim: SELECT ... WHERE published_at IS NULL AND dead_at IS NULL
//     AND (retry_after IS NULL OR retry_after <= now()) ORDER BY
//     created_at, seq LIMIT OUTBOX_BATCH_SIZE FOR UPDATE SKIP LOCKED:
//     the eligible rows, oldest first, locked until the transaction ends;
//     rows another batch holds are skipped;
//  2. a row whose topic OUTBOX_TYPES does not list, or whose body lacks a
//     field it requires, is parked at once (dead_at = now()) and never
//     published;
//  3. every other row is published to OUTBOX_EXCHANGE, all of them before
//     the first confirm is awaited: routing key and type = topic,
//     message_id = seq, correlation_id = correlation, persistent,
//     mandatory, content type application/json, body = body; then each
//     publisher confirm is awaited until OUTBOX_PUBLISH_TIMEOUT after its
//     publish. The row locks are held meanwhile;
//  4. in the same transaction, the confirmed rows are marked
//     (published_at = now()); a nack or a return (unroutable) is a
//     failure of the row: failures + 1, retry_after = now() +
//     min(OUTBOX_BACKOFF_BASE × 2^(failures-1), OUTBOX_BACKOFF_MAX) with
//     failures counted after this one, and dead_at = now() once failures
//     reach OUTBOX_MAX_ATTEMPTS; then COMMIT, which frees every row.
//
// A broker outage (no connection, a publish error, no confirm in time, a
// closed channel) stops the batch and consumes no attempt: the rows it
// left unconfirmed are neither marked nor failed, and the commit frees
// them for the next batch; the confirmed ones are marked (a confirmed
// publish may be marked, and a rollback would only publish them again).
// A database error rolls the transaction back, or the server ends it
// when the connection is gone: what the batch published is published
// again, a duplicate the consumers absorb.
//
// The database clock is the only clock: every time a statement compares
// or computes is now() of the database, the start of the batch's
// transaction, and a backoff is counted from it. OUTBOX_CLOCK_OFFSET
// moves only the time of the log lines.
//
// Every wait has a timeout: connecting (3s, and a second for the
// handshakes), each statement (OUTBOX_STORE_TIMEOUT, by context and by
// the session's statement_timeout), each confirm (OUTBOX_PUBLISH_TIMEOUT
// and 100ms of grace), each publish's write (a watchdog closes the broker
// connection under a write that takes longer than the publish timeout and
// a second). The session's idle_in_transaction_session_timeout
// (2 × OUTBOX_PUBLISH_TIMEOUT + OUTBOX_STORE_TIMEOUT + 8s) lets the server
// end the transaction, and free its locks, of a relay that was frozen
// while it published. A lost connection is dropped and opened again at
// the next batch; after a failed batch the next waits from the poll
// interval, doubling, up to a second (or the poll interval when that is
// longer).
//
// No sweep, failpoints, records, metrics or LISTEN/NOTIFY. Logs are plain
// text lines on stderr; URLs and credentials never appear in them.
//
// # Configuration
//
// The variables of docs/contract.md §3.2. OUTBOX_DATABASE_URL,
// OUTBOX_AMQP_URL (one URL, or a cluster's nodes separated by commas,
// dialled in turn), OUTBOX_TABLE (table or schema.table, each part quoted
// as written) and OUTBOX_EXCHANGE are required. OUTBOX_RELAY_ID names the
// sessions and the log lines (default rowlock-HOST-PID). The settings,
// Go durations where they are times, with their defaults outside the
// harness (which sets them all): OUTBOX_POLL_INTERVAL (1s; the wait after
// a batch that was not full), OUTBOX_BATCH_SIZE (100, at most 10000),
// OUTBOX_PUBLISH_TIMEOUT (10s, 100ms to 10m), OUTBOX_STORE_TIMEOUT (30s),
// OUTBOX_MAX_ATTEMPTS (5, 1 to 100), OUTBOX_BACKOFF_BASE and
// OUTBOX_BACKOFF_MAX (30s and 1h), OUTBOX_CLOCK_OFFSET (0s) and
// OUTBOX_TYPES ("type:field=kind;field=kind,type2"; kinds string, number,
// integer, bool, object, array, any; unset, every type and any JSON body
// is accepted). OUTBOX_LEASE and the variables of a sweep, records,
// failpoints and metrics are ignored: it has none of them.
//
// A configuration it cannot use prints every problem, naming the
// variable, and exits 2. An unreachable database or broker is not a
// configuration error: it logs and tries again.
//
// SIGTERM or SIGINT: the batch under way is finished (its publishes,
// confirms, marks and commit, each bounded as above), no other begins,
// and the process exits 0; a second signal, or a stop longer than 9s,
// exits 1 at once.
//
// Run under the harness's catalogue (docs/examples.md):
//
//	make build   # or: go build -o .build/bin/rowlock-relay ./examples/rowlock
//	go run ./cmd/outboxlab run --target examples/rowlock/target.yaml --seed 1
//
// # Bug modes
//
// ROWLOCK_BUG selects a bug, each breaking a different promise of
// docs/contract.md §2 (numbered there §2.1 to §2.4); empty is the correct
// relay, an unknown name exits 2. A relay run as a command inherits the
// environment of the harness's process, so
//
//	ROWLOCK_BUG=commit-first go run ./cmd/outboxlab run --target examples/rowlock/target.yaml --scenario broker-down --seed 1
//
// runs a mode (the replay line the run prints does not repeat the
// variable); so does a target file's relay.env, or the Env of the
// scenarios.RelayUnderTest that scenarios.LoadTarget returns. The
// scenario and checker named are those of the harness's catalogue
// expected to catch it under the target's capabilities
// (parks,locking=rowlock,attempts=3,backoff=100ms/2s and its budgets):
// expectations read
// from the scenarios, to be confirmed on containers.
//
//   - commit-first: marks the batch's rows published and commits before it
//     publishes them. Breaks "mark processed only after the broker
//     confirmed" (§2.3). It claims before it connects to the broker, so
//     while the broker is unreachable every batch it claims is marked and
//     never published: broker-down, checker lost.
//   - outage-burns-attempts: counts a failure of every row a broker outage
//     left unconfirmed (failures + 1, backoff, parked at the limit).
//     Breaks "a broker outage consumes no attempt" (§2.4): broker-down,
//     checker parking (attempts consumed during the outage, as the
//     observed retries show; healthy rows parked; healthy rows left with
//     attempts nothing refused).
//   - skip-late: claims only rows whose seq is above the highest it has
//     published. Breaks "skip no eligible row" (§2.1): an identity is
//     drawn at INSERT, so a transaction that commits after later ones
//     has rows below that mark, which nobody publishes:
//     commit-order-inversion, checker lost (and liveness).
//   - no-lock: claims with a plain SELECT, without FOR UPDATE SKIP
//     LOCKED, so that two replicas publish the same rows. Breaks "skip
//     the rows another claim holds" (§2.1): baseline, which allows no
//     duplicate delivery, checker duplicate-deliveries (no fault explains
//     them).
//   - drop-poison: deletes a row of an unknown type or an undecodable body
//     instead of parking it. Breaks "a row of an unknown type or with an
//     undecodable payload is parked" (§2.2): poison, checker parking
//     ("poison row gone from the outbox instead of parked"), and
//     retention (a row gone without sweeps declared).
//   - transient: publishes with transient delivery mode. Breaks
//     "persistent delivery" (§2.2): the messages confirmed and marked that
//     sit in a queue when RabbitMQ is killed are gone after its restart:
//     broker-killed, checker lost.
//   - lock-table: locks the whole table (LOCK TABLE ... IN SHARE ROW
//     EXCLUSIVE MODE) at the start of each batch, which holds the lock
//     while it publishes and waits for the confirms. Breaks its producer
//     budget (§3.3.2): every producer's INSERT waits for the batch, and
//     for as long as a replica that holds the lock is frozen:
//     stall-under-load, the producer budget.
//   - no-reconnect-backoff: starts the next batch at once after a failed
//     one, instead of waiting from the poll interval. Breaks its outage
//     budget (§3.3.2): while the broker is unreachable it claims, fails
//     to connect and logs, in a loop: broker-down, the outage budget
//     (its CPU, lines of output and statements a second).
//
// No mode drops the publisher confirm: as seqrelay's comment says, no
// scenario of the catalogue makes the broker lose a message that reached
// it, so such a bug is not expected to be caught.
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
		fmt.Fprintf(stderr, "rowlock-relay: cannot start:\n%s\n", indent(err))
		return exitConfig
	}
	lg := newLogger(stderr, cfg.relayID, cfg.clockOffset)
	stop := make(chan struct{})
	go func() {
		sig, ok := <-sigs
		if !ok {
			return
		}
		lg.printf("got %s: finishing the batch under way, then stopping", sig)
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
	newRelay(cfg, lg, stop).loop()
	return exitOK
}
