// Package rvtarget puts River (github.com/riverqueue/river v0.51.2, with
// its pgx v5 driver riverpgxv5) under outboxlab's chaos catalogue as an
// outbox: the business transaction inserts a River job that carries the
// event (package rvoutbox), and River's workers, in cmd/river-relay,
// publish it to RabbitMQ with publisher confirms. `outboxlab run --relay
// river`, or Target(command) in a suite.Target, with the command built
// from ./cmd/river-relay. River runs as its users run it: what the
// black-box contract needs is set, and River's defaults otherwise, but
// for two timings the harness cannot wait out (Env).
//
// # Settings
//
// The stage is rvoutbox.Schema(): River's migrations into the run's
// schema, one job per event through River's own Client.InsertTx (an
// insert-only client over riverpgxv5.New(nil)), with River's default
// attempt limit (25, kept in each job's max_attempts at the insert). The
// replica runs River's client in that schema with the replica's name as
// its client id, the contract's poll interval as FetchPollInterval and
// publish timeout as the worker's, and Env: RIVER_RESCUE_AFTER =
// rvoutbox.RescueAfter (the harness's lease, 4 s; River's default is an
// hour, which lease-expiry and crash-between-publish-and-mark would wait
// out) and RIVER_JOB_TIMEOUT = JobTimeout (3 s; River refuses a
// rescue-after shorter than the job timeout, whose default is a minute).
// The rest is River's default: its retry policy (n⁴ seconds after the
// n-th failure, ±10 % jitter), 100 workers, leader election and the
// leader's maintenance (rescuer every 30 s, scheduler every 5 s, job
// cleaner with completed jobs kept 24 h, cancelled 24 h, discarded 7
// days).
//
// # Promises
//
// Locking: a lease of rvoutbox.RescueAfter. River holds a job by setting
// state = 'running', attempted_at = the database's now() and appending
// its client id to attempted_by in the statement that fetches it
// (JobGetAvailable, riverdriver/riverpgxv5/internal/dbsqlc/river_job.sql),
// and only available jobs are fetched, so no other replica takes a
// running job. The hold ends only when the leader's rescuer
// (internal/maintenance/job_rescuer.go) finds attempted_at older than its
// clock's now minus RescueStuckJobsAfter (JobGetStuck) and makes the job
// retryable or discards it (JobRescueMany). The rows view shows the hold
// as locked_by = the last element of attempted_by, locked_at =
// attempted_at and locked_until = attempted_at + rvoutbox.RescueAfter,
// exactly the declared length, on the database clock: no replica can
// take the job before locked_until (given a leader whose clock agrees
// with the database's). It is a lease in that sense only. Nothing frees
// the job at locked_until: the rescuer runs every 30 s
// (JobRescuerIntervalDefault, which river.Config does not expose), the
// rescued job is retryable until River's retry policy's time has come
// and the leader's scheduler (every 5 s) makes it available, and no
// rescue runs while no leader does (a term lasts 15 s after the leader's
// last re-election, internal/leadership/elector.go). Another replica
// takes a job over up to about 35 s after its lease end, plus the retry
// wait (1 s for a first rescue), plus a leader's term and an election
// when the frozen replica was the leader.
//
// Not fenced. A worker writes its outcome through River's completer
// (internal/jobcompleter/job_completer.go, JobSetStateIfRunningMany in
// river_job.sql), whose UPDATE requires only state = 'running': it checks
// neither that attempted_by still ends in this client's id nor that the
// attempt is the one the worker ran, nor any lease end. A replica whose
// job was rescued and fetched again by another while it was frozen
// completes, or fails into a retry, the other's attempt when it resumes;
// the other's own outcome then finds the job no longer running and
// changes nothing. No event is lost by it (a worker completes a job only
// after the broker confirmed its publish), but the late write is not
// kept out, so fenced is not declared.
//
// Parks: not declared. River keeps a job that failed at its attempt
// limit in the table as discarded (faulted_at in the rows view, deleted
// by the cleaner only after 7 days), and never works it again: a park in
// the row's sense. But the promise is that poison of every kind is parked
// and never published, and River has no notion of the harness's poison:
// a job of an unknown type or with an undecodable payload is published
// like any other (its args are the event, whatever it holds), and only
// the broker's refusal (a returned, unroutable publish) fails it, up to
// 25 times with River's default policy, far longer than a run. So poison
// ends delivered, or pending, and no check of parking runs.
//
// Attempts: not declared. River has a limit, 25 by default
// (river.MaxAttemptsDefault): it discards a job whose attempt fails once its attempts reach the job's
// max_attempts (internal/jobexecutor/job_executor.go), and the rescuer
// discards a stuck job at it. River compares its attempt column, which
// counts fetches; the rows view shows the attempts used up, River's
// recorded errors (one per failed attempt and per rescue), which equal
// the fetches of a job whose last attempt failed, so a discarded job
// shows its limit, unless a late write of a rescued attempt (see
// fencing) added an error of its own. But River counts every error a
// worker returns as an attempt, a broker outage included, and an attempt
// limit declared to the harness promises that outages consume none
// (docs/contract.md §3.3): River makes no such promise, and with its
// retry policy its 25 attempts span weeks, so its limit is left
// undeclared rather than failed on a promise it does not make.
//
// Sweeps, with a retention of 24 h: the leader's job cleaner
// (internal/maintenance/job_cleaner.go, JobDeleteBefore) deletes completed
// jobs whose finalized_at is older than CompletedJobRetentionPeriod,
// River's default 24 h, by the leader's clock. It also deletes cancelled
// jobs after 24 h and discarded ones after 7 days, which the contract's
// sweep never does to a parked row; no run lasts that long.
//
// No backoff: River's default retry policy (internal/retrypolicy, n⁴
// seconds with jitter) has no shape contract.Backoff can declare.
// cmd/river-relay's RIVER_RETRY=BASE/MAX has contract.Backoff's shape
// (min(BASE × 2^(n-1), MAX) after the n-th recorded error, without
// jitter), which a target running it could declare; this one does not
// set it. No failpoints and no records: River has neither, and the
// replica adds none. Identity: the contract's message_id, which the
// worker sets to the event id.
//
// # What the catalogue found
//
// results/river/findings.md says, from seeds 1 to 3 of the catalogue,
// with the evidence and a replay command for each.
package rvtarget

import (
	"time"

	"github.com/riverqueue/river/rivershared/riversharedmaintenance"

	"github.com/outboxlab/outboxlab/contract"
	"github.com/outboxlab/outboxlab/scenarios"
	"github.com/outboxlab/outboxlab/target/river/rvoutbox"
)

// Name is the target's name in reports and on the command line.
const Name = "river"

// JobTimeout is River's job timeout under the harness: shorter than
// rvoutbox.RescueAfter, as River requires, and longer than the
// harness's publish timeout, which bounds the worker's publish.
const JobTimeout = 3 * time.Second

// Env is the relay's River settings under the harness beside River's
// defaults: the rescue-after that the rows view's lease end assumes, and
// a job timeout River accepts with it.
func Env() map[string]string {
	return map[string]string{
		"RIVER_RESCUE_AFTER": rvoutbox.RescueAfter.String(),
		"RIVER_JOB_TIMEOUT":  JobTimeout.String(),
	}
}

// Promises is what River promises as an outbox run with Env (see the
// package comment): a lease of rvoutbox.RescueAfter, and sweeps after
// River's default retention of completed jobs.
func Promises() contract.Promises {
	return contract.Promises{
		Locking:   contract.Lease(rvoutbox.RescueAfter),
		Sweeps:    true,
		Retention: riversharedmaintenance.CompletedJobRetentionPeriodDefault,
	}
}

// RetryName names River run with a capped exponential retry policy
// instead of River's default (RetryEnv), the setting that keeps a broker
// outage from pushing jobs back by minutes.
const RetryName = "river-retry"

// Retry is the capped exponential retry policy RetryName runs River's
// relay with: min(Base × 2^(n-1), Max) after the n-th failure, the shape
// contract.Backoff declares.
var Retry = contract.Backoff{Base: 100 * time.Millisecond, Max: 2 * time.Second}

// RetryTarget is Target with the relay's RIVER_RETRY set to Retry. The
// backoff is not declared: River computes a job's next time on the
// failing worker's clock, and its completer records the failure
// asynchronously, in batches, so the failures recorded on the database
// clock are spaced by the delay less the completer's lag (750 ms for
// 800 ms, say), short of the declared shape that the parking checker
// holds a relay to.
func RetryTarget(command string) scenarios.RelayUnderTest {
	u := Target(command)
	u.Name, u.Replay = RetryName, "--relay "+RetryName
	u.Env["RIVER_RETRY"] = Retry.String()
	return u
}

// Target is River as a relay under test: command, the path of the
// binary built from ./cmd/river-relay, run as a host process with Env,
// over rvoutbox's schema, with Promises. Its deliveries carry the event
// id as message_id, the contract's default identity.
func Target(command string) scenarios.RelayUnderTest {
	return scenarios.RelayUnderTest{
		Name:     Name,
		Command:  []string{command},
		Env:      Env(),
		Promises: Promises(),
		Outbox:   rvoutbox.Schema(),
		Replay:   "--relay " + Name,
	}
}
