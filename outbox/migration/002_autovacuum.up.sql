-- 002_autovacuum tunes autovacuum for a queue table. Every published row is
-- inserted, updated at least twice (the claim, then the mark; a retry adds
-- one more) and deleted by the sweep, so dead tuples pile up far faster than
-- the default thresholds (50 tuples plus 20% of the table) notice.
--
-- Vacuuming after a fixed 1,000 dead tuples plus 1% keeps the heap and the
-- pending index small at any table size. The pending index needs it most: a
-- marked row's old version keeps its entry there until vacuum removes it, and
-- the claim reads the index from its oldest end, so it steps over the entries
-- of every row published since the last vacuum (cheaply once a scan has
-- flagged them dead, but the first scan visits each one's heap tuple). The
-- insert thresholds make vacuum visit a table that only grows, such as a
-- backlog building up while no relay runs. The analyze thresholds keep the
-- planner's counts of pending and processed rows current as the table swings
-- between the two. A zero cost delay lets the vacuum finish between two sweeps
-- instead of throttling itself.
--
-- The fillfactor leaves room on each page for HOT updates of the claim, which
-- changes no indexed column: a claim whose new row version fits on its page
-- adds no index entries. Only part of a batch fits (about a quarter of the
-- claims with 256-byte payloads: a batch claims every row of a page, and a
-- fifth of a page holds a few of them). The mark is never HOT: processed_at is
-- indexed and decides membership in the pending index, so every mark adds
-- index entries, one more reason for vacuum to come often.
ALTER TABLE {{.Table}} SET (
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_insert_threshold = 1000,
    autovacuum_vacuum_insert_scale_factor = 0.01,
    autovacuum_analyze_threshold = 1000,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_vacuum_cost_delay = 0,
    fillfactor = 80
);
