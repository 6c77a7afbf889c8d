package bench

import (
	"context"
	"fmt"
	"math"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxlab/outboxlab/internal/bench/result"
	"github.com/outboxlab/outboxlab/outbox"
	"github.com/outboxlab/outboxlab/relay"
	"github.com/outboxlab/outboxlab/testenv"
)

// TestRunSmall runs the whole benchmark on a small backlog, in the
// isolated layout, and checks what a reader of its figures relies on; it
// asserts no speed.
func TestRunSmall(t *testing.T) {
	env := sharedEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	const n = 1500
	dir := t.TempDir()
	res, err := Run(ctx, env, Options{
		Events:           n,
		Relay:            relay.Config{PollInterval: 300 * time.Millisecond},
		LatencyDuration:  time.Second,
		Producers:        4,
		WatermillTimeout: 3 * time.Minute,
		ProfileDir:       dir,
		Schema:           "bench_run_small",
		Exchange:         "outboxlab.bench.small",
		Queue:            "outboxlab.bench.small",
		IsolateBroker:    true,
		Logf:             t.Logf,
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Config.Layout != result.LayoutIsolated {
		t.Errorf("layout %q, want %q", res.Config.Layout, result.LayoutIsolated)
	}
	// On Linux the host reaches the containers' network: no port proxy.
	if res.Config.Addressing != result.AddressBridge {
		t.Errorf("addressing %q, want %q", res.Config.Addressing, result.AddressBridge)
	}
	var names []string
	for _, ph := range res.Phases {
		names = append(names, ph.Name)
		if ph.Events != n || ph.QueueDepth != n {
			t.Errorf("%s: %d events confirmed, queue depth %d; want %d and %d", ph.Name, ph.Events, ph.QueueDepth, n, n)
		}
		if ph.Seconds <= 0 || ph.MsgsPerSec <= 0 {
			t.Errorf("%s: %.3f s, %.0f msgs/s", ph.Name, ph.Seconds, ph.MsgsPerSec)
		}
		if ph.CPU.ProcessSeconds <= 0 {
			t.Errorf("%s: no CPU time measured for the process", ph.Name)
		}
		if ph.CPU.PostgresSeconds <= 0 && strings.HasPrefix(ph.Name, "relay") {
			t.Logf("%s: no CPU time read for the PostgreSQL container (cgroup not readable here)", ph.Name)
		}
	}
	if got := strings.Join(names, ","); got != "raw,relay-1,relay-2,raw-2,raw-after,watermill" {
		t.Fatalf("phases = %s", got)
	}
	if res.RawMsgsPerSec != max(res.Phases[0].MsgsPerSec, res.Phases[4].MsgsPerSec) {
		t.Errorf("raw_msgs_per_sec %.0f is not the higher of the raw runs %.0f and %.0f",
			res.RawMsgsPerSec, res.Phases[0].MsgsPerSec, res.Phases[4].MsgsPerSec)
	}
	// raw-2 is not one of them: its rate over the limit bounds relay-2's.
	if split := res.Phases[3]; !split.Complete || res.Limits().Raw2RatioToRaw != split.MsgsPerSec/res.RawMsgsPerSec {
		t.Errorf("raw-2 %+v, raw2_ratio_to_raw %.3f", split, res.Limits().Raw2RatioToRaw)
	}
	for _, ph := range res.Phases[1:3] {
		b := ph.Breakdown
		if b == nil {
			t.Fatalf("%s has no breakdown", ph.Name)
		}
		if b.Claim.Rows != n || b.Mark.Rows != n || b.Publish.Calls != n || b.ConfirmWait.Calls != n || b.Decode.Calls != n {
			t.Errorf("%s breakdown counts %+v, want %d rows claimed, published, confirmed, marked and decoded", ph.Name, b, n)
		}
		if b.LostLeases != 0 {
			t.Errorf("%s lost %d leases", ph.Name, b.LostLeases)
		}
		// Publishing, waiting for confirms and decoding happen on the
		// relay's goroutine; claims and marks overlap them on their own:
		// one claim at a time per replica, but up to two marks (the
		// relay's maxMarks), so the marks' share may pass the wall time
		// where marks are slow (a loaded machine: 1.25 seen in CI).
		sum := b.Publish.ShareOfWall + b.ConfirmWait.ShareOfWall + b.Decode.ShareOfWall
		if sum <= 0 || sum > 1.05 || b.Claim.ShareOfWall <= 0 || b.Claim.ShareOfWall > 1.05 || b.Mark.ShareOfWall <= 0 || b.Mark.ShareOfWall > 2.05 {
			t.Errorf("%s: the relay's own calls take %.2f of the wall time, claims %.2f, marks %.2f",
				ph.Name, sum, b.Claim.ShareOfWall, b.Mark.ShareOfWall)
		}
	}
	if res.RatioToRaw() != res.RelayMsgsPerSec/res.RawMsgsPerSec || res.RatioToWatermill() != res.RelayMsgsPerSec/res.WatermillMsgsPerSec {
		t.Errorf("ratios %+v do not follow from the rates", res.Summary())
	}
	if len(res.Latency) != 6 || res.Latency[0].Mode != "poll" || res.Latency[1].Mode != "notify" ||
		res.Latency[2].Mode != "notify-after-commit" || res.Latency[3].Mode != "inline" || res.Latency[4].Mode != "keyed" ||
		res.Latency[5].Mode != "broker" {
		t.Fatalf("latency runs = %+v", res.Latency)
	}
	if res.LatencyBrokerP99Ms != res.Latency[5].Confirm.P99 {
		t.Errorf("latency_broker_p99_ms %.1f, the broker run says %.1f", res.LatencyBrokerP99Ms, res.Latency[5].Confirm.P99)
	}
	// The keyed lease leases every row it publishes, so it has stages;
	// its figures follow from its run.
	if k := res.Latency[4]; k.Stages == nil || k.Stages.ClaimCall.P50 <= 0 || res.LatencyKeyedP99Ms != k.Confirm.P99 ||
		res.KeyedOverBrokerP99() != k.Confirm.P99/res.LatencyBrokerP99Ms || res.NotifyOverKeyedP99() != res.LatencyNotifyP99Ms/k.Confirm.P99 {
		t.Errorf("keyed run %+v: latency_keyed_p99_ms %.2f, x%.2f of the broker's, the relay x%.2f of it",
			k, res.LatencyKeyedP99Ms, res.KeyedOverBrokerP99(), res.NotifyOverKeyedP99())
	}
	if res.LatencyInlineP99Ms != res.Latency[3].Confirm.P99 || res.NotifyOverInlineP99() != res.LatencyNotifyP99Ms/res.LatencyInlineP99Ms {
		t.Errorf("latency_inline_p99_ms %.1f (x%.2f), the inline run says %.1f", res.LatencyInlineP99Ms, res.NotifyOverInlineP99(), res.Latency[3].Confirm.P99)
	}
	// The inline run has no relay, so no stages; the relay's runs have.
	if res.Latency[3].Stages != nil || res.Latency[1].Stages == nil {
		t.Errorf("stages: inline %+v, notify %+v", res.Latency[3].Stages, res.Latency[1].Stages)
	} else if st := res.Latency[1].Stages; st.ClaimCall.P50 <= 0 || st.ClaimCall.P99 < st.ClaimCall.P50 ||
		res.LatencyClaimCallP99Ms != st.ClaimCall.P99 || res.ClaimCallOverBrokerP99() != st.ClaimCall.P99/res.LatencyBrokerP99Ms {
		t.Errorf("notify's claim statements %+v, latency_claim_call_p99_ms %.2f (x%.2f of the broker's)", st.ClaimCall,
			res.LatencyClaimCallP99Ms, res.ClaimCallOverBrokerP99())
	}
	for _, l := range res.Latency {
		// Producers that fall behind stop at twice the duration: the run
		// then measures the events committed until then.
		if l.Events < 1 || l.Events > res.Config.LatencyEvents {
			t.Errorf("%s: %d events, config says %d", l.Mode, l.Events, res.Config.LatencyEvents)
		}
		// A warm-up at the run's rate, at most a second of it and half
		// the workload, comes before the events timed and is not counted
		// among them.
		if most := min(int(l.TargetRate*res.Config.LatencyWarmupMs/1000), n/2); l.WarmupEvents < 1 || l.WarmupEvents > most ||
			l.WarmupEvents+l.Events > n {
			t.Errorf("%s: %d warm-up events and %d timed, want 1 to %d warming up (%.0f/s for %.0f ms) of %d", l.Mode, l.WarmupEvents, l.Events,
				most, l.TargetRate, res.Config.LatencyWarmupMs, n)
		}
		for _, p := range []result.Percentiles{l.Confirm, l.Delivery} {
			if !(0 < p.P50 && p.P50 <= p.P99 && p.P99 <= p.Max) {
				t.Errorf("%s: percentiles out of order: %+v", l.Mode, p)
			}
		}
		if l.Duplicates != 0 {
			t.Errorf("%s: %d duplicate deliveries", l.Mode, l.Duplicates)
		}
	}
	checkSched(t, res, 4)
	if res.LatencyNotifyP99Ms != res.Latency[1].Confirm.P99 || res.LatencyPollP50Ms != res.Latency[0].Confirm.P50 {
		t.Errorf("summary latencies do not match the runs: %+v", res.Summary())
	}
	// The profiler samples the process's CPU 100 times a second: a drain
	// that used a tenth of a second of it must have samples; a shorter
	// one may have none, but its profile is still written.
	switch {
	case res.Profile == nil:
		t.Error("no profile")
	case res.Phases[1].CPU.ProcessSeconds >= 0.1 && (res.Profile.SampledSeconds <= 0 || len(res.Profile.TopCum) == 0):
		t.Errorf("relay-1 used %.2f s of CPU, profile = %+v", res.Phases[1].CPU.ProcessSeconds, res.Profile)
	default:
		if _, err := os.Stat(res.Profile.Path); err != nil {
			t.Errorf("profile file: %v", err)
		}
	}
	if len(res.Hygiene) != 3 {
		t.Fatalf("hygiene = %+v", res.Hygiene)
	}
	if after := res.Hygiene[2]; after.LiveTuples != 0 || after.DeadTuples != 0 {
		t.Errorf("after sweep and vacuum the table holds %d live and %d dead tuples", after.LiveTuples, after.DeadTuples)
	}
	if res.Hygiene[2].TableBytes >= res.Hygiene[1].TableBytes {
		t.Errorf("vacuum after the sweep did not shrink the table: %+v", res.Hygiene)
	}
	// The run removed what it made.
	conn, err := pgx.Connect(ctx, env.DirectDatabaseURL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var schemas int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_namespace WHERE nspname = 'bench_run_small'`).Scan(&schemas); err != nil {
		t.Fatal(err)
	}
	if schemas != 0 {
		t.Error("the run left its schema behind")
	}
	var buf strings.Builder
	if err := res.WriteTable(&buf); err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", buf.String())
}

// TestClaimUsesPendingIndexAtVolume reads EXPLAIN of the claim on a
// backlog of 100,000 rows, and again once half of them are processed and
// not yet vacuumed: both times the claim must scan the partial index and
// reach the rows it updates by primary key, never by a sequential scan.
func TestClaimUsesPendingIndexAtVolume(t *testing.T) {
	env := sharedEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	db := newTestDB(t, env, "outbox")
	const n = 100_000
	if err := stageCopy(ctx, db.pool, db.table, benchWorkload(t, n)); err != nil {
		t.Fatal(err)
	}
	store := relay.NewPGStore(db.pool, db.table)
	index := db.table.PendingIndex()
	check := func(state string) {
		t.Helper()
		rows, err := db.pool.Query(ctx, `EXPLAIN `+store.ClaimSQL(), relay.DefaultBatchSize, "explain", int64(120e6))
		if err != nil {
			t.Fatal(err)
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		plan := strings.Join(lines, "\n")
		if !strings.Contains(plan, "Index Scan using "+index) {
			t.Errorf("%s: the claim does not scan %s:\n%s", state, index, plan)
		}
		if strings.Contains(plan, "Seq Scan") {
			t.Errorf("%s: the claim has a sequential scan:\n%s", state, plan)
		}
		t.Logf("%s: claim plan:\n%s", state, plan)
	}
	check("100,000 pending")
	// Half the backlog published: its rows leave the partial index only
	// when vacuum removes their old versions.
	if _, err := db.pool.Exec(ctx, `UPDATE `+db.table.Ident()+` SET processed_at = now()
		WHERE id IN (SELECT id FROM `+db.table.Ident()+` ORDER BY occurred_at LIMIT $1)`, n/2); err != nil {
		t.Fatal(err)
	}
	if _, err := db.pool.Exec(ctx, `ANALYZE `+db.table.Ident()); err != nil {
		t.Fatal(err)
	}
	check("50,000 processed, 50,000 pending, not vacuumed")
	// What the claim costs in that state, in buffers (logged, not
	// asserted: a figure for the report). The first scan marks the index
	// entries of dead row versions as dead; the second skips them without
	// visiting the heap, but still reads their pages.
	for _, run := range []string{"first", "second"} {
		tx, err := db.pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		rows, err := tx.Query(ctx, `EXPLAIN (ANALYZE, BUFFERS) `+store.ClaimSQL(), relay.DefaultBatchSize, "explain", int64(120e6))
		if err != nil {
			t.Fatal(err)
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s claim with half the backlog processed and not vacuumed:\n%s", run, strings.Join(lines, "\n"))
	}
}

// TestSweepKeepsTableBounded runs rounds of stage, drain and sweep with
// the table's own autovacuum settings (002_autovacuum) and autovacuum
// visiting every second. Each round also parks one poison row, which the
// sweep never deletes, so that vacuum cannot simply truncate an emptied
// table: the space of swept rows must be reused. The table's size at the
// end of a round, before autovacuum's visit, must stay that of one round's
// rows instead of growing with the rounds.
func TestSweepKeepsTableBounded(t *testing.T) {
	env := sharedEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	db := newTestDB(t, env, "outbox")
	setNaptime(t, ctx, env, "1s")
	in := newBenchBroker(t, env)
	pub, err := relay.NewAMQPPublisher(relay.AMQPConfig{URL: in.amqpURL, Exchange: in.exchange})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	store := relay.NewPGStore(db.pool, db.table)
	r, err := relay.New(relay.Config{
		RelayID:       "bench-hygiene",
		Retention:     time.Millisecond,
		SweepInterval: time.Millisecond,
		BatchSize:     500,
		PublishWindow: 500,
	}, store, pub, relay.Options{Decoder: newRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	admin := &infra{admin: db.pool}
	const rounds, perRound = 8, 10_000
	var peaks []result.TableStats
	base := time.Now().Truncate(time.Millisecond)
	for round := range rounds {
		w, err := newWorkload(perRound, DefaultPayloadBytes, uint64(round+1), base.Add(time.Duration(round)*time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		before, _ := autovacuumCount(t, ctx, db)
		if err := stageCopy(ctx, db.pool, db.table, w); err != nil {
			t.Fatal(err)
		}
		// The poison row takes the id one past the round's events.
		extra, err := newWorkload(perRound+1, DefaultPayloadBytes, uint64(round+1), base.Add(time.Duration(round)*time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		poison := outbox.Event{ID: extra.ids[perRound], Type: "bench.unknown", Payload: extra.payloads[perRound]}
		if err := outbox.Stage(ctx, db.pool, db.table, poison, outbox.StageOptions{}); err != nil {
			t.Fatal(err)
		}
		// Drain, then sweep until every processed row is gone: the sweep
		// runs at the end of a tick, for rows processed a millisecond ago.
		err = testenv.WaitUntil(ctx, 10*time.Millisecond, func(ctx context.Context) error {
			if _, err := r.Tick(ctx); err != nil {
				return err
			}
			st, err := store.Stats(ctx)
			if err != nil {
				return err
			}
			if st.Pending+st.Processed > 0 {
				return fmt.Errorf("%d pending, %d processed", st.Pending, st.Processed)
			}
			if st.Faulted != int64(round+1) {
				return fmt.Errorf("%d rows parked, want %d", st.Faulted, round+1)
			}
			return nil
		})
		if err != nil {
			t.Fatalf("round %d: draining and sweeping: %v", round+1, err)
		}
		if err := in.purge(ctx); err != nil {
			t.Fatal(err)
		}
		peak, err := tableStats(ctx, admin, db.table, fmt.Sprintf("round %d swept", round+1))
		if err != nil {
			t.Fatal(err)
		}
		peaks = append(peaks, peak)
		// Autovacuum, not the test, reclaims the space: wait until it has
		// visited the table during the round and left fewer dead tuples
		// than its own threshold for this table (1,000 plus 1%), so that
		// by its rules it has nothing more to do.
		wctx, wcancel := context.WithTimeout(ctx, time.Minute)
		err = testenv.WaitUntil(wctx, 200*time.Millisecond, func(ctx context.Context) error {
			c, _ := autovacuumCount(t, ctx, db)
			st, err := tableStats(ctx, admin, db.table, "")
			if err != nil {
				return err
			}
			var reltuples float64
			if err := db.pool.QueryRow(ctx, `SELECT greatest(reltuples, 0) FROM pg_class WHERE oid = $1::regclass`,
				db.table.Ident()).Scan(&reltuples); err != nil {
				return err
			}
			if threshold := 1000 + 0.01*reltuples; c <= before || float64(st.DeadTuples) > threshold {
				return fmt.Errorf("autovacuum ran %d times (%d before the round); %d dead tuples, threshold %.0f",
					c, before, st.DeadTuples, threshold)
			}
			return nil
		})
		wcancel()
		if err != nil {
			t.Fatalf("round %d: autovacuum did not clean up after the sweep: %v", round+1, err)
		}
		after, err := tableStats(ctx, admin, db.table, fmt.Sprintf("round %d vacuumed", round+1))
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("round %d: swept: table %d B, indexes %d B, dead %d; after autovacuum: table %d B, indexes %d B, dead %d; updates %d (HOT %d)",
			round+1, peak.TableBytes, peak.IndexBytes, peak.DeadTuples,
			after.TableBytes, after.IndexBytes, after.DeadTuples, after.Updates, after.HOTUpdates)
	}
	// The first two rounds set the size of one round's rows; the rest
	// must reuse that space. Without vacuum every round adds its own, and
	// the last round's table would be about rounds/2 = 4 times the first
	// two's; with it the table stays within a round's churn of them, and
	// the indexes grow a little while emptied btree pages wait a second
	// vacuum to be recycled.
	var maxTable, maxIndex int64
	for _, s := range peaks[:2] {
		maxTable, maxIndex = max(maxTable, s.TableBytes), max(maxIndex, s.IndexBytes)
	}
	for _, s := range peaks[2:] {
		if s.TableBytes > maxTable*2 {
			t.Errorf("%s: table %d B, more than twice the %d B of the first rounds", s.Moment, s.TableBytes, maxTable)
		}
		if s.IndexBytes > maxIndex*2 {
			t.Errorf("%s: indexes %d B, more than twice the %d B of the first rounds", s.Moment, s.IndexBytes, maxIndex)
		}
	}
}

// setNaptime sets autovacuum_naptime for the rest of the test and resets
// it when the test ends.
func setNaptime(t *testing.T, ctx context.Context, env *testenv.Env, naptime string) {
	t.Helper()
	conn, err := pgx.Connect(ctx, env.DirectDatabaseURL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, q := range []string{`ALTER SYSTEM SET autovacuum_naptime = '` + naptime + `'`, `SELECT pg_reload_conf()`} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, env.DirectDatabaseURL())
		if err != nil {
			t.Errorf("resetting autovacuum_naptime: %v", err)
			return
		}
		defer conn.Close(ctx)
		for _, q := range []string{`ALTER SYSTEM RESET autovacuum_naptime`, `SELECT pg_reload_conf()`} {
			if _, err := conn.Exec(ctx, q); err != nil {
				t.Errorf("resetting autovacuum_naptime: %v", err)
			}
		}
	})
}

// autovacuumCount returns how many times autovacuum has vacuumed the
// table and when it last did (the zero time if never).
func autovacuumCount(t *testing.T, ctx context.Context, db *testDB) (int64, time.Time) {
	t.Helper()
	if _, err := db.pool.Exec(ctx, `SELECT pg_stat_clear_snapshot()`); err != nil {
		t.Fatal(err)
	}
	var n int64
	var last *time.Time
	if err := db.pool.QueryRow(ctx, `SELECT autovacuum_count, last_autovacuum FROM pg_stat_user_tables WHERE relid = $1::regclass`,
		db.table.Ident()).Scan(&n, &last); err != nil {
		t.Fatal(err)
	}
	if last == nil {
		return n, time.Time{}
	}
	return n, *last
}

// TestAutovacuumSettingsShipped checks that the migration leaves the
// settings 002_autovacuum and 003_fillfactor explain on a new outbox table.
func TestAutovacuumSettingsShipped(t *testing.T) {
	env := sharedEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db := newTestDB(t, env, "outbox")
	var opts []string
	if err := db.pool.QueryRow(ctx, `SELECT coalesce(reloptions, '{}') FROM pg_class WHERE oid = $1::regclass`,
		db.table.Ident()).Scan(&opts); err != nil {
		t.Fatal(err)
	}
	got := strings.Join(opts, " ")
	for _, want := range []string{
		"autovacuum_vacuum_threshold=1000", "autovacuum_vacuum_scale_factor=0.01",
		"autovacuum_vacuum_insert_threshold=1000", "autovacuum_vacuum_insert_scale_factor=0.01",
		"autovacuum_vacuum_cost_delay=0", "fillfactor=50",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("reloptions %q lack %s", got, want)
		}
	}
}

// checkSched checks the scheduler's figures of the latency runs of res,
// whose producers held producers sessions: every run reads this process's
// threads; where the PostgreSQL container's are readable, each session is
// found by its application_name, and the notify run's wait per statement
// follows from its relay sessions' wait.
func checkSched(t *testing.T, res result.Result, producers int) {
	t.Helper()
	for _, l := range res.Latency {
		if l.Mode == "broker" {
			continue
		}
		groups := map[string]result.SchedGroup{}
		for _, g := range l.Sched {
			groups[g.Name] = g
		}
		self, ok := groups["this process"]
		if !ok || self.Threads < 1 || self.OnCPUMs <= 0 || self.RunQueueMs < 0 {
			t.Errorf("%s: this process's threads: %+v", l.Mode, self)
		}
		if l.BusyCores <= 0 || l.BusyCores > float64(runtime.NumCPU())+0.1 {
			t.Errorf("%s: %.2f cores busy", l.Mode, l.BusyCores)
		}
		pg, ok := groups["PostgreSQL"]
		if !ok {
			t.Logf("%s: the PostgreSQL container's threads are not readable here", l.Mode)
			continue
		}
		if p := groups["producer sessions"]; p.Threads != producers || p.OnCPUMs <= 0 {
			t.Errorf("%s: producer sessions %+v, want %d", l.Mode, p, producers)
		}
		if pg.Threads <= producers || pg.OnCPUMs < groups["producer sessions"].OnCPUMs {
			t.Errorf("%s: PostgreSQL %+v holds less than its producer sessions", l.Mode, pg)
		}
		if l.Mode == "inline" {
			if _, ok := groups["relay sessions"]; ok || l.RelayStatements != 0 {
				t.Errorf("inline ran no relay, yet: %+v", l.Sched)
			}
			continue
		}
		rel := groups["relay sessions"]
		if rel.Threads < 1 || rel.OnCPUMs <= 0 || l.RelayStatements < 1 || l.RelayStatementMeanMs <= 0 {
			t.Errorf("%s: relay sessions %+v, %d statements of %.2f ms", l.Mode, rel, l.RelayStatements, l.RelayStatementMeanMs)
		} else if got := rel.RunQueueMs / float64(l.RelayStatements); math.Abs(got-l.RelayStatementCPUWaitMs) > 1e-9 {
			t.Errorf("%s: wait per statement %.4f ms, the sessions say %.4f", l.Mode, l.RelayStatementCPUWaitMs, got)
		}
		if lis := groups["relay listener"]; (l.Mode == "poll") != (lis.Threads == 0) {
			t.Errorf("%s: relay listener %+v", l.Mode, lis)
		}
	}
	n := res.Latency[1]
	if res.NotifyRelayStatementMeanMs != n.RelayStatementMeanMs || res.NotifyRelayStatementCPUWaitMs != n.RelayStatementCPUWaitMs ||
		res.NotifyBusyCores != n.BusyCores {
		t.Errorf("summary's notify statements %.2f / %.2f ms, %.2f cores; the notify run's %.2f / %.2f ms, %.2f cores",
			res.NotifyRelayStatementMeanMs, res.NotifyRelayStatementCPUWaitMs, res.NotifyBusyCores,
			n.RelayStatementMeanMs, n.RelayStatementCPUWaitMs, n.BusyCores)
	}
}
