package chaos_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxlab/outboxlab/chaos"
	"github.com/outboxlab/outboxlab/contract"
	"github.com/outboxlab/outboxlab/outbox"
	"github.com/outboxlab/outboxlab/relay"
	"github.com/outboxlab/outboxlab/testenv"
)

// buildRelay compiles ./cmd/relay into a temporary directory.
func buildRelay(t *testing.T) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the relay kill test builds ./cmd/relay and needs the go command: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "relay")
	cmd := exec.Command(goBin, "build", "-o", bin, "github.com/outboxlab/outboxlab/cmd/relay")
	cmd.Dir = ".."
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building ./cmd/relay: %v\n%s", err, out)
	}
	return bin
}

// killSetup is an outbox table and a bound queue of the test's own, with
// one committed event staged by stage.
type killSetup struct {
	table    outbox.Table
	exchange string
	queue    string
	pool     *pgxpool.Pool
}

func newKillSetup(t *testing.T, ctx context.Context, env *fixture) *killSetup {
	t.Helper()
	stamp := fmt.Sprintf("%d", time.Now().UnixNano())
	schema := "chaos_kill_" + stamp
	k := &killSetup{table: outbox.MustParseTable(schema + ".outbox"), exchange: "chaos.kill." + stamp}
	k.queue = k.exchange + ".q"
	admin, err := pgx.Connect(ctx, env.dbDirectURL)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.WithoutCancel(ctx))
	if _, err := admin.Exec(ctx, `CREATE SCHEMA `+pgx.Identifier{schema}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), env.dbDirectURL)
		if err != nil {
			return
		}
		defer c.Close(context.Background())
		_ = outbox.Drop(context.Background(), c, k.table, true)
	})
	k.pool, err = pgxpool.New(ctx, env.dbDirectURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.pool.Close)
	if err := outbox.Migrate(ctx, k.pool, k.table); err != nil {
		t.Fatal(err)
	}
	if err := relay.DeclareTopology(ctx, env.amqpDirectURL, k.exchange, k.queue, "#"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = relay.Topology{Exchange: k.exchange, Queue: k.queue}.Remove(context.Background(), env.amqpDirectURL)
	})
	return k
}

// stage commits one event and returns it.
func (k *killSetup) stage(t *testing.T, ctx context.Context) outbox.Event {
	t.Helper()
	ev, err := outbox.NewEvent("chaos.killed", map[string]string{"at": relay.FailAfterConfirmBeforeMark})
	if err != nil {
		t.Fatal(err)
	}
	tx, err := k.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if err := outbox.Stage(ctx, tx, k.table, ev, outbox.StageOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	return ev
}

// relaySettings are the relay's variables besides its URLs and id: a
// short poll and a short lease, so that another relay takes over soon.
func (k *killSetup) relaySettings() map[string]string {
	return map[string]string{
		contract.EnvTable:          k.table.String(),
		contract.EnvExchange:       k.exchange,
		contract.EnvPollInterval:   "100ms",
		contract.EnvLease:          "3s",
		contract.EnvPublishTimeout: "1s",
		contract.EnvNotify:         "false",
		contract.EnvClockOffset:    chaos.FormatClockOffset(0),
	}
}

// checkKilledBetweenConfirmAndMark checks the state a relay killed at
// after-confirm-before-mark leaves: the event confirmed and queued, its
// row pending under the dead relay's lease with no attempt consumed.
func (k *killSetup) checkKilledBetweenConfirmAndMark(t *testing.T, ctx context.Context, env *fixture, ev outbox.Event, relayID string) {
	t.Helper()
	ids := getAll(t, ctx, env.amqpDirectURL, k.queue)
	if len(ids) != 1 || ids[0] != ev.ID.String() {
		t.Fatalf("queue holds %v, want exactly the event %s", ids, ev.ID)
	}
	var (
		processed *time.Time
		lockedBy  *string
		attempts  int
	)
	if err := k.pool.QueryRow(ctx, `SELECT processed_at, locked_by, attempts FROM `+k.table.Ident()+` WHERE id = $1`, ev.ID).
		Scan(&processed, &lockedBy, &attempts); err != nil {
		t.Fatal(err)
	}
	if processed != nil || lockedBy == nil || *lockedBy != relayID || attempts != 0 {
		t.Fatalf("row after the kill: processed_at=%v locked_by=%v attempts=%d; want unmarked, leased to %s, 0 attempts",
			processed, lockedBy, attempts, relayID)
	}
}

// TestFailpointKillsRelayBetweenConfirmAndMark runs the relay binary with
// OUTBOX_FAILPOINTS=after-confirm-before-mark=kill: it must die by SIGKILL
// with the event confirmed in the queue and its row still unmarked, under
// the dead relay's lease. A second relay without failpoints then publishes
// the row again once the lease expires and marks it: the duplicate that
// at-least-once delivery allows, and no loss.
func TestFailpointKillsRelayBetweenConfirmAndMark(t *testing.T) {
	env := newFixture(t)
	bin := buildRelay(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	k := newKillSetup(t, ctx, env)
	ev := k.stage(t, ctx)
	table, pool := k.table, k.pool

	relayEnv := func(id, failpoints string) []string {
		e := append(os.Environ(),
			contract.EnvDatabaseURL+"="+env.dbURL,
			contract.EnvAMQPURL+"="+env.amqpURL,
			contract.EnvRelayID+"="+id,
		)
		for k, v := range k.relaySettings() {
			e = append(e, k+"="+v)
		}
		if failpoints != "" {
			e = append(e, contract.EnvFailpoints+"="+failpoints)
		}
		return e
	}

	// The doomed relay.
	var logs bytes.Buffer
	doomed := exec.CommandContext(ctx, bin)
	doomed.Env = relayEnv("relay-doomed", relay.FailAfterConfirmBeforeMark+"=kill")
	doomed.Stdout, doomed.Stderr = &logs, &logs
	err := doomed.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		t.Fatalf("relay with the kill failpoint ended with %v; logs:\n%s", err, logs.String())
	}
	ws, ok := exit.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("relay ended with %v, want death by SIGKILL; logs:\n%s", exit, logs.String())
	}
	t.Logf("relay died by %v", ws.Signal())

	if strings.Contains(logs.String(), "relay stopped") {
		t.Fatalf("the killed relay shut down cleanly; logs:\n%s", logs.String())
	}
	k.checkKilledBetweenConfirmAndMark(t, ctx, env, ev, "relay-doomed")

	// A healthy relay takes over once the lease has expired.
	var logs2 bytes.Buffer
	healthy := exec.Command(bin)
	healthy.Env = relayEnv("relay-healthy", "")
	healthy.Stdout, healthy.Stderr = &logs2, &logs2
	if err := healthy.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- healthy.Wait() }()
	// terminate stops the healthy relay with SIGTERM, as the contract
	// says, and returns how it exited.
	terminate := func() error {
		_ = healthy.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			return err
		case <-time.After(30 * time.Second):
			_ = healthy.Process.Kill()
			<-exited
			return errors.New("relay still running 30 s after SIGTERM")
		}
	}
	wctx, wcancel := context.WithTimeout(ctx, time.Minute)
	defer wcancel()
	if err := chaos.WaitFor(wctx, 100*time.Millisecond, func(ctx context.Context) (bool, error) {
		var done bool
		err := pool.QueryRow(ctx, `SELECT processed_at IS NOT NULL AND locked_by = 'relay-healthy' FROM `+table.Ident()+` WHERE id = $1`, ev.ID).Scan(&done)
		return done, err
	}); err != nil {
		_ = terminate()
		t.Fatalf("the healthy relay did not mark the row: %v; logs:\n%s", err, logs2.String())
	}
	if err := terminate(); err != nil {
		t.Fatalf("healthy relay exit on SIGTERM: %v; logs:\n%s", err, logs2.String())
	}
	ids := getAll(t, ctx, env.amqpDirectURL, k.queue)
	if len(ids) != 1 || ids[0] != ev.ID.String() {
		t.Fatalf("queue holds %v after the first get, want the event %s once more (the duplicate)", ids, ev.ID)
	}
}

// getAll takes every message from queue (acking them) and returns their
// message ids.
func getAll(t *testing.T, ctx context.Context, url, queue string) []string {
	t.Helper()
	var ids []string
	err := relay.WithChannel(ctx, url, func(ch *amqp.Channel) error {
		for {
			d, ok, err := ch.Get(queue, false)
			if err != nil {
				return err
			}
			if !ok {
				return nil
			}
			ids = append(ids, d.MessageId)
			if err := d.Ack(false); err != nil {
				return err
			}
		}
	})
	if err != nil {
		t.Fatalf("reading queue %s: %v", queue, err)
	}
	return ids
}

// TestFailpointKillsRelayContainer does the same with the relay image as a
// container (the relay is the container's PID 1): the container must exit
// with status 137 after the publish was confirmed and before the mark.
// Restarting the same container without failpoints is out of reach (its
// environment is fixed), so a second replica takes over.
func TestFailpointKillsRelayContainer(t *testing.T) {
	env := newFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	k := newKillSetup(t, ctx, env)
	settings := k.relaySettings()
	settings[contract.EnvFailpoints] = relay.FailAfterConfirmBeforeMark + "=kill"
	doomed, err := env.env.StartRelay(ctx, testenv.RelaySpec{Name: "relay-doomed", Env: settings})
	if err != nil {
		t.Fatal(err)
	}
	// Staged only now, so that the relay cannot die before StartRelay saw
	// it running.
	ev := k.stage(t, ctx)
	wctx, wcancel := context.WithTimeout(ctx, time.Minute)
	defer wcancel()
	code, err := doomed.WaitExit(wctx)
	if err != nil {
		logs, _ := doomed.Logs(ctx, 50)
		t.Fatalf("relay container did not exit: %v; logs:\n%s", err, logs)
	}
	logs, _ := doomed.Logs(ctx, 50)
	if code != 137 {
		t.Fatalf("relay container exited with %d, want 137 (killed); logs:\n%s", code, logs)
	}
	if strings.Contains(logs, "relay stopped") {
		t.Fatalf("the killed relay shut down cleanly; logs:\n%s", logs)
	}
	k.checkKilledBetweenConfirmAndMark(t, ctx, env, ev, "relay-doomed")

	healthy, err := env.env.StartRelay(ctx, testenv.RelaySpec{Name: "relay-healthy", Env: k.relaySettings()})
	if err != nil {
		t.Fatal(err)
	}
	if err := chaos.WaitFor(wctx, 100*time.Millisecond, func(ctx context.Context) (bool, error) {
		var done bool
		err := k.pool.QueryRow(ctx, `SELECT processed_at IS NOT NULL AND locked_by = 'relay-healthy' FROM `+k.table.Ident()+` WHERE id = $1`, ev.ID).Scan(&done)
		return done, err
	}); err != nil {
		logs, _ := healthy.Logs(ctx, 50)
		t.Fatalf("the second replica did not mark the row: %v; logs:\n%s", err, logs)
	}
	if ids := getAll(t, ctx, env.amqpDirectURL, k.queue); len(ids) != 1 || ids[0] != ev.ID.String() {
		t.Fatalf("queue holds %v, want the event %s once more (the duplicate)", ids, ev.ID)
	}
	if err := healthy.Stop(ctx, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	if st, err := healthy.State(ctx); err != nil || st.ExitCode != 0 {
		t.Fatalf("second replica after SIGTERM: %+v, %v", st, err)
	}
}
