-- 001_outbox creates the outbox table of one bounded context and the partial
-- index that serves the relay's claim query. The index names are quoted and
-- derived by outbox.Table (PendingIndex, ProcessedIndex): distinct for every
-- table name that outbox.ParseTable accepts, Outbox beside outbox and names of
-- 63 bytes included, so IF NOT EXISTS never skips an index another table has.
CREATE TABLE IF NOT EXISTS {{.Table}} (
    id             uuid        PRIMARY KEY,
    message_type   text        NOT NULL,
    payload        jsonb       NOT NULL,
    correlation_id uuid        NULL,
    occurred_at    timestamptz NOT NULL DEFAULT now(),
    processed_at   timestamptz NULL,
    attempts       integer     NOT NULL DEFAULT 0,
    faulted_at     timestamptz NULL,
    last_error     text        NULL,
    locked_by      text        NULL,
    locked_at      timestamptz NULL,
    locked_until   timestamptz NULL
);

-- The claim reads pending rows oldest first; processed and faulted rows never
-- enter this index, so it stays as small as the backlog.
CREATE INDEX IF NOT EXISTS {{.PendingIndex}}
    ON {{.Table}} (occurred_at, id)
    WHERE processed_at IS NULL AND faulted_at IS NULL;

-- The sweep deletes processed rows by age.
CREATE INDEX IF NOT EXISTS {{.ProcessedIndex}}
    ON {{.Table}} (processed_at)
    WHERE processed_at IS NOT NULL;
