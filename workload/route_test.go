package workload

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/outboxlab/outboxlab/outbox"
	"github.com/outboxlab/outboxlab/testenv/pgserver"
)

// TestPGRouteStagesEachEventInItsContext: a PG with a Route stages the
// events of one transaction in the outboxes the route names, and the
// business rows beside them, in one commit.
func TestPGRouteStagesEachEventInItsContext(t *testing.T) {
	srv := pgserver.StartT(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db := srv.SchemaPoolT(t, "rt")
	if _, err := db.Exec(ctx, `CREATE TABLE rt.business (id uuid PRIMARY KEY, event_id uuid NOT NULL, note text)`); err != nil {
		t.Fatal(err)
	}
	orders, payments := outbox.MustParseTable("rt.orders_outbox"), outbox.MustParseTable("rt.payments_outbox")
	for _, tb := range []outbox.Table{orders, payments} {
		if err := outbox.Migrate(ctx, db, tb); err != nil {
			t.Fatal(err)
		}
	}
	a, b := uuid.New(), uuid.New()
	in := map[uuid.UUID]outbox.Table{a: orders, b: payments}
	st := PG{DB: db, Table: orders, Business: "rt.business", Route: func(e outbox.Event) PG {
		return PG{DB: db, Table: in[e.ID], Business: "rt.business"}
	}}
	p := &Producer{Name: "producer-1", Store: st, Mode: Outbox}
	txn := Txn{Events: []outbox.Event{
		{ID: a, Type: TypeOrderPlaced, Payload: []byte(`{"order_id":"o1","amount":1,"version":1}`)},
		{ID: b, Type: TypeOrderPaid, Payload: []byte(`{"order_id":"o1","amount":1,"version":2}`)},
	}}
	if err := p.Do(ctx, txn); err != nil {
		t.Fatal(err)
	}
	for id, tb := range in {
		var n int
		if err := db.QueryRow(ctx, `SELECT count(*) FROM `+tb.Ident()+` WHERE id = $1`, id).Scan(&n); err != nil || n != 1 {
			t.Errorf("%s in %s: %d rows, %v; want 1", id, tb, n, err)
		}
	}
	var n int
	if err := db.QueryRow(ctx, `SELECT (SELECT count(*) FROM rt.orders_outbox) + (SELECT count(*) FROM rt.payments_outbox)`).Scan(&n); err != nil || n != 2 {
		t.Errorf("%d rows staged in all, %v; want 2", n, err)
	}
}
