// Package pgserver starts a throwaway PostgreSQL server for the tests and
// tiers that need a real database but no Docker: the SQL-faithful
// simulation above all. Start runs Debian's server binaries when they are
// installed (initdb into a temporary directory, the server on a Unix socket
// in that directory, durability and autovacuum off), and falls back to the
// outboxlab/postgres:15 container through testenv when they are not.
// Close stops the server and removes its directory; StartT does that when
// the test ends, also when it fails.
package pgserver

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxlab/outboxlab/testenv"
)

// BinDirEnv names the environment variable that points at the directory
// of the PostgreSQL server binaries (initdb, postgres), ahead of the
// places Start looks at by itself.
const BinDirEnv = "OUTBOXLAB_PG_BIN"

// User is the database superuser of a local server.
const User = "outboxlab"

// ErrUnavailable means neither the PostgreSQL binaries nor a Docker engine
// with the outboxlab/postgres image are there.
var ErrUnavailable = errors.New("no PostgreSQL server binaries and no Docker engine")

// Server is a running throwaway PostgreSQL server.
type Server struct {
	// Kind is "local" for the binaries, "container" for the fallback.
	Kind string
	// Version is the server's version line (SELECT version()).
	Version string

	admin string // URL of the postgres database
	dir   string
	cmd   *exec.Cmd
	exit  chan error
	env   *testenv.Env
}

// URL returns the connection URL of database db on the server.
func (s *Server) URL(db string) string {
	u, err := url.Parse(s.admin)
	if err != nil {
		panic(fmt.Sprintf("pgserver: own URL %q: %v", s.admin, err))
	}
	u.Path = "/" + db
	return u.String()
}

// AdminURL returns the URL of the server's maintenance database, where
// databases are created and dropped.
func (s *Server) AdminURL() string { return s.admin }

// BinDir returns the directory of the local PostgreSQL server binaries, or
// an error naming where it looked.
func BinDir() (string, error) {
	var tried []string
	if d := os.Getenv(BinDirEnv); d != "" {
		if hasServer(d) {
			return d, nil
		}
		return "", fmt.Errorf("%s=%s: no initdb and postgres there", BinDirEnv, d)
	}
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		d := strings.TrimSpace(string(out))
		if hasServer(d) {
			return d, nil
		}
		tried = append(tried, d)
	}
	// Debian keeps the server out of PATH, one directory per major
	// version: take the newest.
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(dirs, func(a, b string) int { return majorOf(b) - majorOf(a) })
	for _, d := range dirs {
		if hasServer(d) {
			return d, nil
		}
	}
	tried = append(tried, "/usr/lib/postgresql/*/bin")
	if p, err := exec.LookPath("initdb"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil && hasServer(filepath.Dir(real)) {
			return filepath.Dir(real), nil
		}
	}
	tried = append(tried, "PATH")
	return "", fmt.Errorf("no PostgreSQL server binaries (looked in %s; set %s, or install postgresql-15)", strings.Join(tried, ", "), BinDirEnv)
}

func majorOf(binDir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return n
}

func hasServer(dir string) bool {
	for _, b := range []string{"initdb", "postgres"} {
		if st, err := os.Stat(filepath.Join(dir, b)); err != nil || st.IsDir() {
			return false
		}
	}
	return true
}

// Start starts a server: from the local binaries when BinDir finds them,
// else the outboxlab/postgres container. The error wraps ErrUnavailable
// when neither is there.
func Start(ctx context.Context) (*Server, error) {
	bin, binErr := BinDir()
	if binErr == nil {
		return StartLocal(ctx, bin)
	}
	s, err := StartContainer(ctx)
	if errors.Is(err, testenv.ErrDockerUnavailable) {
		return nil, fmt.Errorf("%w: %w; %w", ErrUnavailable, binErr, err)
	}
	return s, err
}

// StartT starts a server for a test and stops it when the test ends. It
// skips the test when neither the binaries nor Docker are there, unless
// testenv.RequireDockerEnv is set (as `make test` does): then it fails.
func StartT(tb testing.TB) *Server {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var (
		s   *Server
		err error
	)
	if bin, binErr := BinDir(); binErr == nil {
		s, err = StartLocal(ctx, bin)
	} else if testing.Short() {
		tb.Skipf("pgserver: skipping under -short: %v, and the container fallback needs Docker", binErr)
	} else {
		s, err = Start(ctx)
	}
	if err != nil {
		if errors.Is(err, ErrUnavailable) && os.Getenv(testenv.RequireDockerEnv) == "" {
			tb.Skipf("pgserver: skipping: %v", err)
		}
		tb.Fatalf("pgserver: %v", err)
	}
	tb.Cleanup(func() {
		if err := s.Close(); err != nil {
			tb.Errorf("pgserver: %v", err)
		}
	})
	return s
}

// SchemaPoolT connects a pool to the server's maintenance database,
// creates schema in it, and closes the pool when the test ends; it fails
// the test when either cannot be done.
func (s *Server) SchemaPoolT(tb testing.TB, schema string) *pgxpool.Pool {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db, err := pgxpool.New(ctx, s.admin)
	if err != nil {
		tb.Fatalf("pgserver: %v", err)
	}
	tb.Cleanup(db.Close)
	if _, err := db.Exec(ctx, `CREATE SCHEMA `+pgx.Identifier{schema}.Sanitize()); err != nil {
		tb.Fatalf("pgserver: creating schema %s: %v", schema, err)
	}
	return db
}

// StartContainer starts the outboxlab/postgres container alone (testenv
// with no broker) and reaches it through its app-db link.
func StartContainer(ctx context.Context) (*Server, error) {
	env, err := testenv.Start(ctx, testenv.Options{NoBroker: true})
	if err != nil {
		return nil, fmt.Errorf("starting the PostgreSQL container: %w", err)
	}
	s := &Server{Kind: "container", env: env, admin: env.DatabaseURL(testenv.LinkAppDB)}
	u, _ := url.Parse(s.admin)
	u.Path = "/postgres"
	s.admin = u.String()
	if err := s.ping(ctx); err != nil {
		return nil, errors.Join(err, s.Close())
	}
	return s, nil
}

// StartLocal starts a server from the binaries in binDir: a fresh cluster
// in a temporary directory, listening only on a Unix socket there, with
// fsync, synchronous_commit, full_page_writes and autovacuum off. As root
// it runs the server as the postgres user (or nobody), which PostgreSQL
// requires.
func StartLocal(ctx context.Context, binDir string) (_ *Server, err error) {
	// What killed runs left behind goes first (once per process): a run
	// killed with SIGKILL cannot remove its servers' directories, tens of
	// megabytes each.
	removeStaleOnce()
	dir, err := os.MkdirTemp("", dirPrefix)
	if err != nil {
		return nil, fmt.Errorf("making the server's directory: %w", err)
	}
	s := &Server{Kind: "local", dir: dir}
	defer func() {
		if err != nil {
			err = errors.Join(err, s.Close())
		}
	}()
	if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(testenv.OwnerLabel()+"\n"), 0o644); err != nil {
		return nil, fmt.Errorf("naming the owner of %s: %w", dir, err)
	}
	cred, err := credential(dir)
	if err != nil {
		return nil, err
	}
	data := filepath.Join(dir, "data")
	initdb := exec.CommandContext(ctx, filepath.Join(binDir, "initdb"), "-D", data, "-U", User,
		"--auth=trust", "--encoding=UTF8", "--locale=C", "--no-sync")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	initdb.Env = append(os.Environ(), "LC_ALL=C")
	if out, err := initdb.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("initdb: %w\n%s", err, tail(out))
	}
	logf, err := os.Create(filepath.Join(dir, "server.log"))
	if err != nil {
		return nil, fmt.Errorf("opening the server log: %w", err)
	}
	defer logf.Close()
	if cred != nil {
		_ = os.Chown(logf.Name(), int(cred.Uid), int(cred.Gid))
	}
	s.cmd = exec.Command(filepath.Join(binDir, "postgres"), "-D", data,
		"-k", dir, "-c", "listen_addresses=",
		"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
		"-c", "autovacuum=off", "-c", "max_connections=200", "-c", "shared_buffers=64MB",
		"-c", "max_locks_per_transaction=128", "-c", "log_min_messages=warning")
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	// Its own process group, so that a terminal's Ctrl-C reaches the
	// harness first and Close shuts the server down; killed with the
	// harness if the harness dies first (the thread that starts it is
	// locked for the call, and the Go runtime keeps idle threads).
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Setpgid: true, Pdeathsig: syscall.SIGQUIT}
	runtime.LockOSThread()
	err = s.cmd.Start()
	runtime.UnlockOSThread()
	if err != nil {
		s.cmd = nil
		return nil, fmt.Errorf("starting postgres: %w", err)
	}
	s.exit = make(chan error, 1)
	go func() { s.exit <- s.cmd.Wait() }()
	s.admin = (&url.URL{Scheme: "postgres", User: url.User(User), Path: "/postgres",
		RawQuery: "host=" + url.QueryEscape(dir) + "&sslmode=disable"}).String()
	if err := s.ping(ctx); err != nil {
		log, _ := os.ReadFile(filepath.Join(dir, "server.log"))
		return nil, fmt.Errorf("%w\n%s", err, tail(log))
	}
	return s, nil
}

// credential returns who the server runs as: nil (this process's user)
// unless this process is root, then the postgres user or nobody, who is
// given dir.
func credential(dir string) (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	var u *user.User
	for _, name := range []string{"postgres", "nobody"} {
		if found, err := user.Lookup(name); err == nil {
			u = found
			break
		}
	}
	if u == nil {
		return nil, errors.New("running as root, and there is no postgres or nobody user to run the server as")
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if err := os.Chown(dir, uid, gid); err != nil {
		return nil, fmt.Errorf("giving %s to %s: %w", dir, u.Username, err)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// ping waits until the server accepts a connection and reads its version,
// for up to a minute.
func (s *Server) ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var last error
	for {
		conn, err := pgx.Connect(ctx, s.admin)
		if err == nil {
			err = conn.QueryRow(ctx, `SELECT version()`).Scan(&s.Version)
			_ = conn.Close(ctx)
			if err == nil {
				return nil
			}
		}
		last = err
		select {
		case err := <-s.exit:
			s.exit <- err
			return fmt.Errorf("postgres exited before it accepted connections: %v", err)
		case <-ctx.Done():
			return fmt.Errorf("waiting for postgres to accept connections: %w (last: %v)", ctx.Err(), last)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Close stops the server (a fast shutdown, then a kill after 10 s) and
// removes its directory, or removes the container.
func (s *Server) Close() error {
	var errs []error
	if s.env != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := s.env.Close(ctx); err != nil {
			errs = append(errs, fmt.Errorf("removing the PostgreSQL container: %w", err))
		}
		s.env = nil
	}
	if s.cmd != nil {
		_ = s.cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-s.exit:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
			<-s.exit
			errs = append(errs, errors.New("postgres did not stop within 10s of SIGINT: killed"))
		}
		s.cmd = nil
	}
	if s.dir != "" {
		if err := os.RemoveAll(s.dir); err != nil {
			errs = append(errs, fmt.Errorf("removing %s: %w", s.dir, err))
		}
		s.dir = ""
	}
	return errors.Join(errs...)
}

// dirPrefix starts the name of every local server's directory, in the
// system's temporary directory.
const dirPrefix = "outboxlab-pg-"

// ownerFile, in a local server's directory, names the process that
// started the server (testenv.OwnerLabel), so that a later run removes
// the directory once that process is dead.
const ownerFile = "owner"

// removeStaleOnce removes, once per process, the directories that dead
// runs left; a failure is left for the next run.
var removeStaleOnce = sync.OnceFunc(func() { _, _ = RemoveStale() })

// RemoveStale removes the directories of local servers, in the system's
// temporary directory, whose owning process is dead, as testenv removes
// the containers of dead runs: a run killed with SIGKILL leaves its
// servers' data behind (the servers themselves die with it). A directory
// of a live process stays, and so does one whose server still runs. A
// directory that names no owner (made by an outboxlab that did not write
// one) is judged by its age. It returns the directories it removed.
func RemoveStale() ([]string, error) { return removeStale(os.TempDir()) }

func removeStale(root string) ([]string, error) {
	dirs, err := filepath.Glob(filepath.Join(root, dirPrefix+"*"))
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", root, err)
	}
	var (
		removed []string
		errs    []error
	)
	for _, dir := range dirs {
		st, err := os.Lstat(dir)
		if err != nil || !st.IsDir() {
			continue
		}
		label, _ := os.ReadFile(filepath.Join(dir, ownerFile))
		if !testenv.OwnerDead(strings.TrimSpace(string(label)), st.ModTime()) || serverRuns(dir) {
			continue
		}
		if err := os.RemoveAll(dir); err != nil {
			errs = append(errs, fmt.Errorf("removing %s: %w", dir, err))
			continue
		}
		removed = append(removed, dir)
	}
	return removed, errors.Join(errs...)
}

// serverRuns reports whether the postmaster that dir's data directory
// names (the first line of postmaster.pid) is a live process.
func serverRuns(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "data", "postmaster.pid"))
	if err != nil {
		return false
	}
	line, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil || pid <= 0 {
		return false
	}
	err = syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

func tail(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 20 {
		lines = lines[len(lines)-20:]
	}
	return strings.Join(lines, "\n")
}

// StartMany starts up to n servers at once: n from the local binaries,
// or, when they are missing, the one container of the fallback. The
// error wraps ErrUnavailable when neither is there; on an error no
// server is left running.
func StartMany(ctx context.Context, n int) ([]*Server, error) {
	bin, err := BinDir()
	if err != nil {
		s, err := Start(ctx)
		if err != nil {
			return nil, err
		}
		return []*Server{s}, nil
	}
	type started struct {
		s   *Server
		err error
	}
	ch := make(chan started, n)
	for range n {
		go func() {
			s, err := StartLocal(ctx, bin)
			ch <- started{s, err}
		}()
	}
	var (
		out  []*Server
		errs []error
	)
	for range n {
		r := <-ch
		if r.err != nil {
			errs = append(errs, r.err)
			continue
		}
		out = append(out, r.s)
	}
	if len(errs) > 0 {
		errs = append(errs, CloseAll(out))
		return nil, errors.Join(errs...)
	}
	return out, nil
}

// CloseAll closes every server of ss.
func CloseAll(ss []*Server) error {
	var errs []error
	for _, s := range ss {
		errs = append(errs, s.Close())
	}
	return errors.Join(errs...)
}

// AdminURLs returns the AdminURL of every server of ss.
func AdminURLs(ss []*Server) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = s.AdminURL()
	}
	return out
}
