-- Key-history anchoring (issue 12 item 5, ADR 0016). Every lifecycle
-- event (a version's state as written, a key's policy and backend, an
-- audit row's hash) and every marker the anchorer writes is a compact JWS
-- signed by the node's event key; its SHA-256 is a vrp_status_event leaf
-- in the transparency log. The JWS are kept here so that a checker can
-- read them back; the rows prove nothing by themselves (the database
-- writer this defends against can delete them) — a replica trusts a fact
-- whose JWS hash it finds here or in the log, and the log alone for the
-- markers that must be absent (ADR 0016).

-- +goose Up
CREATE TABLE anchor_events (
    artifact_hash  bytea PRIMARY KEY CHECK (octet_length(artifact_hash) = 32),
    kind           text NOT NULL,
    subject        text NOT NULL,
    jws            text NOT NULL,
    created_at     timestamptz NOT NULL
);

-- +goose Down
DROP TABLE anchor_events;
