// Package oatarget puts github.com/oagudo/outbox (v1.0.1) with its
// optimistic publishing under outboxlab's chaos catalogue: `outboxlab
// run --relay oagudo-optimistic`, or OptimisticTarget(command) in a
// suite.Target, with the command built from ./cmd/oagudo-relay.
//
// The library's reader alone, the way its users run it without the
// option, is a target file (examples/oagudo/target.yaml), since a
// statement stages its rows. Its optimistic mode is not: it lives in the
// producer, where the library's managed writer (Writer.Write with
// WithOptimisticPublisher) commits the business transaction and then
// publishes and deletes what it stored, from the producer's process
// (oaoutbox.OptimisticSchema). Here the producers commit so and publish
// through the relays' link to the broker, recorded as their own
// publishes, and the same readers as the target file's run beside them.
//
// The promises are the reader's, as the target file declares them:
// the library deletes a row once published (deletes), whether by the
// reader or by the optimistic writer, and locks nothing (locking=none):
// the library's documentation says that the reader may publish a row
// the writer is publishing, and so may two readers. Its attempt limit
// is off by default and not declared.
package oatarget

import (
	"github.com/outboxlab/outboxlab/contract"
	"github.com/outboxlab/outboxlab/scenarios"
	"github.com/outboxlab/outboxlab/target/oagudo/oaoutbox"
)

// OptimisticName is the target's name in reports and on the command
// line.
const OptimisticName = "oagudo-optimistic"

// Promises is what the library promises, run with its defaults: it
// deletes a row once the broker confirmed it, and locks no row.
func Promises() contract.Promises {
	return contract.Promises{Deletes: true, Locking: contract.Locking{Style: contract.LockingNone}}
}

// OptimisticTarget is the library with optimistic publishing as a relay
// under test: command, the path of the binary built from
// ./cmd/oagudo-relay, run as host processes (the readers), over
// oaoutbox.OptimisticSchema (the producers' writer), with Promises. Its
// deliveries carry the event id as message_id, the contract's default
// identity.
func OptimisticTarget(command string) scenarios.RelayUnderTest {
	return scenarios.RelayUnderTest{
		Name:     OptimisticName,
		Command:  []string{command},
		Promises: Promises(),
		Outbox:   oaoutbox.OptimisticSchema(),
		Replay:   "--relay " + OptimisticName,
	}
}
