package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/outboxlab/outboxlab/contract"
)

// hangingDB is a PostgreSQL that hangs: it accepts connections and, when
// answerCheck is set, completes the startup handshake and answers the
// relay's startup check of its table (a simple-protocol SELECT ... FROM
// ... LIMIT 0), so that the relay gets as far as claiming. Every other
// statement (the listener's LISTEN, the relay's claims) is read and never
// answered, as by a database whose disk stalled. Without answerCheck it
// answers nothing at all.
type hangingDB struct {
	URL string

	ln          net.Listener
	answerCheck bool
	// muteCancel makes the database a silent peer to cancel requests: it
	// takes their connections and never answers nor closes them, as a
	// stalled server's kernel does. Without it a cancel request's
	// connection is closed at once.
	muteCancel bool
	wg         sync.WaitGroup

	mu     sync.Mutex
	conns  []net.Conn
	claims []time.Time // when each extended-protocol statement (a claim's batch) arrived
	// inHang closes when a statement is first left unanswered, claimed
	// when the first claim arrives.
	inHang, claimed       chan struct{}
	hangOnce, claimedOnce sync.Once
}

func newHangingDB(t *testing.T, answerCheck bool) *hangingDB {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	db := &hangingDB{
		URL:         "postgres://relay:s3cret@" + ln.Addr().String() + "/app?sslmode=disable",
		ln:          ln,
		answerCheck: answerCheck,
		inHang:      make(chan struct{}),
		claimed:     make(chan struct{}),
	}
	db.wg.Add(1)
	go db.accept()
	t.Cleanup(func() {
		_ = ln.Close()
		db.mu.Lock()
		for _, c := range db.conns {
			_ = c.Close()
		}
		db.mu.Unlock()
		db.wg.Wait()
	})
	return db
}

func (db *hangingDB) accept() {
	defer db.wg.Done()
	for {
		c, err := db.ln.Accept()
		if err != nil {
			return
		}
		db.mu.Lock()
		db.conns = append(db.conns, c)
		db.mu.Unlock()
		db.wg.Add(1)
		go func() {
			defer db.wg.Done()
			defer c.Close()
			db.serve(c)
		}()
	}
}

// hung notes that a statement was left unanswered.
func (db *hangingDB) hung() { db.hangOnce.Do(func() { close(db.inHang) }) }

// serve speaks to one client until it hangs up.
func (db *hangingDB) serve(c net.Conn) {
	if !db.answerCheck {
		db.hung()
		_, _ = c.Read(make([]byte, 1<<16)) // until the client hangs up
		return
	}
	be := pgproto3.NewBackend(c, c)
	msg, err := be.ReceiveStartupMessage()
	if err != nil {
		return
	}
	if _, ok := msg.(*pgproto3.StartupMessage); !ok {
		// A cancel request: nothing to cancel. A mute database holds its
		// connection until the client hangs up.
		if db.muteCancel {
			_, _ = io.Copy(io.Discard, c)
		}
		return
	}
	be.Send(&pgproto3.AuthenticationOk{})
	be.Send(&pgproto3.ParameterStatus{Name: "server_version", Value: "17.0"})
	be.Send(&pgproto3.ParameterStatus{Name: "client_encoding", Value: "UTF8"})
	be.Send(&pgproto3.ParameterStatus{Name: "standard_conforming_strings", Value: "on"})
	be.Send(&pgproto3.BackendKeyData{ProcessID: 1, SecretKey: []byte{1, 2, 3, 4}})
	be.Send(&pgproto3.ReadyForQuery{TxStatus: 'I'})
	if be.Flush() != nil {
		return
	}
	for {
		msg, err := be.Receive()
		if err != nil {
			return
		}
		switch m := msg.(type) {
		case *pgproto3.Query:
			if !strings.HasPrefix(m.String, "SELECT ") {
				db.hung()
				continue
			}
			be.Send(&pgproto3.RowDescription{Fields: []pgproto3.FieldDescription{{Name: []byte("?column?"), DataTypeOID: 23, DataTypeSize: 4, TypeModifier: -1}}})
			be.Send(&pgproto3.CommandComplete{CommandTag: []byte("SELECT 0")})
			be.Send(&pgproto3.ReadyForQuery{TxStatus: 'I'})
			if be.Flush() != nil {
				return
			}
		case *pgproto3.Parse:
			db.mu.Lock()
			db.claims = append(db.claims, time.Now())
			db.mu.Unlock()
			db.hung()
			db.claimedOnce.Do(func() { close(db.claimed) })
		case *pgproto3.Terminate:
			return
		}
	}
}

// claimsSince counts the claims that arrived after t.
func (db *hangingDB) claimsSince(t time.Time) int {
	db.mu.Lock()
	defer db.mu.Unlock()
	n := 0
	for _, at := range db.claims {
		if at.After(t) {
			n++
		}
	}
	return n
}

// TestSIGTERMWithAHangingDatabase stops the relay with SIGTERM while its
// database hangs, in the middle of a claim (the database answered the
// startup check, then stalled) or already at the startup check: the
// relay must exit 0 within the publish timeout plus one second, without
// sending another claim.
func TestSIGTERMWithAHangingDatabase(t *testing.T) {
	const publishTimeout = 2 * time.Second
	for _, tc := range []struct {
		name        string
		answerCheck bool
		notify      string
	}{
		{"hangs in a claim", true, "true"},
		{"hangs in a claim, no listener", true, "false"},
		{"hangs at the startup check", false, "true"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := newHangingDB(t, tc.answerCheck)
			env := goodEnv()
			env[contract.EnvDatabaseURL] = db.URL
			env[contract.EnvAMQPURL] = "amqp://relay:s3cret@" + freePort(t) + "/"
			env[contract.EnvPublishTimeout] = publishTimeout.String()
			env[contract.EnvPollInterval] = "50ms"
			env[contract.EnvNotify] = tc.notify
			p := start(t, env)
			ready := db.inHang
			if tc.answerCheck {
				ready = db.claimed
			}
			select {
			case <-ready:
			case <-p.done:
				t.Fatalf("the relay exited before the database hung:\n%s", p.output())
			case <-time.After(30 * time.Second):
				t.Fatalf("the relay sent the database nothing within 30s:\n%s", p.output())
			}
			time.Sleep(100 * time.Millisecond) // the call is well under way
			sent := time.Now()
			if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			code := p.wait(t, 60*time.Second)
			took := time.Since(sent)
			if code != exitOK {
				t.Errorf("exit code %d after SIGTERM, want %d", code, exitOK)
			}
			if took > publishTimeout+time.Second {
				t.Errorf("the relay exited %s after SIGTERM; the publish timeout is %s", took.Round(time.Millisecond), publishTimeout)
			}
			if n := db.claimsSince(sent); n > 0 {
				t.Errorf("the relay sent %d claims after SIGTERM", n)
			}
			t.Logf("exited %s after SIGTERM", took.Round(time.Millisecond))
		})
	}
}

// signalHelperEnv makes the test binary, run again as a child, be the
// helper of TestASecondSignalEndsTheProcessAtOnce.
const signalHelperEnv = "OUTBOXLAB_RELAY_SIGNAL_HELPER"

// TestSignalHelper is a process whose shutdown hangs: it takes main's
// signal context, says "ready", and once the context ends says "stopping"
// and hangs for a minute. It runs only as the child of
// TestASecondSignalEndsTheProcessAtOnce.
func TestSignalHelper(t *testing.T) {
	if os.Getenv(signalHelperEnv) != "1" {
		t.Skip("the child process of TestASecondSignalEndsTheProcessAtOnce")
	}
	ctx := signalContext()
	fmt.Println("ready")
	<-ctx.Done()
	fmt.Println("stopping")
	time.Sleep(time.Minute)
	os.Exit(0)
}

// TestASecondSignalEndsTheProcessAtOnce sends a process that uses main's
// signal handling a first signal, which starts a shutdown that hangs, and
// a second one, which must end the process at once.
func TestASecondSignalEndsTheProcessAtOnce(t *testing.T) {
	for _, sigs := range [][2]syscall.Signal{
		{syscall.SIGTERM, syscall.SIGTERM},
		{syscall.SIGINT, syscall.SIGINT},
		{syscall.SIGTERM, syscall.SIGINT},
	} {
		t.Run(fmt.Sprintf("%s then %s", sigs[0], sigs[1]), func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestSignalHelper$", "-test.count=1")
			cmd.Env = append(os.Environ(), signalHelperEnv+"=1")
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			lines := make(chan string, 64)
			go func() {
				sc := bufio.NewScanner(out)
				for sc.Scan() {
					select {
					case lines <- sc.Text():
					default: // nobody reads any more
					}
				}
				close(lines)
				done <- cmd.Wait()
			}()
			t.Cleanup(func() {
				_ = cmd.Process.Kill()
				<-done
			})
			expect := func(want string) {
				t.Helper()
				for {
					select {
					case l, ok := <-lines:
						if !ok {
							t.Fatalf("the helper ended before saying %q", want)
						}
						if l == want {
							return
						}
					case <-time.After(30 * time.Second):
						t.Fatalf("the helper did not say %q within 30s", want)
					}
				}
			}
			expect("ready")
			if err := cmd.Process.Signal(sigs[0]); err != nil {
				t.Fatal(err)
			}
			expect("stopping")
			sent := time.Now()
			if err := cmd.Process.Signal(sigs[1]); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-done:
				done <- err
				var ee *exec.ExitError
				if !errors.As(err, &ee) {
					t.Fatalf("the helper ended with %v, want killed by %s", err, sigs[1])
				}
				ws, ok := ee.Sys().(syscall.WaitStatus)
				if !ok || !ws.Signaled() || ws.Signal() != sigs[1] {
					t.Errorf("the helper ended with %v, want killed by %s", err, sigs[1])
				}
				if took := time.Since(sent); took > time.Second {
					t.Errorf("the helper ended %s after the second signal", took)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("the helper still runs 10s after the second signal")
			}
		})
	}
}

// TestShutdownIsBoundedWhileTheDatabaseHangs stops the relay, ten times,
// with SIGTERM or SIGINT while its database hangs in the middle of a
// claim and is a silent peer to the cancel request that the interrupted
// claim sends: the relay must exit 0 within the publish timeout plus two
// seconds, whatever the database does. (Closing the pool waited up to 15 s
// per connection for the cancel request's answer.)
func TestShutdownIsBoundedWhileTheDatabaseHangs(t *testing.T) {
	const (
		publishTimeout = time.Second
		bound          = publishTimeout + 2*time.Second
		trials         = 10
	)
	var took []string
	for i := range trials {
		sig, name := syscall.SIGTERM, "SIGTERM"
		if i%2 == 1 {
			sig, name = syscall.SIGINT, "SIGINT"
		}
		db := newHangingDB(t, true)
		db.muteCancel = true
		env := goodEnv()
		env[contract.EnvDatabaseURL] = db.URL
		env[contract.EnvAMQPURL] = "amqp://relay:s3cret@" + freePort(t) + "/"
		env[contract.EnvPublishTimeout] = publishTimeout.String()
		env[contract.EnvPollInterval] = "50ms"
		p := start(t, env)
		select {
		case <-db.claimed:
		case <-p.done:
			t.Fatalf("trial %d: the relay exited before the database hung:\n%s", i+1, p.output())
		case <-time.After(30 * time.Second):
			t.Fatalf("trial %d: the relay sent no claim within 30s:\n%s", i+1, p.output())
		}
		sent := time.Now()
		if err := p.cmd.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
		code := p.wait(t, bound+30*time.Second)
		d := time.Since(sent)
		took = append(took, fmt.Sprintf("%s %s", name, d.Round(10*time.Millisecond)))
		if code != exitOK {
			t.Errorf("trial %d: exit code %d after %s, want %d", i+1, code, name, exitOK)
		}
		if d > bound {
			t.Fatalf("trial %d: the relay exited %s after %s; the bound is the publish timeout plus 2s, %s (exits so far: %s)",
				i+1, d.Round(time.Millisecond), name, bound, strings.Join(took, ", "))
		}
	}
	t.Logf("exits after the signal: %s", strings.Join(took, ", "))
}
