package pgserver

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxlab/outboxlab/testenv"
)

// TestStartLocal starts a server from the local binaries, checks that it
// runs with durability and autovacuum off, and that Close stops it and
// removes its directory.
func TestStartLocal(t *testing.T) {
	bin, err := BinDir()
	if err != nil {
		t.Skipf("no local binaries: %v", err)
	}
	ctx := context.Background()
	s, err := StartLocal(ctx, bin)
	if err != nil {
		t.Fatal(err)
	}
	dir := s.dir
	conn, err := pgx.Connect(ctx, s.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off", "autovacuum": "off"} {
		var got string
		if err := conn.QueryRow(ctx, `SELECT current_setting($1)`, name).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("%s = %s, want %s", name, got, want)
		}
	}
	_ = conn.Close(ctx)
	if !strings.HasPrefix(s.Version, "PostgreSQL ") {
		t.Errorf("version %q", s.Version)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("%s still there after Close: %v", dir, err)
	}
	if _, err := pgx.Connect(ctx, s.admin); err == nil {
		t.Fatal("the server still accepts connections after Close")
	}
}

// TestRemoveStaleRemovesOnlyTheDeadRunsDirectories lays out directories
// as runs leave them: of a dead process, of this live one, of a dead
// process whose server still runs, and two that name no owner, one old
// and one new. Only the dead process's and the old one go.
func TestRemoveStaleRemovesOnlyTheDeadRunsDirectories(t *testing.T) {
	root := t.TempDir()
	host, _ := os.Hostname()
	// This pid with a start time it never had: a process that ended, whose
	// pid came back.
	deadOwner := host + ":" + strconv.Itoa(os.Getpid()) + ":0"
	mk := func(name, owner string, age time.Duration, postmaster int) string {
		t.Helper()
		dir := filepath.Join(root, dirPrefix+name)
		if err := os.MkdirAll(filepath.Join(dir, "data"), 0o755); err != nil {
			t.Fatal(err)
		}
		if owner != "" {
			if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(owner+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if postmaster > 0 {
			if err := os.WriteFile(filepath.Join(dir, "data", "postmaster.pid"), []byte(strconv.Itoa(postmaster)+"\n/data\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		at := time.Now().Add(-age)
		if err := os.Chtimes(dir, at, at); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	dead := mk("dead", deadOwner, 0, 0)
	alive := mk("alive", testenv.OwnerLabel(), 0, 0)
	running := mk("running", deadOwner, 0, os.Getpid())
	oldUnowned := mk("old", "", 7*time.Hour, 0)
	newUnowned := mk("new", "", time.Minute, 0)
	other := filepath.Join(root, "not-ours")
	if err := os.Mkdir(other, 0o755); err != nil {
		t.Fatal(err)
	}

	removed, err := removeStale(root)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(removed)
	if want := []string{dead, oldUnowned}; !slices.Equal(removed, want) {
		t.Errorf("removed %v, want %v", removed, want)
	}
	for _, dir := range []string{dead, oldUnowned} {
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s is still there: %v", dir, err)
		}
	}
	for _, dir := range []string{alive, running, newUnowned, other} {
		if _, err := os.Stat(dir); err != nil {
			t.Errorf("%s was removed: %v", dir, err)
		}
	}
}

// killedHelperEnv makes the test binary, run again as a child, start a
// local server, print its directory and wait to be killed.
const killedHelperEnv = "OUTBOXLAB_PGSERVER_KILLED_HELPER"

// TestKilledHelper is the child of TestRemoveStaleAfterSIGKILL.
func TestKilledHelper(t *testing.T) {
	if os.Getenv(killedHelperEnv) != "1" {
		t.Skip("the child process of TestRemoveStaleAfterSIGKILL")
	}
	bin, err := BinDir()
	if err != nil {
		t.Fatal(err)
	}
	s, err := StartLocal(context.Background(), bin)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println("dir=" + s.dir)
	select {} // until killed
}

// TestRemoveStaleAfterSIGKILL kills a process that runs a local server
// with SIGKILL, which gives it no chance to remove the server's
// directory: the next RemoveStale removes it.
func TestRemoveStaleAfterSIGKILL(t *testing.T) {
	if _, err := BinDir(); err != nil {
		t.Skipf("no local binaries: %v", err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestKilledHelper$", "-test.count=1")
	cmd.Env = append(os.Environ(), killedHelperEnv+"=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	dirs := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if d, ok := strings.CutPrefix(sc.Text(), "dir="); ok {
				dirs <- d
			}
		}
		exited <- cmd.Wait()
	}()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	var dir string
	select {
	case dir = <-dirs:
	case err := <-exited:
		t.Fatalf("the helper ended before it started a server: %v", err)
	case <-time.After(2 * time.Minute):
		t.Fatal("the helper started no server within 2 minutes")
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-exited
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("the killed run's directory %s is not there to remove: %v", dir, err)
	}
	// The server dies with its owner (SIGQUIT on the parent's death); its
	// directory goes once it has.
	deadline := time.Now().Add(30 * time.Second)
	for {
		removed, err := RemoveStale()
		if err != nil {
			t.Fatal(err)
		}
		if slices.Contains(removed, dir) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("RemoveStale removed %v, not %s, within 30s of the kill", removed, dir)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s is still there: %v", dir, err)
	}
}
