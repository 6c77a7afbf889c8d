package chaos_test

import (
	"context"
	"testing"
	"time"

	"github.com/outboxlab/outboxlab/chaos"
	"github.com/outboxlab/outboxlab/testenv"
)

// fixture is one test's own environment (the tests kill and pause its
// containers, so it is never shared): PostgreSQL and RabbitMQ, reached
// through the toxiproxy links app-db and relay-broker.
type fixture struct {
	env                    *testenv.Env
	appDB, relayBroker     *chaos.Link
	dbURL, dbDirectURL     string // through app-db, and straight to the container
	amqpURL, amqpDirectURL string // through relay-broker, and straight
	postgres, rabbitmq     chaos.Container
}

var _ chaos.Container = (*testenv.Container)(nil)

// newFixture starts the test's environment, or skips under -short or
// without Docker; testenv removes it when the test ends.
func newFixture(t *testing.T) *fixture {
	t.Helper()
	e := testenv.StartT(t, testenv.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	link := func(name string) *chaos.Link {
		l, err := chaos.LinkByName(ctx, e.ToxiproxyClient(), name, "")
		if err != nil {
			t.Fatal(err)
		}
		// The link's class is the service at its far end, as the
		// environment declares it.
		for _, d := range e.Links() {
			if d.Name == name {
				l.WithClass(d.Service.FaultClass())
			}
		}
		return l
	}
	return &fixture{
		env:           e,
		appDB:         link(testenv.LinkAppDB),
		relayBroker:   link(testenv.LinkRelayBroker),
		dbURL:         e.DatabaseURL(testenv.LinkAppDB),
		dbDirectURL:   e.DirectDatabaseURL(),
		amqpURL:       e.AMQPURL(testenv.LinkRelayBroker),
		amqpDirectURL: e.DirectAMQPURL(),
		postgres:      e.Postgres(),
		rabbitmq:      e.RabbitMQ(),
	}
}
