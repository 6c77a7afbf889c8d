// Package lesson holds the lessons of `outboxlab demo --lesson`: each one
// answers a question of the outbox pattern's guarantee table by running
// one scenario of the catalogue, on real PostgreSQL and RabbitMQ, against
// cases that answer it wrongly (the contrasts) and cases that answer it
// rightly, with the same workload, faults and seed. A contrast must fail,
// and fail by the checker whose verdict is the lesson; the others must
// pass. Every sentence a lesson prints is built from its runs' counts.
package lesson

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxlab/outboxlab/checker"
	"github.com/outboxlab/outboxlab/consumer"
	"github.com/outboxlab/outboxlab/contract"
	"github.com/outboxlab/outboxlab/history"
	"github.com/outboxlab/outboxlab/internal/mutant"
	"github.com/outboxlab/outboxlab/scenarios"
	"github.com/outboxlab/outboxlab/workload"
)

// Seed is the seed every lesson runs with unless told otherwise: the
// demo's, so that a lesson tells the same story each time.
const Seed = 42

// Lesson is one question of the guarantee table, shown live.
type Lesson struct {
	// Name is how `demo --lesson` calls it.
	Name string
	// Question and Answer are the row of the guarantee table.
	Question, Answer string
	// Scenario is the catalogue's scenario every case runs.
	Scenario string
	// Cases are run in order, the contrasts first.
	Cases []Case
}

// Case is one way of answering the lesson's question: the relay and the
// consumers a run puts under the scenario.
type Case struct {
	// Label names the case in the table.
	Label string
	// How says in one sentence what the case does.
	How string
	// Contrast: the case answers the question wrongly, so its run must
	// fail, by the checker Teaches.
	Contrast bool
	// Teaches is the checker whose failure is the lesson.
	Teaches string
	// Mode is how producers get their events out; the zero value is the
	// outbox.
	Mode workload.Mode
	// Relay is the relay under test; the zero value is ours.
	Relay scenarios.RelayUnderTest
	// Consumer, when set, replaces our consumers' inbox.
	Consumer *scenarios.ConsumerUnderTest
}

// All returns the lessons, in the order of the guarantee table.
func All() []Lesson {
	return []Lesson{atLeastOnce(), acrossContexts(), ordering(), asynchronous(), markThenSweep(), poison()}
}

// Lookup returns the lesson named name.
func Lookup(name string) (Lesson, bool) {
	for _, l := range All() {
		if l.Name == name {
			return l, true
		}
	}
	return Lesson{}, false
}

// Names returns the lessons' names, in order.
func Names() []string {
	var out []string
	for _, l := range All() {
		out = append(out, l.Name)
	}
	return out
}

// Judge says whether the run res of c behaved as the lesson says (a
// contrast failed by Teaches, with nothing inconclusive; any other case
// passed), and why, in one sentence built from the run's counts.
func (c Case) Judge(res scenarios.Result) (ok bool, why string) {
	failedBy := failedCheckers(res)
	switch {
	case res.Verdict() == scenarios.VerdictInconclusive:
		return false, "the run was inconclusive: " + strings.Join(res.Inconclusive, "; ")
	case c.Contrast && !slices.Contains(failedBy, c.Teaches):
		if len(failedBy) == 0 && len(res.Problems) == 0 {
			return false, fmt.Sprintf("it was expected to fail %s and passed", c.Teaches)
		}
		return false, fmt.Sprintf("it was expected to fail %s and failed %s", c.Teaches, strings.Join(append(failedBy, res.Problems...), "; "))
	case !c.Contrast && res.Verdict() != scenarios.VerdictPass:
		return false, "it was expected to pass and failed: " + strings.Join(res.Problems, "; ")
	}
	return true, sentence(c, res)
}

// failedCheckers names the checkers that failed res.
func failedCheckers(res scenarios.Result) []string {
	var out []string
	for _, f := range res.Report.Failed() {
		out = append(out, f.Checker)
	}
	return out
}

// sentence tells what happened in a case's run, from its counts.
func sentence(c Case, res scenarios.Result) string {
	n := res.Counts
	switch {
	case c.Teaches == checker.NameDuplicateEffects && c.Contrast:
		return fmt.Sprintf("%s reached the consumers more than once (%s), and this consumer applied %s again: at-least-once delivery with no dedupe is a duplicate effect",
			count(countDuplicated(res), "event"), count(n.DuplicateDeliveries, "extra delivery"), count(n.DuplicateEffects, "of them"))
	case c.Teaches == checker.NameDuplicateEffects:
		return fmt.Sprintf("%s reached the consumers more than once (%s), and no effect was applied twice: the consumer absorbed every duplicate",
			count(countDuplicated(res), "event"), count(n.DuplicateDeliveries, "extra delivery"))
	case c.Teaches == checker.NameLost && c.Contrast:
		return fmt.Sprintf("%d of %s were lost: each request published inline after its COMMIT and waited for it, and while the broker was down the publish failed after the write had committed",
			n.Lost, count(n.Committed, "committed event"))
	case c.Teaches == checker.NameLost:
		p50, p99 := deliveryLatency(res)
		return fmt.Sprintf("all %s were delivered; each request returned at its COMMIT, and the relay published afterwards: from COMMIT to delivery took %s at the median and %s at the 99th percentile, the outage included",
			count(n.Committed, "committed event"), p50, p99)
	case c.Teaches == checker.NameParking && c.Contrast:
		return fmt.Sprintf("%s committed; the relay deleted %s it should have parked, so no operator will ever see what went wrong, while the other %d events were delivered",
			count(n.Poison, "poison event was", "poison events were"), count(offending(res, checker.NameParking), "row"), n.Delivered)
	case c.Teaches == checker.NameParking:
		return fmt.Sprintf("%s committed; %d ended parked for an operator, never deleted, while the other %d events were delivered around them",
			count(n.Poison, "poison event was", "poison events were"), n.Parked, n.Delivered)
	case c.Teaches == checker.NameConvergence && c.Contrast:
		return fmt.Sprintf("%s first applied after a newer version of their order, and this consumer let each overwrite the newer state: %d of %s ended at an older version than the newest it applied",
			count(n.OutOfOrder, "event was", "events were"), offending(res, checker.NameConvergence), count(entities(res), "order"))
	case c.Teaches == checker.NameConvergence:
		return fmt.Sprintf("%s first applied after a newer version of their order, and all %s ended at their newest version: the guard skipped every stale event",
			count(n.OutOfOrder, "event was", "events were"), count(entities(res), "order"))
	case c.Teaches == checker.NameRetention && c.Contrast:
		return fmt.Sprintf("%d of %s were delivered, and the outbox kept no trace of %d of them: \"was it published, and when?\" has no answer there",
			n.Delivered, count(n.Committed, "committed event"), offending(res, checker.NameRetention))
	case c.Teaches == checker.NameRetention:
		return fmt.Sprintf("%d of %s were delivered, and every published row stayed in the outbox with the time of its publish, for the sweep to delete once retention has passed",
			n.Delivered, count(n.Committed, "committed event"))
	}
	return fmt.Sprintf("%d committed, %d delivered, %d lost, %d phantom", n.Committed, n.Delivered, n.Lost, n.Phantom)
}

// count writes n and the noun, in the plural (its second form, or an
// "s" added to the first) unless n is 1.
func count(n int, noun string, plural ...string) string {
	switch {
	case n == 1:
		return "1 " + noun
	case len(plural) > 0:
		return fmt.Sprintf("%d %s", n, plural[0])
	case strings.HasSuffix(noun, "y"):
		return fmt.Sprintf("%d %sies", n, strings.TrimSuffix(noun, "y"))
	case strings.HasSuffix(noun, "them"):
		return fmt.Sprintf("%d %s", n, noun)
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// deliveryLatency returns the median and 99th percentile of the time from
// each event's COMMIT (its producer's commit ok) to its first delivery,
// over the events that were delivered, rounded to the millisecond.
func deliveryLatency(res scenarios.Result) (p50, p99 time.Duration) {
	committed := map[string]time.Time{}
	delivered := map[string]time.Time{}
	for _, op := range res.History {
		if op.Type != history.OK {
			continue
		}
		for _, e := range op.Events {
			switch op.F {
			case history.Commit:
				if _, ok := committed[e]; !ok {
					committed[e] = op.Time
				}
			case history.Deliver:
				if _, ok := delivered[e]; !ok {
					delivered[e] = op.Time
				}
			}
		}
	}
	var ds []time.Duration
	for e, at := range delivered {
		if c, ok := committed[e]; ok && !at.Before(c) {
			ds = append(ds, at.Sub(c))
		}
	}
	if len(ds) == 0 {
		return 0, 0
	}
	slices.Sort(ds)
	pick := func(q float64) time.Duration {
		return ds[min(len(ds)-1, int(q*float64(len(ds))))].Round(time.Millisecond)
	}
	return pick(0.5), pick(0.99)
}

// offending counts the events the checker named failed in res.
func offending(res scenarios.Result, name string) int {
	if r, ok := res.Report.Result(name); ok {
		return len(r.Offending)
	}
	return 0
}

// entities counts the entities the convergence checker judged in res.
func entities(res scenarios.Result) int {
	if r, ok := res.Report.Result(checker.NameConvergence); ok {
		return r.Counts["entities"]
	}
	return 0
}

// countDuplicated counts the events delivered more than once.
func countDuplicated(res scenarios.Result) int {
	seen := map[string]int{}
	for _, op := range res.History {
		if op.F == history.Deliver && op.Type == history.OK {
			for _, e := range op.Events {
				seen[e]++
			}
		}
	}
	n := 0
	for _, k := range seen {
		if k > 1 {
			n++
		}
	}
	return n
}

// atLeastOnce is the lesson "exactly once? no: at-least-once; the
// consumer dedupes".
func atLeastOnce() Lesson {
	noDedupe, _ := mutant.Lookup("consumer-no-dedupe")
	return Lesson{
		Name:     "at-least-once",
		Question: "exactly once?",
		Answer:   "no: at-least-once; the consumer dedupes",
		Scenario: scenarios.CrashBeforeMark,
		Cases: []Case{
			{
				Label: "no dedupe", Contrast: true, Teaches: checker.NameDuplicateEffects,
				How: "the consumer applies every delivery it gets",
				Consumer: &scenarios.ConsumerUnderTest{
					Name: "no-dedupe",
					Wrap: func(in consumer.Inbox, pool *pgxpool.Pool, effect consumer.Effect) consumer.Inbox {
						return noDedupe.WrapInbox(in, mutant.PGEffect(pool, effect))
					},
				},
			},
			{
				Label: "state check", Teaches: checker.NameDuplicateEffects,
				How: "the consumer locks the event, looks for the effect it leaves, and applies nothing when it is there",
				Consumer: &scenarios.ConsumerUnderTest{
					Name: "state-check",
					Wrap: func(_ consumer.Inbox, pool *pgxpool.Pool, effect consumer.Effect) consumer.Inbox {
						return stateCheck{pool: pool, effect: effect}
					},
				},
			},
			{
				Label: "business key", Teaches: checker.NameDuplicateEffects,
				How: "the consumer records what the event did to which order (its type and order id) under a unique key, in the transaction of the effect",
				Consumer: &scenarios.ConsumerUnderTest{
					Name: "business-key",
					Wrap: func(in consumer.Inbox, _ *pgxpool.Pool, _ consumer.Effect) consumer.Inbox {
						return businessKey{in: in.(*consumer.PGInbox)}
					},
				},
			},
			{
				Label: "inbox", Teaches: checker.NameDuplicateEffects,
				How: "the consumer records the event's id in its inbox with a unique key, in the transaction of the effect",
			},
		},
	}
}

// lastApplyWinsConsumer is the contrast of the ordering lessons: a
// consumer that writes each order's state from the event it applies last.
func lastApplyWinsConsumer() *scenarios.ConsumerUnderTest {
	return &scenarios.ConsumerUnderTest{
		Name: "last-apply-wins",
		Project: func(name string, version consumer.Versioned) consumer.Effect {
			return lastApplyWins{consumer: name, version: version}.apply
		},
	}
}

// acrossContexts is the lesson "is there an order across contexts? no:
// independent relays share no sequence".
func acrossContexts() Lesson {
	return orderLesson("across-contexts", "is there an order across contexts?",
		"no: each context has its own outbox and relay, and nothing orders one context's events against another's",
		scenarios.CrossContext,
		"the consumer assumes the two contexts' events arrive in the order they were committed and writes each order's state from the event it applies last",
		"the consumer writes an order's state only from an event newer than the version it holds, whichever context it came from")
}

// ordering is the lesson "strict order inside one context? no: oldest
// first is a hint; the consumer keeps state by version".
func ordering() Lesson {
	return orderLesson("ordering", "strict order inside one context?",
		"no: the relay claims oldest first, but competing consumers and redelivery reorder events; the consumer keeps each entity's state by version",
		scenarios.OutOfOrder,
		"the consumer assumes events arrive in order and writes each order's state from the event it applies last",
		"the consumer writes an order's state only from an event newer than the version it holds, and skips a stale one")
}

// orderLesson is a lesson of the ordering rows of the table: the
// scenario's events update orders and arrive out of order; a consumer
// whose state is the last event it applied (the contrast) fails
// convergence, the harness's consumer with its staleness guard passes.
func orderLesson(name, question, answer, scenario, lastWinsHow, guardHow string) Lesson {
	return Lesson{
		Name: name, Question: question, Answer: answer, Scenario: scenario,
		Cases: []Case{
			{
				Label: "last apply wins", Contrast: true, Teaches: checker.NameConvergence,
				How: lastWinsHow, Consumer: lastApplyWinsConsumer(),
			},
			{Label: "staleness guard", Teaches: checker.NameConvergence, How: guardHow},
		},
	}
}

// asynchronous is the lesson "does the request wait for the publish? no:
// the relay publishes asynchronously".
func asynchronous() Lesson {
	return Lesson{
		Name:     "asynchronous",
		Question: "does the request wait for the publish?",
		Answer:   "no: it returns at COMMIT, and the relay publishes afterwards, woken at once by NOTIFY or at its next poll",
		Scenario: scenarios.BrokerDown,
		Cases: []Case{
			{
				Label: "inline publish", Contrast: true, Teaches: checker.NameLost, Mode: workload.CommitThenPublish,
				How: "each request commits, then publishes the event itself and waits for the broker",
			},
			{
				Label: "outbox, polling", Teaches: checker.NameLost,
				How:   "each request stages the event and returns at COMMIT; the relay polls every second",
				Relay: scenarios.RelayUnderTest{Name: "ours-polling", Env: map[string]string{contract.EnvNotify: "false", contract.EnvPollInterval: "1s"}},
			},
			{
				Label: "outbox, NOTIFY", Teaches: checker.NameLost,
				How:   "each request stages the event and returns at COMMIT; the relay polls every second and is woken at once by the NOTIFY the COMMIT sends",
				Relay: scenarios.RelayUnderTest{Name: "ours-notify", Env: map[string]string{contract.EnvNotify: "true", contract.EnvPollInterval: "1s"}},
			},
		},
	}
}

// markThenSweep is the lesson "does a row vanish right after publish?
// no: mark-then-sweep".
func markThenSweep() Lesson {
	const deleteOnPublish = "delete-before-confirm"
	return Lesson{
		Name:     "mark-then-sweep",
		Question: "does a row vanish right after publish?",
		Answer:   "no: it is marked, and swept only after retention",
		Scenario: scenarios.Baseline,
		Cases: []Case{
			{
				Label: "delete on publish", Contrast: true, Teaches: checker.NameRetention,
				How:   "the relay deletes each row as soon as it has sent its publish",
				Relay: scenarios.RelayUnderTest{Name: deleteOnPublish, Mutants: true, Env: map[string]string{mutant.EnvVar: deleteOnPublish}},
			},
			{
				Label: "mark, then sweep", Teaches: checker.NameRetention,
				How: "the relay marks each row published once the broker confirms it, and sweeps processed rows after retention",
			},
		},
	}
}

// poison is the lesson "are faulted (poison) rows deleted automatically?
// never; only an operator does".
func poison() Lesson {
	const drop = "drop-poison"
	return Lesson{
		Name:     "poison",
		Question: "are poison rows deleted automatically?",
		Answer:   "never: they are retried with backoff, parked, and left for an operator",
		Scenario: scenarios.Poison,
		Cases: []Case{
			{
				Label: "drop poison", Contrast: true, Teaches: checker.NameParking,
				How:   "the relay deletes each row it should park",
				Relay: scenarios.RelayUnderTest{Name: drop, Mutants: true, Env: map[string]string{mutant.EnvVar: drop}},
			},
			{
				Label: "park", Teaches: checker.NameParking,
				How: "the relay retries a failing row with backoff, parks it at the attempt limit (an unknown type or undecodable payload at once), and never deletes it",
			},
		},
	}
}

// lastApplyWins keeps each entity's state from the event applied last,
// whatever its version: a consumer that assumes events arrive in the
// order they were staged.
type lastApplyWins struct {
	consumer string
	version  consumer.Versioned
}

func (l lastApplyWins) apply(ctx context.Context, tx pgx.Tx, m consumer.Message) error {
	entity, v, ok := l.version(m)
	if !ok {
		return nil
	}
	if _, err := tx.Exec(ctx, `INSERT INTO projection (consumer, entity, version, message_id) VALUES ($1, $2, $3, $4)
		ON CONFLICT (consumer, entity) DO UPDATE SET version = excluded.version, message_id = excluded.message_id, updated_at = now()`,
		l.consumer, entity, v, m.ID); err != nil {
		return fmt.Errorf("projecting %s: %w", m.ID, err)
	}
	return nil
}

// businessKey is the dedupe strategy of a unique business key: the
// consumer keys its dedupe on what the event means (its type and the
// order it is about), not on the event's id, so that a duplicate is
// recognised even when it came with another id. It records the key in
// the inbox table, under its unique key, in the effect's transaction.
type businessKey struct {
	in *consumer.PGInbox
}

func (b businessKey) Apply(ctx context.Context, m consumer.Message) (bool, error) {
	var p workload.OrderPlaced
	if err := json.Unmarshal(m.Payload, &p); err != nil || p.OrderID == "" {
		return false, fmt.Errorf("applying %s: no order in its payload %q", m.ID, m.Payload)
	}
	return b.in.ApplyKeyed(ctx, m.Type+"/"+p.OrderID, m, true)
}

// stateCheck is the dedupe strategy of an existing-state check: in the
// effect's transaction, under a lock on the event (an advisory lock on
// its id), the consumer looks for the effect the event leaves, and
// applies nothing when it is there. It keeps no inbox.
type stateCheck struct {
	pool   *pgxpool.Pool
	effect consumer.Effect
}

func (s stateCheck) Apply(ctx context.Context, m consumer.Message) (bool, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return false, fmt.Errorf("applying %s: begin: %w", m.ID, err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext($1))`, m.ID); err != nil {
		return false, fmt.Errorf("applying %s: locking it: %w", m.ID, err)
	}
	var done bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM effects WHERE message_id = $1)`, m.ID).Scan(&done); err != nil {
		return false, fmt.Errorf("applying %s: looking for its effect: %w", m.ID, err)
	}
	if done {
		return true, nil
	}
	if err := s.effect(ctx, tx, m); err != nil {
		return false, fmt.Errorf("applying %s: %w", m.ID, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return false, fmt.Errorf("applying %s: commit: %w", m.ID, err)
	}
	return false, nil
}
