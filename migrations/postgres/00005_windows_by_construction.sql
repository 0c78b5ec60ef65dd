-- Windows true by construction (issue 14, ADR 0014).
--
-- lifecycle_epoch: one row, incremented by every lifecycle transaction
-- (Tx.NotifyChange). Replicas read it as their freshness probe: a replica
-- whose probe succeeds and finds the epoch it loaded knows its key history
-- is current as of the probe's start, which renews its signing lease.
--
-- keysvc_commit_deadline: a deferred constraint trigger on that row. A
-- transaction that records an activation instant A sets the transaction-
-- local setting keysvc.commit_by (Tx.CommitBy) to A - L; the trigger runs at
-- COMMIT, on the database's clock, and aborts a commit that comes later
-- (SQLSTATE KS001). So an activation is visible to every replica at least
-- L before it takes effect, however slow the connection that wrote it was.
--
-- key_versions.activation_armed_at: when a pending version's activation was
-- armed (committed with its final activates_at). Replicas switch to a
-- pending version at activates_at only when it is armed; an unarmed
-- pending version is published but never signs.
--
-- idempotency_keys: the Idempotency-Key of an admin mutation, claimed in
-- the mutation's own transaction (exactly once), with the response stored
-- after it; rows older than a day are purged.

-- +goose Up
CREATE TABLE lifecycle_epoch (
    id     integer PRIMARY KEY CHECK (id = 1),
    epoch  bigint NOT NULL
);
INSERT INTO lifecycle_epoch (id, epoch) VALUES (1, 1);

-- +goose StatementBegin
CREATE FUNCTION keysvc_check_commit_deadline() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    d text := current_setting('keysvc.commit_by', true);
BEGIN
    IF d IS NOT NULL AND d <> '' AND clock_timestamp() > d::timestamptz THEN
        RAISE EXCEPTION 'keysvc: commit deadline % passed at %', d, clock_timestamp()
            USING ERRCODE = 'KS001';
    END IF;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd
CREATE CONSTRAINT TRIGGER keysvc_commit_deadline AFTER UPDATE ON lifecycle_epoch
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION keysvc_check_commit_deadline();

ALTER TABLE key_versions ADD COLUMN activation_armed_at timestamptz;

CREATE TABLE idempotency_keys (
    principal    text NOT NULL,
    key          text NOT NULL,
    fingerprint  text NOT NULL,
    created_at   timestamptz NOT NULL,
    status       integer,
    body         text,
    PRIMARY KEY (principal, key)
);
CREATE INDEX idempotency_keys_by_age ON idempotency_keys (created_at);

-- +goose Down
DROP TABLE idempotency_keys;
ALTER TABLE key_versions DROP COLUMN activation_armed_at;
DROP TRIGGER keysvc_commit_deadline ON lifecycle_epoch;
DROP FUNCTION keysvc_check_commit_deadline();
DROP TABLE lifecycle_epoch;
