-- outboxlab:no-transaction
--
-- 004_parked_index indexes the parked rows, so that an operator lists what
-- waits for a decision (WHERE faulted_at IS NOT NULL ORDER BY faulted_at)
-- without reading the whole table, which holds every processed row until
-- the sweep deletes it. Parked rows are few: the index stays small, and no
-- statement of the relay's loop changes it except the park itself.
--
-- On a table that exists, it is built CONCURRENTLY, outside a transaction,
-- so that producers and relays keep writing the table while it is built: a
-- plain CREATE INDEX would hold off every insert, claim and mark for as long
-- as it reads the table. A concurrent build that fails or is interrupted
-- leaves an invalid index behind, which IF NOT EXISTS would then keep for
-- ever: the first statement drops such a leftover (Migrate runs this
-- migration under its lock and records it only once both statements are
-- done, so an index of this name that exists when it runs is a leftover of
-- an attempt that did not finish). On a table that the same Migrate
-- creates, nobody else can write it yet: it runs in Migrate's transaction,
-- without CONCURRENTLY ({{.Concurrently}} is then empty), and waits for no
-- other transaction.
DROP INDEX {{.Concurrently}} IF EXISTS {{.ParkedIndexRef}};
CREATE INDEX {{.Concurrently}} {{.ParkedIndex}}
    ON {{.Table}} (faulted_at)
    WHERE faulted_at IS NOT NULL;
