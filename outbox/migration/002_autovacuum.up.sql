-- 002_autovacuum tunes autovacuum for a queue table. Every row is inserted,
-- updated once or twice (claim, mark) and deleted by the sweep, so dead tuples
-- pile up far faster than the default thresholds (20% of the table) notice.
-- Vacuuming after a fixed 1,000 dead tuples plus 1% keeps the pending index
-- and the heap small at any backlog size; a zero cost delay lets the vacuum
-- finish between two sweeps instead of throttling itself. The fillfactor
-- leaves room on each page for HOT updates of the claim and mark columns.
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
