package bench

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

func TestReadSchedstat(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	if err := os.WriteFile(good, []byte("1500000 2500000 7\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p, ok := readSchedstat(good)
	if !ok || p.run != 1500*time.Microsecond || p.wait != 2500*time.Microsecond {
		t.Errorf("readSchedstat = %+v, %v", p, ok)
	}
	for name, body := range map[string]string{"short": "12\n", "words": "a b c\n", "empty": ""} {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		if p, ok := readSchedstat(path); ok {
			t.Errorf("%s: read %+v from %q", name, p, body)
		}
	}
	if _, ok := readSchedstat(filepath.Join(dir, "missing")); ok {
		t.Error("read a missing file")
	}
}

func TestThreadTimesSince(t *testing.T) {
	start := threadTimes{1: {run: 10 * time.Millisecond, wait: 4 * time.Millisecond}, 2: {run: time.Millisecond}}
	end := threadTimes{
		1: {run: 30 * time.Millisecond, wait: 10 * time.Millisecond},
		2: {run: 3 * time.Millisecond, wait: time.Millisecond},
		3: {run: 5 * time.Millisecond, wait: 2 * time.Millisecond}, // born during the run
	}
	all := end.since(start, "all", nil)
	if all.Name != "all" || all.Threads != 3 || all.OnCPUMs != 27 || all.RunQueueMs != 9 {
		t.Errorf("every thread: %+v", all)
	}
	some := end.since(start, "some", []int{1, 3, 99})
	if some.Threads != 2 || some.OnCPUMs != 25 || some.RunQueueMs != 8 {
		t.Errorf("threads 1 and 3: %+v", some)
	}
	if none := end.since(start, "none", nonNil(nil)); none.Threads != 0 || none.OnCPUMs != 0 {
		t.Errorf("no thread: %+v", none)
	}
}

func TestSelfThreadsAndNamespacePID(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("schedstat is Linux's")
	}
	// Burn a little CPU so this thread has run.
	x := 0
	for i := range 1_000_000 {
		x += i
	}
	tt := selfThreads()
	if len(tt) < 1 {
		t.Fatal("no thread of this process read")
	}
	var run time.Duration
	for _, p := range tt {
		run += p.run
	}
	if run <= 0 {
		t.Errorf("this process's threads ran %s (x=%d)", run, x)
	}
	if ns, ok := nsPID(os.Getpid()); !ok || ns != os.Getpid() {
		t.Errorf("nsPID of this process = %d, %v; want %d", ns, ok, os.Getpid())
	}
	if tt, inner := containerThreads("no-such-container", true); len(tt) != 0 || len(inner) != 0 {
		t.Errorf("a missing container has threads: %v %v", tt, inner)
	}
}

func TestWithApplicationName(t *testing.T) {
	for _, conn := range []string{
		"postgres://u:p@localhost:5432/db?sslmode=disable",
		"postgresql://u:p@localhost/db",
		"host=localhost user=u password=p dbname=db sslmode=disable",
	} {
		named := withApplicationName(conn, "bench-x-a-listen")
		cfg, err := pgx.ParseConfig(named)
		if err != nil {
			t.Errorf("%s: %v", named, err)
			continue
		}
		if got := cfg.RuntimeParams["application_name"]; got != "bench-x-a-listen" {
			t.Errorf("%s: application_name %q", named, got)
		}
		if cfg.Database != "db" || cfg.User != "u" {
			t.Errorf("%s lost the rest: database %q, user %q", named, cfg.Database, cfg.User)
		}
	}
}
