-- 002_projection creates the harness's projection table: per consumer and
-- entity, the version of the entity the consumer's state is at, and the
-- event that put it there. A consumer that keeps an entity's state from
-- events that arrive in any order writes it (see ProjectNewest).
CREATE TABLE IF NOT EXISTS projection (
    consumer   text        NOT NULL,
    entity     text        NOT NULL,
    version    integer     NOT NULL,
    message_id text        NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, entity)
);
