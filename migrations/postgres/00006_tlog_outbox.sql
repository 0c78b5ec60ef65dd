-- Transparency-log outbox (issue 12, ADR 0015). Every JWS the signing API
-- returns is first recorded here, one row per configured log, by a group
-- commit shared by many concurrent requests; the log client submits the
-- rows to the log (POST add-batch) and deletes them once the log's Signed
-- Entry Promise is checked. A row outlives the replica that wrote it: any
-- replica claims rows whose lease has expired (FOR UPDATE SKIP LOCKED).
-- artifact_hash is the raw SHA-256 of the exact compact JWS (32 bytes).

-- +goose Up
CREATE TABLE tlog_outbox (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    log_url        text NOT NULL,
    artifact_type  text NOT NULL CHECK (artifact_type IN
                       ('vrp_attestation', 'vrp_signed_offer', 'vrp_status_event', 'vrp_receipt', 'vrp_spec')),
    artifact_hash  bytea NOT NULL CHECK (octet_length(artifact_hash) = 32),
    enqueued_at    timestamptz NOT NULL,
    lease_until    timestamptz NOT NULL
);

-- +goose Down
DROP TABLE tlog_outbox;
