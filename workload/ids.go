package workload

import (
	"context"
	"fmt"
	"sync"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// UnmappedPrefix starts the id under which the harness shows a row of an
// outbox that gives its rows ids of the database's (outbox.Schema.ReturnsID)
// when no stage of the harness returned the row's id: a row nobody the
// harness knows staged, which the checkers then report as unexpected,
// "db:ID", rather than never see (fixture.MappedRows).
const UnmappedPrefix = "db:"

// IDs maps the ids the database gives the events staged in one outbox
// (outbox.Schema.ReturnsID) to the events' own ids, by which the
// history, the checkers and the consumers' inboxes follow every event. It
// keeps the map in memory, where a stage that rolled back stays (so that
// a publish of a rolled-back event is still named by its own id), and,
// when it has a table, in the run's database, in the staging transaction
// itself, so that the mapping commits or rolls back with the row. It is
// safe for concurrent use; a nil *IDs maps nothing and names every id as
// it is.
type IDs struct {
	table string

	mu   sync.RWMutex
	byDB map[string]uuid.UUID
}

// NewIDs returns an empty map that Keep also writes to table, a
// sanitized identifier of a table made by IDsTableSQL; "" keeps the map in
// memory alone.
func NewIDs(table string) *IDs {
	return &IDs{table: table, byDB: map[string]uuid.UUID{}}
}

// IDsTableSQL creates table, the database's half of an IDs map: the id
// the database gave a row, as text, and the event's own id.
func IDsTableSQL(table string) string {
	return `CREATE TABLE ` + table + ` (db_id text PRIMARY KEY, harness_id uuid NOT NULL)`
}

// Table returns the table Keep writes to, "" for none.
func (m *IDs) Table() string {
	if m == nil {
		return ""
	}
	return m.table
}

// Note maps dbID to event in memory. The database gives every row an id
// of its own, so an id that already stands for another event is an error
// that names both.
func (m *IDs) Note(dbID string, event uuid.UUID) error {
	if dbID == "" {
		return fmt.Errorf("event %s: the database gave its row an empty id", event)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if prev, ok := m.byDB[dbID]; ok && prev != event {
		return fmt.Errorf("event %s: the database gave its row id %q, which it had already given event %s's row: the id the stage returns must name one row", event, dbID, prev)
	}
	m.byDB[dbID] = event
	return nil
}

// Keep maps dbID to event in memory (Note) and, when m has a table, in
// it, inside tx, the transaction that staged the row.
func (m *IDs) Keep(ctx context.Context, tx pgx.Tx, dbID string, event uuid.UUID) error {
	if m == nil {
		return fmt.Errorf("event %s: the outbox gave its row id %q, and nothing keeps the harness's map of such ids", event, dbID)
	}
	if err := m.Note(dbID, event); err != nil {
		return err
	}
	if m.table == "" {
		return nil
	}
	if _, err := tx.Exec(ctx, `INSERT INTO `+m.table+` (db_id, harness_id) VALUES ($1, $2)`, dbID, event); err != nil {
		return fmt.Errorf("event %s: keeping the id %q its row was given: %w", event, dbID, err)
	}
	return nil
}

// Event names the event an id of the outbox stands for: its own id when
// a stage returned id, else id as it is (a delivery of an id no stage
// returned, which the checkers report as unexpected; a producer of an
// unsafe mode publishes the event's own id). A nil map names every id as
// it is.
func (m *IDs) Event(id string) string {
	if m == nil {
		return id
	}
	m.mu.RLock()
	e, ok := m.byDB[id]
	m.mu.RUnlock()
	if !ok {
		return id
	}
	return e.String()
}

// Events names each of ids as Event does, in a new slice; nil for none.
func (m *IDs) Events(ids []string) []string {
	if m == nil || ids == nil {
		return ids
	}
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = m.Event(id)
	}
	return out
}

// Len returns how many ids the map holds.
func (m *IDs) Len() int {
	if m == nil {
		return 0
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	return len(m.byDB)
}
