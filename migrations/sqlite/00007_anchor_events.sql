-- Key-history anchoring (issue 12 item 5, ADR 0016); see the PostgreSQL
-- migration. created_at is INTEGER unix microseconds (UTC).

-- +goose Up
CREATE TABLE anchor_events (
    artifact_hash  BLOB PRIMARY KEY CHECK (length(artifact_hash) = 32),
    kind           TEXT NOT NULL,
    subject        TEXT NOT NULL,
    jws            TEXT NOT NULL,
    created_at     INTEGER NOT NULL
) STRICT;

-- +goose Down
DROP TABLE anchor_events;
