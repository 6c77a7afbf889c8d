package observe_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxlab/outboxlab/checker"
	"github.com/outboxlab/outboxlab/history"
	"github.com/outboxlab/outboxlab/internal/observe"
	"github.com/outboxlab/outboxlab/relay"
	"github.com/outboxlab/outboxlab/testenv/pgserver"
)

// TestObserveRelayStore drives our relay's PostgreSQL store through two
// replicas, each logged in with a role of its own and both setting the
// application name "relay": claims, a mark, retries up to the attempt
// limit, a park, a lease that runs out on the database clock and is
// claimed again by the other replica, a lease extension, a claim over a
// live lease, a release and a sweep, and deletions of a faulted and a
// pending row. The log must show each change with the replica that made
// it, classified, and the history ops must carry what the store itself
// returned (lease ends, database times, attempts).
//
// The negative case: relay-b, its lease taken over by relay-a, marks a
// row with a store whose mark has no lease fence. The log shows that mark
// as relay-b's, under relay-a's live lease, and the lease checker, given
// the observed ops, fails the row; without that mark it passes.
func TestObserveRelayStore(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e := startEnv(t, ctx)
	table := e.outboxTable(t, ctx, "obs_relay.outbox")
	roleA, poolA := e.replica(t, ctx, table, "relay-a")
	roleB, poolB := e.replica(t, ctx, table, "relay-b")
	procs := observe.Processes([]observe.Role{roleA, roleB})
	if roleA.Name == roleB.Name {
		t.Fatalf("both replicas got the role %s", roleA.Name)
	}
	storeA, storeB := relay.NewPGStore(poolA, table), relay.NewPGStore(poolB, table)
	// unfencedB is relay-b with a mark that ignores the lease.
	unfencedB := relay.NewPGStore(poolB, table)
	q := unfencedB.Statements()
	q.Mark = `UPDATE ` + table.Ident() + ` SET processed_at = now()
WHERE id = ANY($1) AND $2::text IS NOT NULL AND processed_at IS NULL
RETURNING id, processed_at`
	if err := unfencedB.UseStatements(q); err != nil {
		t.Fatal(err)
	}

	ids, labels := e.stage(t, ctx, table, 6)
	e1, e2, e3, e4, e5, e6 := ids[0], ids[1], ids[2], ids[3], ids[4], ids[5]

	// 1. relay-a claims e1, e2, e3 for an hour.
	claimA1, err := storeA.Claim(ctx, "relay-a", 3, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if got := rowIDs(claimA1); !slices.Equal(got, ids[:3]) {
		t.Fatalf("relay-a claimed %v, want e1..e3", labelsOf(labels, got))
	}
	// 2. It marks e1.
	marked, markAt, err := storeA.MarkAt(ctx, "relay-a", []uuid.UUID{e1})
	if err != nil || len(marked) != 1 {
		t.Fatalf("relay-a marking e1: %v, %v", marked, err)
	}
	// 3. It retries e2 up to the attempt limit, with an hour's backoff so
	// that no other claim takes it in between.
	policy := relay.RetryPolicy{MaxAttempts: 3, BackoffBase: time.Hour, BackoffMax: 2 * time.Hour}
	var retries []relay.RetryResult
	for range 3 {
		res, err := storeA.Retry(ctx, "relay-a", e2, policy, "returned")
		if err != nil || !res.Applied {
			t.Fatalf("relay-a retrying e2: %+v, %v", res, err)
		}
		retries = append(retries, res)
	}
	if !retries[2].Parked || retries[1].Parked {
		t.Fatalf("retries of e2: %+v, want the third to park it", retries)
	}
	// 4. It parks e3.
	if ok, err := storeA.Park(ctx, "relay-a", e3, "unknown type"); err != nil || !ok {
		t.Fatalf("relay-a parking e3: %v, %v", ok, err)
	}
	// 5. relay-b claims the rest with a lease of 200ms, which runs out.
	claimB, err := storeB.Claim(ctx, "relay-b", 10, 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if got := rowIDs(claimB); !slices.Equal(got, ids[3:]) {
		t.Fatalf("relay-b claimed %v, want e4..e6", labelsOf(labels, got))
	}
	waitDBPast(t, ctx, e.admin, claimB[0].LockedUntil)
	// 6. relay-a claims them again after the expiry.
	claimA2, err := storeA.Claim(ctx, "relay-a", 10, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if got := rowIDs(claimA2); !slices.Equal(got, ids[3:]) {
		t.Fatalf("relay-a claimed %v after relay-b's leases ran out, want e4..e6", labelsOf(labels, got))
	}
	// 7. relay-b's fenced mark of e4 changes nothing; its unfenced one
	// marks e4 under relay-a's lease.
	if marked, err := storeB.Mark(ctx, "relay-b", []uuid.UUID{e4}); err != nil || len(marked) != 0 {
		t.Fatalf("relay-b's fenced mark of e4 after losing its lease: %v, %v", marked, err)
	}
	if marked, err := unfencedB.Mark(ctx, "relay-b", []uuid.UUID{e4}); err != nil || len(marked) != 1 {
		t.Fatalf("relay-b's unfenced mark of e4: %v, %v", marked, err)
	}
	// 8. relay-a extends its lease of e5; relay-b takes e6 over relay-a's
	// live lease, as a relay trusting a skewed clock of its own would.
	exec(t, ctx, poolA, `UPDATE `+table.Ident()+` SET locked_until = locked_until + interval '10 minutes'
WHERE id = $1 AND locked_by = 'relay-a'`, e5)
	exec(t, ctx, poolB, `UPDATE `+table.Ident()+` SET locked_by = 'relay-b', locked_at = now(), locked_until = now() + interval '1 hour'
WHERE id = $1`, e6)
	// 9. relay-a marks e5; relay-b releases e6.
	marked5, markAt5, err := storeA.MarkAt(ctx, "relay-a", []uuid.UUID{e5})
	if err != nil || len(marked5) != 1 {
		t.Fatalf("relay-a marking e5: %v, %v", marked5, err)
	}
	exec(t, ctx, poolB, `UPDATE `+table.Ident()+` SET locked_by = NULL, locked_at = NULL, locked_until = NULL WHERE id = $1`, e6)
	// 10. relay-a sweeps the processed rows; the admin deletes a faulted
	// and a pending row.
	swept, sweepAt, err := storeA.SweepIDs(ctx, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(swept) != 3 {
		t.Fatalf("relay-a swept %v, want e1, e4, e5", labelsOf(labels, swept))
	}
	exec(t, ctx, e.admin, `DELETE FROM `+table.Ident()+` WHERE id = $1`, e3)
	exec(t, ctx, e.admin, `DELETE FROM `+table.Ident()+` WHERE id = $1`, e6)

	ts, err := observe.Read(ctx, e.admin, table, 0)
	if err != nil {
		t.Fatal(err)
	}
	admin := pgserver.User
	diffLines(t, "transitions", renderAll(ts, labels, procs), []string{
		admin + " inserted e1",
		admin + " inserted e2",
		admin + " inserted e3",
		admin + " inserted e4",
		admin + " inserted e5",
		admin + " inserted e6",
		"relay-a claimed/new e1 lease=-",
		"relay-a claimed/new e2 lease=-",
		"relay-a claimed/new e3 lease=-",
		"relay-a marked e1 lease=relay-a:live",
		"relay-a retried e2 attempts=1 lease=relay-a:live",
		"relay-a retried e2 attempts=2 lease=relay-a:live",
		"relay-a parked e2 attempts=3 lease=relay-a:live",
		"relay-a parked e3 attempts=0 lease=relay-a:live",
		"relay-b claimed/new e4 lease=-",
		"relay-b claimed/new e5 lease=-",
		"relay-b claimed/new e6 lease=-",
		"relay-a claimed/after-expiry e4 lease=relay-b:expired",
		"relay-a claimed/after-expiry e5 lease=relay-b:expired",
		"relay-a claimed/after-expiry e6 lease=relay-b:expired",
		"relay-b marked e4 lease=relay-a:live",
		"relay-a claimed/extended e5 lease=relay-a:live",
		"relay-b claimed/over-live-lease e6 lease=relay-a:live",
		"relay-a marked e5 lease=relay-a:live",
		"relay-b released e6 lease=relay-b:live",
		"relay-a deleted/processed e1 lease=relay-a:live",
		"relay-a deleted/processed e4 lease=relay-a:live",
		"relay-a deleted/processed e5 lease=relay-a:live",
		admin + " deleted/faulted e3 lease=relay-a:live",
		admin + " deleted/pending e6 lease=-",
	})
	for _, tr := range ts {
		if tr.App != "relay" && tr.Session != admin {
			t.Errorf("change #%d by %s: application_name %q, want relay", tr.Seq, tr.Session, tr.App)
		}
		if tr.PID == 0 || tr.Xid == 0 || tr.At.Before(tr.TxTime) {
			t.Errorf("change #%d: pid %d, xid %d, at %s before its transaction's now() %s", tr.Seq, tr.PID, tr.Xid, tr.At, tr.TxTime)
		}
	}
	// Reading after a sequence number returns only what follows it.
	if len(ts) > 10 {
		rest, err := observe.Read(ctx, e.admin, table, ts[9].Seq)
		if err != nil {
			t.Fatal(err)
		}
		if len(rest) != len(ts)-10 || rest[0].Seq != ts[10].Seq {
			t.Errorf("reading after #%d: %d changes from #%d, want %d from #%d", ts[9].Seq, len(rest), rest[0].Seq, len(ts)-10, ts[10].Seq)
		}
	}

	ops := observe.Ops(ts, procs)
	var lines []string
	for _, op := range ops {
		lines = append(lines, renderOp(op, labels))
	}
	diffLines(t, "ops", lines, []string{
		"relay-a ok claim [e1 e2 e3] claim new",
		"relay-a ok mark [e1]",
		"relay-a ok retry [e2] attempts=1",
		"relay-a ok retry [e2] attempts=2",
		"relay-a ok retry [e2] attempts=3 parked",
		"relay-a ok park [e3]",
		"relay-b ok claim [e4 e5 e6] claim new",
		"relay-a ok claim [e4 e5 e6] claim after-expiry",
		"relay-b ok mark [e4]",
		"relay-a ok claim [e5] claim extended",
		"relay-b ok claim [e6] claim over-live-lease",
		"relay-a ok mark [e5]",
		"relay-a ok sweep [e1 e4 e5] deleted processed",
		admin + " ok sweep [e3] deleted faulted",
		admin + " ok sweep [e6] deleted pending",
	})
	if len(ops) != 15 {
		t.FailNow()
	}
	// The database times and lease ends are what the store returned.
	for _, c := range []struct {
		op        int
		what      string
		got, want time.Time
	}{
		{0, "relay-a's claim's locked_at", ops[0].DBTime, claimA1[0].LockedAt},
		{0, "relay-a's claim's locked_until", ops[0].Until, claimA1[0].LockedUntil},
		{1, "the mark of e1's processed_at", ops[1].DBTime, markAt},
		{2, "the first retry's time", ops[2].DBTime, retries[0].At},
		{2, "the first retry's next eligible time", ops[2].Until, retries[0].Until},
		{3, "the second retry's next eligible time", ops[3].Until, retries[1].Until},
		{4, "the parking retry's time", ops[4].DBTime, retries[2].At},
		{6, "relay-b's claim's locked_at", ops[6].DBTime, claimB[0].LockedAt},
		{6, "relay-b's claim's locked_until", ops[6].Until, claimB[0].LockedUntil},
		{7, "relay-a's re-claim's locked_at", ops[7].DBTime, claimA2[0].LockedAt},
		{7, "relay-a's re-claim's locked_until", ops[7].Until, claimA2[0].LockedUntil},
		{11, "the mark of e5's processed_at", ops[11].DBTime, markAt5},
		{12, "the sweep's time", ops[12].DBTime, sweepAt},
	} {
		if !c.got.Equal(c.want) {
			t.Errorf("op %d, %s: %s, want %s", c.op, c.what, c.got, c.want)
		}
	}
	if !ops[7].DBTime.After(ops[6].Until) {
		t.Errorf("relay-a's re-claim at %s is not after the end of relay-b's lease %s", ops[7].DBTime, ops[6].Until)
	}
	if !ops[8].DBTime.Before(ops[7].Until) {
		t.Errorf("relay-b's unfenced mark at %s is not within relay-a's lease (until %s)", ops[8].DBTime, ops[7].Until)
	}
	for i, op := range ops {
		if op.Index != int64(i) || op.Type != history.OK {
			t.Errorf("op %d: index %d, type %s", i, op.Index, op.Type)
		}
		if i > 0 && (op.DBTime.Before(ops[i-1].DBTime) || op.Time.Before(ops[i-1].Time)) {
			t.Errorf("op %d (%s) goes back in database time: %s after %s", i, op.F, op.DBTime, ops[i-1].DBTime)
		}
	}

	// The lease checker takes the observed ops as it takes records. The
	// fenced ops pass; relay-b's unfenced mark fails e4, and relay-b's
	// claim over relay-a's live lease fails e6.
	cfg := checker.Config{Features: checker.Features{Stages: true, Fenced: true}}
	fenced := slices.Concat(ops[:8], ops[11:])
	if r := checker.Leases(fenced, checker.State{}, cfg); !r.Valid || r.Skipped {
		t.Errorf("leases over the fenced observed ops: valid %v, skipped %v: %s %v", r.Valid, r.Skipped, r.Detail, r.Reasons)
	}
	withMark := slices.Concat(ops[:9], ops[11:])
	r := checker.Leases(withMark, checker.State{}, cfg)
	if r.Valid || !slices.Equal(r.Offending, []string{e4.String()}) || !strings.Contains(r.Reasons[e4.String()], "marked by relay-b") {
		t.Errorf("leases over the ops with relay-b's unfenced mark: valid %v, offending %v, reasons %v; want e4 failed as marked by relay-b",
			r.Valid, labelStrings(labels, r.Offending), r.Reasons)
	}
	withOverlap := slices.Concat(ops[:8], ops[10:])
	r = checker.Leases(withOverlap, checker.State{}, cfg)
	if r.Valid || !slices.Equal(r.Offending, []string{e6.String()}) || !strings.Contains(r.Reasons[e6.String()], "claimed by relay-b") {
		t.Errorf("leases over the ops with relay-b's claim over a live lease: valid %v, offending %v, reasons %v; want e6 failed as claimed by relay-b",
			r.Valid, labelStrings(labels, r.Offending), r.Reasons)
	}
}

// renderOp writes an op as one line a test compares.
func renderOp(op history.Op, labels map[string]string) string {
	evs := make([]string, len(op.Events))
	for i, id := range op.Events {
		evs[i] = label(labels, id)
	}
	slices.Sort(evs)
	s := fmt.Sprintf("%s %s %s %v", op.Process, op.Type, op.F, evs)
	if op.Attempts != 0 {
		s += fmt.Sprintf(" attempts=%d", op.Attempts)
	}
	if op.Parked {
		s += " parked"
	}
	if op.Detail != "" {
		s += " " + op.Detail
	}
	return s
}

func rowIDs(rows []relay.Row) []uuid.UUID {
	out := make([]uuid.UUID, len(rows))
	for i, r := range rows {
		out[i] = r.ID
	}
	return out
}

func labelsOf(labels map[string]string, ids []uuid.UUID) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = label(labels, id.String())
	}
	return out
}

func labelStrings(labels map[string]string, ids []string) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = label(labels, id)
	}
	return out
}

func exec(t *testing.T, ctx context.Context, db *pgxpool.Pool, sql string, args ...any) {
	t.Helper()
	tag, err := db.Exec(ctx, sql, args...)
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	if tag.RowsAffected() == 0 {
		t.Fatalf("%s: changed no row", sql)
	}
}
