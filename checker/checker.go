// Package checker turns a run's history and its final state into a verdict.
// Each checker is a pure function from the history (the operations recorded
// by producers, relays, consumers and the fault injector), the state read
// after heal and drain, and the run's Config, to a Result: valid or not,
// with the offending events and why. Check runs them all and sums them up in
// a Report. A checker never stops a test; the caller decides what a failed
// Result means.
//
// The checkers follow Jepsen's total-queue checker (lost, unexpected,
// duplicated, recovered) and split what the system promises (Config and its
// Features, the model) from the analysis of what happened (the checkers).
//
// # Ordering and clocks
//
// Records are ordered by history.Op.Index, the recorder's single sequence.
// Op.Time is the recording process's clock, which may be skewed, so times
// are compared only where a check says so: between two records of one
// process, or between the runner and the consumers, which run in the
// harness's process on one clock. Times of the database clock travel in
// Meta.DBTime and are compared with each other and with State's database
// times.
//
// # Recording conventions
//
// Every operation is an invoke followed by ok, fail or info from the same
// process with the same Func (history.Pairs matches them); completions
// repeat their invoke's Events, or the subset that took effect (a Mark ok
// lists only the rows actually marked, a Claim ok the rows claimed). Deliver,
// FaultStart, FaultStop, Crash, Restart and Phase may be recorded as single
// records without an invoke.
//
//   - Producers ("producer-N") record the Commit invoke with the staged
//     Events when the transaction begins, before staging or publishing
//     anything, then ok, fail (definitely not committed, rolled back
//     included) or info (unknown). CausedBy names the events whose
//     consumption caused the commit (multi-hop pipelines).
//     Unsafe producers record their inline Publish.
//   - Relays ("relay-<id>", in the simulation through its ports, on
//     containers in their own records, see relay.Records) record Claim
//     (ok: claimed ids, with DBTime = locked_at and Until = locked_until
//     when the store tells), Publish (one event; ok once confirmed, fail
//     when nacked or refused, info when the confirm never came; Confirm
//     says which), Mark (invoke: confirmed ids; ok: ids marked, Fenced the
//     rows the lease fence kept; fail or info when the statement failed),
//     Retry (ok: Attempts, Until = the next eligible time, and Parked when
//     it faulted the row; fail when the lease was lost), Park (ok when
//     faulted, fail when the lease was lost), Sweep (ok: ids deleted, when
//     the store can tell, and the retention Cutoff), Failpoint and Stop.
//     Mark, Retry and Sweep oks carry DBTime when the store can tell the
//     database time.
//   - Consumers ("consumer-N") record Deliver ok when the broker hands them a
//     message (Redelivered for a redelivery, Queue when a run has several
//     queues), and Apply (invoke, then ok; Duplicate when the inbox
//     absorbed it; fail when the transaction failed and the delivery was
//     requeued).
//   - The fault injector ("nemesis") brackets each fault with FaultStart and
//     FaultStop records whose Fault identifies it: its name (unique in the
//     run, what pairs a start with its stop), kind, class and target
//     processes (none: every process). Checkers scope and classify a fault
//     by Class and Targets only; the name is never parsed. Either single
//     records, or an invoke then
//     ok; an info completing a FaultStart (half applied) or a FaultStop
//     (heal failed) leaves the fault on. Crash and Restart carry Process =
//     the process that died and came back; a Crash closes every operation
//     that process had open, with an unknown outcome.
//   - The runner records Phase with Phase "safety", "liveness" (heal done,
//     workload stopped: the backlog must drain from here) and "check".
package checker

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/outboxlab/outboxlab/history"
)

// RowState is one outbox row as read at the end of the run.
type RowState struct {
	ID          string
	Type        string
	ProcessedAt *time.Time
	FaultedAt   *time.Time
	Attempts    int
	OccurredAt  time.Time
	// LockedAt and LockedUntil are the row's last lease, as the relay
	// wrote it on the database clock; nil when unknown or never leased.
	LockedAt, LockedUntil *time.Time
}

// State is the final state read after heal and drain.
type State struct {
	// Outbox holds the rows still in the outbox tables, by event id. Swept
	// rows are absent. Nil when the run has no outbox (Features.Stages
	// false) or did not read it.
	Outbox map[string]RowState
	// Effects counts, per event id, the effects consumers applied (the
	// effects table has no unique key, so a second effect shows here).
	// Nil when the run has no consumers that keep effects.
	Effects map[string]int
	// Projection holds, per entity, the version of it the consumers'
	// projection table ended at (see Convergence). Nil when the run has
	// no consumers that keep tables.
	Projection map[string]int
	// Business lists the event ids whose business row exists at the end
	// (the producers write one per event in the transaction that stages
	// it). Read after a failover of the database, nil otherwise: then
	// an acknowledged commit whose row is gone was undone by the
	// failover (see Failover).
	Business map[string]bool
	// Queued lists event ids still sitting in queues after the drain.
	Queued []string
	// DBStart and DBNow are the database clock at the start and at the end
	// of the run; either may be zero when unknown.
	DBStart time.Time
	DBNow   time.Time
}

// Features declares what the system under test promises beyond the core
// guarantee. The zero value assumes nothing; lost, phantom, unexpected and
// duplicate-effect checks apply whatever the features say. Stages describes
// the run; Config.WithPromises sets the others from what a relay declares
// (contract.Promises).
type Features struct {
	// Stages: events are staged as outbox rows that State.Outbox reflects.
	// False for the unsafe variants that publish inline.
	Stages bool
	// Parks: the relay faults poison rows (unknown type, undecodable,
	// rejected by the broker) instead of retrying them forever or
	// publishing them; within Config.MaxAttempts when one is declared.
	Parks bool
	// Fenced: the relay's marks, retries and parks take effect only while
	// it still holds the row's lease.
	Fenced bool
	// Sweeps: the relay deletes processed rows after Retention. When
	// false, no row may leave the outbox during the run.
	Sweeps bool
	// Deletes: the relay deletes a row once it has published it, and
	// marks none; its delete is its mark. A row gone is then judged by
	// its delivery (Lost), not by Retention, but a parked row must stay.
	Deletes bool
	// Unlocked: the relay takes no lock of a row, so two of its replicas
	// may both publish one row; such a second publish is explained by
	// CauseUnlocked (see DuplicateDeliveries).
	Unlocked bool
}

// EntityVersion is an event that updates an entity: which one, and which
// version of it the event carries. Versions of one entity count from 1
// in the order their updates committed.
type EntityVersion struct {
	Entity  string
	Version int
}

// Config is what a run promises: the relay's settings that the checks
// depend on, which events the workload made poison, and the features. A
// relay's declaration (contract.Promises) sets its part through
// WithPromises.
type Config struct {
	// Retention is how long processed rows are kept (by the database
	// clock). Default 7 days, the relay's default.
	Retention time.Duration
	// Lease is the lease the relay declares, which the rows it leased must
	// show (see Fencing). Zero: lease lengths are not checked.
	Lease time.Duration
	// MaxAttempts is the attempt limit the relay declares, after which it
	// parks a row. Zero: the relay declared no limit, and no check of the
	// attempt count runs (another relay's limit is never assumed).
	MaxAttempts int
	// Backoff(n) is the least delay between a Retry ok that left a row at
	// n attempts and that row's next Retry ok. A relay that backs a row off
	// by relay.RetryPolicy.Backoff(attempts before the failure), as the
	// PostgreSQL store does, passes func(n) { return policy.Backoff(n-1) }.
	// Nil: the spacing of retries is not checked.
	Backoff func(attempts int) time.Duration
	// Poison lists the event ids the workload made poison.
	Poison map[string]bool
	// Versions gives, for a workload whose events are updates of
	// entities, each event's entity and version (see Convergence); nil
	// otherwise.
	Versions map[string]EntityVersion
	// LivenessBound is how long after the liveness phase starts every
	// committed event must be delivered. Zero: delivered by the end of the
	// run, with no bound.
	LivenessBound time.Duration
	// BrokerOnly says the run has no consumers: an event counts as
	// delivered once the broker confirmed it (Publish ok), delivered it
	// (Deliver ok) or still holds it (State.Queued).
	BrokerOnly bool
	// Features are the promises of the system under test.
	Features Features
	// SyncReplication says the database's standby was synchronous: a
	// failover to it must undo no acknowledged commit (see Failover).
	SyncReplication bool
	// Relays names the run's relay processes, as fault targets name them:
	// for a relay that records nothing, the duplicates checker sees which
	// faults hit a relay.
	Relays []string
}

// DefaultRetention is Config.Retention's default.
const DefaultRetention = 7 * 24 * time.Hour

func (c Config) withDefaults() Config {
	if c.Retention == 0 {
		c.Retention = DefaultRetention
	}
	return c
}

// Result is the verdict of one checker.
type Result struct {
	// Checker names the checker ("lost", "phantom", ...).
	Checker string
	// Valid is false when the checker found a violation.
	Valid bool
	// Skipped says the checker had nothing to check (no liveness phase, no
	// causal links, a feature not promised); Valid is then true.
	Skipped bool
	// Offending lists the event ids that violate the checker's invariant,
	// in the order they first appear in the history.
	Offending []string
	// Reasons says, per offending event, what went wrong.
	Reasons map[string]string
	// Detail is a one-line summary.
	Detail string
	// Counts are the checker's own tallies.
	Counts map[string]int
	// By attributes counts to causes: duplicates per explaining cause.
	By map[string]int
	// Noted lists events a checker reports without failing the run,
	// with their Reasons: what the deployment it ran on risks (the
	// commits a failover to an asynchronous standby undid).
	Noted []string `json:",omitempty"`
	// Unexplained counts what a checker could not explain by what it was
	// near: unexplained duplicates by the fault windows their journey
	// overlapped, which explain nothing by themselves ("none": no window).
	Unexplained map[string]int
}

// Counts sums up a run.
type Counts struct {
	// Events is the number of distinct event ids staged or seen.
	Events int
	// Committed, RolledBack and Indeterminate classify the staged events by
	// their commits: ok, definitely failed, unknown.
	Committed, RolledBack, Indeterminate int
	// Recovered counts indeterminate events that showed up anyway.
	Recovered int
	// Delivered counts distinct events delivered end to end (applied, or
	// reached the broker when BrokerOnly).
	Delivered int
	// Lost, Phantom and Unexpected count the safety violations.
	Lost, Phantom, Unexpected int
	// Publishes and Deliveries count Publish ok and Deliver ok records;
	// the Duplicate counts are those beyond the first per event.
	Publishes, DuplicatePublishes   int
	Deliveries, DuplicateDeliveries int
	// UnexplainedDuplicates are duplicates no fault explains.
	UnexplainedDuplicates int
	// DuplicatesBy attributes explained duplicates to the causes that
	// touched their rows (see DuplicateDeliveries).
	DuplicatesBy map[string]int `json:",omitempty"`
	// UnexplainedBy counts unexplained duplicates by the fault windows
	// their journey overlapped ("none": no window).
	UnexplainedBy map[string]int `json:",omitempty"`
	// DuplicateEffects counts events whose effect was applied twice.
	DuplicateEffects int
	// Poison and Parked count poison events and events that ended faulted.
	Poison, Parked int
	// LostLeases counts confirmed rows a mark did not mark.
	LostLeases int
	// DrainTime is the time from the liveness phase to the last first
	// delivery; zero without a liveness phase.
	DrainTime time.Duration
	// OutOfOrder counts, for a workload whose events update entities,
	// the events first applied after a newer version of their entity.
	OutOfOrder int `json:",omitempty"`
	// FailoverLost and FailoverPhantom count the acknowledged commits a
	// failover of the database undid (see Failover): never delivered,
	// and delivered.
	FailoverLost    int `json:",omitempty"`
	FailoverPhantom int `json:",omitempty"`
}

// Report is the verdict of every checker over one run.
type Report struct {
	Valid   bool
	Results []Result
	Counts  Counts
}

// Failed returns the results that found a violation.
func (r Report) Failed() []Result {
	var out []Result
	for _, res := range r.Results {
		if !res.Valid {
			out = append(out, res)
		}
	}
	return out
}

// Result returns the result of the named checker.
func (r Report) Result(name string) (Result, bool) {
	for _, res := range r.Results {
		if res.Checker == name {
			return res, true
		}
	}
	return Result{}, false
}

// Checker names, in the order Check runs them.
const (
	NameWellFormed          = "well-formed"
	NameLost                = "lost"
	NamePhantom             = "phantom"
	NameUnexpected          = "unexpected"
	NameDuplicateDeliveries = "duplicate-deliveries"
	NameDuplicateEffects    = "duplicate-effects"
	NameParking             = "parking"
	NameRetention           = "retention"
	NameFencing             = "fencing"
	NameLeases              = "leases"
	NameLiveness            = "liveness"
	NameCausalOrder         = "causal-order"
	NameConvergence         = "convergence"
	NameFailover            = "failover"
)

// Check runs every checker over one run and sums the results up.
func Check(h []history.Op, s State, cfg Config) Report {
	a := analyze(h, s, cfg)
	results := []Result{
		a.wellFormed(),
		a.lost(),
		a.phantom(),
		a.unexpected(),
		a.duplicateDeliveries(),
		a.duplicateEffects(),
		a.parking(),
		a.retention(),
		a.fencing(),
		a.leases(),
		a.liveness(),
		a.causalOrder(),
		a.convergence(),
		a.failover(),
	}
	rep := Report{Valid: true, Results: results, Counts: a.counts()}
	for _, r := range results {
		if !r.Valid {
			rep.Valid = false
		}
		switch r.Checker {
		case NameLost:
			rep.Counts.Lost = len(r.Offending)
		case NamePhantom:
			rep.Counts.Phantom = len(r.Offending)
		case NameUnexpected:
			rep.Counts.Unexpected = len(r.Offending)
		case NameDuplicateDeliveries:
			rep.Counts.UnexplainedDuplicates = r.Counts["unexplained"]
			rep.Counts.DuplicatesBy = r.By
			rep.Counts.UnexplainedBy = r.Unexplained
		case NameDuplicateEffects:
			rep.Counts.DuplicateEffects = len(r.Offending)
		case NameLiveness:
			rep.Counts.DrainTime = time.Duration(r.Counts["drain_ms"]) * time.Millisecond
		case NameConvergence:
			rep.Counts.OutOfOrder = r.Counts["out_of_order"]
		case NameFailover:
			rep.Counts.FailoverLost, rep.Counts.FailoverPhantom = r.Counts["failover_lost"], r.Counts["failover_phantom"]
		}
	}
	return rep
}

// String renders the report as Summary does.
func (r Report) String() string { return r.Summary() }

// Summary renders the report for a person: the verdict, the counts, and for
// each violated invariant its detail and its first few offending events.
func (r Report) Summary() string {
	const maxShown = 5
	var b strings.Builder
	failed := r.Failed()
	if r.Valid {
		fmt.Fprintf(&b, "VERDICT: PASS (%d checkers)\n", len(r.Results))
	} else {
		names := make([]string, len(failed))
		for i, f := range failed {
			names[i] = f.Checker
		}
		fmt.Fprintf(&b, "VERDICT: FAIL (%d of %d checkers: %s)\n", len(failed), len(r.Results), strings.Join(names, ", "))
	}
	c := r.Counts
	fmt.Fprintf(&b, "events: %d committed, %d rolled back, %d indeterminate (%d recovered); %d delivered\n",
		c.Committed, c.RolledBack, c.Indeterminate, c.Recovered, c.Delivered)
	fmt.Fprintf(&b, "safety: %d lost, %d phantom, %d unexpected, %d duplicate effects\n",
		c.Lost, c.Phantom, c.Unexpected, c.DuplicateEffects)
	fmt.Fprintf(&b, "duplicates: %d publishes (%d extra), %d deliveries (%d extra), %d unexplained",
		c.Publishes, c.DuplicatePublishes, c.Deliveries, c.DuplicateDeliveries, c.UnexplainedDuplicates)
	if len(c.DuplicatesBy) > 0 {
		var parts []string
		for _, k := range slices.Sorted(maps.Keys(c.DuplicatesBy)) {
			parts = append(parts, fmt.Sprintf("%s=%d", k, c.DuplicatesBy[k]))
		}
		fmt.Fprintf(&b, "; explained by: %s", strings.Join(parts, ", "))
	}
	if len(c.UnexplainedBy) > 0 {
		var parts []string
		for _, k := range slices.Sorted(maps.Keys(c.UnexplainedBy)) {
			parts = append(parts, fmt.Sprintf("%s=%d", k, c.UnexplainedBy[k]))
		}
		fmt.Fprintf(&b, "; unexplained, near: %s", strings.Join(parts, ", "))
	}
	b.WriteString("\n")
	fmt.Fprintf(&b, "parking: %d poison, %d parked; lost leases: %d; drain time: %s\n",
		c.Poison, c.Parked, c.LostLeases, c.DrainTime)
	for _, res := range r.Results {
		switch {
		case !res.Valid:
			fmt.Fprintf(&b, "FAIL %s: %s\n", res.Checker, res.Detail)
			for i, id := range res.Offending {
				if i == maxShown {
					fmt.Fprintf(&b, "     ... and %d more\n", len(res.Offending)-maxShown)
					break
				}
				if why := res.Reasons[id]; why != "" {
					fmt.Fprintf(&b, "     %s: %s\n", id, why)
				} else {
					fmt.Fprintf(&b, "     %s\n", id)
				}
			}
		case res.Skipped:
			fmt.Fprintf(&b, "skip %s: %s\n", res.Checker, res.Detail)
		default:
			fmt.Fprintf(&b, "ok   %s: %s\n", res.Checker, res.Detail)
		}
	}
	return b.String()
}

// verdict collects the offending events of one checker.
type verdict struct {
	a       *analysis
	name    string
	reasons map[string]string
	counts  map[string]int
	by      map[string]int
	// noted lists the events reported without failing the run, in the
	// order noted, with their reasons in notes.
	noted []string
	notes map[string]string
}

func (a *analysis) verdict(name string) *verdict {
	return &verdict{a: a, name: name, reasons: map[string]string{}, counts: map[string]int{}}
}

// offend records a violation by id; the first reason given for an id stays.
func (v *verdict) offend(id, format string, args ...any) {
	if _, ok := v.reasons[id]; ok {
		return
	}
	v.reasons[id] = fmt.Sprintf(format, args...)
}

// note records an event the checker reports without failing the run
// (Result.Noted); the first reason given for an id stays.
func (v *verdict) note(id, format string, args ...any) {
	if _, ok := v.notes[id]; ok {
		return
	}
	if v.notes == nil {
		v.notes = map[string]string{}
	}
	v.noted = append(v.noted, id)
	v.notes[id] = fmt.Sprintf(format, args...)
}

// result builds the Result; detail says what was checked, and a failed
// result's detail is prefixed with the number of offending events.
func (v *verdict) result(detail string) Result {
	r := Result{Checker: v.name, Valid: len(v.reasons) == 0, Counts: v.counts, By: v.by}
	if !r.Valid {
		r.Reasons = v.reasons
		r.Offending = slices.Collect(maps.Keys(v.reasons))
		slices.SortFunc(r.Offending, func(x, y string) int {
			return cmp.Or(cmp.Compare(v.a.firstIndex(x), v.a.firstIndex(y)), cmp.Compare(x, y))
		})
		detail = fmt.Sprintf("%d offending; %s", len(r.Offending), detail)
	}
	if len(v.noted) > 0 {
		r.Noted = v.noted
		if r.Reasons == nil {
			r.Reasons = map[string]string{}
		}
		maps.Copy(r.Reasons, v.notes)
	}
	r.Detail = detail
	return r
}

func skipped(name, why string) Result {
	return Result{Checker: name, Valid: true, Skipped: true, Detail: why}
}
