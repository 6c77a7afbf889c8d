package testenv_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxlab/outboxlab/contract"
	"github.com/outboxlab/outboxlab/testenv"
)

// A test starts an environment with StartT; it is removed when the test
// ends. Clients in the test connect through a link's proxy; faults act on
// the link (toxiproxy) or on a container.
func ExampleStartT() {
	var t *testing.T // the test's *testing.T
	env := testenv.StartT(t, testenv.Options{})
	ctx := context.Background()

	conn, err := pgx.Connect(ctx, env.DatabaseURL(testenv.LinkAppDB))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)

	// Cut relay->broker, then heal it.
	p, err := env.Proxy(testenv.LinkRelayBroker)
	if err != nil {
		t.Fatal(err)
	}
	_ = p.Disable()
	_ = p.Enable()

	// Crash the broker and bring it back.
	_ = env.RabbitMQ().Kill(ctx)
	_ = env.RabbitMQ().Start(ctx)
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := env.RabbitMQ().WaitReady(wctx); err != nil {
		t.Fatal(err)
	}
}

// A relay replica runs as its own container on the environment's network,
// reaching PostgreSQL and RabbitMQ through the relay links' proxies.
func ExampleEnv_StartRelay() {
	var env *testenv.Env // from testenv.StartT or testenv.Start
	ctx := context.Background()
	relay, err := env.StartRelay(ctx, testenv.RelaySpec{
		Name: "relay-a",
		Env:  map[string]string{contract.EnvTable: "orders_outbox", contract.EnvExchange: "orders"},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	_ = relay.Pause(ctx) // past its lease
	_ = relay.Unpause(ctx)
	_ = relay.Kill(ctx)
}

// Any container of the environment, a service or one the test started, is
// found by its name and can be killed, stopped, paused or restarted.
func ExampleEnv_Container() {
	var env *testenv.Env // from testenv.StartT or testenv.Start
	ctx := context.Background()
	pg, ok := env.Container("postgres")
	if !ok {
		return
	}
	_ = pg.Pause(ctx) // clients time out until it is unpaused
	_ = pg.Unpause(ctx)
	_ = pg.Restart(ctx) // SIGTERM, then SIGKILL after its stop timeout
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	_ = pg.WaitReady(wctx)
}

// A command-line program starts an environment with Start and closes it.
func ExampleStart() {
	ctx := context.Background()
	env, err := testenv.Start(ctx, testenv.Options{})
	if err != nil {
		fmt.Println(err) // names `make images` when an image is missing
		return
	}
	defer env.Close(ctx)
	fmt.Println("ready in", env.ReadyAfter())
}
