package scenarios

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/outboxlab/outboxlab/footprint"
	"github.com/outboxlab/outboxlab/history"
)

// usageEvery is the interval of the footprint's samples.
const usageEvery = 250 * time.Millisecond

// clockTicks is the kernel's USER_HZ, the unit of a process's CPU times
// in /proc/PID/stat: 100 on every Linux the harness runs on.
const clockTicks = 100

// usage samples, from outside the relay, what the footprint needs: each
// replica's CPU time, TCP connections opened and statements, and the
// producers' sessions waiting for locks.
type usage struct {
	stop func()

	// netns is the network namespace each replica's counting rules
	// were added to; tick counts the samples. Only the sampling
	// goroutine touches them.
	netns map[string]string
	tick  int

	mu       sync.Mutex
	samples  map[string][]footprint.Sample
	locks    []footprint.LockSample
	problems map[string]bool
}

// startUsage starts sampling, until the returned usage is stopped.
func (r *run) startUsage(ctx context.Context) *usage {
	u := &usage{samples: map[string][]footprint.Sample{}, problems: map[string]bool{}, netns: map[string]string{}}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(usageEvery)
		defer t.Stop()
		for {
			r.sampleUsage(ctx, u)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	})
	u.stop = func() { cancel(); wg.Wait() }
	return u
}

// problem notes once why a figure could not be read.
func (u *usage) problem(format string, args ...any) {
	u.mu.Lock()
	u.problems[fmt.Sprintf(format, args...)] = true
	u.mu.Unlock()
}

// sampleUsage takes one sample of every replica and of the producers'
// lock waits.
func (r *run) sampleUsage(ctx context.Context, u *usage) {
	qctx, cancel := context.WithTimeout(ctx, usageEvery)
	defer cancel()
	now := time.Now()
	statements := r.roleStatements(qctx, u)
	var waiting int
	lockErr := r.fx.Admin.QueryRow(qctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'`,
		r.fx.AppName).Scan(&waiting)
	counted := u.tick%connsEvery == 0
	u.tick++
	type taken struct {
		name string
		smp  footprint.Sample
	}
	var got []taken
	for _, bc := range r.contexts {
		for _, s := range bc.relays {
			smp := footprint.Sample{At: now, Connects: -1, Statements: -1}
			if s.role != nil {
				if n, ok := statements[s.role.Name]; ok {
					smp.Statements = n
				}
			}
			if pid := s.processID(ctx); pid > 0 {
				if life, cpu, err := processCPU(pid); err == nil {
					smp.Life, smp.CPU = life, cpu
					smp.Connects = netnsConnects(pid)
					if counted && smp.Connects >= 0 {
						smp.ConnectsTo = u.serviceConns(ctx, s, pid)
					}
				}
			}
			got = append(got, taken{s.name, smp})
		}
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if lockErr == nil {
		u.locks = append(u.locks, footprint.LockSample{At: now, Waiting: waiting})
	}
	for _, t := range got {
		u.samples[t.name] = append(u.samples[t.name], t.smp)
	}
}

// connsEvery is how many samples apart the connection attempts per
// service are read: each reading runs iptables in the replica's network
// namespace, which costs the machine more than the other figures.
const connsEvery = 4

// serviceConns reads the connection attempts the replica's process pid,
// in a network namespace of its own, sent to each service so far; it
// adds the counting rules first to a namespace it has not seen. nil
// when they cannot be counted (the reason goes to the run's notes).
func (u *usage) serviceConns(ctx context.Context, s *Replica, pid int) map[string]int64 {
	ns := netnsOf(pid)
	if ns == "" {
		return nil
	}
	if u.netns[s.name] != ns {
		s.mu.Lock()
		ports := maps.Clone(s.ports)
		s.mu.Unlock()
		if len(ports) == 0 {
			return nil
		}
		if err := countConnsIn(ctx, pid, ports); err != nil {
			if ctx.Err() == nil {
				u.problem("the connection attempts per service could not be counted (root, nsenter and iptables are needed): %v", err)
			}
			return nil
		}
		u.netns[s.name] = ns
	}
	got, err := readConnsIn(ctx, pid)
	switch {
	case errors.Is(err, errNoConnRules):
		// A new process in a namespace of its own, under the pid read
		// before it: its rules are added at the next reading.
		delete(u.netns, s.name)
		return nil
	case err != nil:
		if ctx.Err() == nil && netnsOf(pid) == ns {
			u.problem("some readings of the connection attempts per service failed: %v", err)
		}
		return nil
	}
	return got
}

// roleStatements reads how many statements each replica's role ran so
// far (pg_stat_statements).
func (r *run) roleStatements(ctx context.Context, u *usage) map[string]int64 {
	var roles []string
	for _, bc := range r.contexts {
		for _, s := range bc.relays {
			if s.role != nil {
				roles = append(roles, s.role.Name)
			}
		}
	}
	if len(roles) == 0 {
		return nil
	}
	rows, err := r.fx.Admin.Query(ctx, `SELECT r.rolname, coalesce(sum(s.calls), 0)::bigint
FROM pg_roles r LEFT JOIN pg_stat_statements s ON s.userid = r.oid
WHERE r.rolname = ANY($1) GROUP BY r.rolname`, roles)
	if err != nil {
		if ctx.Err() == nil {
			u.problem("some readings of the replicas' statements failed (their rates are over the others): %v", err)
		}
		return nil
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var name string
		var n int64
		if err := rows.Scan(&name, &n); err != nil {
			return nil
		}
		out[name] = n
	}
	if rows.Err() != nil {
		return nil
	}
	return out
}

// processCPU reads a process's CPU time so far (user and system) and
// names its life by its pid and start time.
func processCPU(pid int) (life string, cpu time.Duration, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", 0, err
	}
	// The command name, in parentheses, may hold spaces: the fields
	// that follow it start after the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return "", 0, errors.New("unreadable /proc/PID/stat")
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state): utime is field 14, stime 15, starttime 22.
	if len(f) < 20 {
		return "", 0, errors.New("short /proc/PID/stat")
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return "", 0, errors.New("unreadable CPU times in /proc/PID/stat")
	}
	return strconv.Itoa(pid) + "@" + f[19], time.Duration(utime+stime) * time.Second / clockTicks, nil
}

// netnsConnects reads the TCP connections opened so far (ActiveOpens)
// in the network namespace of process pid, or -1 when that namespace is
// the harness's own (a process on the host), whose counter is not the
// process's alone, or cannot be read.
func netnsConnects(pid int) int64 {
	mine, err1 := os.Readlink("/proc/self/ns/net")
	theirs, err2 := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", pid))
	if err1 != nil || err2 != nil || mine == theirs {
		return -1
	}
	f, err := os.Open(fmt.Sprintf("/proc/%d/net/snmp", pid))
	if err != nil {
		return -1
	}
	defer f.Close()
	var head []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 || fields[0] != "Tcp:" {
			continue
		}
		if head == nil {
			head = fields
			continue
		}
		for i, name := range head {
			if name == "ActiveOpens" && i < len(fields) {
				if n, err := strconv.ParseInt(fields[i], 10, 64); err == nil {
					return n
				}
			}
		}
		return -1
	}
	return -1
}

// measureFootprint stops the sampling and computes the run's footprint
// from h and the samples, with the replicas' output lines.
func (r *run) measureFootprint(ctx context.Context, h []history.Op) *footprint.Footprint {
	r.usage.stop()
	in := footprint.Input{History: h, LockEvery: usageEvery, Producer: func(p string) bool { return strings.HasPrefix(p, "producer-") }}
	u := r.usage
	u.mu.Lock()
	in.Locks = u.locks
	for _, bc := range r.contexts {
		for _, s := range bc.relays {
			rep := footprint.Replica{Name: s.name, Samples: u.samples[s.name]}
			rep.Lines, rep.LinesKnown = s.lineTimes(ctx)
			in.Replicas = append(in.Replicas, rep)
		}
	}
	u.mu.Unlock()
	f := footprint.Measure(in)
	return &f
}

// notes says, for the run's unchecked notes, what the sampling could not
// read.
func (u *usage) notes() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	var out []string
	for p := range u.problems {
		out = append(out, "footprint: "+p)
	}
	slices.Sort(out)
	return out
}
