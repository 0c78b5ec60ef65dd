-- Transparency-log outbox (issue 12, ADR 0015); see the PostgreSQL
-- migration. Times are INTEGER unix microseconds (UTC). AUTOINCREMENT: a
-- deleted row's id is never handed out again, so deleting by id after a
-- Signed Entry Promise can never remove a newer, undelivered row.

-- +goose Up
CREATE TABLE tlog_outbox (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    log_url        TEXT NOT NULL,
    artifact_type  TEXT NOT NULL CHECK (artifact_type IN
                       ('vrp_attestation', 'vrp_signed_offer', 'vrp_status_event', 'vrp_receipt', 'vrp_spec')),
    artifact_hash  BLOB NOT NULL CHECK (length(artifact_hash) = 32),
    enqueued_at    INTEGER NOT NULL,
    lease_until    INTEGER NOT NULL
) STRICT;

-- +goose Down
DROP TABLE tlog_outbox;
