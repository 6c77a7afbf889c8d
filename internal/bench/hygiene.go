package bench

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxlab/outboxlab/internal/bench/result"
	"github.com/outboxlab/outboxlab/outbox"
	"github.com/outboxlab/outboxlab/relay"
	"github.com/outboxlab/outboxlab/testenv"
)

// explain returns the plan of the claim statement.
func explain(ctx context.Context, in *infra, store *relay.PGStore) (string, error) {
	rows, err := in.admin.Query(ctx, `EXPLAIN `+store.ClaimSQL(), 100, "explain", int64(120e6))
	if err != nil {
		return "", fmt.Errorf("explaining the claim: %w", err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return "", fmt.Errorf("explaining the claim: %w", err)
	}
	return strings.Join(lines, "\n"), nil
}

// tableStats reads the size and tuple counts of table.
func tableStats(ctx context.Context, in *infra, table outbox.Table, moment string) (result.TableStats, error) {
	st := result.TableStats{Moment: moment}
	// The statistics of other sessions arrive when they end or every
	// second; read a fresh snapshot.
	if _, err := in.admin.Exec(ctx, `SELECT pg_stat_clear_snapshot()`); err != nil {
		return st, fmt.Errorf("reading stats of %s: %w", table, err)
	}
	err := in.admin.QueryRow(ctx, `SELECT n_live_tup, n_dead_tup, n_tup_upd, n_tup_hot_upd,
		pg_table_size(relid), pg_indexes_size(relid)
		FROM pg_stat_user_tables WHERE relid = $1::regclass`, table.Ident()).
		Scan(&st.LiveTuples, &st.DeadTuples, &st.Updates, &st.HOTUpdates, &st.TableBytes, &st.IndexBytes)
	if err != nil {
		return st, fmt.Errorf("reading stats of %s: %w", table, err)
	}
	return st, nil
}

// hygiene reads the drained table, sweeps every processed row as the
// relay does once they pass retention, and reads it again before and
// after a VACUUM.
func hygiene(ctx context.Context, in *infra, store *relay.PGStore) (_ []result.TableStats, err error) {
	table := store.Table()
	var out []result.TableStats
	exact, drop := pgstattuple(ctx, in)
	defer func() {
		if derr := drop(); derr != nil && err == nil {
			err = derr
		}
	}()
	snap := func(moment string) error {
		st, err := tableStats(ctx, in, table, moment)
		if err == nil && exact {
			err = in.admin.QueryRow(ctx, `SELECT tuple_count, dead_tuple_count FROM pgstattuple($1::regclass)`,
				table.Ident()).Scan(&st.LiveTuples, &st.DeadTuples)
			st.Exact = err == nil
		}
		out = append(out, st)
		return err
	}
	if err := waitStatsFlushed(ctx, in, table); err != nil {
		return out, err
	}
	if err := snap("after drain"); err != nil {
		return out, err
	}
	for {
		n, err := store.Sweep(ctx, 0, relay.DefaultSweepBatch)
		if err != nil {
			return out, err
		}
		if n < relay.DefaultSweepBatch {
			break
		}
	}
	if err := waitStatsFlushed(ctx, in, table); err != nil {
		return out, err
	}
	if err := snap("after sweep"); err != nil {
		return out, err
	}
	if _, err := in.admin.Exec(ctx, `VACUUM `+table.Ident()); err != nil {
		return out, fmt.Errorf("vacuuming %s: %w", table, err)
	}
	if err := snap("after vacuum"); err != nil {
		return out, err
	}
	return out, nil
}

// pgstattuple makes the pgstattuple extension available when the
// database has it, and returns whether it is, and how to drop it again if
// this run created it.
func pgstattuple(ctx context.Context, in *infra) (bool, func() error) {
	var had bool
	if err := in.admin.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'pgstattuple')`).Scan(&had); err != nil {
		return false, func() error { return nil }
	}
	if had {
		return true, func() error { return nil }
	}
	if _, err := in.admin.Exec(ctx, `CREATE EXTENSION pgstattuple`); err != nil {
		return false, func() error { return nil }
	}
	return true, func() error {
		if _, err := in.admin.Exec(context.WithoutCancel(ctx), `DROP EXTENSION IF EXISTS pgstattuple`); err != nil {
			return fmt.Errorf("dropping the pgstattuple extension: %w", err)
		}
		return nil
	}
}

// waitStatsFlushed waits until the cumulative statistics of table have
// settled: two reads a quarter second apart agree.
func waitStatsFlushed(ctx context.Context, in *infra, table outbox.Table) error {
	var last result.TableStats
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	err := testenv.WaitUntil(wctx, 250*time.Millisecond, func(ctx context.Context) error {
		st, err := tableStats(ctx, in, table, "")
		if err != nil {
			return err
		}
		same := st == last
		last = st
		if !same {
			return errors.New("statistics still moving")
		}
		return nil
	})
	if err != nil && wctx.Err() != nil && ctx.Err() == nil {
		return nil // best effort: report what there is
	}
	return err
}
