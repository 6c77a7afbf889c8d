package workload

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxlab/outboxlab/outbox"
)

// TestIDsNameTheEventsOfTheDatabasesIDs maps the ids a database gave
// rows to their events: a mapped id names its event, an id no stage
// returned stays as it is, an id given to a second event is refused
// naming both, and a nil map names every id as it is.
func TestIDsNameTheEventsOfTheDatabasesIDs(t *testing.T) {
	m := NewIDs("")
	a, b := uuid.New(), uuid.New()
	if err := m.Note("1", a); err != nil {
		t.Fatal(err)
	}
	if err := m.Note("1", a); err != nil {
		t.Errorf("the same id noted again for the same event: %v", err)
	}
	err := m.Note("1", b)
	if err == nil || !strings.Contains(err.Error(), a.String()) || !strings.Contains(err.Error(), b.String()) {
		t.Errorf("id 1 given to a second event: err = %v, want one naming both events", err)
	}
	if err := m.Note("", b); err == nil {
		t.Error("an empty id was noted")
	}
	if got := m.Event("1"); got != a.String() {
		t.Errorf("Event(1) = %q, want %s", got, a)
	}
	if got := m.Event("2"); got != "2" {
		t.Errorf("Event(2), an id no stage returned, = %q, want it as it is", got)
	}
	if got := m.Events([]string{"1", "2"}); strings.Join(got, ",") != a.String()+",2" {
		t.Errorf("Events = %v", got)
	}
	if m.Events(nil) != nil || m.Len() != 1 {
		t.Errorf("Events(nil) = %v, Len = %d", m.Events(nil), m.Len())
	}
	var none *IDs
	if none.Event("1") != "1" || none.Events([]string{"x"})[0] != "x" || none.Len() != 0 || none.Table() != "" {
		t.Error("a nil map does not name ids as they are")
	}
	if err := none.Keep(context.Background(), nil, "1", a); err == nil {
		t.Error("a nil map kept an id: a stage that returns ids needs a map")
	}
}

// TestIDsAreSafeForConcurrentUse notes and reads ids from many goroutines
// at once, as producers and consumers do (run with -race to see a race).
func TestIDsAreSafeForConcurrentUse(t *testing.T) {
	m := NewIDs("")
	const writers, each = 8, 200
	events := make([][]uuid.UUID, writers)
	var wg sync.WaitGroup
	for w := range writers {
		events[w] = make([]uuid.UUID, each)
		wg.Go(func() {
			for i := range each {
				e := uuid.New()
				events[w][i] = e
				if err := m.Note(strconv.Itoa(w*each+i), e); err != nil {
					t.Error(err)
					return
				}
			}
		})
		wg.Go(func() {
			for i := range each {
				_ = m.Event(strconv.Itoa(w*each + i))
				_ = m.Len()
			}
		})
	}
	wg.Wait()
	if m.Len() != writers*each {
		t.Fatalf("Len = %d, want %d", m.Len(), writers*each)
	}
	for w := range writers {
		for i := range each {
			if got := m.Event(strconv.Itoa(w*each + i)); got != events[w][i].String() {
				t.Fatalf("Event(%d) = %s, want %s", w*each+i, got, events[w][i])
			}
		}
	}
}

// TestPGStageKeepsTheDatabasesID stages through an own schema that
// returns ids: PG.Stage returns the id and notes it in the map; a schema
// that keeps the event's id returns none and notes nothing; a schema that
// returns ids with no map to keep them in is an error.
func TestPGStageKeepsTheDatabasesID(t *testing.T) {
	stage := func(id string) outbox.Schema {
		return outbox.Schema{
			Name:      "test",
			Migrate:   func(context.Context, *pgxpool.Pool, outbox.Table) error { return nil },
			Stage:     func(context.Context, pgx.Tx, outbox.Table, outbox.Event) (string, error) { return id, nil },
			Rows:      func(outbox.Table) string { return "" },
			ReturnsID: id != "",
		}
	}
	e := outbox.Event{ID: uuid.New(), Type: TypeOrderPlaced}
	ids := NewIDs("")
	got, err := PG{Schema: stage("42"), IDs: ids}.Stage(context.Background(), nil, e)
	if err != nil || got != "42" || ids.Event("42") != e.ID.String() {
		t.Errorf("Stage = %q, %v; map names 42 %q; want 42 kept for %s", got, err, ids.Event("42"), e.ID)
	}
	if got, err := (PG{Schema: stage(""), IDs: NewIDs("")}).Stage(context.Background(), nil, e); got != "" || err != nil {
		t.Errorf("a schema that keeps the event's id: Stage = %q, %v", got, err)
	}
	if _, err := (PG{Schema: stage("43")}).Stage(context.Background(), nil, e); err == nil {
		t.Error("a schema that returns ids staged with no map to keep them in")
	}
	noID := stage("")
	noID.ReturnsID = true
	if _, err := (PG{Schema: noID, IDs: NewIDs("")}).Stage(context.Background(), nil, e); err == nil || !strings.Contains(err.Error(), "returned no id") {
		t.Errorf("a schema that returns ids returned none: err = %v", err)
	}
	if err := (outbox.Schema{ReturnsID: true}).Validate(); err == nil {
		t.Error("package outbox's table returns ids")
	}
}
