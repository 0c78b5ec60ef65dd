-- A key's settings revision (ADR 0036): how many times its settings
-- (policy, backend) were changed. The anchorer signs it into the key's
-- fact and writes a marker for every revision, so that rolling the row
-- back to an older, once-anchored value is caught: the log holds the
-- marker of the revision after it.

-- +goose Up
ALTER TABLE keys ADD COLUMN settings_rev bigint NOT NULL DEFAULT 0 CHECK (settings_rev >= 0);

-- +goose Down
ALTER TABLE keys DROP COLUMN settings_rev;
