package scenarios

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxlab/outboxlab/consumer"
	"github.com/outboxlab/outboxlab/outbox"
	"github.com/outboxlab/outboxlab/relay"
	"github.com/outboxlab/outboxlab/testenv"
	"github.com/outboxlab/outboxlab/workload"
)

// ErrMapping is returned, wrapped, when the setup probe finds that the
// relay under test's stage, rows view and deliveries do not name one
// event the same way: every scenario would then count its events lost
// and its deliveries unexpected, a verdict on the mapping rather than on
// the relay. The run verb exits 2 on it, before any scenario runs.
var ErrMapping = errors.New("the event identity does not round-trip")

// ProbeWithin bounds the setup probe's wait for the probe event's
// delivery. A relay that publishes nothing in that time is not refused:
// the scenarios judge it.
const ProbeWithin = 30 * time.Second

// probed holds the relays whose mapping a probe of this process proved.
var probed sync.Map

// probeKey names what a probe proves: one relay's stage, rows view and
// delivery identity.
func probeKey(u RelayUnderTest) string {
	return strings.Join([]string{u.Name, u.Image, strings.Join(u.Command, " "), u.Outbox.Name, u.Identity.String()}, "\x00")
}

// probeOnce runs Probe for u on env unless a probe of this process
// already judged u's mapping: a mapping that did not round-trip fails
// every later run at once with the same error.
func probeOnce(ctx context.Context, env *testenv.Env, u RelayUnderTest, log func(string)) error {
	key := probeKey(u)
	if prev, ok := probed.Load(key); ok {
		err, _ := prev.(error)
		return err
	}
	err := Probe(ctx, env, u, log)
	switch {
	case err == nil:
		probed.Store(key, nil)
	case errors.Is(err, ErrMapping):
		probed.Store(key, err)
	}
	return err
}

// Probe checks, before any scenario, that u's stage, rows view and
// deliveries name the same event: it stages one event through u's own
// stage in a business transaction, reads it back through the rows view in
// that transaction, commits, and waits for its delivery with one replica
// of u running. The id they must agree on is the event's own, or, for an
// outbox that returns the id the database gave the row
// (outbox.Schema.ReturnsID), that one, which the run names the event by
// through its map of such ids, as it then does for every row and
// delivery. A rows view that does not show the staged event under that
// id, or a delivery that carries another id where u's delivery identity
// looks, is an error wrapping ErrMapping that names the column or
// delivery field. A relay that delivers nothing within
// ProbeWithin is not refused here: the scenarios judge what it does.
func Probe(ctx context.Context, env *testenv.Env, u RelayUnderTest, log func(string)) error {
	r := newRun(env, Scenario{Name: "setup-probe", Replicas: 1, Workload: workload.Shape{Producers: 1}}, Options{Relay: u, Log: log})
	defer r.teardown()
	if err := r.setup(ctx); err != nil {
		return fmt.Errorf("setup probe: %w", err)
	}
	bc := r.contexts[0]
	deliveries, closeQueue, err := probeQueue(r.env.AMQPURL(testenv.LinkConsumerBroker), bc.exchange)
	if err != nil {
		return fmt.Errorf("setup probe: %w", err)
	}
	defer closeQueue()

	e := outbox.Event{ID: uuid.New(), Type: workload.TypeOrderPlaced, Payload: json.RawMessage(`{"order_id":"probe","amount":1}`)}
	dbID, err := r.probeStage(ctx, bc, e)
	if err != nil {
		return err
	}
	// The id the delivery must carry: the event's own, or the one the
	// database gave its row.
	want, given := e.ID.String(), fmt.Sprintf("the id %s it was staged with", e.ID)
	if dbID != "" {
		want, given = dbID, fmt.Sprintf("the id %q its stage returned (RETURNING) for event %s", dbID, e.ID)
	}
	timer := time.NewTimer(ProbeWithin)
	defer timer.Stop()
	select {
	case d, ok := <-deliveries:
		if !ok {
			return fmt.Errorf("setup probe: the probe's queue on %s closed before a delivery", bc.exchange)
		}
		// The consumers' path: the id where the identity looks, named
		// through the map of the database's ids.
		if got := u.Identity.ID(d); bc.ids.Event(got) != e.ID.String() {
			err := fmt.Errorf("%w: delivery.id %s: the probe event's delivery (routing key %q) carries %q there, not %s; %s",
				ErrMapping, u.Identity, d.RoutingKey, got, given, describeDelivery(d))
			if fits := identitiesOf(d, want); len(fits) > 0 {
				err = fmt.Errorf("%w (delivery.id %s would name it)", err, strings.Join(fits, " or "))
			} else if fits := identitiesOf(d, e.ID.String()); dbID != "" && len(fits) > 0 {
				err = fmt.Errorf("%w (the delivery carries the event's own id, :id, under delivery.id %s: the stage need not return the database's id)", err, strings.Join(fits, " or "))
			}
			return err
		}
		if dbID != "" {
			r.logf("setup probe: event %s staged as row %q, shown by the rows view and delivered under that id", e.ID, dbID)
		} else {
			r.logf("setup probe: event %s staged, shown by the rows view and delivered under the same id", e.ID)
		}
	case <-timer.C:
		r.logf("setup probe: no delivery within %s; the scenarios judge the relay (the delivery identity is unchecked)", ProbeWithin)
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// probeStage stages e in bc's outbox through the relay's own stage, in a
// business transaction that reads it back through the rows view before it
// commits; it returns the id the database gave the row, for an outbox
// that returns one ("" otherwise). The rows view is read as every read
// of the run reads it: under the events' ids, which the map of the
// database's ids gives.
func (r *run) probeStage(ctx context.Context, bc *boundedCtx, e outbox.Event) (string, error) {
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	tx, err := r.fx.App.Begin(sctx)
	if err != nil {
		return "", fmt.Errorf("setup probe: beginning the business transaction: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(sctx)) }()
	store := workload.PG{Table: bc.table, Notify: true, Schema: r.relay.Outbox, IDs: bc.ids}
	dbID, err := store.Stage(sctx, tx, e)
	if err != nil {
		return "", fmt.Errorf("setup probe: staging one event through outbox.stage: %w", err)
	}
	rows, err := tx.Query(sctx, `SELECT id::text, COALESCE(message_type::text, '') FROM `+bc.rows)
	if err != nil {
		return "", fmt.Errorf("setup probe: reading the rows view: %w", err)
	}
	shown := map[string]string{}
	for rows.Next() {
		var id, typ string
		if err := rows.Scan(&id, &typ); err != nil {
			rows.Close()
			return "", fmt.Errorf("setup probe: reading the rows view: %w", err)
		}
		// A row whose id no stage returned shows its own id.
		shown[strings.TrimPrefix(id, workload.UnmappedPrefix)] = typ
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return "", fmt.Errorf("setup probe: reading the rows view: %w", err)
	}
	typ, ok := shown[e.ID.String()]
	switch {
	case len(shown) == 0:
		return "", fmt.Errorf("%w: outbox.rows: the rows view shows no row after the stage of event %s in the same transaction; it must show the outbox's rows", ErrMapping, e.ID)
	case !ok && dbID != "":
		return "", fmt.Errorf("%w: outbox.rows: the rows view's id is not the id the stage returned (RETURNING gave %q for event %s); in the staging transaction it shows %s (the stage must return the column the rows view shows as id)",
			ErrMapping, dbID, e.ID, describeRows(shown))
	case !ok:
		return "", fmt.Errorf("%w: outbox.rows: the rows view's id is not the id the stage was given (:id %s); in the staging transaction it shows %s (a key the database assigns is shown as id when a stage statement ends in RETURNING it)",
			ErrMapping, e.ID, describeRows(shown))
	case typ != e.Type:
		return "", fmt.Errorf("%w: outbox.rows: the rows view shows event %s with message_type %q, not the :type %q it was staged with", ErrMapping, e.ID, typ, e.Type)
	}
	if err := tx.Commit(sctx); err != nil {
		return "", fmt.Errorf("setup probe: committing the probe event: %w", err)
	}
	return dbID, nil
}

// probeQueue binds a queue of its own to exchange, for every routing key,
// and consumes it with automatic acks. On a broker cluster, whose URL
// lists every node (comma-separated), it connects to the first node:
// the exchange and its bindings are the cluster's.
func probeQueue(url, exchange string) (<-chan amqp.Delivery, func(), error) {
	url, _, _ = strings.Cut(url, ",")
	conn, err := amqp.DialConfig(url, amqp.Config{Dial: amqp.DefaultDial(5 * time.Second)})
	if err != nil {
		return nil, nil, fmt.Errorf("connecting to RabbitMQ %s: %w", relay.RedactURL(url), err)
	}
	fail := func(what string, err error) (<-chan amqp.Delivery, func(), error) {
		_ = conn.Close()
		return nil, nil, fmt.Errorf("%s: %w", what, err)
	}
	ch, err := conn.Channel()
	if err != nil {
		return fail("opening a channel", err)
	}
	q, err := ch.QueueDeclare("", false, true, true, false, nil)
	if err != nil {
		return fail("declaring the probe's queue", err)
	}
	if err := ch.QueueBind(q.Name, "#", exchange, false, nil); err != nil {
		return fail("binding the probe's queue to "+exchange, err)
	}
	deliveries, err := ch.Consume(q.Name, "", true, true, false, false, nil)
	if err != nil {
		return fail("consuming the probe's queue", err)
	}
	return deliveries, func() { _ = conn.Close() }, nil
}

// describeRows names at most three of the rows a rows view showed.
func describeRows(shown map[string]string) string {
	ids := slices.Sorted(maps.Keys(shown))
	var parts []string
	for _, id := range ids[:min(3, len(ids))] {
		parts = append(parts, fmt.Sprintf("id %q (message_type %q)", id, shown[id]))
	}
	out := fmt.Sprintf("%d row(s): %s", len(ids), strings.Join(parts, ", "))
	if len(ids) > 3 {
		out += ", ..."
	}
	return out
}

// describeDelivery says where a delivery could carry an event id: its
// message_id, its headers and the top-level fields of its JSON body.
func describeDelivery(d amqp.Delivery) string {
	headers := make([]string, 0, len(d.Headers))
	for k, v := range d.Headers {
		headers = append(headers, fmt.Sprintf("%s=%v", k, v))
	}
	slices.Sort(headers)
	var body map[string]any
	var fields []string
	if json.Unmarshal(d.Body, &body) == nil {
		fields = slices.Sorted(maps.Keys(body))
	}
	return fmt.Sprintf("the delivery carries message_id %q, headers [%s], body fields [%s]", d.MessageId, strings.Join(headers, " "), strings.Join(fields, " "))
}

// identitiesOf lists the delivery identities under which d carries id.
func identitiesOf(d amqp.Delivery, id string) []string {
	var out []string
	if d.MessageId == id {
		out = append(out, consumer.Identity{}.String())
	}
	for _, k := range slices.Sorted(maps.Keys(d.Headers)) {
		if i := (consumer.Identity{Header: k}); i.ID(d) == id {
			out = append(out, i.String())
		}
	}
	var body map[string]any
	if json.Unmarshal(d.Body, &body) == nil {
		for _, k := range slices.Sorted(maps.Keys(body)) {
			if i := (consumer.Identity{BodyField: k}); i.ID(d) == id {
				out = append(out, i.String())
			}
		}
	}
	return out
}
