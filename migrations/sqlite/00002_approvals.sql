-- Two-person rule: a protected lifecycle change waits here for a second
-- principal's approval. Times are INTEGER unix microseconds (UTC).

-- +goose Up
CREATE TABLE approvals (
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
CREATE INDEX approvals_by_status ON approvals (status, requested_at);

-- +goose Down
DROP TABLE approvals;
