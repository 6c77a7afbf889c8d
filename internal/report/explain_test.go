package report

import (
	"strings"
	"testing"
	"time"

	"github.com/outboxlab/outboxlab/checker"
	"github.com/outboxlab/outboxlab/history"
)

func explained(t *testing.T, variant string, b *hb) string {
	t.Helper()
	rep := checker.Check(b.ops, checker.State{}, checker.Config{})
	return Explain(Run{Variant: variant, Report: rep, History: b.ops})
}

func TestExplainNamesWhatLostEachEvent(t *testing.T) {
	b := &hb{}
	p := "producer-1"
	// e1: committed, then the producer died before publishing.
	b.at(0).rec(p, history.Invoke, history.Commit, history.Meta{}, "e1").rec(p, history.OK, history.Commit, history.Meta{}, "e1").
		rec(p, history.Info, history.Crash, history.Meta{Detail: "after-commit"})
	// e2 and e4 commit together; e2's publish fails (broker down) and the
	// producer gives up on e4.
	b.at(time.Second).rec(p, history.Invoke, history.Commit, history.Meta{}, "e2", "e4").rec(p, history.OK, history.Commit, history.Meta{}, "e2", "e4").
		rec(p, history.Invoke, history.Publish, history.Meta{}, "e2").rec(p, history.Fail, history.Publish, history.Meta{}, "e2")
	// e3: delivered.
	b.at(2*time.Second).rec(p, history.Invoke, history.Commit, history.Meta{}, "e3").rec(p, history.OK, history.Commit, history.Meta{}, "e3").
		rec(p, history.Invoke, history.Publish, history.Meta{}, "e3").rec(p, history.OK, history.Publish, history.Meta{}, "e3").
		rec("consumer-1", history.OK, history.Deliver, history.Meta{}, "e3").rec("consumer-1", history.Invoke, history.Apply, history.Meta{}, "e3").
		rec("consumer-1", history.OK, history.Apply, history.Meta{}, "e3")
	got := explained(t, "commit-then-publish", b)
	want := "3 of 4 committed events were lost: 1 because the producer died between COMMIT and publish, " +
		"1 because the inline publish failed while the broker was unreachable, " +
		"1 because an earlier publish of the same transaction failed and the producer gave up on the rest, " +
		"and nothing retries an inline publish."
	if got != want {
		t.Errorf("Explain =\n%s\nwant\n%s", got, want)
	}
}

func TestExplainRequestsRefusedByAnOutage(t *testing.T) {
	b := &hb{}
	p := "producer-1"
	b.at(0).rec(p, history.Invoke, history.Commit, history.Meta{}, "e1").
		rec(p, history.Invoke, history.Publish, history.Meta{}, "e1").rec(p, history.Fail, history.Publish, history.Meta{}, "e1").
		rec(p, history.Fail, history.Commit, history.Meta{}, "e1")
	// A rollback with no publish failure is not a refused request.
	b.rec(p, history.Invoke, history.Commit, history.Meta{}, "e2").rec(p, history.Fail, history.Commit, history.Meta{}, "e2")
	got := explained(t, "publish-then-commit", b)
	if !strings.HasPrefix(got, "1 request failed because the publish before COMMIT could not reach the broker; ") {
		t.Errorf("Explain = %s", got)
	}
}

func TestExplainPhantoms(t *testing.T) {
	b := &hb{}
	p := "producer-1"
	b.at(0).rec(p, history.Invoke, history.Commit, history.Meta{}, "e1").
		rec(p, history.Invoke, history.Publish, history.Meta{}, "e1").rec(p, history.OK, history.Publish, history.Meta{}, "e1").
		rec(p, history.Fail, history.Commit, history.Meta{}, "e1").
		rec("consumer-1", history.OK, history.Deliver, history.Meta{}, "e1").rec("consumer-1", history.Invoke, history.Apply, history.Meta{}, "e1").
		rec("consumer-1", history.OK, history.Apply, history.Meta{}, "e1")
	got := explained(t, "publish-then-commit", b)
	if !strings.HasPrefix(got, "1 event was delivered although its transaction rolled back (phantom)") {
		t.Errorf("Explain = %s", got)
	}
}

func TestExplainASafeRunWithDuplicates(t *testing.T) {
	b := &hb{}
	b.journey("e1", 0)
	b.at(time.Second).rec("producer-1", history.Invoke, history.Commit, history.Meta{}, "e2").rec("producer-1", history.Fail, history.Commit, history.Meta{}, "e2")
	b.at(2*time.Second).rec("nemesis", history.Info, history.FaultStart, brokerDown).
		rec("consumer-1", history.OK, history.Deliver, history.Meta{Redelivered: true}, "e1").
		rec("consumer-1", history.Invoke, history.Apply, history.Meta{}, "e1").
		rec("consumer-1", history.OK, history.Apply, history.Meta{Duplicate: true}, "e1").
		rec("nemesis", history.Info, history.FaultStop, brokerDown)
	got := explained(t, "outbox", b)
	want := "The one committed event was delivered and the rolled-back one was not: each event row committed or rolled back " +
		"with its business write, and the relay published only committed rows, retrying through the faults; " +
		"1 duplicate delivery was absorbed by the consumer's inbox with no second effect."
	if got != want {
		t.Errorf("Explain =\n%s\nwant\n%s", got, want)
	}
}

func TestEventStoryShowsTheCrashAfterCommit(t *testing.T) {
	b := &hb{}
	p := "producer-1"
	b.at(0).rec(p, history.Invoke, history.Commit, history.Meta{}, "e1").rec(p, history.OK, history.Commit, history.Meta{}, "e1").
		rec(p, history.Info, history.Crash, history.Meta{Detail: "after-commit"}).
		rec(p, history.Invoke, history.Commit, history.Meta{}, "e2").rec(p, history.OK, history.Commit, history.Meta{}, "e2").
		rec("relay-a", history.Info, history.Crash, history.Meta{})
	got := EventStory(b.ops, "e1", 0)
	if n := strings.Count(got, "\n"); n != 3 || !strings.Contains(got, "crash") {
		t.Errorf("story of e1:\n%s", got)
	}
	if got := EventStory(b.ops, "e2", 0); strings.Contains(got, "crash") {
		t.Errorf("story of e2 shows a crash that came after no record of e2 by its process:\n%s", got)
	}
	if got := EventStory(b.ops, "e9", 0); !strings.Contains(got, "no record names this event") {
		t.Errorf("story of an unknown event: %s", got)
	}
}
