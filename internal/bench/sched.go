package bench

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/outboxlab/outboxlab/internal/bench/result"
)

// schedPair is one thread's scheduler times so far.
type schedPair struct{ run, wait time.Duration }

// threadTimes is the scheduler times of threads by their thread id on
// this machine.
type threadTimes map[int]schedPair

// readSchedstat reads a thread's schedstat: nanoseconds on a CPU,
// nanoseconds waiting in a run queue, timeslices.
func readSchedstat(path string) (schedPair, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return schedPair{}, false
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return schedPair{}, false
	}
	run, err1 := strconv.ParseInt(f[0], 10, 64)
	wait, err2 := strconv.ParseInt(f[1], 10, 64)
	if err1 != nil || err2 != nil {
		return schedPair{}, false
	}
	return schedPair{run: time.Duration(run), wait: time.Duration(wait)}, true
}

// selfThreads returns the scheduler times of this process's threads.
func selfThreads() threadTimes {
	tt := threadTimes{}
	dirs, _ := filepath.Glob("/proc/self/task/*")
	for _, d := range dirs {
		tid, err := strconv.Atoi(filepath.Base(d))
		if err != nil {
			continue
		}
		if p, ok := readSchedstat(filepath.Join(d, "schedstat")); ok {
			tt[tid] = p
		}
	}
	return tt
}

// containerThreads returns the scheduler times of a container's threads,
// listed by its cgroup (v1 or v2), where the engine runs on this machine,
// and with inner, for each its process id inside the container (the last
// of NSpid).
func containerThreads(id string, inner bool) (threadTimes, map[int]int) {
	var (
		tids  []int
		paths []string
	)
	v1, v2 := cgroupDirs(id)
	for _, dir := range v1 {
		paths = append(paths, filepath.Join(dir, "tasks"))
	}
	for _, dir := range v2 {
		paths = append(paths, filepath.Join(dir, "cgroup.threads"))
	}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		for _, line := range strings.Fields(string(b)) {
			if tid, err := strconv.Atoi(line); err == nil {
				tids = append(tids, tid)
			}
		}
		break
	}
	tt, pids := threadTimes{}, map[int]int{}
	for _, tid := range tids {
		p, ok := readSchedstat(filepath.Join("/proc", strconv.Itoa(tid), "schedstat"))
		if !ok {
			continue
		}
		tt[tid] = p
		if !inner {
			continue
		}
		if ns, ok := nsPID(tid); ok {
			pids[ns] = tid
		}
	}
	return tt, pids
}

// nsPID returns the id of thread tid in its innermost pid namespace.
func nsPID(tid int) (int, bool) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(tid), "status"))
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "NSpid:"); ok {
			f := strings.Fields(v)
			if len(f) == 0 {
				return 0, false
			}
			n, err := strconv.Atoi(f[len(f)-1])
			return n, err == nil
		}
	}
	return 0, false
}

// since returns the group of the threads of t (those of ids when ids is
// not nil) less what each had at start (a thread new since then counts
// from zero).
func (t threadTimes) since(start threadTimes, name string, ids []int) result.SchedGroup {
	g := result.SchedGroup{Name: name}
	add := func(tid int, p schedPair) {
		s := start[tid]
		g.Threads++
		g.OnCPUMs += float64(p.run-s.run) / 1e6
		g.RunQueueMs += float64(p.wait-s.wait) / 1e6
	}
	if ids == nil {
		for tid, p := range t {
			add(tid, p)
		}
		return g
	}
	for _, tid := range ids {
		if p, ok := t[tid]; ok {
			add(tid, p)
		}
	}
	return g
}

// schedSample is the scheduler times of every thread a latency run
// accounts for, at one moment.
type schedSample struct {
	self, postgres, rabbitmq threadTimes
	// pgPIDs maps a process id inside the PostgreSQL container to its id
	// on this machine.
	pgPIDs  map[int]int
	machine time.Duration
	wall    time.Time
}

// Names of the application_name the latency runs give their sessions, so
// that each PostgreSQL process can be told whose it is.
const (
	appProducers    = "outboxlab-bench-producers"
	appListenSuffix = "-listen"
)

// sampleSched reads the scheduler times of this process and of the
// service containers where their cgroups are readable; with sessions, also
// which of PostgreSQL's threads is which of its processes.
func (in *infra) sampleSched(sessions bool) schedSample {
	s := schedSample{self: selfThreads(), machine: machineCPU(), wall: time.Now()}
	if id, ok := in.containers["postgres"]; ok {
		s.postgres, s.pgPIDs = containerThreads(id, sessions)
	}
	if id, ok := in.containers["rabbitmq"]; ok {
		s.rabbitmq, _ = containerThreads(id, false)
	}
	return s
}

// schedGroups returns the groups of a run from its two samples, the
// PostgreSQL sessions told apart by application_name (relayID's pool,
// relayID's listener, the producers), read from pg_stat_activity before
// any of them closed. It returns nil where this process's threads cannot
// be read.
func (in *infra) schedGroups(ctx context.Context, start, end schedSample, relayID string) ([]result.SchedGroup, error) {
	if len(end.self) == 0 {
		return nil, nil
	}
	var groups []result.SchedGroup
	if end.postgres != nil {
		rows, err := in.admin.Query(ctx, `SELECT pid, application_name FROM pg_stat_activity
WHERE datname = current_database() AND backend_type = 'client backend' AND pid <> pg_backend_pid()`)
		if err != nil {
			return nil, fmt.Errorf("reading the sessions: %w", err)
		}
		byApp := map[string][]int{}
		for rows.Next() {
			var (
				pid int
				app string
			)
			if err := rows.Scan(&pid, &app); err != nil {
				rows.Close()
				return nil, fmt.Errorf("reading the sessions: %w", err)
			}
			if tid, ok := end.pgPIDs[pid]; ok {
				byApp[app] = append(byApp[app], tid)
			}
		}
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("reading the sessions: %w", err)
		}
		if relayID != "" {
			groups = append(groups,
				end.postgres.since(start.postgres, "relay sessions", nonNil(byApp[relayID])),
				end.postgres.since(start.postgres, "relay listener", nonNil(byApp[relayID+appListenSuffix])))
		}
		groups = append(groups,
			end.postgres.since(start.postgres, "producer sessions", nonNil(byApp[appProducers])),
			end.postgres.since(start.postgres, "PostgreSQL", nil))
	}
	if end.rabbitmq != nil {
		groups = append(groups, end.rabbitmq.since(start.rabbitmq, "RabbitMQ", nil))
	}
	return append(groups, end.self.since(start.self, "this process", nil)), nil
}

// nonNil returns ids, or an empty list for none, so that since counts no
// thread rather than every one.
func nonNil(ids []int) []int {
	if ids == nil {
		return []int{}
	}
	return ids
}

// withApplicationName returns connString with its sessions named name in
// pg_stat_activity: a query parameter of a URL, a keyword otherwise.
func withApplicationName(connString, name string) string {
	if u, err := url.Parse(connString); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		q := u.Query()
		q.Set("application_name", name)
		u.RawQuery = q.Encode()
		return u.String()
	}
	return connString + " application_name=" + name
}
