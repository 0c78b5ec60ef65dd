-- keysvc schema v1 (PostgreSQL). Times are timestamptz (microseconds);
-- JSON documents (policy, public JWK, audit details) are stored as text,
-- byte for byte, because jsonb would reorder keys and break audit hashes.

-- +goose Up
CREATE TABLE keys (
    name        text PRIMARY KEY,
    issuer      text NOT NULL,
    algorithm   text NOT NULL,
    backend     text NOT NULL,
    jwks_url    text NOT NULL,
    policy      text,
    created_at  timestamptz NOT NULL,
    created_by  text NOT NULL
);

CREATE TABLE key_versions (
    kid                 text PRIMARY KEY,
    key_name            text NOT NULL REFERENCES keys (name),
    algorithm           text NOT NULL,
    backend_ref         text NOT NULL,
    sealed_private_key  bytea,
    public_jwk          text NOT NULL,
    state               text NOT NULL CHECK (state IN ('pending', 'active', 'retired', 'revoked')),
    created_at          timestamptz NOT NULL,
    published_at        timestamptz,
    activates_at        timestamptz,
    activated_at        timestamptz,
    retired_at          timestamptz,
    revoked_at          timestamptz,
    compromised_at      timestamptz,
    revocation_reason   text NOT NULL DEFAULT ''
);

-- At most one active version per key.
CREATE UNIQUE INDEX key_versions_one_active ON key_versions (key_name) WHERE state = 'active';
CREATE INDEX key_versions_by_key ON key_versions (key_name, created_at, kid);

CREATE TABLE audit_events (
    seq        bigint PRIMARY KEY CHECK (seq > 0),
    at         timestamptz NOT NULL,
    actor      text NOT NULL,
    action     text NOT NULL,
    key_name   text NOT NULL DEFAULT '',
    kid        text NOT NULL DEFAULT '',
    reason     text NOT NULL DEFAULT '',
    details    text,
    prev_hash  text NOT NULL,
    hash       text NOT NULL UNIQUE
);

-- The audit trail is append-only: refuse UPDATE, DELETE and TRUNCATE.
-- +goose StatementBegin
CREATE FUNCTION audit_events_append_only() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'audit trail is append-only';
END;
$$;
-- +goose StatementEnd

CREATE TRIGGER audit_events_append_only
    BEFORE UPDATE OR DELETE OR TRUNCATE ON audit_events
    FOR EACH STATEMENT EXECUTE FUNCTION audit_events_append_only();

CREATE TABLE api_tokens (
    id            text PRIMARY KEY,
    name          text NOT NULL,
    sha256        bytea NOT NULL UNIQUE CHECK (octet_length(sha256) = 32),
    scopes        text NOT NULL,
    created_at    timestamptz NOT NULL,
    expires_at    timestamptz,
    revoked_at    timestamptz,
    last_used_at  timestamptz
);

-- +goose Down
DROP TABLE api_tokens;
DROP TABLE audit_events;
DROP FUNCTION audit_events_append_only();
DROP TABLE key_versions;
DROP TABLE keys;
