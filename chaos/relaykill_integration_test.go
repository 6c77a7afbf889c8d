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
	"github.com/outboxlab/outboxlab/outbox"
	"github.com/outboxlab/outboxlab/relay"
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

// withSearchPath points url's connections at schema.
func withSearchPath(url, schema string) string {
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	return url + sep + "search_path=" + schema
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

	stamp := fmt.Sprintf("%d", time.Now().UnixNano())
	schema := "chaos_kill_" + stamp
	table := outbox.MustParseTable(schema + ".outbox")
	exchange := "chaos.kill." + stamp
	queue := exchange + ".q"

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
		_, _ = c.Exec(context.Background(), `DROP SCHEMA IF EXISTS `+pgx.Identifier{schema}.Sanitize()+` CASCADE`)
		_, _ = c.Exec(context.Background(), `DELETE FROM public.outbox_migrations WHERE table_name = $1`, table.String())
	})
	pool, err := pgxpool.New(ctx, env.dbDirectURL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if err := outbox.Migrate(ctx, pool, table); err != nil {
		t.Fatal(err)
	}
	if err := relay.DeclareTopology(ctx, env.amqpDirectURL, exchange, queue, "#"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = relay.WithChannel(context.Background(), env.amqpDirectURL, func(ch *amqp.Channel) error {
			for _, q := range []string{queue, queue + ".dead"} {
				_, _ = ch.QueueDelete(q, false, false, false)
			}
			_ = ch.ExchangeDelete(queue+".dlx", false, false)
			return ch.ExchangeDelete(exchange, false, false)
		})
	})

	ev, err := outbox.NewEvent("chaos.killed", map[string]string{"at": "after-confirm-before-mark"})
	if err != nil {
		t.Fatal(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := outbox.Stage(ctx, tx, table, ev, outbox.StageOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}

	relayEnv := func(id, failpoints string) []string {
		e := append(os.Environ(),
			"OUTBOX_DATABASE_URL="+env.dbURL,
			"OUTBOX_AMQP_URL="+env.amqpURL,
			"OUTBOX_TABLE="+table.String(),
			"OUTBOX_EXCHANGE="+exchange,
			"OUTBOX_RELAY_ID="+id,
			"OUTBOX_POLL_INTERVAL=100ms",
			"OUTBOX_LEASE=3s",
			"OUTBOX_PUBLISH_TIMEOUT=1s",
			"OUTBOX_NOTIFY=false",
			chaos.ClockOffsetEnvVar(0),
		)
		if failpoints != "" {
			e = append(e, chaos.FailpointsEnv+"="+failpoints)
		}
		return e
	}

	// The doomed relay.
	var logs bytes.Buffer
	doomed := exec.CommandContext(ctx, bin)
	doomed.Env = relayEnv("relay-doomed", relay.FailAfterConfirmBeforeMark+"=kill")
	doomed.Stdout, doomed.Stderr = &logs, &logs
	err = doomed.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		t.Fatalf("relay with the kill failpoint ended with %v; logs:\n%s", err, logs.String())
	}
	ws, ok := exit.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("relay ended with %v, want death by SIGKILL; logs:\n%s", exit, logs.String())
	}
	t.Logf("relay died by %v", ws.Signal())

	// The publish was confirmed before the kill: the message is queued.
	ids := getAll(t, ctx, env.amqpDirectURL, queue)
	if len(ids) != 1 || ids[0] != ev.ID.String() {
		t.Fatalf("queue holds %v, want exactly the event %s", ids, ev.ID)
	}
	// The mark never ran: the row is pending, leased to the dead relay,
	// with no attempt consumed.
	var (
		processed *time.Time
		lockedBy  *string
		attempts  int
	)
	if err := pool.QueryRow(ctx, `SELECT processed_at, locked_by, attempts FROM `+table.Ident()+` WHERE id = $1`, ev.ID).
		Scan(&processed, &lockedBy, &attempts); err != nil {
		t.Fatal(err)
	}
	if processed != nil || lockedBy == nil || *lockedBy != "relay-doomed" || attempts != 0 {
		t.Fatalf("row after the kill: processed_at=%v locked_by=%v attempts=%d; want unmarked, leased to relay-doomed, 0 attempts",
			processed, lockedBy, attempts)
	}

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
	ids = getAll(t, ctx, env.amqpDirectURL, queue)
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
