-- Key-material destruction as a lifecycle action: a two-person approval may
-- now ask for "destroy", and a key version records when its private half
-- was destroyed (material_destroyed_at, INTEGER unix microseconds UTC; the
-- sealed blob of a software version is dropped at the same time). SQLite
-- cannot alter a CHECK constraint, so approvals is rebuilt (rows and the
-- index kept) inside this migration's transaction. Nothing references
-- approvals, so the rebuild is safe with foreign keys on.

-- +goose Up
CREATE TABLE approvals_new (
    id            TEXT PRIMARY KEY,
    key_name      TEXT NOT NULL REFERENCES keys (name),
    action        TEXT NOT NULL CHECK (action IN ('revoke', 'destroy', 'policy')),
    kid           TEXT NOT NULL,
    params        TEXT NOT NULL,
    requested_by  TEXT NOT NULL,
    requested_at  INTEGER NOT NULL,
    expires_at    INTEGER NOT NULL,
    status        TEXT NOT NULL CHECK (status IN ('pending', 'approved', 'expired')),
    decided_by    TEXT,
    decided_at    INTEGER,
    requested_by_name TEXT NOT NULL DEFAULT '',
    decided_by_name   TEXT
) STRICT;
INSERT INTO approvals_new (id, key_name, action, kid, params, requested_by, requested_at, expires_at, status, decided_by, decided_at)
    SELECT id, key_name, action, kid, params, requested_by, requested_at, expires_at, status, decided_by, decided_at FROM approvals;
DROP TABLE approvals;
ALTER TABLE approvals_new RENAME TO approvals;
CREATE INDEX approvals_by_status ON approvals (status, requested_at);

ALTER TABLE key_versions ADD COLUMN material_destroyed_at INTEGER;

-- +goose Down
-- A downgrade forgets destroy approvals (their audit rows stay) and when
-- material was destroyed; destroyed material does not come back.
ALTER TABLE key_versions DROP COLUMN material_destroyed_at;
CREATE TABLE approvals_old (
    id            TEXT PRIMARY KEY,
    key_name      TEXT NOT NULL REFERENCES keys (name),
    action        TEXT NOT NULL CHECK (action IN ('revoke')),
    kid           TEXT NOT NULL,
    params        TEXT NOT NULL,
    requested_by  TEXT NOT NULL,
    requested_at  INTEGER NOT NULL,
    expires_at    INTEGER NOT NULL,
    status        TEXT NOT NULL CHECK (status IN ('pending', 'approved', 'expired')),
    decided_by    TEXT,
    decided_at    INTEGER
) STRICT;
INSERT INTO approvals_old (id, key_name, action, kid, params, requested_by, requested_at, expires_at, status, decided_by, decided_at)
    SELECT id, key_name, action, kid, params, requested_by, requested_at, expires_at, status, decided_by, decided_at FROM approvals
    WHERE action = 'revoke';
DROP TABLE approvals;
ALTER TABLE approvals_old RENAME TO approvals;
CREATE INDEX approvals_by_status ON approvals (status, requested_at);
