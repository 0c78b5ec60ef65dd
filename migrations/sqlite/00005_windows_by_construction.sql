-- Windows true by construction (issue 14, ADR 0014); see the PostgreSQL
-- migration of the same number. SQLite has one writer process, so the
-- commit deadline (Tx.CommitBy) is checked by the store in-process right
-- before COMMIT instead of by a trigger. Instants are INTEGER unix
-- microseconds UTC.

-- +goose Up
CREATE TABLE lifecycle_epoch (
    id     INTEGER PRIMARY KEY CHECK (id = 1),
    epoch  INTEGER NOT NULL
) STRICT;
INSERT INTO lifecycle_epoch (id, epoch) VALUES (1, 1);

ALTER TABLE key_versions ADD COLUMN activation_armed_at INTEGER;

CREATE TABLE idempotency_keys (
    principal    TEXT NOT NULL,
    key          TEXT NOT NULL,
    fingerprint  TEXT NOT NULL,
    created_at   INTEGER NOT NULL,
    status       INTEGER,
    body         TEXT,
    PRIMARY KEY (principal, key)
) STRICT;
CREATE INDEX idempotency_keys_by_age ON idempotency_keys (created_at);

-- +goose Down
DROP TABLE idempotency_keys;
ALTER TABLE key_versions DROP COLUMN activation_armed_at;
DROP TABLE lifecycle_epoch;
