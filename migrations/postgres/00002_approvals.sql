-- Two-person rule: a protected lifecycle change waits here for a second
-- principal's approval.

-- +goose Up
CREATE TABLE approvals (
    id            TEXT PRIMARY KEY,
    key_name      TEXT NOT NULL REFERENCES keys (name),
    action        TEXT NOT NULL CHECK (action IN ('revoke')),
    kid           TEXT NOT NULL,
    params        TEXT NOT NULL,
    requested_by  TEXT NOT NULL,
    requested_at  TIMESTAMPTZ NOT NULL,
    expires_at    TIMESTAMPTZ NOT NULL,
    status        TEXT NOT NULL CHECK (status IN ('pending', 'approved', 'expired')),
    decided_by    TEXT,
    decided_at    TIMESTAMPTZ
);
CREATE INDEX approvals_by_status ON approvals (status, requested_at);

-- +goose Down
DROP TABLE approvals;
