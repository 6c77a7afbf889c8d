// Package footprint measures what a relay costs beyond the guarantee it
// keeps, and judges it against the budgets the relay declares
// (contract.Budgets): what its running does to the producers' business
// transactions, against a control phase of the same run in which no
// replica ran; and how each replica behaves while the broker or the
// database is down and just after (CPU, lines of output, statements,
// TCP connections opened, and the time to its first publish after the
// heal).
//
// Everything here is a pure function of a run's history and of samples
// the harness took from outside the relay (its process's CPU time and
// network counters, its database role's statement count, the times of
// its output lines, the database's lock waits): no figure depends on
// the relay's cooperation, and none is scraped from its logs.
package footprint

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/outboxlab/outboxlab/contract"
	"github.com/outboxlab/outboxlab/history"
)

// Footprint is what a run measured of the relay's cost.
type Footprint struct {
	// Producers is what the producers' transactions took with the relay
	// running and without it.
	Producers Producers `json:"producers"`
	// Outages are the run's outages of the broker or the database, each
	// with every replica's figures over it.
	Outages []Outage `json:"outages,omitempty"`
}

// Latency summarises the times of transactions.
type Latency struct {
	Count int           `json:"count"`
	P50   time.Duration `json:"p50_ns"`
	P99   time.Duration `json:"p99_ns"`
	Max   time.Duration `json:"max_ns"`
}

// Producers is what the producers' business transactions took: from the
// producer's invoke to its outcome (committed, failed, or cut off with
// its outcome unknown), less the time a transaction was held open on
// purpose (history.Meta.Held). A transaction that failed counts with the
// time it took to fail: one that waited for a lock until its deadline
// waited all that time.
type Producers struct {
	// Control are the transactions of the control phase, before any
	// replica started; Run those of the safety and liveness phases,
	// while the replicas ran.
	Control Latency `json:"control"`
	Run     Latency `json:"run"`
	// Ratio is Run.P99 over Control.P99; 0 when either is unknown.
	Ratio float64 `json:"ratio,omitempty"`
	// SerializationFailures and Deadlocks count the producers'
	// transactions the database aborted so (SQLSTATE 40001, 40P01).
	SerializationFailures int `json:"serialization_failures,omitempty"`
	Deadlocks             int `json:"deadlocks,omitempty"`
	// LockWaitSamples counts the samples of the database's sessions in
	// which a producer's session waited for a lock, and LockWait
	// estimates the time they waited (samples times the interval).
	LockWaitSamples int           `json:"lock_wait_samples,omitempty"`
	LockWait        time.Duration `json:"lock_wait_ns,omitempty"`
	// Unjudged says why no producer budget could be judged in this run
	// (a fault hit the producers, too few transactions); empty when it
	// could.
	Unjudged string `json:"unjudged,omitempty"`
}

// Waited reports whether the database shows the relay's doing in the
// producers' transactions: their sessions waited for locks, or the
// database aborted some of them (a serialization failure, a deadlock).
func (p Producers) Waited() bool {
	return p.LockWaitSamples > 0 || p.SerializationFailures > 0 || p.Deadlocks > 0
}

// Outage is one window in which the broker or the database was down:
// from the start of its faults to their heal. A replica's rates are
// taken over the window and contract.OutageAfter after it.
type Outage struct {
	Faults []string           `json:"faults"`
	Class  history.FaultClass `json:"class"`
	From   time.Time          `json:"from"`
	To     time.Time          `json:"to"`
	// Resume is the time from the heal to the first publish after it of
	// any replica the outage hit: when the relay got events flowing
	// again; nil when none published after the heal.
	Resume *time.Duration `json:"resume_ns,omitempty"`
	// Replicas are the figures of every replica the outage hit.
	Replicas []ReplicaOutage `json:"replicas"`
}

// ReplicaOutage is one replica's figures over an outage window. A nil
// figure was not measured (its Unmeasured note says why).
type ReplicaOutage struct {
	Replica string `json:"replica"`
	// CPU is the replica's CPU use, in cores.
	CPU *float64 `json:"cpu_cores,omitempty"`
	// Logs is the lines it wrote to its output per second.
	Logs *float64 `json:"log_lines_per_s,omitempty"`
	// Statements is the statements its database role ran per second.
	Statements *float64 `json:"statements_per_s,omitempty"`
	// Connects is the TCP connections it opened per second, to any
	// service.
	Connects *float64 `json:"connects_per_s,omitempty"`
	// ConnectsTo is the TCP connection attempts it sent per second to
	// each service ("database", "broker"), failed ones included.
	ConnectsTo map[string]float64 `json:"connects_per_s_by_service,omitempty"`
	// Resume is the time from the heal to its first publish after it;
	// Never says it published nothing after the heal while another
	// replica did, and OthersUntil how long after the heal the others
	// went on publishing; unset when not judged (ResumeUnjudged says
	// why).
	Resume         *time.Duration `json:"resume_ns,omitempty"`
	Never          bool           `json:"never_resumed,omitempty"`
	OthersUntil    time.Duration  `json:"others_until_ns,omitempty"`
	ResumeUnjudged string         `json:"resume_unjudged,omitempty"`
	Unmeasured     []string       `json:"unmeasured,omitempty"`
}

// Sample is one reading of a replica's counters, taken from outside it.
// A counter is -1 when it could not be read.
type Sample struct {
	At time.Time
	// Life names the process the CPU and connection counters belong to
	// (its pid and start time): they start again with a new process.
	Life string
	// CPU is the process's CPU time so far (user and system).
	CPU time.Duration
	// Connects counts the TCP connections opened so far in the
	// process's network namespace, -1 when it shares the harness's.
	Connects int64
	// ConnectsTo counts the TCP connection attempts sent so far to
	// each service, nil when they were not read.
	ConnectsTo map[string]int64
	// Statements counts the statements the replica's database role ran
	// so far, -1 when unknown.
	Statements int64
}

// Replica is what was measured of one replica.
type Replica struct {
	Name    string
	Samples []Sample
	// Lines are the times of its output lines; LinesKnown is false when
	// they could not be read.
	Lines      []time.Time
	LinesKnown bool
}

// LockSample is one sample of the database's sessions: how many of the
// producers' sessions waited for a lock.
type LockSample struct {
	At      time.Time
	Waiting int
}

// Input is what Measure reads.
type Input struct {
	History  []history.Op
	Replicas []Replica
	Locks    []LockSample
	// LockEvery is the interval of the lock samples.
	LockEvery time.Duration
	// Producer reports whether a history process is a producer.
	Producer func(process string) bool
}

// SQLSTATEs of the aborts Producers counts.
const (
	SQLStateSerialization = "40001"
	SQLStateDeadlock      = "40P01"
)

// minCommits is the fewest transactions of the control phase a producer
// budget is judged on. Of the run, one is enough: a relay that blocks
// the producers may leave them few.
const minCommits = 5

// Measure computes a run's footprint.
func Measure(in Input) Footprint {
	return Footprint{Producers: producers(in), Outages: outages(in)}
}

// producers times the producers' committed transactions of the control
// phase and of the run.
func producers(in Input) Producers {
	var p Producers
	type invoked struct {
		op    history.Op
		phase string
	}
	phase := ""
	open := map[string]invoked{}
	var control, run []time.Duration
	for _, op := range in.History {
		if op.F == history.Phase {
			phase = op.Phase
			continue
		}
		if op.F != history.Commit || !in.Producer(op.Process) {
			continue
		}
		if op.Type == history.Invoke {
			open[op.Process] = invoked{op, phase}
			continue
		}
		inv, ok := open[op.Process]
		delete(open, op.Process)
		switch {
		case op.Type == history.Fail && op.SQLState == SQLStateSerialization:
			p.SerializationFailures++
		case op.Type == history.Fail && op.SQLState == SQLStateDeadlock:
			p.Deadlocks++
		}
		if !ok {
			continue
		}
		d := op.Time.Sub(inv.op.Time) - inv.op.Held
		switch inv.phase {
		case history.PhaseControl:
			control = append(control, d)
		case history.PhaseSafety, history.PhaseLiveness:
			run = append(run, d)
		}
	}
	p.Control, p.Run = LatencyOf(control), LatencyOf(run)
	if p.Control.P99 > 0 && p.Run.Count > 0 {
		p.Ratio = float64(p.Run.P99) / float64(p.Control.P99)
	}
	for _, s := range in.Locks {
		if s.Waiting > 0 {
			p.LockWaitSamples++
			p.LockWait += time.Duration(s.Waiting) * in.LockEvery
		}
	}
	switch hit := faultsOnProducers(in); {
	case len(hit) > 0:
		p.Unjudged = "faults hit the producers: " + strings.Join(hit, ", ")
	case p.Control.Count < minCommits || p.Run.Count == 0:
		p.Unjudged = fmt.Sprintf("too few transactions to compare: %d in the control phase (at least %d), %d with the relay (at least one)",
			p.Control.Count, minCommits, p.Run.Count)
	}
	return p
}

// faultsOnProducers names the faults, clock skews aside, that hit a
// producer (or every process).
func faultsOnProducers(in Input) []string {
	var out []string
	for _, op := range in.History {
		f := op.Fault
		if op.F != history.FaultStart || f == nil || f.Class == history.ClassClock || slices.Contains(out, f.Name) {
			continue
		}
		hit := len(f.Targets) == 0
		for _, t := range f.Targets {
			hit = hit || in.Producer(t)
		}
		if hit {
			out = append(out, f.Name)
		}
	}
	return out
}

// LatencyOf summarises the transaction times ds.
func LatencyOf(ds []time.Duration) Latency {
	if len(ds) == 0 {
		return Latency{}
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return Latency{Count: len(s), P50: rank(s, 0.50), P99: rank(s, 0.99), Max: s[len(s)-1]}
}

// rank is the nearest-rank percentile q of sorted s.
func rank(s []time.Duration, q float64) time.Duration {
	i := int(float64(len(s))*q+0.999999) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// outageKinds are the kinds of faults of the broker or the database that
// make them unavailable, rather than slow.
var outageKinds = []string{"down", "kill", "stop", "pause", "failover", "restore"}

// window is one outage: the faults that overlap in it, from the start of
// the first to the heal of the last.
type window struct {
	faults   []string
	class    history.FaultClass
	from, to time.Time
	// hits are the faults' targets; all is set when one of them hits
	// every process.
	hits []string
	all  bool
}

// hit reports whether a fault of w hits process.
func (w window) hit(process string) bool { return w.all || slices.Contains(w.hits, process) }

// windows finds the outages of h: faults of the broker or the database
// of an outage kind, from their start to their stop, overlapping ones
// of one class merged.
func windows(h []history.Op) []window {
	starts := map[string]history.Op{}
	var out []window
	for _, op := range h {
		f := op.Fault
		if f == nil || op.Type != history.OK || (f.Class != history.ClassBroker && f.Class != history.ClassDB) || !slices.Contains(outageKinds, f.Kind) {
			continue
		}
		switch op.F {
		case history.FaultStart:
			starts[f.Name] = op
		case history.FaultStop:
			st, ok := starts[f.Name]
			if !ok {
				continue
			}
			delete(starts, f.Name)
			w := window{faults: []string{f.Name}, class: f.Class, from: st.Time, to: op.Time, hits: f.Targets, all: len(f.Targets) == 0}
			merged := false
			for i := range out {
				o := &out[i]
				if o.class == w.class && !w.from.After(o.to) && !o.from.After(w.to) {
					if !slices.Contains(o.faults, f.Name) {
						o.faults = append(o.faults, f.Name)
					}
					o.from, o.to = minTime(o.from, w.from), maxTime(o.to, w.to)
					o.hits, o.all = append(o.hits, w.hits...), o.all || w.all
					merged = true
					break
				}
			}
			if !merged {
				out = append(out, w)
			}
		}
	}
	slices.SortFunc(out, func(a, b window) int { return a.from.Compare(b.from) })
	return out
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// outages measures, over every outage window, each replica its faults
// hit; a window that hit no replica (an outage of the consumers' links)
// is left out.
func outages(in Input) []Outage {
	var out []Outage
	for _, w := range windows(in.History) {
		o := Outage{Faults: w.faults, Class: w.class, From: w.from, To: w.to}
		end := w.to.Add(contract.OutageAfter)
		for _, r := range in.Replicas {
			if !w.hit(r.Name) {
				continue
			}
			ro := ReplicaOutage{Replica: r.Name}
			if v, ok := rate(r.Samples, w.from, end, true, func(s Sample) int64 { return int64(s.CPU) }); ok {
				v /= float64(time.Second)
				ro.CPU = &v
			} else {
				ro.Unmeasured = append(ro.Unmeasured, "cpu: no two readings of one process in the window")
			}
			if v, ok := rate(r.Samples, w.from, end, false, func(s Sample) int64 { return s.Statements }); ok {
				ro.Statements = &v
			} else {
				ro.Unmeasured = append(ro.Unmeasured, "statements: its database role's statements could not be read (pg_stat_statements)")
			}
			if v, ok := rate(r.Samples, w.from, end, true, func(s Sample) int64 { return s.Connects }); ok {
				ro.Connects = &v
			} else {
				ro.Unmeasured = append(ro.Unmeasured, "connects: it shares the harness's network namespace (a host process), whose connections are not its own")
			}
			for _, service := range services(r.Samples) {
				if v, ok := rate(r.Samples, w.from, end, true, func(s Sample) int64 {
					if n, ok := s.ConnectsTo[service]; ok {
						return n
					}
					return -1
				}); ok {
					if ro.ConnectsTo == nil {
						ro.ConnectsTo = map[string]float64{}
					}
					ro.ConnectsTo[service] = v
				}
			}
			if r.LinesKnown {
				n := 0
				for _, t := range r.Lines {
					if !t.Before(w.from) && !t.After(end) {
						n++
					}
				}
				v := float64(n) / end.Sub(w.from).Seconds()
				ro.Logs = &v
			} else {
				ro.Unmeasured = append(ro.Unmeasured, "logs: its output's times could not be read")
			}
			resume(in, w, &ro)
			o.Replicas = append(o.Replicas, ro)
		}
		if len(o.Replicas) == 0 {
			continue
		}
		for _, r := range o.Replicas {
			if r.Resume != nil && (o.Resume == nil || *r.Resume < *o.Resume) {
				d := *r.Resume
				o.Resume = &d
			}
		}
		out = append(out, o)
	}
	return out
}

// services returns the services whose connection attempts some sample
// counted, sorted.
func services(samples []Sample) []string {
	var out []string
	for _, s := range samples {
		for name := range s.ConnectsTo {
			if !slices.Contains(out, name) {
				out = append(out, name)
			}
		}
	}
	slices.Sort(out)
	return out
}

// rate is how fast a counter of samples grew between from and to, per
// second: the growth between the first and the last reading in the
// window of each process (perLife: the counter starts again with a new
// process), over the time those readings span. ok is false without two
// readings of one process, or when the counter is unknown (-1).
func rate(samples []Sample, from, to time.Time, perLife bool, counter func(Sample) int64) (float64, bool) {
	type span struct{ first, last Sample }
	spans := map[string]*span{}
	var order []string
	for _, s := range samples {
		if s.At.Before(from) || s.At.After(to) || counter(s) < 0 {
			continue
		}
		key := ""
		if perLife {
			key = s.Life
		}
		sp, ok := spans[key]
		if !ok {
			spans[key] = &span{s, s}
			order = append(order, key)
			continue
		}
		sp.last = s
	}
	var grew int64
	var covered time.Duration
	for _, k := range order {
		sp := spans[k]
		if d := sp.last.At.Sub(sp.first.At); d > 0 {
			grew += max(counter(sp.last)-counter(sp.first), 0)
			covered += d
		}
	}
	if covered <= 0 {
		return 0, false
	}
	return float64(grew) / covered.Seconds(), true
}

// resume finds the replica's first publish after the heal of w, or that
// it published nothing after it while another replica went on
// publishing (until OthersUntil after the heal). It is judged of a
// replica that was not crashed, killed, paused or stopped from the
// window's start to that publish (or to the end of the history), and
// when some replica published after the heal.
func resume(in Input, w window, ro *ReplicaOutage) {
	var first, othersLast time.Time
	for _, op := range in.History {
		if op.F != history.Publish || op.Type == history.Invoke || !op.Time.After(w.to) || !w.hit(op.Process) {
			continue
		}
		switch {
		case op.Process == ro.Replica && first.IsZero():
			first = op.Time
		case op.Process != ro.Replica && slices.ContainsFunc(in.Replicas, func(r Replica) bool { return r.Name == op.Process }):
			othersLast = op.Time
		}
	}
	until := first
	if until.IsZero() && len(in.History) > 0 {
		until = in.History[len(in.History)-1].Time
	}
	for _, op := range in.History {
		if op.Time.Before(w.from) || op.Time.After(until) {
			continue
		}
		if (op.F == history.Crash || op.F == history.Restart) && op.Process == ro.Replica {
			ro.ResumeUnjudged = "it crashed or restarted in the window"
			return
		}
		if op.F == history.FaultStart && op.Fault != nil && op.Fault.Class == history.ClassProcess && slices.Contains(op.Fault.Targets, ro.Replica) {
			ro.ResumeUnjudged = "a fault of its process (" + op.Fault.Name + ") began before it resumed"
			return
		}
	}
	switch {
	case first.IsZero() && othersLast.IsZero():
		ro.ResumeUnjudged = "no replica published after the heal"
	case first.IsZero():
		ro.Never, ro.OthersUntil = true, othersLast.Sub(w.to)
	default:
		d := first.Sub(w.to)
		ro.Resume = &d
	}
}
