-- 001_inbox creates the consumer's dedupe table and the harness's effects
-- table. The inbox's primary key is what makes a redelivery harmless: the
-- second insert of (consumer, message_id) affects no row. The effects table
-- has no unique key on purpose, so that an effect applied twice shows up as
-- two rows instead of an error.
CREATE TABLE IF NOT EXISTS inbox (
    consumer     text        NOT NULL,
    message_id   text        NOT NULL,
    message_type text        NULL,
    received_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, message_id)
);

CREATE TABLE IF NOT EXISTS effects (
    id         bigserial   PRIMARY KEY,
    consumer   text        NOT NULL,
    message_id text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX IF NOT EXISTS effects_consumer_message_idx
    ON effects (consumer, message_id);
