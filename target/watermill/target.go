// Package wmtarget puts watermill's outbox, the SQL forwarder, under
// outboxlab's chaos catalogue as a target: `outboxlab run --relay
// watermill`, or Target() in a suite.Target. The library is run as its
// users configure it: what the black-box contract needs is set, the rest
// is watermill's default. Versions: those of go.mod (watermill v1.5,
// watermill-sql v4, watermill-amqp v3).
//
// # Outbox (package wmoutbox)
//
// Migrate creates watermill-sql's tables of one topic with the library's
// own DDL: the messages table is the table the harness names (in the
// run's schema), the offsets table is beside it ("<table>_offsets",
// outbox.Table.Sibling), and the topic is the table's name. Stage
// publishes the event inside the caller's pgx.Tx through watermill-sql's
// Publisher over wsql.TxFromPgx(tx), wrapped in forwarder.NewPublisher:
// message UUID = event id, destination topic = the event's message type
// (the routing key), payload = its JSON payload, correlation id in the
// metadata ("correlation_id"). Rows reads the envelope back (id = the
// envelope's uuid, message_type = its destination topic) and shows a row
// processed once the consumer group acked its offset; processed_at is the
// message's created_at, not the time it was forwarded, which watermill
// does not keep. attempts is 0, faulted_at and the lease columns NULL:
// watermill counts no attempts, parks nothing and leases no row.
//
// # Replica (package wmrelay, cmd/watermill-relay, image outboxlab/watermill-relay:dev)
//
//   - SQL subscriber: wsql.NewSubscriber over wsql.BeginnerFromPgx(pgxpool)
//     with SchemaAdapter wsql.DefaultPostgreSQLSchema (messages table =
//     OUTBOX_TABLE, payload column JSON, SubscribeBatchSize default 100,
//     schema initialized in a transaction), OffsetsAdapter
//     wsql.DefaultPostgreSQLOffsetsAdapter (the offsets table beside it),
//     ConsumerGroup "outboxlab_forwarder" for every replica (they share
//     one offset: the replica that reads a batch holds the group's
//     offsets row FOR UPDATE until it acks), PollInterval =
//     OUTBOX_POLL_INTERVAL (100 ms under the harness; watermill's default
//     1 s when unset), AckDeadline default 30 s, ResendInterval default
//     1 s (a nacked message is sent again after it, for ever),
//     RetryInterval default 1 s, the default backoff manager,
//     InitializeSchema off (Migrate made the tables).
//   - Forwarder: forwarder.NewForwarder with ForwarderTopic = the table's
//     name, CloseTimeout 5 s (default 30 s; the harness kills a replica
//     10 s after SIGTERM), AckWhenCannotUnwrap false (default), no
//     middleware.
//   - AMQP publisher: wamqp.NewDurableTopicConfig(first URI of
//     OUTBOX_AMQP_URL, OUTBOX_EXCHANGE, "") with Exchange.Durable = true
//     (the config declares the exchange non-durable, which RabbitMQ
//     refuses for the contract's durable exchange), routing key = the
//     destination topic, Publish.ConfirmDelivery = true,
//     Publish.Mandatory = true; defaults for the rest: DefaultMarshaler
//     (persistent delivery; the message UUID in the header
//     "_watermill_message_uuid", metadata as headers; no message_id, type
//     or content type), ChannelPoolSize 0 (a channel, in confirm mode,
//     opened for every Publish), Transactional false, reconnection with
//     wamqp.DefaultReconnectConfig to the one URI.
//   - The replica dials the broker again every second while it cannot
//     reach it at start, starts the forwarder again when it stops on its
//     own, and stops within 8 s of SIGTERM (exit 0). OUTBOX_CLOCK_OFFSET
//     and OUTBOX_RECORDS are not read: watermill takes no decision by a
//     wall clock, and it records nothing of its own.
//   - OUTBOX_FAILPOINTS: the replica, not the library, passes one
//     failpoint, after-confirm-before-mark, in a handler middleware of the
//     forwarder: after the publish of a message was confirmed, before the
//     message and so its offset is acked. crash-between-publish-and-mark
//     kills it there.
//
// # Promises
//
// Target declares its locking style and the replica's failpoints
// (failpoints,locking=rowlock) and nothing else: watermill holds its
// consumer group's offset row locked (FOR UPDATE) while it forwards a
// batch and leases no row, so the scenarios that judge leases are not
// applicable to it; it does not park poison (a message it cannot publish
// is nacked and sent again), does not sweep, and records nothing; the
// replica honours failpoints (the one above). It is judged by the core
// guarantee: no lost and no phantom event, every duplicate explained, no
// duplicate effect.
// results/watermill/findings.md in the repository says what the
// catalogue found.
package wmtarget

import (
	wamqp "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"

	"github.com/outboxlab/outboxlab/consumer"
	"github.com/outboxlab/outboxlab/contract"
	"github.com/outboxlab/outboxlab/scenarios"
	"github.com/outboxlab/outboxlab/target/watermill/wmoutbox"
	"github.com/outboxlab/outboxlab/testenv"
)

// Name is the target's name in reports and on the command line.
const Name = "watermill"

// Identity is where watermill's deliveries carry the event id: the header
// watermill-amqp's DefaultMarshaler writes the message UUID to. The type
// is the routing key (there is no type property).
var Identity = consumer.Identity{Header: wamqp.DefaultMessageUUIDHeaderKey}

// Target is watermill's forwarder as a relay under test: the replica's
// image, watermill-sql's outbox, the identity of its deliveries, its row
// locks, and the replica's failpoint.
func Target() scenarios.RelayUnderTest {
	return scenarios.RelayUnderTest{
		Name:     Name,
		Image:    testenv.ImageWatermillRelay,
		Promises: contract.Promises{Failpoints: true, Locking: contract.RowLocks},
		Outbox:   wmoutbox.Schema(),
		Identity: Identity,
		Replay:   "--relay " + Name,
	}
}
