-- keysvc schema v1 (SQLite). Same semantics as the PostgreSQL schema; times
-- are INTEGER unix microseconds (UTC), JSON documents TEXT byte for byte.

-- +goose Up
CREATE TABLE keys (
    name        TEXT PRIMARY KEY,
    issuer      TEXT NOT NULL,
    algorithm   TEXT NOT NULL,
    backend     TEXT NOT NULL,
    jwks_url    TEXT NOT NULL,
    policy      TEXT,
    created_at  INTEGER NOT NULL,
    created_by  TEXT NOT NULL
) STRICT;

CREATE TABLE key_versions (
    kid                 TEXT PRIMARY KEY,
    key_name            TEXT NOT NULL REFERENCES keys (name),
    algorithm           TEXT NOT NULL,
    backend_ref         TEXT NOT NULL,
    sealed_private_key  BLOB,
    public_jwk          TEXT NOT NULL,
    state               TEXT NOT NULL CHECK (state IN ('pending', 'active', 'retired', 'revoked')),
    created_at          INTEGER NOT NULL,
    published_at        INTEGER,
    activates_at        INTEGER,
    activated_at        INTEGER,
    retired_at          INTEGER,
    revoked_at          INTEGER,
    compromised_at      INTEGER,
    revocation_reason   TEXT NOT NULL DEFAULT ''
) STRICT;

-- At most one active version per key.
CREATE UNIQUE INDEX key_versions_one_active ON key_versions (key_name) WHERE state = 'active';
CREATE INDEX key_versions_by_key ON key_versions (key_name, created_at, kid);

CREATE TABLE audit_events (
    seq        INTEGER PRIMARY KEY CHECK (seq > 0),
    at         INTEGER NOT NULL,
    actor      TEXT NOT NULL,
    action     TEXT NOT NULL,
    key_name   TEXT NOT NULL DEFAULT '',
    kid        TEXT NOT NULL DEFAULT '',
    reason     TEXT NOT NULL DEFAULT '',
    details    TEXT,
    prev_hash  TEXT NOT NULL,
    hash       TEXT NOT NULL UNIQUE
) STRICT;

-- The audit trail is append-only: refuse UPDATE and DELETE.
-- +goose StatementBegin
CREATE TRIGGER audit_events_no_update BEFORE UPDATE ON audit_events
BEGIN
    SELECT RAISE(ABORT, 'audit trail is append-only');
END;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE TRIGGER audit_events_no_delete BEFORE DELETE ON audit_events
BEGIN
    SELECT RAISE(ABORT, 'audit trail is append-only');
END;
-- +goose StatementEnd

CREATE TABLE api_tokens (
    id            TEXT PRIMARY KEY,
    name          TEXT NOT NULL,
    sha256        BLOB NOT NULL UNIQUE CHECK (length(sha256) = 32),
    scopes        TEXT NOT NULL,
    created_at    INTEGER NOT NULL,
    expires_at    INTEGER,
    revoked_at    INTEGER,
    last_used_at  INTEGER
) STRICT;

-- +goose Down
DROP TABLE api_tokens;
DROP TRIGGER audit_events_no_delete;
DROP TRIGGER audit_events_no_update;
DROP TABLE audit_events;
DROP TABLE key_versions;
DROP TABLE keys;
